// SPDX-License-Identifier: MIT
/*
 * interpose_stdio.c - the stdio calls that take a descriptor: fdopen()
 * and dprintf().  Why a connection a stream may use is TCP, and which
 * ones are: stdstream.c.
 */
#include "interpose.h"
#include "fdtab.h"
#include "sock.h"
#include "stdstream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
