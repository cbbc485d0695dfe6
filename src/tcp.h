/* SPDX-License-Identifier: MIT */
/*
 * tcp.h - what a connection does on its TCP socket beside the rings
 * (tcp.c): looking at it, the CLC messages owed on it, a connect's end, and
 * moving to it.
 */
#ifndef USMC_TCP_H
#define USMC_TCP_H

#include <stdbool.h>
#include <stdint.h>

struct usmc_sock;

/* Look at TCP alone: false while another thread of the family does;
 * usmc_tcp_look_give lets go (and looks again if asked meanwhile). */
bool usmc_tcp_look_take(struct usmc_sock *sk);
/* Held by this thread already (a call made while looking). */
bool usmc_tcp_look_mine(struct usmc_sock *sk);
void usmc_tcp_look_give(struct usmc_sock *sk, int fd);
/* Look at the TCP socket under a shared-memory connection (EOF, stray bytes). */
void usmc_check_tcp(struct usmc_sock *sk, int fd);
/* The same; installed = false: fd is not in the descriptor table yet
 * (accept), so nobody can have closed or reused it. */
void usmc_check_tcp_fd(struct usmc_sock *sk, int fd, bool installed);

/* TCP-mode server after a late decline: drop the client's wake message. */
int usmc_tcp_skip_wake(struct usmc_sock *sk, int fd, bool nonblock);
/* The same, waiting for what is owed: before the descriptor goes where
 * reads bypass usmc (another process, an image without libusmc, stdio). */
void usmc_tcp_take_owed(struct usmc_sock *sk, int fd);
/* ... those of owed (SKF_*), waiting at most ms milliseconds (-1: no limit). */
void usmc_tcp_take_owed_ms(struct usmc_sock *sk, int fd, uint32_t owed, int ms);

/* Settle a non-blocking connect that finished: 0, -EINPROGRESS, -errno, or
 * USMC_CONNECT_FAILED (now plain TCP; the kernel holds the error). */
#define USMC_CONNECT_FAILED	1
int usmc_sock_connect_done(struct usmc_sock *sk, int fd);
/* The same from the TCP socket's readiness (poll's bits, or an epoll
 * event's for the socket's own entry). */
int usmc_connect_settle(struct usmc_sock *sk, int fd, unsigned int revents);
bool usmc_sock_proposal_reset(struct usmc_sock *sk, int fd);

/* The peer raised CDC_F_MIGRATE: follow it. */
void usmc_migrate_follow(struct usmc_sock *sk, int fd);
/* Client: the server declined our proposal (clc.h); 1 if so, else 0. */
int usmc_migrate_declined(struct usmc_sock *sk);
/* Last close of a migrating (or declined) connection: our queued bytes. */
void usmc_migrate_on_close(struct usmc_sock *sk, int fd);
/* We leave shared memory now, for reason (the peer follows). */
int usmc_conn_to_tcp(struct usmc_sock *sk, int fd, int reason);

/* Moved to TCP (its bytes all sent): our ring's FIN there too, once
 * (close.c's shutdown, or the move itself). */
void usmc_conn_fin_to_tcp(struct usmc_sock *sk, int fd);

#endif
