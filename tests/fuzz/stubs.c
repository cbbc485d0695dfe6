// SPDX-License-Identifier: MIT
/*
 * stubs.c - what the fuzz targets link instead of src/interpose*.c.
 *
 * The fuzz binaries link the library's objects directly (every file but the
 * libc wrappers), so the code under test is the code libusmc runs.  The
 * wrappers would interpose read/write/close inside libFuzzer itself; here
 * the "real" table simply points at libc.
 */
#include "guard.h"
#include "options.h"
#include "real.h"
#include "sock.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

struct usmc_real real;
_Atomic int usmc_real_ready;

void usmc_real_init(void)
{
	real.socket = socket;
	real.socketpair = socketpair;
	real.connect = connect;
	real.listen = listen;
	real.accept = accept;
	real.accept4 = accept4;
	real.close = close;
	real.shutdown = shutdown;
	real.read = read;
	real.write = write;
	real.readv = readv;
	real.writev = writev;
	real.recv = recv;
	real.send = send;
	real.recvfrom = recvfrom;
	real.sendto = sendto;
	real.recvmsg = recvmsg;
	real.sendmsg = sendmsg;
	real.recvmmsg = recvmmsg;
	real.sendmmsg = sendmmsg;
	real.sendfile = sendfile;
	real.splice = splice;
	real.poll = poll;
	real.ppoll = ppoll;
	real.select = select;
	real.pselect = pselect;
	real.epoll_create = epoll_create;
	real.epoll_create1 = epoll_create1;
	real.epoll_ctl = epoll_ctl;
	real.epoll_wait = epoll_wait;
	real.epoll_pwait = epoll_pwait;
	real.epoll_pwait2 = epoll_pwait2;
	real.dup = dup;
	real.dup2 = dup2;
	real.dup3 = dup3;
	real.fcntl = fcntl;
	real.ioctl = ioctl;
	real.getsockopt = getsockopt;
	real.setsockopt = setsockopt;
	real.close_range = close_range;
	real.execve = execve;
	real.sigaction = sigaction;
	STORE_RELEASE(&usmc_real_ready, 1);
}

