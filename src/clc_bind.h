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
	/* Not a mark: the connection is not established on that side
	 * (SYN_RECV: usmc_bind_peer_marks). */
	USMC_BIND_PENDING = 4,
};

/* Put mark on our socket fd: 0 or -errno. */
int usmc_bind_mark(int fd, int mark);
/* Is this one of the options our marks use?  Then the program sees, and
 * keeps, the value it set itself (interpose.c calls these). */
bool usmc_bind_is_mark_option(int level, int name);
struct usmc_sock;
int usmc_bind_getsockopt(struct usmc_sock *sk, int fd, int name, void *val, socklen_t *len);
/* setsockopt() of a mark option: 0 or -1 with errno, as the kernel. */
int usmc_bind_setsockopt(struct usmc_sock *sk, int fd, int name, const void *val, socklen_t len);

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
 * peer is dst (from its client, a connection's server end)?  0 no: an
 * orphan, closed by every holder or all of them dead, between its FIN and
 * TIME_WAIT (usmc keeps a socket's file open until its last call on it
 * returned: sock.c held_fd); 1 yes, or cannot tell (TIME_WAIT: a socket
 * still held goes there too); -ENOENT none there (gone, reset, or in
 * another namespace); or another error.
 */
int usmc_bind_conn_held(const struct usmc_addr *src, const struct usmc_addr *dst);

/*
 * Client, just connected, no socket found for the server's end: is a usmc
 * listener for peer in our namespace?  Then the connection is not
 * established on its side (a SYN cookie answered: the listener's queue
 * was full), or was sent elsewhere by a rule of ours (DNAT): either way
 * no usmc server has it now.  Otherwise it is in another namespace.
 */
bool usmc_bind_listener_here(const struct usmc_addr *local, const struct usmc_addr *peer);
/* shed.c: the application is out of descriptors: give ours back (1 if one
 * went), and keep none from now on. */
int usmc_bind_shed(void);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_bind_after_fork(void);

#endif
