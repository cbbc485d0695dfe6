/* SPDX-License-Identifier: MIT */
/*
 * close.h - shutdown and the close protocol (close.c).
 */
#ifndef USMC_CLOSE_H
#define USMC_CLOSE_H

struct usmc_sock;

int usmc_sock_shutdown(struct usmc_sock *sk, int fd, int how);

#endif
