// SPDX-License-Identifier: MIT
/*
 * fuzz_lgr.c - link groups (lgr.c, dev_loopback.c, guard.c) written by a
 * peer that lies.
 *
 * Server side: a link group file lg-<id>/mem whose header the input writes
 * (starting from a valid one: magic, version, id, device, slot count, ring
 * size, offsets, size; then any field changed) with a file size that may
 * disagree, attached through usmc_lgr_attach() (the accept path) or
 * usmc_lgr_adopt() (after exec).  Once attached, the peer may truncate
 * the file under us; our next access to a vanished page is a SIGBUS that
 * guard.c must absorb (zero pages, link group poisoned).
 *
 * Client side: a link group we own (usmc_lgr_slot_get), whose control
 * blocks the server side rewrites between our slot allocations and
 * releases: slot states, generations, answers, released generations.
 *
 * Properties:
 *   - attach and adopt accept a file exactly when its header is the
 *     geometry dev_loopback.c would have written for its slot count and
 *     ring size (checked here independently) and the file has that size;
 *     then every slot's control block and both rings lie inside the
 *     mapping;
 *   - a truncated mapping never kills us: the access completes (zeros)
 *     and the link group reads as poisoned;
 *   - slot_get hands out a slot below the slot count, a new nonzero
 *     generation, and lines reset to zero, whatever the server wrote.
 */
#include "fuzz.h"

#include "guard.h"
#include "lgr.h"

#include <sys/mman.h>
#include <sys/stat.h>

#define MAX_OPS		16
#define MAX_FILE	(1ULL << 30)	/* sparse tmpfs files we are willing to create */

static uint64_t next_id = 0x1000;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const env[] = { "USMC_LGR_SLOTS=4", "USMC_RING_SIZE=4096", NULL };

	(void)argc;
	(void)argv;
	fz_setup(env);
	return 0;
}

/* The header dev_loopback.c writes, from the slot count, ring size and DMB
 * alignment (shift 12: pages, 21: huge pages). */
static void geometry(struct usmc_lgr_hdr *h, uint32_t nslots, uint32_t ring, uint32_t shift)
{
	uint64_t align = 1ULL << (shift & 63);

	h->nslots = nslots;
	h->ring_size = ring;
	h->dmb_shift = shift;
	h->ctrl_off = 4096;
	h->dmb_off = (4096 + (uint64_t)nslots * sizeof(struct usmc_cdc_ctrl) + align - 1) &
		     ~(align - 1);
	h->size = h->dmb_off + (uint64_t)nslots * 2 * ring;
}

static bool header_ok(const struct usmc_lgr_hdr *h, uint64_t id, uint64_t fsize)
{
	struct usmc_lgr_hdr g;

	if (h->magic != USMC_LGR_MAGIC || h->version != USMC_PROTO_VERSION || h->id != id ||
	    h->dev != USMC_DEV_LOOPBACK || !h->nslots || h->nslots > USMC_LGR_MAX_SLOTS ||
	    h->ring_size < 4096 || h->ring_size > (64u << 20) || (h->ring_size & (h->ring_size - 1)) ||
	    (h->dmb_shift != 12 && h->dmb_shift != 21))
		return false;
	geometry(&g, h->nslots, h->ring_size, h->dmb_shift);
	return h->ctrl_off == g.ctrl_off && h->dmb_off == g.dmb_off && h->size == g.size &&
	       fsize == h->size;
}

/* Touch one byte of the mapping: a truncated page raises SIGBUS there. */
static uint8_t touch(volatile uint8_t *p)
{
	return *p;
}

static void check_inside(struct usmc_lgr *l)
{
	uint8_t *end = l->base + l->size;
	uint32_t k;

	FZ_CHECK((uint8_t *)l->ctrl >= l->base + 4096 &&
		 (uint8_t *)(l->ctrl + l->nslots) <= l->dmb, "control blocks outside [base, dmb)");
	for (k = 0; k < l->nslots; k++)
		FZ_CHECK(usmc_lgr_ring(l, k, 0) >= l->dmb &&
			 usmc_lgr_ring(l, k, 1) + l->ring_size <= end, "slot %u rings outside the map", k);
}

/* Server side: a peer's link group file, attached or adopted. */
static void op_attach(struct fz *f)
{
	uint64_t id = next_id++, fsize;
	uint8_t sel = fz_u8(f), nsl = fz_u8(f);
	struct usmc_lgr_hdr h;
	struct usmc_lgr *l;
	char dir[64], path[96];
	int fd, rc;
	bool ok;

	memset(&h, 0, sizeof(h));
	h.magic = USMC_LGR_MAGIC;
	h.version = USMC_PROTO_VERSION;
	h.id = id;
	h.dev = USMC_DEV_LOOPBACK;
	h.owner_pid = 1;
	h.owner_uid = (uint32_t)geteuid();
	geometry(&h, 1 + nsl % 8, 4096u << (sel & 3), nsl & 0x80 ? 21 : 12);
	/* Then the peer's word: any field, any value. */
	if (sel & 4) {
		uint8_t off = fz_u8(f) % sizeof(h), len = 1 + fz_u8(f) % 8;

		fz_bytes(f, (uint8_t *)&h + off, MIN((size_t)len, sizeof(h) - off));
	}
	if (sel & 8) {	/* a consistent but unusual geometry */
		uint32_t ns = fz_u16(f), ring = fz_u32(f), shift = fz_u8(f);

		geometry(&h, ns, ring, shift & 0x40 ? shift & 63 : 12 + (shift & 1) * 9);
	}
	fsize = h.size;
	if (sel & 16)
		fsize += (uint64_t)(int64_t)(int16_t)fz_u16(f);
	if (fsize > MAX_FILE || fsize < 64)
		fsize = 4096;
	snprintf(dir, sizeof(dir), "lg-%016llx", (unsigned long long)id);
	snprintf(path, sizeof(path), "%s/mem", dir);
	if (mkdirat(usmc_rundir_fd(), dir, 0700))
		abort();
	fd = fz_write_file(path, fsize, &h, sizeof(h));
	if (fd < 0)
		abort();
	/* Usually the owner is alive (holds byte 0), as a real client is. */
	if (!(sel & 32) && usmc_lock_take(fd, 0))
		abort();
	ok = header_ok(&h, id, fsize);
	if (sel & 64) {
		int ofd = dup(fd);

		rc = usmc_lgr_adopt(id, ofd, &l);
		if (rc)
			close(ofd);
	} else {
		rc = usmc_lgr_attach(id, USMC_DEV_LOOPBACK, &l);
	}
	FZ_CHECK(!rc == ok, "%s returned %d for a %s header (nslots %u ring %u size %llu file %llu)",
		 sel & 64 ? "adopt" : "attach", rc, ok ? "valid" : "invalid", h.nslots, h.ring_size,
		 (unsigned long long)h.size, (unsigned long long)fsize);
	if (!rc) {
		FZ_CHECK(l->nslots == h.nslots && l->ring_size == h.ring_size && l->size == h.size &&
			 l->base && l->dmb == l->base + h.dmb_off, "attached geometry differs");
		check_inside(l);
		if (sel & 128 && l->guard >= 0) {
			/* The peer shrinks the file; we touch a vanished page. */
			uint64_t cut = (fz_u32(f) % (h.size / 4096)) * 4096;
			uint64_t at = cut + fz_u32(f) % (h.size - cut);

			if (ftruncate(fd, (off_t)cut))
				abort();
			FZ_CHECK(touch(l->base + at) == 0, "read past the truncation gave data");
			FZ_CHECK(usmc_guard_poisoned(l->guard), "truncated link group not poisoned");
			/* Afterwards the whole mapping is readable zeros. */
			FZ_CHECK(touch(l->base) == 0 && touch(l->base + h.size - 1) == 0,
				 "poisoned mapping not zero");
		}
		usmc_lgr_put(l);
	}
	usmc_lock_drop(fd, 0);
	close(fd);
	unlinkat(usmc_rundir_fd(), path, 0);
	unlinkat(usmc_rundir_fd(), dir, AT_REMOVEDIR);
}

/* ---- client side: our own link group, rewritten by the server ---------- */

struct owned {
	uint64_t ln_id;		/* a listener of our own per input: a fresh link group */
	struct usmc_lgr *l;
	uint32_t slot[8], gen[8];
	int n;
};

static void op_slot_get(struct owned *o)
{
	struct usmc_lgr *l;
	uint32_t slot, gen;
	int rc;

	if (o->n == 8)
		return;
	rc = usmc_lgr_slot_get(o->ln_id, &usmc_dev_loopback, 0, &l, &slot, &gen);
	if (rc)
		return;		/* every slot busy or draining: a reason, not a crash */
	FZ_CHECK(slot < l->nslots && gen, "slot %u gen %u of %u", slot, gen, l->nslots);
	FZ_CHECK(!l->ctrl[slot].c2s_p.prod && !l->ctrl[slot].c2s_c.cons &&
		 !l->ctrl[slot].s2c_p.prod && !l->ctrl[slot].s2c_c.cons &&
		 !l->ctrl[slot].c2s_p.flags && !l->ctrl[slot].s2c_p.flags, "claimed lines not reset");
	FZ_CHECK(LOAD_RELAXED(&l->ctrl[slot].c.state) == SLOT_BUSY &&
		 LOAD_RELAXED(&l->ctrl[slot].c.gen) == gen, "claimed slot not ours");
	o->l = l;
	o->slot[o->n] = slot;
	o->gen[o->n++] = gen;
}

static void op_slot_put(struct owned *o, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	int k;

	if (!o->n)
		return;
	k = sel % o->n;
	usmc_lgr_slot_put(o->l, o->slot[k], o->gen[k], sel & 0x80);
	o->slot[k] = o->slot[o->n - 1];
	o->gen[k] = o->gen[--o->n];
}

static void op_server_writes(struct owned *o, struct fz *f)
{
	struct usmc_cdc_ctrl *c;
	uint8_t sel = fz_u8(f);

	if (!o->l)
		return;
	c = &o->l->ctrl[fz_u8(f) % o->l->nslots];
	switch (sel % 5) {
	case 0:
		STORE_RELEASE(&c->c.state, fz_u8(f) % 4);
		break;
	case 1:
		STORE_RELEASE(&c->c.gen, sel & 0x80 ? fz_u32(f) : LOAD_RELAXED(&c->c.gen) + 1);
		break;
	case 2:
		STORE_RELEASE(&c->s.answer, CDC_ANSWER(sel & 0x80 ? fz_u32(f) : LOAD_RELAXED(&c->c.gen),
						       fz_u8(f) % 4, fz_u16(f)));
		break;
	case 3:
		STORE_RELEASE(&c->s.released_gen, sel & 0x80 ? fz_u32(f) : LOAD_RELAXED(&c->c.gen));
		break;
	default:
		STORE_RELEASE(&c->c2s_p.prod, fz_u64(f));
		STORE_RELEASE(&c->s2c_c.flags, fz_u32(f));
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	static uint64_t ln_id = 0x77;
	struct owned o = { .ln_id = ln_id++, .n = 0 };
	int ops = 0;

	while (fz_more(&f) && ops++ < MAX_OPS) {
		switch (fz_u8(&f) % 5) {
		case 0:
		case 1:
			op_attach(&f);
			break;
		case 2:
			op_slot_get(&o);
			break;
		case 3:
			op_slot_put(&o, &f);
			break;
		default:
			op_server_writes(&o, &f);
			break;
		}
	}
	while (o.n) {
		o.n--;
		usmc_lgr_slot_put(o.l, o.slot[o.n], o.gen[o.n], false);
	}
	return 0;
}
