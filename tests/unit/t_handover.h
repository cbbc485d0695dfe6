/* SPDX-License-Identifier: MIT */
/*
 * t_handover.h - how t_handover.c's roles pass descriptors: the checks'
 * flags, SCM_RIGHTS over the acceptor's UNIX socket (sendmsg, sendmmsg, or
 * to a datagram socket's name), the worker's side of it, and the first
 * message that makes a worker under usmc announce that it adopts.
 */
#ifndef T_HANDOVER_H
#define T_HANDOVER_H

#include "t_util.h"

#include <sys/un.h>

/* Flags of a check. */
#define H_PLAIN		0x01	/* worker without libusmc */
#define H_KEEP		0x02	/* the acceptor keeps its copy */
#define H_LATE		0x04	/* the client proposes late */
#define H_RING		0x08	/* request in the ring, acceptor reads a part */
#define H_SHUT		0x10	/* the client shuts its side down after the request */
#define H_LISTEN	0x20	/* pass the listener */
#define H_DECLINE	0x40	/* the acceptor declines the proposal */
#define H_NOW		0x80	/* pass it as soon as accept() returns */
#define H_QUEUED	0x100	/* the client's connection waits in the queue */
#define H_RELISTEN	0x200	/* the worker listens again, the acceptor accepts */
#define H_MMSG		0x400	/* pass with sendmmsg(), take with recvmmsg() */
#define H_TWICE		0x800	/* pass it twice: the worker reads half on each copy */
#define H_CLOSED	0x1000	/* the client closes after its request, before the hand-over */
#define H_CLIENT	0x2000	/* pass a client's end: the worker talks to a server */
#define H_CONNECTING	0x4000	/* ... passed while its non-blocking connect is in progress */
#define H_LOST		0x8000	/* the worker dies before it takes the descriptor */
#define H_CTRUNC	0x10000	/* passed twice in one message, room for one */
#define H_STOP		0x20000	/* H_LOST with the client stopped meanwhile */
#define H_GONE		0x40000	/* H_CLOSED, and the client process exited */
#define H_DGRAM		0x80000	/* pass on an unconnected datagram socket, to a name */
#define DGRAM_FD	100	/* H_DGRAM: the worker's bound datagram socket */

static int g_flags;	/* the role's flags */
/* H_DGRAM: the acceptor's unconnected datagram socket, and the name the
 * worker's channel is bound to. */
static int g_tx = -1;
static struct sockaddr_un g_dest;

/* One descriptor and an offset over the UNIX socket. */
static T_UNUSED void pass_fd(int chan, int fd, uint32_t off)
{
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	int n = g_flags & H_CTRUNC ? 3 : 1, fds[3] = { fd, fd, fd };
	struct iovec v = { &off, sizeof(off) };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = CMSG_SPACE(n * sizeof(int)) };
	struct cmsghdr *c;

	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	if (g_flags & H_MMSG) {
		struct mmsghdr mm = { .msg_hdr = m };

		if (sendmmsg(chan, &mm, 1, 0) != 1 || mm.msg_len != sizeof(off))
			t_fail("sendmmsg(SCM_RIGHTS): %s", strerror(errno));
		return;
	}
	if (g_tx >= 0) {
		chan = g_tx;
		m.msg_name = &g_dest;
		m.msg_namelen = sizeof(g_dest);
	}
	if (sendmsg(chan, &m, 0) != sizeof(off))
		t_fail("sendmsg(SCM_RIGHTS): %s", strerror(errno));
}

static T_UNUSED int take_fd(int chan, uint32_t *off)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec v = { off, sizeof(*off) };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t n;
	int fd;

	if (g_flags & H_MMSG) {
		struct mmsghdr mm = { .msg_hdr = m };

		do
			n = recvmmsg(chan, &mm, 1, MSG_CMSG_CLOEXEC, NULL);
		while (n < 0 && errno == EINTR);
		m = mm.msg_hdr;
		n = n == 1 ? (ssize_t)mm.msg_len : -1;
	} else {
		do
			n = recvmsg(chan, &m, MSG_CMSG_CLOEXEC);
		while (n < 0 && errno == EINTR);
	}
	if (n != sizeof(*off))
		t_fail("recvmsg: %zd %s", n, n < 0 ? strerror(errno) : "short");
	/* Three passed, room for two (CMSG_SPACE(4) == CMSG_LEN(8) on
	 * LP64): the kernel's truncation, exactly. */
	t_assert(!!(m.msg_flags & MSG_CTRUNC) == !!(g_flags & H_CTRUNC), "msg_flags %#x", m.msg_flags);
	t_assert(m.msg_controllen == CMSG_SPACE(sizeof(int)), "msg_controllen %zu",
		 (size_t)m.msg_controllen);
	c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN((g_flags & H_CTRUNC ? 2 : 1) * sizeof(int)))
		t_fail("no descriptor received");
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	if (g_flags & H_CTRUNC) {
		int fd2;

		memcpy(&fd2, CMSG_DATA(c) + sizeof(int), sizeof(int));
		t_ok(close(fd2));
	}
	return fd;
}

/*
 * The worker's first message, received as a program that expects
 * descriptors receives (recvmsg with a control buffer), as node's cluster
 * workers read their channel before any handle comes: a worker under usmc
 * has announced by then that it adopts (scm_peer.c).  Answered with one
 * byte.
 */
static T_UNUSED void hello_send(int chan)
{
	char b = 'h';

	t_write_all(chan, &b, 1);
	t_read_all(chan, &b, 1);
}

/* One byte, read with room for a descriptor: the read that announces a
 * reader under usmc. */
static T_UNUSED void recv_announce(int chan, char *b)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec v = { b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };

	while (recvmsg(chan, &m, 0) != 1)
		t_assert(errno == EINTR, "recvmsg hello: %s", strerror(errno));
}

static T_UNUSED void hello_recv(int chan)
{
	char b;

	recv_announce(chan, &b);
	t_write_all(chan, &b, 1);
}

#endif
