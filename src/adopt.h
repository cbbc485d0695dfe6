/* SPDX-License-Identifier: MIT */
/*
 * adopt.h - a socket that another image or process made becomes ours:
 * after exec (exec.c, USMC_INHERIT) and when received with SCM_RIGHTS
 * (scm_recv.c, the sender's ticket).
 */
#ifndef USMC_ADOPT_H
#define USMC_ADOPT_H

#include "usmc.h"

struct usmc_sock_sh;

struct usmc_adopt {
	int fd;				/* the descriptor here */
	struct usmc_sock_sh *sh;	/* its shared half (a family region) */
	char role;			/* connection: 'C' or 'S' */
	uint32_t mode;			/* connection: enum usmc_conn_mode */
	uint64_t lgr_id;		/* connection: its link group, slot, generation */
	uint32_t slot, gen;
	uint64_t ln_id;			/* the listener's CLC index */
	int ln_fd;			/* listener: its index (owner lock); exec: kept open */
	int owner_fd;			/* client: the link group's owner lock, or -1 */
	int reg_idx;			/* listener: registry record */
	struct usmc_addr local, peer;	/* listener: bound address in local */
	/* Received from another process (SCM_RIGHTS): nothing above is
	 * trusted until checked against the kernel socket and the link
	 * group, and the sender counted one reference for the descriptor in
	 * flight, which becomes ours (dropped if we hold the socket already). */
	bool received;
	bool peek;			/* MSG_PEEK: the message stays queued, and its reference */
};

/* 0: fd is tracked as a->sh's socket; -errno: left alone. */
int usmc_adopt_conn(const struct usmc_adopt *a);
int usmc_adopt_listener(const struct usmc_adopt *a);
/* A socket not connected nor listening here (bound, usually), that the
 * receiver or the new image and other holders may each listen on
 * (listener.c). */
int usmc_adopt_bound(const struct usmc_adopt *a);

#endif
