// SPDX-License-Identifier: MIT
/*
 * log.c - one-line diagnostics written with a single write(2).
 */
#include "log.h"
#include "sys.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>

/*
 * Our lines go to descriptor 2, unless it is a TCP connection (an inetd
 * style program's stderr is its socket): the peer must see only the
 * program's own bytes there, so they are dropped.  A UNIX socket
 * (journald) still gets them.
 */
static bool stderr_is_inet(void)
{
	int dom = 0;
	socklen_t len = sizeof(dom);

	return usmc_sys6(SYS_getsockopt, 2, SOL_SOCKET, SO_DOMAIN, (long)&dom, (long)&len, 0) == 0 &&
	       (dom == AF_INET || dom == AF_INET6);
}

void usmc_log_write(const char *fmt, ...)
{
	char buf[512];
	int saved = errno;
	va_list ap;
	int n;

	n = snprintf(buf, sizeof(buf), "usmc[%d]: ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	if (!stderr_is_inet())
		(void)sys_write(2, buf, (size_t)n);
	errno = saved;
}
