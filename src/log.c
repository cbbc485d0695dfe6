// SPDX-License-Identifier: MIT
/*
 * log.c - one-line diagnostics written with a single write(2).
 */
#include "log.h"
#include "sys.h"

#include <stdarg.h>
#include <stdio.h>

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
	(void)sys_write(2, buf, (size_t)n);
	errno = saved;
}
