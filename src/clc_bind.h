/* SPDX-License-Identifier: MIT */
/*
 * clc_bind.h - the CLC decision bound to the TCP connection (clc_bind.c).
 */
#ifndef USMC_CLC_BIND_H
#define USMC_CLC_BIND_H

#include "usmc.h"

#include <sys/socket.h>

enum usmc_bind_mark {
	/* On a usmc listener, and so on every socket it accepts (the kernel
	 * copies it): the server end belongs to a usmc server. */
	USMC_BIND_LISTENER = 1,
	/* On a client socket before it proposes; on an accepted socket
	 * before the server answers accept. */
	USMC_BIND_DECIDED = 2,
	/* Not a mark: the connection is not established on that side yet
	 * (SYN_RECV, or no socket for it beside a listener there), only its
	 * listener answered (usmc_bind_peer_marks). */
	USMC_BIND_PENDING = 4,
	/* ... and with PENDING: no socket at all for it (a SYN cookie's, or
	 * one gone already). */
	USMC_BIND_ABSENT = 8,
};

/* Put mark on our socket fd: 0 or -errno. */
int usmc_bind_mark(int fd, int mark);
/* Is this one of the options our marks use?  Then the program sees, and
 * keeps, the value it set itself (interpose.c calls these). */
bool usmc_bind_is_mark_option(int level, int name);
struct usmc_sock;
int usmc_bind_getsockopt(struct usmc_sock *sk, int fd, int name, void *val, socklen_t *len);
void usmc_bind_setsockopt(struct usmc_sock *sk, int fd, int name, const void *val, socklen_t len);

/*
 * Does the other end of our connection local -> peer carry mark?  1 yes,
 * 0 no (a plain program holds it, or a usmc one that did not decide), or
 * -ENOENT: that end is not in our network namespace (the kernel routed the
 * connection elsewhere, or it is gone), or another -errno: the kernel
 * could not be asked.  Only 0 is proof of a forgery.
 */
int usmc_bind_peer_marked(const struct usmc_addr *local, const struct usmc_addr *peer, int mark);
/* The same, every mark at once: a set of enum usmc_bind_mark, or -errno. */
int usmc_bind_peer_marks(const struct usmc_addr *local, const struct usmc_addr *peer);

/*
 * Does a process still hold the socket whose own address is src and whose
 * peer is dst (from its client, a connection's server end)?  1 yes (a
 * socket with a file, which usmc keeps open until its last call on it
 * returned: sock.c held_fd), 0 no (closed by every holder, or all of them
 * died: an orphan on its way out, TIME_WAIT), -ENOENT none there (gone, or
 * in another namespace), or another error.
 */
int usmc_bind_conn_held(const struct usmc_addr *src, const struct usmc_addr *dst);
/* shed.c: the application is out of descriptors: give ours back (1 if one
 * went), and keep none from now on. */
int usmc_bind_shed(void);

#endif
