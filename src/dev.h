/* SPDX-License-Identifier: MIT */
/*
 * dev.h - the device interface behind SMC-D style link groups.
 *
 * Shaped like the kernel's smcd_ops: a device provides the memory a link
 * group's DMBs live in (the owner registers it, the peer attaches it by
 * token), a doorbell per side of a link group, and a way to signal the peer.  Loopback (one
 * host, any network namespace) is the first device; ivshmem (between VMs)
 * and RDMA (between hosts) slot in behind the same table.
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
};

struct usmc_dev_ops {
	const char *name;
	uint8_t id;				/* enum usmc_dev_id, carried in CLC */
	bool (*probe)(void);			/* usable in this process? */
	/* Link group memory: owner creates and maps, peer attaches by lgr->id. */
	int (*lgr_create)(struct usmc_lgr *lgr);
	int (*lgr_attach)(struct usmc_lgr *lgr);
	void (*lgr_release)(struct usmc_lgr *lgr);
	/* Owner: remove the link group's names (peers keep their mappings). */
	void (*lgr_unpublish)(struct usmc_lgr *lgr);
	/* Is anyone on the other side still holding this link group? */
	bool (*lgr_peer_alive)(struct usmc_lgr *lgr);
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
	 * with nothing unread there): 0 or -errno. */
	int (*dmb_release)(struct usmc_lgr *lgr, uint32_t slot, int dir, uint32_t off,
			   uint32_t len);
	/* Wake every waiter watching bell; drain: empty it (signal does,
	 * when it is full). */
	void (*signal)(int bell);
	void (*drain)(int bell);
};

extern const struct usmc_dev_ops usmc_dev_loopback;

/* Devices this process can use, best first (0-terminated ids). */
void usmc_dev_list(uint8_t ids[4]);
const struct usmc_dev_ops *usmc_dev_get(uint8_t id);

#endif
