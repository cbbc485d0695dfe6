/* SPDX-License-Identifier: MIT */
/*
 * waitset.h - each thread's own epoll instance watching doorbells
 * edge-triggered (waitset.c).  A wait brackets itself with enter/leave;
 * the level it gets picks the instance, so a signal handler's wait never
 * takes the edges of the wait it interrupted.
 */
#ifndef USMC_WAITSET_H
#define USMC_WAITSET_H

#include "usmc.h"

struct usmc_lgr;

/* Library constructor: the key whose destructor closes a thread's
 * instances when it exits. */
void usmc_waitset_init(void);
/* A wait begins: its level (>= 0); leave(level) ends it. */
int usmc_waitset_enter(void);
void usmc_waitset_leave(int level);
/* The level's epoll descriptor (created on first use), or -errno. */
int usmc_waitset_fd(int level);
/* Watch l's own doorbell bell from the level's instance (-ENOSPC: the
 * wait watches more link groups than an instance holds). */
int usmc_waitset_watch(int level, struct usmc_lgr *l, int bell);
/* Stop watching what the wait in progress did not watch (the doorbells
 * of link groups the thread no longer waits for must not wake it). */
void usmc_waitset_prune(int level);
/* Take the edges queued in the level's instance. */
void usmc_waitset_clear(int level);
/* A wait this deep shares its instance with the wait it interrupted:
 * it must wake that one when it ends. */
bool usmc_waitset_nested(int level);
/* Out of descriptors (shed.c): close this thread's idle instances (the
 * levels no wait of this thread is in); how many went. */
int usmc_waitset_shed(void);
/* In a forked child (atfork). */
void usmc_waitset_after_fork(void);

#endif
