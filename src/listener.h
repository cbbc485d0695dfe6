/* SPDX-License-Identifier: MIT */
/*
 * listener.h - a listener's record and index, shared by its holders
 * (listener.c).
 */
#ifndef USMC_LISTENER_H
#define USMC_LISTENER_H

#include <stdbool.h>

struct usmc_clc_ln;
struct usmc_sock;

/* listen(): published before the kernel listens. */
int usmc_sock_listen(struct usmc_sock *sk, int fd, int backlog);
/* The socket's last close: record and index removed. */
void usmc_listen_release(struct usmc_sock *sk);
/* After shutdown(SHUT_RD/RDWR) of fd: a listener the kernel stopped is
 * unpublished for good. */
void usmc_listen_shutdown(struct usmc_sock *sk, int fd);
/* Clients stop finding it (it goes where nobody answers). */
void usmc_listen_unpublish(struct usmc_sock *sk);
/* accept() on a socket we only know as bound, which another
 * holder made a listener: ours is one too, joined to its publication. */
void usmc_listen_follow(struct usmc_sock *sk, int fd);
/* The listener's TCP_DEFER_ACCEPT (set, or cleared) tells
 * its clients whether to send the wake message always (clc.h wake_always). */
void usmc_listen_defer(struct usmc_sock *sk, int fd);
/* A holder of the socket may not run usmc: no holder publishes
 * it from now on (SKF_NOPUB).  true the first time. */
bool usmc_listen_nopub(struct usmc_sock *sk);
/* The index another holder published for listening socket fd
 * (a reference, and its record in *reg_idx), or NULL. */
struct usmc_clc_ln *usmc_listen_find(int fd, int *reg_idx);

#endif
