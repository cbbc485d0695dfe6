/* SPDX-License-Identifier: MIT */
/*
 * lgr.h - link groups: what two peers share.
 *
 * A link group is created by a client process for one listener (a server
 * process family) and holds up to nslots connections: per slot a control
 * block (cdc.h) and two DMB rings.  Everything in it is only ever seen by
 * those two peers, so a misbehaving peer can only break connections with
 * itself.  Slots are reused (already mapped, already faulted in, doorbells
 * already open), which is what makes connection setup cheap.
 *
 *   page 0                 struct usmc_lgr_hdr (owner-written, immutable)
 *   ctrl_off               struct usmc_cdc_ctrl[nslots]
 *   dmb_off + k*2*ring     slot k: client->server ring, then server->client
 */
#ifndef USMC_LGR_H
#define USMC_LGR_H

#include "cdc.h"
#include "dev.h"

#include <pthread.h>

#define USMC_LGR_MAGIC		0x524750474d535555ULL	/* "UUSMCGPR" */
#define USMC_LGR_MAX_SLOTS	1024

struct usmc_lgr_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nslots;
	uint64_t id;
	uint32_t ring_size;
	uint32_t owner_pid;
	uint32_t owner_uid;
	uint32_t dev;
	uint32_t dmb_shift;		/* DMBs start 1 << dmb_shift aligned (12 or 21) */
	uint32_t __pad;
	uint64_t ctrl_off, dmb_off, size;
};

struct usmc_lgr_bell {
	uint32_t backed[2];		/* ring bytes this process backed, by dir
					 * (dmb_reserve; written under the tx_lock of
					 * the slot's connection); only whether it is
					 * set is used: the slot was registered here */
	uint32_t gone_gen;		/* owner: no process holds the server end of
					 * this generation (lgr.c slot_server_gone) */
};

struct usmc_epreg;

struct usmc_lgr {
	uint64_t id;
	uint64_t ln_id;			/* client: the listener it serves */
	const struct usmc_dev_ops *dev;
	bool owner;			/* created here (client side) */
	pid_t pid;			/* owner: process allowed to allocate */
	uint32_t nslots, ring_size;	/* private copies, validated at attach */
	int mem_fd;
	int guard;			/* guard.c handle of the mapping */
	uint8_t *base;
	size_t size;
	struct usmc_cdc_ctrl *ctrl;
	uint8_t *dmb;
	void *dev_priv;			/* the device's own state for this link group */
	uint8_t *sndbuf;		/* unmapped devices: our side's sndbufs (lgr.c) */
	size_t sndbuf_size;
	size_t as_bytes;		/* counted in the address-space budget (lgr.c) */
	size_t dev_as;			/* what the device maps of its own (counted too) */
	bool fd_high;			/* attach: a new connection's, whose descriptors
					 * go above the program's numbers or the
					 * attach fails (-EMFILE); else (received,
					 * inherited) they stay where they land */
	size_t map_max;			/* attach: the device maps no bigger file
					 * (-E2BIG: the address-space budget;
					 * SIZE_MAX: any) */
	int refs;			/* connections + cache reference (lgr_lock) */
	uint64_t idle_since_ns;
	struct usmc_lgr_bell *bells;	/* [nslots] */
	/* The doorbells, one per side for every slot (under lock): own is
	 * watched by our waiters, peer rung for the other side; -1 until
	 * opened.  bell_gen: which opening of the process's (waitset.c and
	 * epoll.c tell registrations by it); bell_users: connections of ours
	 * using them. */
	int bell_own, bell_peer;
	_Atomic uint32_t bell_gen;
	uint32_t bell_users;
	struct usmc_epreg *epregs;	/* epoll records of its sockets (ep_lock, epoll.c) */
	pthread_mutex_t lock;
	struct usmc_lgr *next;
};

/*
 * Page 0 past the header: how many epoll instances of each side sleep on
 * its doorbell now (side 0 the owner's, the client's; 1 the server's).  A
 * side counts its own word (epoll_sleep.c), the other reads it before it
 * rings (wait.c): a word the peer scribbles only decides whether we ring
 * the peer.  Waits on one connection count in its own lines instead (cdc.h
 * waiting).  And, a line further each, the kicks the other side spared
 * because nobody of this side slept: a doorbell in memory, which awake
 * epoll instances look at on every call (epoll_sleep.c ep_spared_scan).
 */
#define USMC_LGR_SLEEPERS_OFF	2048
#define USMC_LGR_SPARED_OFF	2176
/* A line per side for the device's own words (dev_copy: its doorbell's
 * re-arm); loopback leaves them alone. */
#define USMC_LGR_DEV_OFF	2304

static inline int usmc_lgr_side(const struct usmc_lgr *l)
{
	return l->owner ? 0 : 1;
}

/* About to look at l's connections before a sleep on its doorbell
 * (dev.h progress): before the arm protocol's fence.  true if the device
 * has the operation (it ran). */
static inline bool usmc_lgr_progress(struct usmc_lgr *l)
{
	if (likely(!LOAD_RELAXED(&usmc_dev_progressing)) || !l->dev->progress)
		return false;
	l->dev->progress(l);
	return true;
}

static inline _Atomic uint32_t *usmc_lgr_sleepers(struct usmc_lgr *l, int side)
{
	return (_Atomic uint32_t *)(l->base + USMC_LGR_SLEEPERS_OFF + (size_t)(side & 1) * 64);
}

static inline _Atomic uint32_t *usmc_lgr_spared(struct usmc_lgr *l, int side)
{
	return (_Atomic uint32_t *)(l->base + USMC_LGR_SPARED_OFF + (size_t)(side & 1) * 64);
}

static inline _Atomic uint32_t *usmc_lgr_dev_word(struct usmc_lgr *l, int side)
{
	return (_Atomic uint32_t *)(l->base + USMC_LGR_DEV_OFF + (size_t)(side & 1) * 64);
}

static inline struct usmc_cdc_ctrl *usmc_lgr_ctrl(struct usmc_lgr *l, uint32_t slot)
{
	return &l->ctrl[slot];
}

/* dir 0: client->server ring, dir 1: server->client ring. */
static inline uint8_t *usmc_lgr_ring(struct usmc_lgr *l, uint32_t slot, int dir)
{
	return l->dmb + ((size_t)slot * 2 + (size_t)dir) * l->ring_size;
}

/* The sndbuf of slot's outgoing ring, on a device without USMC_DEV_F_MAPPED. */
static inline uint8_t *usmc_lgr_sndbuf(struct usmc_lgr *l, uint32_t slot)
{
	return l->sndbuf + (size_t)slot * l->ring_size;
}

/* Client: a fresh slot towards listener ln_id on device dev (a link group
 * of that device; created if none has room, its rings reserving at most
 * peer_fit bytes if not 0: the server's usmc_lgr_fit). */
int usmc_lgr_slot_get(uint64_t ln_id, const struct usmc_dev_ops *dev, size_t peer_fit,
		      struct usmc_lgr **out, uint32_t *slot, uint32_t *gen);
/* The most one link group's rings may reserve in this process: 0 without
 * an address-space limit (lgr.c). */
size_t usmc_lgr_fit(void);
/* The limit changed (interpose_rlimit.c): read it again. */
void usmc_lgr_fit_forget(void);
/* Client: the connection on slot/gen is gone here; server_attached says
 * whether the server may still be using it. */
void usmc_lgr_slot_put(struct usmc_lgr *l, uint32_t slot, uint32_t gen, bool server_attached);
/* The same without dropping our reference to l (no lock: process exit). */
void usmc_lgr_slot_release(struct usmc_lgr *l, uint32_t slot, uint32_t gen, bool server_attached);
/* Client, closing a connection whose server end sent its FIN without a
 * usmc close: if no process holds that end any more (lgr.c
 * slot_server_gone), the slot is free for reuse once we let go of it. */
void usmc_lgr_slot_ask(struct usmc_lgr *l, uint32_t slot, uint32_t gen);

/* Server: attach the client's link group by id on the device the
 * proposal named (cached); -EBADMSG: not one we offer, or the link group
 * says another. */
int usmc_lgr_attach(uint64_t id, uint8_t dev_id, struct usmc_lgr **out);
/* The same for a connection that exists already (received, inherited):
 * never refused for the address-space budget; falling back to mem_fd (a
 * received copy of the link group's file, validated as the name would be)
 * when the name is gone; mem_fd is consumed (-1: none). */
int usmc_lgr_attach_fd(uint64_t id, uint8_t dev_id, int mem_fd, struct usmc_lgr **out);
/* The descriptor that carries l to another image or process (the
 * device's lgr_handle_fd), -1 if none. */
int usmc_lgr_handle_fd(const struct usmc_lgr *l);
void usmc_lgr_put(struct usmc_lgr *l);
/* One more reference to a link group we hold one of. */
void usmc_lgr_hold(struct usmc_lgr *l);
/* After exec or SCM_RIGHTS: the link group we own, kept locked by the
 * inherited owner_fd (it must be lg-<id>/mem's file; consumed: closed
 * unless it becomes the link group's). */
int usmc_lgr_adopt(uint64_t id, int owner_fd, struct usmc_lgr **out);

/* Both: the link group's doorbell descriptors (opened once, owned by the
 * lgr), with a use counted (usmc_lgr_bells_put lets go). */
int usmc_lgr_bells(struct usmc_lgr *l, int *own, int *peer);
/* A connection of ours stops using the doorbells. */
void usmc_lgr_bells_put(struct usmc_lgr *l);
/* Is one connection all that uses them (shed.c: moving it frees them)? */
bool usmc_lgr_bells_last(struct usmc_lgr *l);
/* Our doorbell's descriptor now (-1: closed by a shed). */
int usmc_lgr_bell_own(struct usmc_lgr *l);
/* Out of descriptors (shed.c): close the doorbells no connection of ours
 * uses and the link groups nothing uses; how many descriptors went. */
int usmc_lgr_shed(void);

/* After fork: the child allocates from link groups of its own. */
void usmc_lgr_after_fork(void);
/* Process exit: owners remove their link groups from the runtime dir. */
void usmc_lgr_exit(void);

#endif
