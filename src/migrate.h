/* SPDX-License-Identifier: MIT */
/*
 * migrate.h - a connection leaves shared memory for TCP without losing or
 * reordering a byte (migrate.c).
 */
#ifndef USMC_MIGRATE_H
#define USMC_MIGRATE_H

#include <stdbool.h>

struct usmc_sock;

/* Keep a migrating connection's ring bytes moving to TCP. */
int usmc_migrate_pump(struct usmc_sock *sk, int fd, bool block);
void usmc_migrate_finish(struct usmc_sock *sk);
/* SKF_RESENT, before a TCP receive: -ECONNRESET (or the error) when the
 * peer answered our moved bytes with a reset, else 0. */
int usmc_migrate_resent_check(struct usmc_sock *sk, int fd);
/* SKF_RESENT, before a TCP send: cleared once the moved bytes are acked. */
void usmc_migrate_resent_acked(struct usmc_sock *sk, int fd);
/* The peer raised CDC_F_MIGRATE: follow it. */
void usmc_migrate_follow(struct usmc_sock *sk, int fd);
/* Client: the server declined our proposal (clc.h); 1 if so, else 0. */
int usmc_migrate_declined(struct usmc_sock *sk);
int usmc_migrate_skip_dup(struct usmc_sock *sk, int fd, bool nonblock);
/* Last close of a migrating (or declined) connection: our queued bytes. */
void usmc_migrate_on_close(struct usmc_sock *sk, int fd);
/* We leave shared memory now, for reason (the peer follows). */
int usmc_conn_to_tcp(struct usmc_sock *sk, int fd, int reason);
/* A connection that must be plain TCP from now on (exec without libusmc,
 * posix_spawn, stdio): settle what cannot travel half-done, then leave. */
void usmc_conn_leave(struct usmc_sock *sk, int fd, int reason);
/* Reset the connection, TCP under it included, for every holder and the
 * peer (ECONNRESET); why: for the log. */
void usmc_conn_reset_tcp(struct usmc_sock *sk, int fd, const char *why);

#endif
