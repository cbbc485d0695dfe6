/* SPDX-License-Identifier: MIT */
/*
 * conn.h - a connection's state below the handshake (conn.c).
 */
#ifndef USMC_CONN_H
#define USMC_CONN_H

#include <stdbool.h>
#include <stdint.h>

struct usmc_lgr;
struct usmc_sock;

/* The connection's entry in the statistics (usmc stat), made once. */
void usmc_conn_stats_open(struct usmc_sock *sk, int fd);
/* The last holder's close: the entry goes, whoever made it. */
void usmc_conn_stats_close(struct usmc_sock *sk);
/* Descriptors an accelerated connection may need besides its socket: a
 * new link group's file and its two doorbells (shared by its connections). */
#define USMC_CONN_FDS	3
/* 0, or the reason this connection cannot use shared memory (resources). */
int usmc_conn_resources(const struct usmc_sock *sk, int fd);
int usmc_conn_bind_slot(struct usmc_sock *sk, struct usmc_lgr *l, uint32_t slot, uint32_t gen,
			bool fresh);
void usmc_conn_unbind_slot(struct usmc_sock *sk, bool server_attached);
/* Both ends: the connection is on shared memory from now on. */
void usmc_conn_established(struct usmc_sock *sk);
/* On TCP from now on, for reason (enum usmc_reason). */
void usmc_sock_set_tcp(struct usmc_sock *sk, int reason);
/* A client counted as shared memory when it proposed, declined or taken
 * back before it ever was: uncounted (once). */
void usmc_conn_uncount(struct usmc_sock *sk);
/* A TCP-mode connect that was in progress: counted once it connected. */
void usmc_sock_count_late(struct usmc_sock *sk, int fd);
/* A reset: mark, count, wake. */
void usmc_sock_abort(struct usmc_sock *sk, int abort_reason);
/* Has the peer reset the connection?  Then so have we. */
void usmc_sock_check_reset(struct usmc_sock *sk);
/* SO_SNDBUF/SO_RCVBUF set on fd (after the kernel took it), and what an
 * accepted socket inherits from its listener. */
void usmc_sock_bufsize(struct usmc_sock *sk, int fd, int name);
void usmc_sock_buf_inherit(struct usmc_sock *sk, const struct usmc_sock *lsk);

#endif
