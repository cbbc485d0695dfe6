/* SPDX-License-Identifier: MIT */
/*
 * rx.h - the receive side: out of our DMB (rx.c).
 */
#ifndef USMC_RX_H
#define USMC_RX_H

#include "usmc.h"

#include <sys/types.h>
#include <sys/uio.h>

struct usmc_sock;

ssize_t usmc_rx_fast(struct usmc_sock *sk, int fd, void *buf, size_t n, int flags);
ssize_t usmc_rx(struct usmc_sock *sk, int fd, const struct iovec *iov, int iovcnt, int flags);
/* splice(2) out of the ring: up to len bytes to out_fd. */
ssize_t usmc_rx_to_fd(struct usmc_sock *sk, int fd, int out_fd, size_t len, int flags);
/* Readiness of an SMC-path connection as poll(2) bits. */
unsigned int usmc_sock_poll(struct usmc_sock *sk);
/* Bytes readable (FIONREAD). */
int usmc_sock_inq(struct usmc_sock *sk);
/* TCP_CM_INQ after a ring read, as the kernel's tcp_inq_hint(): what is
 * left to read, or 1 at the peer's FIN with nothing left (read again for
 * the EOF); -1: nothing left in the ring of a connection moving to TCP
 * (the kernel's count is the answer). */
int usmc_rx_inq_hint(struct usmc_sock *sk);

#endif
