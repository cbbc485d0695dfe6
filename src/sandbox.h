/* SPDX-License-Identifier: MIT */
/*
 * sandbox.h - stepping aside for a process under a seccomp filter.
 *
 * Once a process runs under a filter (it started under one, or installs one
 * through prctl(PR_SET_SECCOMP) or syscall(SYS_seccomp) while we watch),
 * libusmc makes no system call the program would not have made itself:
 * its connections are on TCP, its descriptors are no longer tracked, and
 * every wrapper passes the call straight to libc.  It never goes back.
 */
#ifndef USMC_SANDBOX_H
#define USMC_SANDBOX_H

#include "usmc.h"

/* Set once, never cleared; read relaxed (a thread racing the filter's
 * installation is not covered: sandbox.c). */
extern _Atomic bool usmc_sandbox_on;

static inline bool usmc_sandboxed(void)
{
	return unlikely(LOAD_RELAXED(&usmc_sandbox_on));
}

/* Constructor: does this process start under a filter?  Then step aside
 * from the start. */
void usmc_sandbox_init(void);
/* A filter is about to be installed: move every connection to TCP, stop
 * tracking descriptors, step aside.  Idempotent. */
void usmc_sandbox_enter(void);
/* The program calls syscall(nr, a0, a1, ...): step aside first if that
 * installs a seccomp filter. */
void usmc_sandbox_syscall(long nr, long a0, long a1);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_sandbox_after_fork(void);

#endif
