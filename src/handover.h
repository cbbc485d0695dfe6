/* SPDX-License-Identifier: MIT */
/*
 * handover.h - sockets that leave the process in a message (SCM_RIGHTS).
 *
 * Called by the sendmsg/sendmmsg wrappers before the message goes out, and
 * by recvmsg/recvmmsg after one came in, whatever the descriptor is (only
 * UNIX sockets carry descriptors, and usmc never tracks those).  A message
 * without ancillary data costs one load and a branch.
 */
#ifndef USMC_HANDOVER_H
#define USMC_HANDOVER_H

#include "usmc.h"

#include <sys/socket.h>
#include <time.h>

struct usmc_sock;

void usmc_handover_send_slow(const struct msghdr *msg);
/* One tracked socket leaves for a process that will not adopt it: to TCP. */
void usmc_handover_fd(int fd);
/* Would its move to TCP reset it (the peer's unread bytes are stranded in
 * our ring: it closed, or left shared memory first)? */
bool usmc_handover_strands(struct usmc_sock *sk, int fd);
/* sendmsg/sendmmsg on an untracked socket with control data: our sockets
 * in it go with a ticket (scm_send.c) or to TCP first.  As the kernel's. */
ssize_t usmc_scm_sendmsg(int fd, const struct msghdr *msg, int flags);
int usmc_scm_sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags);
/* recvmsg/recvmmsg on an untracked socket with a control buffer: usmc's
 * ticket taken out, its sockets adopted (scm_recv.c).  As the kernel's. */
ssize_t usmc_scm_recvmsg(int fd, struct msghdr *msg, int flags);
int usmc_scm_recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *t);
/* Another process is about to share this connection (fd), or every
 * connection of ours (conns; inherited: only those an exec keeps, not
 * close-on-exec): those on a device without all of need's capabilities
 * (dev.h USMC_DEV_F_FORK, _EXEC) move to TCP first, reason
 * device_unshared.  Free when every device has them. */
void usmc_conn_unshare(struct usmc_sock *sk, int fd, uint32_t need);
void usmc_conns_unshare(uint32_t need, bool inherited);
/* A connection that must be plain TCP from now on (exec without libusmc,
 * posix_spawn, stdio): settle what cannot travel half-done, then leave. */
void usmc_conn_leave(struct usmc_sock *sk, int fd, int reason);
/* A listener goes where nobody answers proposals (SCM_RIGHTS, an exec
 * without libusmc, a posix_spawn dup2 action): clients stop proposing, and
 * the proposals of connections still in the accept queue are declined. */
void usmc_handover_listener(struct usmc_sock *sk);
/* The same for a socket we know as bound only (fd), which other holders
 * may have made a listener (listener.c). */
void usmc_handover_bound(struct usmc_sock *sk, int fd);

static inline void usmc_handover_send(const struct msghdr *msg)
{
	if (unlikely(msg && msg->msg_controllen))
		usmc_handover_send_slow(msg);
}

void usmc_handover_recv_slow(const struct msghdr *msg);

/* After a receive: r, the call's result, is returned as it is (errno
 * untouched). */
static inline ssize_t usmc_handover_recv(ssize_t r, const struct msghdr *msg)
{
	if (unlikely(r >= 0 && msg && msg->msg_controllen))
		usmc_handover_recv_slow(msg);
	return r;
}

static inline int usmc_handover_recvmm(int r, const struct mmsghdr *v)
{
	int i;

	for (i = 0; v && i < r; i++)
		usmc_handover_recv(0, &v[i].msg_hdr);
	return r;
}

static inline void usmc_handover_sendmm(const struct mmsghdr *v, unsigned int n)
{
	unsigned int i;

	for (i = 0; v && i < n; i++)
		usmc_handover_send(&v[i].msg_hdr);
}

#endif
