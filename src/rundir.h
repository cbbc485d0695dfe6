/* SPDX-License-Identifier: MIT */
/*
 * rundir.h - the runtime directory: where cooperating processes meet.
 *
 * Everything usmc shares between processes is a file here: the listener
 * registry, the statistics, one CLC index per listener, one directory per
 * link group (its shared memory and doorbell FIFOs).  Liveness of whoever
 * owns an object is an OFD lock that the kernel drops when the owner dies,
 * so a survivor or the next run can always tell stale state from live state.
 */
#ifndef USMC_RUNDIR_H
#define USMC_RUNDIR_H

#include "usmc.h"

#include <sys/stat.h>

/* Resolve, create (mode 0700) and validate the directory; idempotent. */
int usmc_rundir_init(void);
const char *usmc_rundir_path(void);
int usmc_rundir_fd(void);

/* openat(rundir, name) with O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC; O_CREAT implies
 * O_EXCL.  An existing object is checked with fstat before anything else
 * (usmc_rundir_check): a regular file (usmc_rundir_open_fifo: a FIFO) of an
 * allowed owner that nobody else may write; -EINVAL wrong type, -EPERM
 * untrusted owner or mode.  Sizes are the caller's to check. */
int usmc_rundir_open(const char *name, int flags, mode_t mode);
/* The same for a descriptor usmc keeps after the call returns (a link
 * group's memory, a listener's index): above the program's numbers
 * (ifd.c) or -EMFILE, never one the program would have got next. */
int usmc_rundir_open_kept(const char *name, int flags, mode_t mode);
int usmc_rundir_open_fifo(const char *name, int flags);
int usmc_rundir_check(int fd, bool fifo, struct stat *st);
/* The liveness of the owner of a lock file (ln-ID, lg-ID/mem).  Never
 * blocks. */
enum usmc_owner {
	USMC_OWNER_DEAD,	/* gone, or its lock is free */
	USMC_OWNER_ALIVE,	/* its lock is held */
	USMC_OWNER_PLANTED,	/* not a regular file: no usmc process made it */
	USMC_OWNER_UNKNOWN,	/* not ours to judge (owner or mode not trusted) */
};
enum usmc_owner usmc_rundir_owner_alive(const char *name);
/* Why usmc_rundir_init() refused the directory ("" when it did not). */
const char *usmc_rundir_problem(void);
int usmc_rundir_mkdir(const char *name);
int usmc_rundir_mkfifo(const char *name);
int usmc_rundir_unlink(const char *name, bool dir);
int usmc_rundir_rename(const char *from, const char *to);

/* Map len bytes of fd MAP_SHARED read-write; NULL on failure (errno set). */
void *usmc_map_shared(int fd, size_t len);

/* OFD write lock on one byte: the owner's liveness token. */
int usmc_lock_take(int fd, off_t byte);
/* OFD read lock on one byte: a liveness token that several holders, each
 * on its own open file description, can hold at once (a CLC index answered
 * by processes that each listen on one socket, listener.c).  -EAGAIN while
 * a write lock is held. */
int usmc_lock_share(int fd, off_t byte);
int usmc_lock_drop(int fd, off_t byte);
/* true when some open file description still holds a lock on that byte. */
bool usmc_lock_held(int fd, off_t byte);

/* Is st (an object opened in the runtime directory) safe to trust?  An
 * allowed owner, and no write permission for group or others. */
bool usmc_rundir_owner_ok(const struct stat *st);

/* Remove link groups and listener indexes whose owners are dead.
 * Returns the number of objects removed. */
int usmc_rundir_gc(void);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_rundir_after_fork(void);

#endif
