/* SPDX-License-Identifier: MIT */
/*
 * dev.h - the device interface behind SMC-D style link groups.
 *
 * Shaped like the kernel's smcd_ops: a device provides the memory a link
 * group's DMBs live in (the owner registers it, the peer attaches it by
 * token), a doorbell per side of a link group, and a way to signal the
 * peer.  dev.c owns the table and the choice of device for a connection;
 * the core asks a link group's device (lgr->dev) and never names one.
 *
 * What a device can do is in its capability flags:
 *
 *  USMC_DEV_F_MAPPED  the peer's DMBs are mapped here: the sender writes
 *                     straight into them (SMC-D's "no copy").  Without it
 *                     (SMC-R's shape) the core writes into a sndbuf of its
 *                     own (lgr.c usmc_lgr_sndbuf) and hands each span to
 *                     move_data before publishing the cursor that covers
 *                     it; the peer's DMBs are never touched by the core.
 *  USMC_DEV_F_FORK    a link group keeps working in a forked child: the
 *                     two processes may share a connection.  Without it,
 *                     a connection moves to TCP before the fork (reason
 *                     device_unshared), unless its peer closed already.
 *  USMC_DEV_F_EXEC    a process can attach a link group it did not make
 *                     or attach itself and take a connection over: exec
 *                     (exec.c), and with _FORK a posix_spawn child or a
 *                     process its socket is sent to (SCM_RIGHTS).
 *  USMC_DEV_F_CLC_INDEX  the peer reads a proposal's body from the
 *                     listener's CLC index and the client the server's
 *                     answer from the control block (the two ends share
 *                     the runtime directory).  Without it the index carries
 *                     the decision words only, and the proposal and the
 *                     answer travel on the TCP connection as typed CLC
 *                     messages (clc_inband.h), as they must between hosts.
 *
 * Loopback (one host, any network namespace) has all four.  dev_copy
 * (-DUSMC_TEST_DEVICES builds only, make copy) is loopback's memory used the
 * way a device without them must be: the suite runs over it so that the
 * sndbuf + move_data path, CDC lines published by message (publish) and
 * the moves to TCP are tested on every commit.
 * ivshmem (between VMs) and RDMA (between hosts) slot in behind the same
 * table.
 */
#ifndef USMC_DEV_H
#define USMC_DEV_H

#include "usmc.h"

struct usmc_lgr;

/* Device ids carried in proposals, by priority (seed 000, discussion 2). */
enum usmc_dev_id {
	USMC_DEV_NONE = 0,
	USMC_DEV_LOOPBACK = 1,	/* same host: shared files + FIFO doorbells */
	USMC_DEV_IVSHMEM = 2,	/* reserved: between VMs */
	USMC_DEV_RDMA = 3,	/* reserved: between hosts */
	USMC_DEV_COPY = 0x7f,	/* test builds only: loopback without mapping (dev_copy.c) */
};

#define USMC_DEV_F_MAPPED	0x1u
#define USMC_DEV_F_FORK		0x2u
#define USMC_DEV_F_EXEC		0x4u
#define USMC_DEV_F_CLC_INDEX	0x8u

/* What of a slot's ring dir the core never gives back (dmb_release). */
#define USMC_DMB_FLOOR		4096u

struct usmc_dev_ops {
	const char *name;
	uint8_t id;				/* enum usmc_dev_id, carried in CLC */
	uint32_t caps;				/* USMC_DEV_F_* */
	bool (*probe)(void);			/* usable in this process? */
	/* Link group memory: owner creates and maps, peer attaches by lgr->id. */
	int (*lgr_create)(struct usmc_lgr *lgr);
	int (*lgr_attach)(struct usmc_lgr *lgr);
	void (*lgr_release)(struct usmc_lgr *lgr);
	/* Owner: remove the link group's names (peers keep their mappings). */
	void (*lgr_unpublish)(struct usmc_lgr *lgr);
	/* Is anyone on the other side still holding this link group? */
	bool (*lgr_peer_alive)(struct usmc_lgr *lgr);
	/* The descriptor that carries the link group to another image or
	 * process (kept open across exec, sent with SCM_RIGHTS tickets; the
	 * owner's liveness lock lives on it), -1 if it has none. */
	int (*lgr_handle_fd)(const struct usmc_lgr *lgr);
	/* A slot's DMBs: registered when the owner first hands the slot out. */
	int (*register_dmb)(struct usmc_lgr *lgr, uint32_t slot);
	/* The link group's doorbells, one per side for all its slots (the
	 * owner creates them with the link group).  own: the descriptor this
	 * side's waiters watch (edge-triggered); peer: the one it signals. */
	int (*attach_bells)(struct usmc_lgr *lgr, bool owner_side, int *own, int *peer);
	/* Back len bytes at offset off of a slot's ring dir with memory now, so
	 * writing there can never fault (tmpfs full): 0 or -ENOSPC. */
	int (*dmb_reserve)(struct usmc_lgr *lgr, uint32_t slot, int dir, uint32_t off,
			   uint32_t len);
	/* Optional: give that memory back (the sender's, under its tx_lock,
	 * with nothing unread there): 0 or -errno.  Never below
	 * USMC_DMB_FLOOR: a ring's first bytes stay backed while its link
	 * group lives, so a reserve there needs asking only once. */
	int (*dmb_release)(struct usmc_lgr *lgr, uint32_t slot, int dir, uint32_t off,
			   uint32_t len);
	/* Devices without USMC_DEV_F_MAPPED: len bytes at offset off of the
	 * slot's sndbuf (usmc_lgr_sndbuf) into the peer's DMB of ring dir at
	 * the same offset (off + len <= ring size: callers split a wrap).
	 * On return the bytes are where the peer will find them once it sees
	 * a cursor published after this call (SMC-R: an RDMA WRITE ordered
	 * before the CDC message).  Called under the connection's tx_lock;
	 * 0, or -errno: the connection is broken. */
	int (*move_data)(struct usmc_lgr *lgr, uint32_t slot, int dir, uint32_t off,
			 uint32_t len);
	/* Devices without USMC_DEV_F_MAPPED: the len bytes at offset off of
	 * this side's control blocks (lgr->ctrl, our view), which a cdc.h
	 * primitive just stored, reach the peer's view of them (SMC-R: the
	 * CDC message).  Called right after each store, in program order,
	 * from any thread: the peer's copy of a word only ever moves on to a
	 * newer value of ours, never back.  The peer's lines in our view are
	 * what its publishes made them. */
	void (*publish)(struct usmc_lgr *lgr, uint32_t off, uint32_t len);
	/* Wake every waiter watching bell, one of lgr's doorbells (from
	 * attach_bells, either side's): the link group says where a doorbell
	 * that is not a descriptor goes (ivshmem: the peer's id and vector).
	 * Waiters watch edges and never read: a device empties what would
	 * refuse the next signal itself. */
	void (*signal)(struct usmc_lgr *lgr, int bell);
	/* Optional: this side is about to look at its connections on lgr
	 * before it may sleep on its doorbell, or took an edge of it (the
	 * look comes after the call, and a signal to the peer's doorbell
	 * only ever follows a look at our arm).  Consume what the doorbell
	 * delivered and re-arm it, so that the next signal to it raises an
	 * edge: whoever takes an edge re-arms, as other waiters of the side
	 * may sleep on for the next one.  SMC-R: ibv_get_cq_event +
	 * ibv_ack_cq_events, ibv_req_notify_cq, then ibv_poll_cq (a CQ raises
	 * one event per request).  NULL: every signal raises an edge by
	 * itself (loopback's FIFO, ivshmem's eventfd).  Called from any
	 * thread, before the fence of the arm protocol (cdc.c): a signal
	 * whose kick saw our arm sees the re-arm too.
	 *
	 * Which connections a signal was for is not the doorbell's business:
	 * each kick publishes the arm it answered in its own CDC lines
	 * (data_rung, space_rung), which a device carries like any other
	 * word; a doorbell only says "look" (epoll_bell.c).  Several waiters
	 * of one side share a doorbell, and one that took slot numbers off it
	 * would take them from the others. */
	void (*progress)(struct usmc_lgr *lgr);
};

extern const struct usmc_dev_ops usmc_dev_loopback;
#ifdef USMC_TEST_DEVICES
extern const struct usmc_dev_ops usmc_dev_copy;
#endif

/* Devices this process can use, best first (0-terminated ids); first, if
 * not 0: that one goes first (a proposal's chosen device). */
void usmc_dev_list(uint8_t ids[4], uint8_t first);
/* A device this process offers, by id; NULL: none. */
const struct usmc_dev_ops *usmc_dev_get(uint8_t id);
/* Client: the best device of ours that a listener offering offered[]
 * (its registry record) can use too; NULL: none in common. */
const struct usmc_dev_ops *usmc_dev_pick(const uint8_t offered[4]);

/* Set once a link group of a device with a progress operation exists in
 * this process: the core's calls to it cost one load until then. */
extern _Atomic bool usmc_dev_progressing;

/* Has every device of this build all of caps? */
bool usmc_dev_all_can(uint32_t caps);

static inline bool usmc_dev_can(const struct usmc_dev_ops *d, uint32_t caps)
{
	return (d->caps & caps) == caps;
}

#ifdef USMC_TEST_DEVICES
/* A link group whose control blocks at view (len bytes, this side's) are
 * published through its device (cdc.h CDC_MIRROR finds it by address);
 * 0 or -ENOSPC.  Unregistered before the view goes. */
int usmc_dev_view_register(struct usmc_lgr *lgr, void *view, size_t len);
void usmc_dev_view_unregister(struct usmc_lgr *lgr);
#endif

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_dev_after_fork(void);

#endif
