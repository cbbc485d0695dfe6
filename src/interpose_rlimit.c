// SPDX-License-Identifier: MIT
/*
 * interpose_rlimit.c - setrlimit(2) and prlimit(2).
 *
 * A program that lowers RLIMIT_AS counts usmc's mappings against it: usmc
 * gives back the link groups it no longer needs (shed.c).  The limit is
 * set with the raw system call, so these wrappers work before libusmc is
 * initialised, and they are not instrumented: sanitizer runtimes set
 * limits before they can run instrumented code.  Only a lowered RLIMIT_AS
 * of this process goes further.
 */
#include "interpose.h"
#include "shed.h"
#include "sys.h"

#include <sys/resource.h>
#include <sys/syscall.h>

#define NOSAN __attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined))

static NOSAN int set_limit(pid_t pid, int res, const struct rlimit *rl, struct rlimit *old)
{
	struct rlimit was = { RLIM_INFINITY, RLIM_INFINITY };	/* written by the kernel */
	long r;

	r = usmc_sys6(SYS_prlimit64, pid, res, (long)rl, (long)&was, 0, 0);
	if (r < 0)
		return (int)ret(r);
	if (old)
		*old = was;
	if (rl && res == RLIMIT_AS && (!pid || pid == usmc_getpid()) &&
	    rl->rlim_cur < was.rlim_cur)
		usmc_shed_address_space();
	return 0;
}

EXPORT NOSAN int setrlimit(__rlimit_resource_t res, const struct rlimit *rl)
{
	return set_limit(0, (int)res, rl, NULL);
}

EXPORT NOSAN int setrlimit64(__rlimit_resource_t res, const struct rlimit64 *rl)
{
	return set_limit(0, (int)res, (const struct rlimit *)rl, NULL);
}

EXPORT NOSAN int prlimit(pid_t pid, __rlimit_resource_t res, const struct rlimit *rl, struct rlimit *old)
{
	return set_limit(pid, (int)res, rl, old);
}

EXPORT NOSAN int prlimit64(pid_t pid, __rlimit_resource_t res, const struct rlimit64 *rl,
		     struct rlimit64 *old)
{
	return set_limit(pid, (int)res, (const struct rlimit *)rl, (struct rlimit *)old);
}
