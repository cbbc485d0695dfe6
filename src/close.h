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

#endif
