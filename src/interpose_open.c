// SPDX-License-Identifier: MIT
/*
 * interpose_open.c - calls that only make descriptors usmc does not track.
 *
 * usmc keeps descriptors TCP does not have (doorbells, link groups; ifd.c
 * puts them at the top of RLIMIT_NOFILE).  A program that fills its
 * table must reach EMFILE where it would over TCP, whichever call fills
 * it: so these wrappers, like socket(), accept(), dup() and epoll_create()
 * in interpose*.c, give usmc's own back at EMFILE and try once more
 * (SHED_RETRY, shed.c).  Otherwise a program that opened files until
 * EMFILE would then see an accept() succeed (usmc shedding there) where
 * TCP fails it.  Anything else is passed on untouched.
 *
 * libusmc itself never calls these (sys_openat, sys_eventfd, real.*):
 * nothing below a wrapper sheds.  libc's own opens inside fopen() and
 * opendir() do not come here, so those two are wrapped whole (libwrap
 * reads /etc/hosts.allow with fopen for every connection slapd accepts:
 * under ulimit -n 64, 15 of 30 clients were denied and reset); other
 * libc-internal opens (getpwnam's, iconv's...) still meet EMFILE up to
 * three descriptors per link group early.
 */
#include "interpose.h"
#include "shed.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* The mode argument exists only when the flags say so (open(2)). */
static bool needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

#define MODE_ARG(flags, last)						\
	({								\
		mode_t m_ = 0;						\
		if (needs_mode(flags)) {				\
			va_list ap;					\
			va_start(ap, last);				\
			m_ = (mode_t)va_arg(ap, int);			\
			va_end(ap);					\
		}							\
		m_;							\
	})

EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = MODE_ARG(flags, flags);

	ENSURE_REAL(open);
	return SHED_RETRY(real.open(path, flags, mode));
}

EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = MODE_ARG(flags, flags);

	ENSURE_REAL(open64);
	return SHED_RETRY(real.open64(path, flags, mode));
}

EXPORT int openat(int dfd, const char *path, int flags, ...)
{
	mode_t mode = MODE_ARG(flags, flags);

	ENSURE_REAL(openat);
	return SHED_RETRY(real.openat(dfd, path, flags, mode));
}

EXPORT int openat64(int dfd, const char *path, int flags, ...)
{
	mode_t mode = MODE_ARG(flags, flags);

	ENSURE_REAL(openat64);
	return SHED_RETRY(real.openat64(dfd, path, flags, mode));
}

/* _FORTIFY_SOURCE's entry points for flags not known at compile time:
 * libc's own, which check the flags as without usmc. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dfd, const char *path, int flags);
int __openat64_2(int dfd, const char *path, int flags);

EXPORT int __open_2(const char *path, int flags)
{
	ENSURE_REAL(__open_2);
	return SHED_RETRY(real.__open_2(path, flags));
}

EXPORT int __open64_2(const char *path, int flags)
{
	ENSURE_REAL(__open64_2);
	return SHED_RETRY(real.__open64_2(path, flags));
}

EXPORT int __openat_2(int dfd, const char *path, int flags)
{
	ENSURE_REAL(__openat_2);
	return SHED_RETRY(real.__openat_2(dfd, path, flags));
}

EXPORT int __openat64_2(int dfd, const char *path, int flags)
{
	ENSURE_REAL(__openat64_2);
	return SHED_RETRY(real.__openat64_2(dfd, path, flags));
}

EXPORT FILE *fopen(const char *path, const char *mode)
{
	ENSURE_REAL(fopen);
	return SHED_RETRY_PTR(real.fopen(path, mode));
}

EXPORT FILE *fopen64(const char *path, const char *mode)
{
	ENSURE_REAL(fopen64);
	return SHED_RETRY_PTR(real.fopen64(path, mode));
}

EXPORT DIR *opendir(const char *path)
{
	ENSURE_REAL(opendir);
	return SHED_RETRY_PTR(real.opendir(path));
}

EXPORT int pipe(int fds[2])
{
	ENSURE_REAL(pipe);
	return SHED_RETRY(real.pipe(fds));
}

EXPORT int pipe2(int fds[2], int flags)
{
	ENSURE_REAL(pipe2);
	return SHED_RETRY(real.pipe2(fds, flags));
}

EXPORT int eventfd(unsigned int val, int flags)
{
	ENSURE_REAL(eventfd);
	return SHED_RETRY(real.eventfd(val, flags));
}
