// SPDX-License-Identifier: MIT
/*
 * atfork.c - what fork() does to usmc's state (pthread_atfork handlers,
 * registered by interpose.c before anything of the program's: glibc runs
 * prepare handlers last registered first, so ours runs last, just before
 * the fork, and parent and child handlers in registration order, ours
 * first).
 *
 * The child has one thread: every other thread of the parent is gone,
 * with whatever lock it held.  The descriptor table is held across the
 * fork (fdtab.c) and so is the family lock (family.c); every other
 * module's locks are made afresh in the child, and the modules recount
 * what the parent's threads were doing (epoll waiters and sleepers, the
 * wait set, references in flight).
 */
#include "atfork.h"
#include "clc.h"
#include "clc_bind.h"
#include "dev.h"
#include "epoll.h"
#include "exec.h"
#include "family.h"
#include "fdtab.h"
#include "lgr.h"
#include "options.h"
#include "registry.h"
#include "rundir.h"
#include "sandbox.h"
#include "sock.h"
#include "stats.h"
#include "waitset.h"

void usmc_atfork_prepare(void)
{
	usmc_fd_fork_prepare();
	usmc_family_before_fork();
}

void usmc_atfork_child(void)
{
	usmc_getpid_forget();
	usmc_fd_after_fork();
	usmc_family_after_fork();
	/* The other modules' locks, then their state. */
	usmc_rundir_after_fork();
	usmc_registry_after_fork();
	usmc_clc_ln_after_fork();
	usmc_bind_after_fork();
	usmc_ctl_after_fork();
	usmc_dev_after_fork();
	usmc_sock_pool_after_fork();
	usmc_spawn_after_fork();
	usmc_sandbox_after_fork();
	usmc_lgr_after_fork();
	usmc_epoll_after_fork();
	usmc_waitset_after_fork();
	usmc_stats_after_fork();
}
