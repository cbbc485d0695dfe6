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
int usmc_migrate_skip_dup(struct usmc_sock *sk, int fd, bool nonblock);
/* A move claimed by another thread or process of ours (SKF_MOVING, under
 * move_lock): wait until it is under way or done; one whose claimer died
 * mid-move (usmc_move_orphaned) is reset and goes on as TCP
 * (usmc_move_take_over).  0, or -EAGAIN when nonblock and the move is
 * still in progress (it may wait for TCP room). */
int usmc_move_wait(struct usmc_sock *sk, int fd, bool nonblock);
bool usmc_move_orphaned(struct usmc_sock *sk);
void usmc_move_take_over(struct usmc_sock *sk, int fd);
/* Reset the connection, TCP under it included, for every holder and the
 * peer (ECONNRESET); why: for the log. */
void usmc_conn_reset_tcp(struct usmc_sock *sk, int fd, const char *why);

#endif
