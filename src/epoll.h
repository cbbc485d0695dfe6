/* SPDX-License-Identifier: MIT */
/*
 * epoll.h - epoll translation (epoll.c).
 */
#ifndef USMC_EPOLL_H
#define USMC_EPOLL_H

#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>

struct usmc_sock;

void usmc_epoll_created(int epfd);
/* close()/dup2() on a descriptor: true if it was an epoll instance. */
bool usmc_epoll_closed(int fd);
void usmc_epoll_dup(int oldfd, int newfd);
int usmc_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int usmc_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		    const sigset_t *mask, bool use_mask);
/* A socket is gone: drop its registrations. */
void usmc_epoll_forget(struct usmc_sock *sk);
/* A socket moved between TCP and shared memory: registrations need resync. */
void usmc_epoll_mode_changed(void);
void usmc_epoll_mark_nested(int epfd);
/* A socket watched through a nested epoll was read: refresh what the
 * outer level sees. */
void usmc_epoll_sock_changed(struct usmc_sock *sk);
bool usmc_epoll_has_ready(int epfd);
void usmc_epoll_after_fork(void);

#endif
