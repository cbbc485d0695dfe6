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

/* A wait begins: its level (>= 0), or -ENOMEM; leave(level) ends it. */
int usmc_waitset_enter(void);
void usmc_waitset_leave(int level);
/* The level's epoll descriptor (created on first use), or -errno. */
int usmc_waitset_fd(int level);
/* Watch l's own doorbell bell from the level's instance. */
int usmc_waitset_watch(int level, struct usmc_lgr *l, int bell);
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
