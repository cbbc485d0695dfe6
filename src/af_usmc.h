/* SPDX-License-Identifier: MIT */
/*
 * af_usmc.h - connect: discovery and the proposal (af_usmc.c).
 */
#ifndef USMC_AF_USMC_H
#define USMC_AF_USMC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct usmc_sock;

/* connect(): discovery, the proposal (af_usmc.c). */
int usmc_sock_connect(struct usmc_sock *sk, int fd, const struct sockaddr *sa, socklen_t len);
/* Look at the CLC answer / TCP state of a connection that is not final.
 * tcp_ev: what the caller knows of the TCP socket's readiness without a
 * system call, an epoll event's bits for the socket's own entry (0: no
 * news since the last one), or -1 (unknown: poll asks the kernel). */
void usmc_sock_refresh_seen(struct usmc_sock *sk, int fd, int tcp_ev);
static inline void usmc_sock_refresh(struct usmc_sock *sk, int fd)
{
	usmc_sock_refresh_seen(sk, fd, -1);
}

#endif
