// SPDX-License-Identifier: MIT
/*
 * fuzz_clc.c - the CLC index (clc.c) against clients that write anything
 * into it.
 *
 * A real listener index (usmc_clc_ln_create: ln-<id> in a private runtime
 * directory, locked, mapped).  The input interleaves an honest client
 * (usmc_clc_propose / usmc_clc_withdraw) with raw writes into the entry of
 * a 4-tuple (any word: any hash, any state; any bytes in its fields), into
 * the connecting[] announcements and the header, and the server's reads of
 * it (usmc_clc_match at every level of patience, usmc_clc_prop_check as
 * af_usmc.c's server_accept uses it, usmc_clc_answer, usmc_clc_has_proposal,
 * usmc_clc_withdraw) and the client's reading of a decline
 * (usmc_clc_declined).  Separately, whole ln-<id> files with
 * a fuzzed header and size go through usmc_clc_ln_get (ln_open).
 *
 * Properties:
 *   - match returns a proposal only for PROPOSED(h)[+W] of exactly this
 *     4-tuple's hash, with the fields the entry held and wake == W, and
 *     leaves it posted; only an answer takes it (EMPTY, or DECLINED(h,
 *     reason) with a valid reason), and only from PROPOSED(h)[+W];
 *   - a client sees a decline only in its own entry, with a reason in
 *     range whatever the word says, and clears it;
 *   - match never takes or overwrites an entry held by another 4-tuple
 *     whose owner may be alive; marks TCP(h) only when deciding, and
 *     WAIT(h, epoch) or W on our claim only when accepting undecided;
 *   - propose takes only an EMPTY entry, a stale mark or our server's
 *     fresh WAIT(h), and posts +W (wake) exactly for the latter;
 *   - usmc_clc_prop_check accepts exactly: our version, the 4-tuple's own
 *     client address, loopback among the offered devices, a link group id;
 *   - usmc_clc_ln_get opens an index only when size, magic, version and id
 *     are right, it is not closed and its owner holds the lock.
 */
#include "fuzz.h"

#include "clc.h"
#include "dev.h"

#include <sys/file.h>

#define MAX_OPS		64

static struct usmc_clc_ln *ln;
static uint64_t next_id = 0x100;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_setup(NULL);
	if (usmc_clc_ln_create(&ln))
		abort();
	return 0;
}

/* The independent reading of what a server may accept (clc.h, design.md). */
static int expect_prop_check(const struct usmc_clc_prop *p, const struct usmc_addr *client)
{
	if (p->version != USMC_PROTO_VERSION)
		return USMC_R_VERSION;
	if (memcmp(p->client.a, client->a, 16) || p->client.port != client->port)
		return USMC_R_INTERNAL;
	/* devs[0] names the link group's device: one this build offers. */
	if (p->devs[0] != USMC_DEV_LOOPBACK)
		return USMC_R_NO_DEVICE;
	return p->lgr_id ? 0 : USMC_R_INTERNAL;
}

struct state {
	struct usmc_addr client;
	struct usmc_clc_entry *e;	/* this tuple's entry: way hash % 4 of its bucket */
	uint64_t h;			/* its hash */
	uint16_t touched[MAX_OPS + 1];
	int ntouched;
};

/* A complete proposal of this tuple, with or without W. */
static bool proposed(const struct state *s, uint64_t w)
{
	return (w & ~CLC_W) == CLC_WORD(s->h, CLC_PROPOSED);
}

static bool claimed(const struct state *s, uint64_t w)
{
	return (w & ~CLC_W) == CLC_WORD(s->h, CLC_CLAIM);
}

static void touch(struct state *s, uint16_t port)
{
	if (s->ntouched < (int)ARRAY_SIZE(s->touched))
		s->touched[s->ntouched++] = port;
}

/*
 * Which way of its bucket the tuple uses and under which hash: propose once
 * into an emptied bucket and look (clc.c keeps its hash private), then put
 * the bucket back as it was.
 */
static void learn_hash(struct state *s)
{
	struct usmc_clc_entry saved[USMC_CLC_WAYS], *b = ln->idx->e[s->client.port];
	struct usmc_clc_prop p;
	unsigned int i;
	bool wake;

	uint32_t degraded = LOAD_RELAXED(&ln->idx->degraded);

	memcpy(saved, b, sizeof(saved));
	memset(b, 0, sizeof(saved));
	STORE_RELAXED(&ln->idx->degraded, 0);
	memset(&p, 0, sizeof(p));
	p.lgr_id = 1;
	p.version = USMC_PROTO_VERSION;
	p.client = s->client;
	if (usmc_clc_propose(ln, &p, &wake) || wake)
		abort();
	s->e = NULL;
	for (i = 0; i < USMC_CLC_WAYS; i++)
		if (b[i].word) {
			FZ_CHECK(!s->e && CLC_STATE(b[i].word) == CLC_PROPOSED, "probe proposal");
			s->e = &b[i];
			s->h = CLC_HASH(b[i].word);
		}
	FZ_CHECK(s->e, "probe proposal not posted");
	memcpy(b, saved, sizeof(saved));
	STORE_RELAXED(&ln->idx->degraded, degraded);
}

static void pick_client(struct state *s, struct fz *f)
{
	uint8_t sel = fz_u8(f);

	memset(&s->client, 0, sizeof(s->client));
	if (sel & 1) {
		fz_bytes(f, s->client.a, 16);
	} else {
		s->client.a[10] = s->client.a[11] = 0xff;
		s->client.a[12] = 127;
		s->client.a[15] = (uint8_t)(1 + (sel >> 1) % 4);
	}
	s->client.port = fz_u16(f);
	touch(s, s->client.port);
	learn_hash(s);
}

/* The entry a raw write goes to: this tuple's, or any way of its bucket. */
static struct usmc_clc_entry *any_entry(struct state *s, uint8_t sel)
{
	if (!(sel & 4))
		return s->e;
	return &ln->idx->e[s->client.port][sel % USMC_CLC_WAYS];
}

static void op_propose(struct state *s, struct fz *f)
{
	struct usmc_clc_entry before[USMC_CLC_WAYS];
	struct usmc_clc_prop p;
	bool wake = false, waiting;
	unsigned int i;
	uint8_t sel;
	int rc;

	memset(&p, 0, sizeof(p));
	sel = fz_u8(f);
	/* The listener's epoch as the client read it before its SYN. */
	p.epoch = sel & 2 ? fz_u32(f) : LOAD_RELAXED(&ln->idx->epoch) - (sel & 4 ? fz_u8(f) : 0);
	p.lgr_id = sel & 1 ? fz_u64(f) : 0x1234;
	p.slot = fz_u8(f);
	p.gen = fz_u32(f);
	p.version = USMC_PROTO_VERSION;
	usmc_dev_list(p.devs, sel & 8 ? fz_u8(f) : 0);
	p.client = s->client;
	p.uid = (uint32_t)geteuid();
	p.pid = (uint32_t)getpid();
	memcpy(before, ln->idx->e[s->client.port], sizeof(before));
	i = (unsigned int)(s->e - ln->idx->e[s->client.port]);
	/* Our server accepted us undecided after our connect() began. */
	waiting = CLC_HASH(before[i].word) == s->h && CLC_STATE(before[i].word) == CLC_WAIT &&
		  CLC_SEQ_AFTER(CLC_SEQ(before[i].word), (uint32_t)p.epoch);
	rc = usmc_clc_propose(ln, &p, &wake);
	for (i = 0; i < USMC_CLC_WAYS; i++) {
		struct usmc_clc_entry *e = &ln->idx->e[s->client.port][i];
		uint64_t w0 = before[i].word;

		if (!memcmp(e, &before[i], sizeof(*e)))
			continue;
		/* Only our way, only if it was EMPTY, a TCP or WAIT mark older
		 * than our connect() or our server's fresh WAIT, only to our
		 * proposal (or back to EMPTY when the listener turned out
		 * degraded). */
		FZ_CHECK(e == s->e && (!w0 || waiting || (CLC_IS_MARK(w0) &&
			 !CLC_SEQ_AFTER(CLC_SEQ(w0), (uint32_t)p.epoch))),
			 "propose (rc %d) changed way %u (word %#llx, epoch %#llx)", rc, i,
			 (unsigned long long)w0, (unsigned long long)p.epoch);
		if (rc)
			FZ_CHECK(!e->word, "failed propose left %#llx", (unsigned long long)e->word);
		else
			FZ_CHECK(proposed(s, e->word) && e->lgr_id == p.lgr_id &&
				 e->gen == p.gen && e->slot == p.slot, "propose wrote another proposal");
	}
	if (!rc) {
		FZ_CHECK(s->e->word == (CLC_WORD(s->h, CLC_PROPOSED) | (waiting ? CLC_W : 0)),
			 "propose: 0 but %#llx posted (waiting %d)", (unsigned long long)s->e->word,
			 waiting);
		FZ_CHECK(wake == waiting, "propose: wake %d for a server waiting %d", wake, waiting);
	}
}

static void op_raw_word(struct state *s, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	struct usmc_clc_entry *e = any_entry(s, sel);
	uint64_t h = sel & 8 ? fz_u64(f) >> 8 : s->h;

	uint8_t st = fz_u8(f);

	STORE_RELEASE(&e->word, sel & 16 ? fz_u64(f) :
		      CLC_WORD(h, st % 5) | (st & 0x80 ? CLC_W : 0) |
		      (sel & 32 ? (uint64_t)fz_u32(f) << 32 : 0));
}

static void op_raw_fields(struct state *s, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	struct usmc_clc_entry *e = any_entry(s, sel);
	uint8_t off = 8 + fz_u8(f) % 56, len = fz_u8(f) % 16;

	fz_bytes(f, (uint8_t *)e + off, MIN((size_t)len, sizeof(*e) - off));
	if (sel & 8)
		e->version = USMC_PROTO_VERSION;
	if (sel & 16)
		e->client = s->client;
}

static bool nobody_connecting(void)
{
	unsigned int i;

	for (i = 0; i < USMC_CLC_CONNECTING; i++)
		if (LOAD_RELAXED(&ln->idx->connecting[i]))
			return false;
	return true;
}

static void op_match(struct state *s, struct fz *f)
{
	static const int hows[] = { CLC_PEEK, CLC_ACCEPT, CLC_DECIDE };
	struct usmc_clc_entry before[USMC_CLC_WAYS], *e = s->e;
	uint8_t sel = fz_u8(f);
	int how = hows[sel % 3], rc, chk;
	bool stale;
	struct usmc_clc_prop p;
	unsigned int i;

	/* DECIDE may wait up to 5 ms for announced clients: only when none. */
	if (how == CLC_DECIDE && !nobody_connecting())
		how = CLC_PEEK;
	memcpy(before, ln->idx->e[s->client.port], sizeof(before));
	memset(&p, 0xa5, sizeof(p));
	rc = usmc_clc_match(ln, &s->client, &p, how);
	if (rc == 0) {
		i = (unsigned int)(e - ln->idx->e[s->client.port]);
		FZ_CHECK(proposed(s, before[i].word) && p.wake == !!(before[i].word & CLC_W),
			 "match returned word %#llx (wake %d)", (unsigned long long)before[i].word,
			 p.wake);
		/* The proposal stays posted until the server answers it. */
		FZ_CHECK(LOAD_RELAXED(&e->word) == before[i].word, "match changed the proposal");
		FZ_CHECK(p.lgr_id == before[i].lgr_id && p.slot == before[i].slot &&
			 p.gen == before[i].gen && p.version == before[i].version &&
			 !memcmp(&p.client, &before[i].client, sizeof(p.client)) &&
			 !memcmp(p.devs, before[i].devs, 4), "match returned other fields");
		chk = usmc_clc_prop_check(&p, &s->client);
		FZ_CHECK(chk == expect_prop_check(&p, &s->client), "prop_check %d, expected %d", chk,
			 expect_prop_check(&p, &s->client));
		chk = usmc_clc_prop_check(&p, NULL);
		if (!chk)
			FZ_CHECK(p.lgr_id && p.version == USMC_PROTO_VERSION, "prop_check(NULL) accepted");
	} else {
		FZ_CHECK(rc == USMC_CLC_PENDING || (rc > 0 && rc < USMC_R_MAX), "match rc %d", rc);
		FZ_CHECK(rc != USMC_CLC_PENDING || how != CLC_DECIDE, "DECIDE left it pending");
	}
	for (i = 0; i < USMC_CLC_WAYS; i++) {
		uint64_t w0 = before[i].word, w1 = LOAD_RELAXED(&ln->idx->e[s->client.port][i].word);

		FZ_CHECK(!memcmp((uint8_t *)&before[i] + 8, (uint8_t *)&ln->idx->e[s->client.port][i] + 8,
				 sizeof(before[i]) - 8), "match wrote into the fields of way %u", i);
		if (w0 == w1)
			continue;
		/* What matching may do to a word: mark our tuple TCP when
		 * deciding, clear a stale entry of another tuple (or a stale
		 * answer; its owner's link group does not exist here). */
		stale = w0 && !proposed(s, w0) && !claimed(s, w0) && !CLC_IS_MARK(w0);
		/* Deciding marks TCP(h, epoch) over an empty entry, our
		 * client's claim, any mark (never acted on but by its own
		 * client) or a stale entry it cleared first.  Accepting
		 * undecided marks WAIT(h, epoch) the same way, except that
		 * our client's claim only gains W. */
		FZ_CHECK(&ln->idx->e[s->client.port][i] == e &&
			 ((w1 == 0 && stale) ||
			  (how == CLC_DECIDE && CLC_STATE(w1) == CLC_TCP && CLC_HASH(w1) == s->h &&
			   !(w1 & CLC_W) && (w0 == 0 || claimed(s, w0) || CLC_IS_MARK(w0) || stale)) ||
			  (how == CLC_ACCEPT && rc == USMC_CLC_PENDING &&
			   ((CLC_STATE(w1) == CLC_WAIT && CLC_HASH(w1) == s->h && !(w1 & CLC_W) &&
			     CLC_SEQ(w1) == (uint32_t)LOAD_RELAXED(&ln->idx->epoch) &&
			     (w0 == 0 || CLC_IS_MARK(w0) || stale)) ||
			    (w0 == CLC_WORD(s->h, CLC_CLAIM) && w1 == (w0 | CLC_W))))),
			 "match (how %d, rc %d) turned way %u from %#llx into %#llx", how, rc, i,
			 (unsigned long long)w0, (unsigned long long)w1);
	}
}

static void op_misc(struct state *s, struct fz *f)
{
	uint64_t w0 = LOAD_RELAXED(&s->e->word);
	bool ok;

	if (fz_u8(f) & 1) {
		ok = usmc_clc_has_proposal(ln, &s->client);
		FZ_CHECK(ok == proposed(s, w0), "has_proposal %d on %#llx", ok,
			 (unsigned long long)w0);
	} else {
		ok = usmc_clc_withdraw(ln, &s->client);
		FZ_CHECK(ok == proposed(s, w0) &&
			 LOAD_RELAXED(&s->e->word) == (ok ? 0 : w0), "withdraw %d on %#llx", ok,
			 (unsigned long long)w0);
	}
}

/* The server answers (accept: 0, decline: a reason, or junk) ... */
static void op_answer(struct state *s, struct fz *f)
{
	uint64_t w0 = LOAD_RELAXED(&s->e->word), w1;
	int reason = fz_u8(f) & 1 ? (int)(int8_t)fz_u8(f) : 0;
	bool ok = usmc_clc_answer(ln, &s->client, reason);

	w1 = LOAD_RELAXED(&s->e->word);
	FZ_CHECK(ok == proposed(s, w0), "answer %d on %#llx", ok,
		 (unsigned long long)w0);
	if (!ok)
		FZ_CHECK(w1 == w0, "failed answer changed %#llx", (unsigned long long)w0);
	else if (reason <= 0 || reason >= USMC_R_MAX)
		FZ_CHECK(w1 == 0, "accept left %#llx", (unsigned long long)w1);
	else
		FZ_CHECK(w1 == CLC_WORD(s->h, CLC_DECLINED | (unsigned int)reason),
			 "decline %d wrote %#llx", reason, (unsigned long long)w1);
}

/* ... and the client reads a decline (whoever wrote it). */
static void op_declined(struct state *s)
{
	uint64_t w0 = LOAD_RELAXED(&s->e->word), w1;
	int r = usmc_clc_declined(ln, &s->client);
	bool is_decl = CLC_HASH(w0) == s->h && (CLC_STATE(w0) & CLC_DECLINED);

	w1 = LOAD_RELAXED(&s->e->word);
	FZ_CHECK(!!r == is_decl, "declined %d on %#llx", r, (unsigned long long)w0);
	FZ_CHECK(r >= 0 && r < USMC_R_MAX, "declined: reason %d out of range", r);
	FZ_CHECK(w1 == (r ? 0 : w0), "declined %d left %#llx", r, (unsigned long long)w1);
}

static void op_connecting(struct fz *f)
{
	uint8_t i = fz_u8(f) % (USMC_CLC_CONNECTING + 1), sel = fz_u8(f);

	if (i == USMC_CLC_CONNECTING)	/* the header's other shared words */
		STORE_RELEASE(sel & 1 ? &ln->idx->degraded : &ln->idx->closed, fz_u8(f) % 4);
	else
		STORE_RELEASE(&ln->idx->connecting[i], sel & 1 ? fz_u64(f) : 0);
}

/* The first page of an index: its header. */
struct ln_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t ways;
	uint64_t id;
	uint32_t closed;
	uint8_t rest[4096 - 28];
};
BUILD_BUG_ON(offsetof(struct ln_hdr, closed) != offsetof(struct usmc_clc_index, closed));
BUILD_BUG_ON(offsetof(struct ln_hdr, id) != offsetof(struct usmc_clc_index, id));

/* A whole ln-<id> file written by someone: usmc_clc_ln_get must judge it. */
static void op_ln_file(struct fz *f)
{
	struct ln_hdr *hdr = calloc(1, sizeof(*hdr));
	uint64_t size = sizeof(struct usmc_clc_index), id = next_id++;
	uint8_t sel = fz_u8(f);
	struct usmc_clc_ln *got, *again;
	bool lock = sel & 2, valid;
	char name[64];
	int fd, rc;

	if (!hdr)
		abort();
	hdr->magic = USMC_CLC_MAGIC;
	hdr->version = USMC_PROTO_VERSION;
	hdr->ways = USMC_CLC_WAYS;
	hdr->id = id;
	if (sel & 4)
		fz_bytes(f, (uint8_t *)hdr + fz_u8(f) % 40, 1 + fz_u8(f) % 8);
	if (sel & 8)
		size += (uint64_t)(int64_t)(int16_t)fz_u16(f);
	hdr->closed = sel & 16 ? fz_u8(f) : 0;
	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)id);
	fd = fz_write_file(name, size, hdr, 4096);
	if (fd < 0)
		abort();
	if (lock && usmc_lock_take(fd, 0))
		abort();
	rc = usmc_clc_ln_get(id, true, &got);
	valid = size == sizeof(struct usmc_clc_index) && hdr->magic == USMC_CLC_MAGIC &&
		hdr->version == USMC_PROTO_VERSION && hdr->id == id && !hdr->closed && lock;
	FZ_CHECK(!rc == valid, "ln_get returned %d for a %s index", rc, valid ? "valid" : "invalid");
	if (!rc) {
		FZ_CHECK(got->id == id && got->idx, "ln_get: wrong index");
		/* Owner gone: the cached index must be dropped at the next look. */
		usmc_lock_drop(fd, 0);
		rc = usmc_clc_ln_get(id, true, &again);
		FZ_CHECK(rc == -ESRCH, "ln_get: %d for an index whose owner is gone", rc);
		usmc_clc_ln_put(got);
	}
	close(fd);
	unlinkat(usmc_rundir_fd(), name, 0);
	free(hdr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	struct state s = { .ntouched = 0 };
	int ops = 0, i;

	pick_client(&s, &f);
	while (fz_more(&f) && ops++ < MAX_OPS) {
		switch (fz_u8(&f) % 12) {
		case 0:
		case 1:
			op_propose(&s, &f);
			break;
		case 2:
			op_raw_word(&s, &f);
			break;
		case 3:
			op_raw_fields(&s, &f);
			break;
		case 4:
		case 5:
			op_match(&s, &f);
			break;
		case 6:
			op_misc(&s, &f);
			break;
		case 7:
			op_connecting(&f);
			break;
		case 8:
			op_ln_file(&f);
			break;
		case 9:
			op_answer(&s, &f);
			break;
		case 10:
			op_declined(&s);
			break;
		default:
			pick_client(&s, &f);
			break;
		}
	}
	/* Leave the index as we found it: empty. */
	for (i = 0; i < s.ntouched; i++)
		memset(ln->idx->e[s.touched[i]], 0, sizeof(ln->idx->e[0]));
	memset((void *)ln->idx->connecting, 0, sizeof(ln->idx->connecting));
	memset((void *)ln->idx->connecting_lgr, 0, sizeof(ln->idx->connecting_lgr));
	memset((void *)ln->idx->connecting_port, 0, sizeof(ln->idx->connecting_port));
	STORE_RELAXED(&ln->idx->epoch, 0);
	STORE_RELAXED(&ln->idx->degraded, 0);
	STORE_RELAXED(&ln->idx->closed, 0);
	return 0;
}
