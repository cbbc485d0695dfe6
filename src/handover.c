// SPDX-License-Identifier: MIT
/*
 * handover.c - sockets passed to another process in a message (SCM_RIGHTS).
 *
 * A descriptor sent over a UNIX socket (node's cluster in round-robin
 * mode, connection brokers, haproxy's and nginx's hand-over on reload)
 * reaches a process that shares none of our memory: it cannot read the
 * rings of a shared-memory connection, nor answer proposals for a
 * listener, and the kernel socket outlives our last close of it (it is in
 * flight, then in the receiver).  So before the message leaves:
 *
 *  - a connection on (or possibly going onto) shared memory moves to TCP,
 *    every byte in order (migrate.c; reason handed_over): a connect in
 *    progress is settled first, an undecided server connection is decided
 *    (TCP unless a proposal is there), and a CLC wake or decline byte still
 *    due ahead of the peer's first TCP byte is consumed here, since the
 *    receiver would read it as data.  Afterwards our copy and the
 *    receiver's are one TCP socket: closing ours, keeping it, or sending
 *    it again behave as TCP;
 *  - a listener stops taking proposals (usmc_listen_unpublish): clients
 *    connect over TCP, whoever accepts.  Our own copy keeps accepting, on
 *    TCP.
 *
 * The send itself is not ours: if it fails, the socket stays on TCP.
 * Descriptors that are not tracked sockets (pipes, files, UNIX sockets,
 * sockets never connected) go untouched.
 *
 * Not done: adopting the connection in a receiver that runs usmc (it would
 * have to reach our family region and link groups, as exec.c's adoption
 * does; docs/design.md, limits).  A connection whose peer had moved it to
 * TCP with bytes of the peer's still unread in our receive ring cannot
 * hand those over: they stay with us (logged).
 */
#include "af_usmc.h"
#include "fdtab.h"
#include "handover.h"
#include "log.h"
#include "sock.h"
#include "sys.h"

#include <poll.h>

/* Sleep until fd shows one of events (or hangs up). */
static void wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	sys_poll(&p, 1, -1);
}

static void handover_conn(struct usmc_sock *sk, int fd)
{
	/* A client's wake byte can only go out on a connected socket, and
	 * the peer counts on it before any TCP byte: settle the connect. */
	while (sk_flag(sk, SKF_CONNECTING) && usmc_sock_connect_done(sk, fd) == -EINPROGRESS)
		wait_fd(fd, POLLOUT);
	if (sk_is_smc_path(sk))
		usmc_conn_leave(sk, fd, USMC_R_HANDOVER);
	if (sk_mode(sk) == USMC_MODE_MIGRATING)
		usmc_dbg(1, "fd %d: handed over before the peer's ring was read: those bytes stay here",
			 fd);
	/* The one CLC byte the peer sends ahead of its TCP data (a wake
	 * byte, or the server's decline byte) must not reach the receiver.
	 * It is on its way (the flag is set only once it is owed). */
	while (sk_flag(sk, SKF_WAKEBYTE)) {
		int rc = usmc_tcp_skip_wake(sk, fd, true);

		if (rc == -EAGAIN || rc == -EWOULDBLOCK)
			wait_fd(fd, POLLIN | POLLRDHUP);
		else if (rc && rc != -EINTR)
			break;
	}
}

static void handover_fd(int fd)
{
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (!sk)
		return;
	if (sk->kind == SK_CONN) {
		handover_conn(sk, fd);
	} else if (sk->kind == SK_LISTEN && sk->lst) {
		usmc_dbg(1, "fd %d: listener handed over: clients connect over TCP", fd);
		usmc_listen_unpublish(sk);
	}
	usmc_sock_put(sk);
}

void usmc_handover_send_slow(const struct msghdr *msg)
{
	struct msghdr *m = (struct msghdr *)msg;	/* CMSG_NXTHDR's prototype */
	struct cmsghdr *c;

	if (!m->msg_control)
		return;
	for (c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		size_t i, n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			handover_fd(fd);
		}
	}
}
