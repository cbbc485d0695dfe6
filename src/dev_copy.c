// SPDX-License-Identifier: MIT
/*
 * dev_copy.c - a test device: loopback's memory, used the way a device
 * that cannot map the peer's DMBs must use it (SMC-R's shape).
 *
 * Built only with -DUSMC_TEST_DEVICES (make copy, build/copy/); the suite runs
 * over it so that every commit exercises what RDMA will need of the core:
 *
 *  - no capability but the data path's (dev.h): fork, exec and SCM_RIGHTS
 *    move its connections to TCP (migrate.c usmc_conn_unshare), and a
 *    proposal's body goes on the TCP connection, not into the listener's
 *    index (no USMC_DEV_F_CLC_INDEX: clc_inband.h), as between hosts;
 *  - the sender writes a sndbuf of its own (lgr.c) and move_data copies
 *    each span into the peer's DMB through a mapping of the device's, the
 *    way an RDMA WRITE would;
 *  - in the mapping the core uses, the DMBs the peer reads (our outgoing
 *    rings) are PROT_NONE: a core access to them faults at once instead
 *    of passing unnoticed.
 *
 *  - each side has its own view of the control blocks: the client the
 *    link group's, the server a second copy after the end of the file
 *    (loopback's checks allow that tail).  A side stores into its own
 *    lines in its view only (cdc.h primitives), and copy_publish carries
 *    each stored word to the peer's view, the way a CDC message would:
 *    a store the core made without a primitive never reaches the peer.
 *
 *  - its doorbells raise one edge per re-arm, as a CQ notification does
 *    (dev.h progress): a signal to the peer's doorbell goes out only if
 *    the peer re-armed it since the last one that did, and is dropped
 *    otherwise (doorbells_unarmed counts them); a wait that forgot to
 *    re-arm before its look sleeps through every later kick.  Rings of
 *    our own doorbell (shutdown, a nested wait's "look again") are local
 *    wake-ups and always go out.
 *
 * Everything else is loopback's: the link group file, its checks, the
 * FIFO doorbells, the OFD-lock liveness, and the per-side words of the
 * link group header (epoll's sleepers and spared counts), which stay
 * shared.
 */
#ifdef USMC_TEST_DEVICES

#include "dev.h"
#include "dev_loopback.h"
#include "guard.h"
#include "lgr.h"
#include "rundir.h"
#include "stats.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct copy_priv {
	uint8_t *base;			/* the device's own mapping of the file, tail included */
	size_t len;
	uint8_t *peer_view;		/* the peer's view of the control blocks */
	int guard;
};

/* The server's view of the control blocks, after the end of the file. */
static size_t view_len(const struct usmc_lgr *l)
{
	return (size_t)l->nslots * sizeof(struct usmc_cdc_ctrl);
}

static bool copy_probe(void)
{
	return usmc_lo_probe();
}

/* Our outgoing rings: dir 0 for the owner (the client), 1 for the server. */
static int copy_setup(struct usmc_lgr *l)
{
	struct copy_priv *p = calloc(1, sizeof(*p));
	int dir = usmc_lgr_side(l);
	uint32_t k;

	uint8_t *a, *b;
	int rc;

	if (!p)
		return -ENOMEM;
	p->len = l->size + view_len(l);
	p->base = usmc_map_shared(l->mem_fd, p->len);
	if (!p->base) {
		free(p);
		return -ENOMEM;
	}
	p->guard = usmc_guard_add(p->base, p->len);
	l->dev_as = p->len;		/* a second mapping of the file */
	for (k = 0; k < l->nslots; k++)
		if (mprotect(usmc_lgr_ring(l, k, dir), l->ring_size, PROT_NONE)) {
			rc = -errno;
			goto err;
		}
	/* The client's view is the link group's; the server's, the tail. */
	a = p->base + ((uint8_t *)l->ctrl - l->base);
	b = p->base + l->size;
	if (!l->owner)
		l->ctrl = (struct usmc_cdc_ctrl *)b;
	p->peer_view = l->owner ? b : a;
	l->dev_priv = p;
	rc = usmc_dev_view_register(l, l->ctrl, view_len(l));
	if (!rc)
		return 0;
	l->dev_priv = NULL;
err:
	usmc_guard_del(p->guard);
	munmap(p->base, p->len);
	free(p);
	return rc;
}

static void copy_lgr_release(struct usmc_lgr *l)
{
	struct copy_priv *p = l->dev_priv;

	if (p) {
		usmc_dev_view_unregister(l);
		usmc_guard_del(p->guard);
		munmap(p->base, p->len);
		free(p);
		l->dev_priv = NULL;
	}
	usmc_lo_lgr_release(l);
}

static int copy_lgr_create(struct usmc_lgr *l)
{
	int rc = usmc_lo_lgr_create(l);

	if (rc)
		return rc;
	/* The server's view: zeroes, backed now (a tmpfs full later must not
	 * fault a control store).  Before any proposal names the group. */
	if (ftruncate(l->mem_fd, (off_t)(l->size + view_len(l))) ||
	    fallocate(l->mem_fd, 0, (off_t)l->size, (off_t)view_len(l)))
		rc = -errno;
	if (rc || (rc = copy_setup(l)))
		usmc_lo_lgr_release(l);
	return rc;
}

static int copy_lgr_attach(struct usmc_lgr *l)
{
	int rc = usmc_lo_lgr_attach_tail(l, sizeof(struct usmc_cdc_ctrl));

	if (!rc && (rc = copy_setup(l)))
		usmc_lo_lgr_release(l);
	return rc;
}

static int copy_move_data(struct usmc_lgr *l, uint32_t slot, int dir, uint32_t off, uint32_t len)
{
	struct copy_priv *p = l->dev_priv;
	uint8_t *dmb = p->base + (usmc_lgr_ring(l, slot, dir) - l->base);

	if (off > l->ring_size || len > l->ring_size - off)
		return -EINVAL;
	memcpy(dmb + off, usmc_lgr_sndbuf(l, slot) + off, len);
	/* A peer that truncated the file: zero pages now (guard.c). */
	return usmc_guard_poisoned(p->guard) ? -EIO : 0;
}

/* A word the core stored into its view goes to the peer's, only ever
 * forward: the peer's copy is loaded before ours, so a CAS that lands
 * replaces it with a value of ours at least as new (another thread's
 * newer copy in between fails it, and we look again). */
static void copy_publish(struct usmc_lgr *l, uint32_t off, uint32_t len)
{
	struct copy_priv *p = l->dev_priv;
	uint32_t w, end = (off + len + 7) & ~7u;

	if (!p)
		return;
	for (w = off & ~7u; w < end; w += 8) {
		_Atomic uint64_t *mine = (_Atomic uint64_t *)((uint8_t *)l->ctrl + w);
		_Atomic uint64_t *theirs = (_Atomic uint64_t *)(p->peer_view + w);
		uint64_t t = atomic_load(theirs), v;

		for (;;) {
			v = atomic_load(mine);
			if (v == t || atomic_compare_exchange_strong(theirs, &t, v))
				break;
		}
	}
}

/* Our doorbell re-armed (seq_cst, before the arm protocol's fence: a kick
 * that saw our arm after its own fence sees this, cdc.c). */
static void copy_progress(struct usmc_lgr *l)
{
	_Atomic uint32_t *armed = usmc_lgr_dev_word(l, usmc_lgr_side(l));

	if (!atomic_load(armed))
		atomic_store(armed, 1);
}

/* The peer's doorbell edges once per re-arm (after the kicker's fence:
 * see above); our own rings always. */
static void copy_signal(struct usmc_lgr *l, int bell)
{
	if (bell < 0)		/* closed (shed.c): no edge to give */
		return;
	if (bell == __atomic_load_n(&l->bell_peer, __ATOMIC_RELAXED) &&
	    !atomic_exchange(usmc_lgr_dev_word(l, 1 - usmc_lgr_side(l)), 0)) {
		STAT_INC(doorbells_unarmed);
		return;
	}
	usmc_lo_signal(l, bell);
}

const struct usmc_dev_ops usmc_dev_copy = {
	.name = "copy",
	.id = USMC_DEV_COPY,
	.caps = 0,
	.probe = copy_probe,
	.lgr_create = copy_lgr_create,
	.lgr_attach = copy_lgr_attach,
	.lgr_release = copy_lgr_release,
	.lgr_unpublish = usmc_lo_lgr_unpublish,
	.lgr_peer_alive = usmc_lo_lgr_peer_alive,
	.lgr_handle_fd = usmc_lo_lgr_handle_fd,
	.register_dmb = usmc_lo_register_dmb,
	.attach_bells = usmc_lo_attach_bells,
	.dmb_reserve = usmc_lo_dmb_reserve,
	.dmb_release = usmc_lo_dmb_release,
	.move_data = copy_move_data,
	.publish = copy_publish,
	.signal = copy_signal,
	.progress = copy_progress,
};

#endif
