/* SPDX-License-Identifier: MIT */
/*
 * scm.h - the ticket: what a usmc sender adds to a message carrying
 * accelerated sockets (SCM_RIGHTS) for a receiver that runs libusmc.
 *
 * The message's descriptors as the kernel delivers them:
 *
 *   [ the program's 0 .. nprog-1 ][ ticket ][ extra 0 .. nextra-1 ]
 *
 * The ticket is a memfd holding struct usmc_ticket; the extras are the
 * descriptors the receiver needs to adopt the program's sockets (adopt.c):
 * family regions (memfds, family.c), a client's link group owner lock, a
 * listener's CLC index.  All of them are regular files, none a socket, so
 * the receiver finds the ticket by looking back from the last descriptor
 * over regular files only.  The ticket comes first so that a receiver short
 * of descriptors (the kernel installs in order and stops) either has the
 * ticket, or none of the extras reached it.
 *
 * Byte order: the host's (one host); sizes in bytes.  Everything in it is
 * another process's word: scm_recv.c checks it, adopt.c checks the sockets.
 */
#ifndef USMC_SCM_H
#define USMC_SCM_H

#include "usmc.h"

#define USMC_TICKET_MAGIC	0x544b43544d534d55ULL	/* "UMSMTCKT" */
/* The kernel's limit of descriptors per message (SCM_MAX_FD). */
#define USMC_SCM_MAX_FD		253
#define USMC_TICKET_NONE	UINT32_MAX

struct usmc_ticket_rec {
	uint32_t pos;		/* the socket's index among the program's descriptors */
	uint32_t kind;		/* SK_CONN, SK_LISTEN, or SK_TCP (bound, not connected) */
	uint32_t fam;		/* extra holding its family region */
	uint32_t sh;		/* its shared half's index in that region */
	uint32_t aux;		/* extra: client's owner lock, listener's index; or NONE */
	uint32_t mode;		/* connection: enum usmc_conn_mode */
	uint32_t slot, gen;	/* connection: link group slot and generation */
	uint64_t lgr_id, ln_id;
	int32_t reg_idx;	/* listener: registry record */
	char role;		/* connection: 'C' or 'S' */
	uint8_t __pad[3];
	struct usmc_addr local, peer;	/* listener, bound socket: bound in local */
};

struct usmc_ticket {
	uint64_t magic;
	uint32_t version;	/* USMC_PROTO_VERSION */
	uint32_t nprog;		/* the program's descriptors (the ticket's own index) */
	uint32_t nextra;	/* ours after the ticket */
	uint32_t nrec;
	struct usmc_ticket_rec rec[];
};

#endif
