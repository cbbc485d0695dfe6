/* SPDX-License-Identifier: MIT */
/*
 * epoll.h - epoll translation (epoll.c).
 */
#ifndef USMC_EPOLL_H
#define USMC_EPOLL_H

#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <time.h>

struct usmc_sock;

void usmc_epoll_created(int epfd);
/* close()/dup2() on a descriptor: true if it was an epoll instance. */
bool usmc_epoll_closed(int fd);
void usmc_epoll_dup(int oldfd, int newfd);
int usmc_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
/* Which call: epoll_wait, epoll_pwait (mask), epoll_pwait2 (mask, ts). */
enum usmc_epw { USMC_EPW_WAIT, USMC_EPW_PWAIT, USMC_EPW_PWAIT2 };
/* Every epoll_wait of the program (timeout in ms, -1 forever; ts for
 * epoll_pwait2): returns a count or -errno, never USMC_PASS.  Kernel
 * events tagged with usmc's records never reach the program. */
int usmc_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		    const struct timespec *ts, const sigset_t *mask, enum usmc_epw how);
void usmc_epoll_mark_nested(int epfd);
/* sk's path changed: its registrations follow now (kernel entries for
 * its doorbell go), not at the next epoll_wait.  Shedding (shed.c): false
 * if the epoll lock could not be had in bounded time. */
bool usmc_epoll_sock_resync(struct usmc_sock *sk);
bool usmc_epoll_has_ready(int epfd);
void usmc_epoll_after_fork(void);

#endif
