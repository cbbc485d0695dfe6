// SPDX-License-Identifier: MIT
/*
 * dev_copy.c - a test device: loopback's memory, used the way a device
 * that cannot map the peer's DMBs must use it (SMC-R's shape).
 *
 * Built only with -DUSMC_TEST_DEVICES (make copy, build/copy/); the suite runs
 * over it so that every commit exercises what RDMA will need of the core:
 *
 *  - no capability but the data path's (dev.h): fork, exec and SCM_RIGHTS
 *    move its connections to TCP (migrate.c usmc_conn_unshare);
 *  - the sender writes a sndbuf of its own (lgr.c) and move_data copies
 *    each span into the peer's DMB through a mapping of the device's, the
 *    way an RDMA WRITE would;
 *  - in the mapping the core uses, the DMBs the peer reads (our outgoing
 *    rings) are PROT_NONE: a core access to them faults at once instead
 *    of passing unnoticed.
 *
 * Everything else is loopback's: the link group file, its checks, the
 * FIFO doorbells, the OFD-lock liveness.  The CDC lines stay in the shared
 * control blocks; every store to them is a cdc.h primitive
 * (tests/test_static.py), where a device without mapping sends a message.
 */
#ifdef USMC_TEST_DEVICES

#include "dev.h"
#include "dev_loopback.h"
#include "guard.h"
#include "lgr.h"
#include "rundir.h"

#include <stdlib.h>
#include <sys/mman.h>

struct copy_priv {
	uint8_t *base;			/* the device's own mapping of the file */
	int guard;
};

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

	if (!p)
		return -ENOMEM;
	p->base = usmc_map_shared(l->mem_fd, l->size);
	if (!p->base) {
		free(p);
		return -ENOMEM;
	}
	p->guard = usmc_guard_add(p->base, l->size);
	for (k = 0; k < l->nslots; k++)
		if (mprotect(usmc_lgr_ring(l, k, dir), l->ring_size, PROT_NONE)) {
			int rc = -errno;

			usmc_guard_del(p->guard);
			munmap(p->base, l->size);
			free(p);
			return rc;
		}
	l->dev_priv = p;
	return 0;
}

static void copy_lgr_release(struct usmc_lgr *l)
{
	struct copy_priv *p = l->dev_priv;

	if (p) {
		usmc_guard_del(p->guard);
		munmap(p->base, l->size);
		free(p);
		l->dev_priv = NULL;
	}
	usmc_lo_lgr_release(l);
}

static int copy_lgr_create(struct usmc_lgr *l)
{
	int rc = usmc_lo_lgr_create(l);

	if (!rc && (rc = copy_setup(l)))
		usmc_lo_lgr_release(l);
	return rc;
}

static int copy_lgr_attach(struct usmc_lgr *l)
{
	int rc = usmc_lo_lgr_attach(l);

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
	.register_dmb = usmc_lo_register_dmb,
	.attach_bells = usmc_lo_attach_bells,
	.dmb_reserve = usmc_lo_dmb_reserve,
	.dmb_release = usmc_lo_dmb_release,
	.move_data = copy_move_data,
	.signal = usmc_lo_signal,
	.drain = usmc_lo_drain,
};

#endif
