// SPDX-License-Identifier: MIT
/*
 * stdstream.c - connections that a stdio stream may read or write.
 *
 * glibc's FILE streams read and write their descriptor with libc's own
 * internal calls, which no LD_PRELOAD wrapper sees: bytes a program
 * printf()s to a connection on shared memory would leave on the kernel's
 * TCP socket, behind the ring's, and the peer resets the connection
 * (protocol_violation); fgets() would wait for TCP bytes that are in the
 * ring.  So a connection a stream may use is plain TCP (reason stdio),
 * moved there before any stream can touch it (migrate.c keeps every byte
 * in order):
 *
 *   - descriptors 0, 1 and 2, which stdin, stdout and stderr use whatever
 *     the program did to make them sockets: a connect() or accept() that
 *     lands there stays TCP (af_usmc.c, accept.c); dup, dup2, dup3 or
 *     F_DUPFD onto them (interpose.c), and any connection there when the
 *     program execs (exec.c; git daemon's upload-pack, inetd, sshd's
 *     re-exec), leave shared memory;
 *   - fdopen() of a connection (interpose_stdio.c).
 *
 * dprintf() needs no stream of the caller's: interpose_stdio.c formats it
 * and writes it through usmc's own write path, so it stays on shared
 * memory.
 *
 * Not seen: a FILE made some other way around an existing descriptor
 * (fopen("/dev/fd/N") of a socket fails in the kernel anyway), and stdio
 * reached by a program that made descriptors 0-2 sockets with raw system
 * calls.
 */
#include "fdtab.h"
#include "handover.h"
#include "migrate.h"
#include "sock.h"
#include "stdstream.h"
#include "sys.h"
#include "tcp.h"

#include <poll.h>
#include <unistd.h>

void usmc_stdio_leave(int fd)
{
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (!sk)
		return;
	if (sk->kind == SK_CONN && sk_mode(sk) != USMC_MODE_TCP) {
		/* The client's wake message can only go out on a connected
		 * socket: a non-blocking connect is settled first. */
		while (sk_flag(sk, SKF_CONNECTING) &&
		       usmc_sock_connect_done(sk, fd) == -EINPROGRESS) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			sys_poll(&p, 1, -1);
		}
		usmc_conn_leave(sk, fd, USMC_R_STDIO);
		/* A CLC message still owed: stdio's reads would take it. */
		usmc_tcp_take_owed(sk, fd);
	}
	usmc_sock_put(sk);
}
