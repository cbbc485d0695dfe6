/* SPDX-License-Identifier: MIT */
/*
 * interpose.h - what the libc wrappers (interpose*.c) share.
 *
 * Wrappers are the only place errno is set: everything below them
 * returns a count or -errno, and USMC_PASS hands the call to libc.
 */
#ifndef USMC_INTERPOSE_H
#define USMC_INTERPOSE_H

#include "af_usmc.h"
#include "export.h"
#include "real.h"
#include "sock.h"

#include <errno.h>
#include <sys/types.h>

static inline ssize_t ret(ssize_t r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/*
 * A call that makes a descriptor: out of them (EMFILE), usmc gives its own
 * back (shed.c) and the call is tried once more, so the application runs
 * out where it would over TCP.  The call is evaluated twice: no side
 * effects in its arguments.
 */
#define SHED_RETRY_IF(call, failed)					\
	({								\
		__typeof__(call) r_ = (call);				\
		if (failed(r_) && errno == EMFILE) {			\
			if (usmc_shed())				\
				r_ = (call);				\
			else						\
				errno = EMFILE;				\
		}							\
		r_;							\
	})
#define SHED_FAILED(r)		((r) < 0)
#define SHED_FAILED_PTR(r)	(!(r))
/* For calls that fail with -1; _PTR: with NULL (fopen, opendir). */
#define SHED_RETRY(call)	SHED_RETRY_IF(call, SHED_FAILED)
#define SHED_RETRY_PTR(call)	SHED_RETRY_IF(call, SHED_FAILED_PTR)

/* write(2) as the wrapper does it, for libusmc's own wrappers (-1/errno). */
ssize_t usmc_write_fd(int fd, const void *buf, size_t n);

/* Account n bytes that went through the kernel on a tracked socket. */
void usmc_tcp_count(struct usmc_sock *sk, ssize_t n, bool tx);

#endif
