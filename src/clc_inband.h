/* SPDX-License-Identifier: MIT */
/*
 * clc_inband.h - CLC messages on the TCP connection itself.
 *
 * Kernel SMC's CLC layer (smc_clc.c) sends typed messages on the TCP
 * connection: proposal, accept, confirm, decline.  usmc decides in the
 * listener's CLC index (clc.h) whether a proposal comes, and without
 * sending a byte when it need not: the index word is what kernel SMC's SYN
 * option is, a promise to the server, made only by a client that found a
 * usmc listener.  What travels on TCP is typed, as kernel SMC's:
 *
 *   PROPOSAL  client -> server: its link group, slot, generation, devices.
 *             Sent when the server waits for it (+W in the index: the
 *             wake), and always on a device whose peers cannot read each
 *             other's proposals from the index (no USMC_DEV_F_CLC_INDEX,
 *             dev.h): the index entry then carries the word only, and the
 *             body can reach nobody but the holder of the accepted socket.
 *   DECLINE   server -> client: with the reason (the index word has it
 *             too, so that a server out of everything can still decline).
 *
 * No ACCEPT and no CONFIRM on TCP.  The accept is the answer in the
 * connection's control block (cdc.h; a CDC message on a device that does
 * not map it), which the client reads without waiting: it wrote into its
 * ring before the answer came (seed 000's "no-copy"), and a message on
 * TCP would make its socket readable where TCP says nothing (poll on it,
 * an epoll set nested in another) until it took it.  SMC-R's confirm
 * sets up the RDMA link the accept named; usmc's client made every buffer
 * of the link group before it proposed, so nothing is left to confirm.
 *
 * Every message is one send() of USMC_CLC_MSG_LEN bytes, and the receiver
 * always knows that exactly one is owed and which kinds it may be.  A
 * receiver takes a message only whole (the kernel's count of queued bytes,
 * then a peek), so the program's bytes behind it are never touched, and a
 * message still on its way is not peeked at in part (a peek moves a
 * program's SO_PEEK_OFF).  Nothing in a message is trusted: one that does
 * not decode resets the connection it came on.
 *
 * Wire format (network byte order), as kernel SMC's: a header with an
 * eyecatcher, the type, the version and the total length, the body, and
 * the eyecatcher again as the trailer.  One length for every type keeps
 * the framing trivial (kernel SMC's vary).
 */
#ifndef USMC_CLC_INBAND_H
#define USMC_CLC_INBAND_H

#include "clc.h"

#include <stddef.h>
#include <stdint.h>

enum usmc_clc_msg_type {
	USMC_CLC_MSG_PROPOSAL = 1,
	USMC_CLC_MSG_DECLINE = 4,	/* kernel SMC's numbers (2, 3: accept, confirm) */
};

/* Which types a receiver takes (a bit per type). */
#define CLC_MSG_BIT(t)		(1u << (t))

#define USMC_CLC_MSG_VERSION	1
#define USMC_CLC_MSG_LEN	64

/* A message's contents, decoded. */
struct usmc_clc_msg {
	uint8_t type;
	uint32_t reason;		/* decline: USMC_R_* */
	/* The proposal: all of its body a PROPOSAL carries (lgr_id, slot,
	 * gen, version, uid, pid, devs, client); a DECLINE names the
	 * proposal by lgr_id, slot and gen.  The rest is never on the wire. */
	struct usmc_clc_prop p;
};

/* Encode m (by its type) into buf[USMC_CLC_MSG_LEN]. */
void usmc_clc_msg_encode(const struct usmc_clc_msg *m, uint8_t *buf);
/* Decode buf[USMC_CLC_MSG_LEN]: 0, or -EPROTO if it is no message of a
 * type in `want` (CLC_MSG_BIT). */
int usmc_clc_msg_decode(const uint8_t *buf, unsigned int want, struct usmc_clc_msg *out);

/* Send m on fd in one call (never blocks): 0 or -errno. */
int usmc_clc_msg_send(int fd, const struct usmc_clc_msg *m);
/*
 * Take the message at the head of fd's receive queue once it is whole
 * (never blocks): 0; -EAGAIN while none of it came, -EINPROGRESS while
 * only part of it did (nothing taken: a waiter must not spin on POLLIN);
 * -EPROTO for bytes that are no message of a wanted type (nothing taken);
 * -ENODATA at the peer's end before it; another -errno of the socket.
 */
int usmc_clc_msg_take(int fd, unsigned int want, struct usmc_clc_msg *out);

#endif
