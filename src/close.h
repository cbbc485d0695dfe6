/* SPDX-License-Identifier: MIT */
/*
 * close.h - shutdown and the close protocol (close.c).
 */
#ifndef USMC_CLOSE_H
#define USMC_CLOSE_H

struct usmc_sock;
struct usmc_sock_ops;

int usmc_sock_shutdown(struct usmc_sock *sk, int fd, int how);
/* Every socket usmc makes releases through these (sock.h). */
extern const struct usmc_sock_ops usmc_sock_ops;
/* The family's last descriptor of a connection is gone. */
void usmc_conn_release(struct usmc_sock *sk, int fd);
/* Tell the peer we are gone (FIN or, with unread data, RST). */
void usmc_conn_close_protocol(struct usmc_sock *sk);
void usmc_conn_close(struct usmc_sock *sk, int fd);
/* The same when the last holder exits without closing. */
void usmc_conn_exit(struct usmc_sock *sk, int fd);

#endif
