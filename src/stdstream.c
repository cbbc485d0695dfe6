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
 *   - fdopen() of a connection (below).
 *
 * dprintf() needs no stream of the caller's: it is formatted here and
 * written through usmc's own write path, so it stays on shared memory.
 *
 * Not seen: a FILE made some other way around an existing descriptor
 * (fopen("/dev/fd/N") of a socket fails in the kernel anyway), and stdio
 * reached by a program that made descriptors 0-2 sockets with raw system
 * calls.
 */
#include "interpose.h"
#include "af_usmc.h"
#include "fdtab.h"
#include "sock.h"
#include "stdstream.h"
#include "sys.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void usmc_stdio_leave(int fd)
{
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (!sk)
		return;
	if (sk->kind == SK_CONN && sk_mode(sk) != USMC_MODE_TCP) {
		/* The client's wake byte can only go out on a connected
		 * socket: a non-blocking connect is settled first. */
		while (sk_flag(sk, SKF_CONNECTING) &&
		       usmc_sock_connect_done(sk, fd) == -EINPROGRESS) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			sys_poll(&p, 1, -1);
		}
		usmc_conn_leave(sk, fd, USMC_R_STDIO);
	}
	usmc_sock_put(sk);
}

EXPORT FILE *fdopen(int fd, const char *mode)
{
	ENSURE_REAL(fdopen);
	usmc_stdio_leave(fd);
	return real.fdopen(fd, mode);
}

/*
 * dprintf(3) into a connection: glibc would write the formatted bytes with
 * its internal write.  Formatted here instead and written in full through
 * usmc's write, as glibc's loop does; -1 with errno at the first failure
 * (glibc's EOF).  Any other descriptor goes to libc's own.
 */
static bool tracked(int fd)
{
	struct usmc_sock *sk;

	ENSURE_REAL(vdprintf);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return false;
	usmc_sock_put(sk);
	return true;
}

static int conn_vdprintf(int fd, const char *fmt, va_list ap)
{
	char *s;
	int n, off;

	n = vasprintf(&s, fmt, ap);
	if (n < 0)
		return -1;
	for (off = 0; off < n;) {
		ssize_t w = usmc_write_fd(fd, s + off, (size_t)(n - off));

		if (w < 0) {
			n = -1;
			break;
		}
		off += (int)w;
	}
	free(s);
	return n;
}

EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
	if (!tracked(fd))
		return real.vdprintf(fd, fmt, ap);
	return conn_vdprintf(fd, fmt, ap);
}

EXPORT int dprintf(int fd, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = tracked(fd) ? conn_vdprintf(fd, fmt, ap) : real.vdprintf(fd, fmt, ap);
	va_end(ap);
	return n;
}

/* _FORTIFY_SOURCE's forms: flag > 0 refuses %n in a writable format,
 * which a connection's vasprintf does not check (the bytes are the same). */
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);

EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
	if (!tracked(fd))
		return real.__vdprintf_chk(fd, flag, fmt, ap);
	return conn_vdprintf(fd, fmt, ap);
}

EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = tracked(fd) ? conn_vdprintf(fd, fmt, ap) : real.__vdprintf_chk(fd, flag, fmt, ap);
	va_end(ap);
	return n;
}
