/* SPDX-License-Identifier: MIT */
/*
 * accept.h - the server side of the handshake (accept.c).
 */
#ifndef USMC_ACCEPT_H
#define USMC_ACCEPT_H

#include <stdbool.h>
#include <sys/socket.h>

struct usmc_sock;

int usmc_sock_accept(struct usmc_sock *lsk, int fd, struct sockaddr *sa, socklen_t *salen,
		     int flags);
/* Server: settle an UNDECIDED connection.  decide: the application is about
 * to act (write, shutdown...): TCP unless a proposal is there.  Otherwise
 * only a proposal, TCP bytes or EOF settle it. */
void usmc_server_resolve(struct usmc_sock *sk, int fd, bool decide);
/* An undecided server connection looks for a proposal (cheap). */
void usmc_server_resolve_quick(struct usmc_sock *sk, int fd);

#endif
