/* SPDX-License-Identifier: MIT */
/*
 * log.h - diagnostics on stderr (USMC_DEBUG).
 *
 * Formats into a fixed stack buffer and issues one write(2): never allocates,
 * never takes a lock, safe after fork and from any thread.
 */
#ifndef USMC_LOG_H
#define USMC_LOG_H

#include "options.h"

void usmc_log_write(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define usmc_dbg(level, ...)						\
	do {								\
		if (unlikely(usmc_opt.debug >= (level)))		\
			usmc_log_write(__VA_ARGS__);			\
	} while (0)

/* Internal consistency checks: cheap, always on, never abort the app. */
#define usmc_warn_on(cond)						\
	({								\
		bool __c = !!(cond);					\
		if (unlikely(__c))					\
			usmc_log_write("internal: %s:%d: %s", __FILE__,	\
				       __LINE__, #cond);		\
		__c;							\
	})

#endif
