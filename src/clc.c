// SPDX-License-Identifier: MIT
/*
 * clc.c - CLC index: proposals posted by clients, matched by servers.
 *
 * Memory ordering: the client writes the proposal fields with relaxed word
 * stores while the entry is CLAIM(h) (owned by it) and publishes them with
 * the release CAS to PROPOSED(h); the server's acquire load of PROPOSED(h)
 * pairs with it before reading the fields.  The server's CAS back to EMPTY
 * is the linearisation point of "matched": a concurrent withdraw fails.
 */
#include "clc.h"
#include "dev.h"
#include "options.h"
#include "guard.h"
#include "log.h"
#include "rundir.h"
#include "shm.h"
#include "sys.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>

BUILD_BUG_ON(sizeof(struct usmc_clc_entry) != 64);
BUILD_BUG_ON(offsetof(struct usmc_clc_index, e) != 4096);

/*
 * The index is sparse (16 MB, touched a page at a time as client ports
 * come and go).  Before the first write into a page we back it with
 * fallocate(2), so a full tmpfs makes the handshake fall back instead of
 * faulting; each process remembers the pages it already backed.  A page
 * the other side backed is backed for us too (SEEK_DATA finds it), even
 * when fallocate fails now.
 */
#define CLC_PAGE_ENTRIES	(4096 / sizeof(struct usmc_clc_entry) / USMC_CLC_WAYS)

/*
 * Is e's page of the index backed?  To write, we back it first
 * (fallocate).  To load, we only look (SEEK_DATA): a load through a shared
 * mapping of a tmpfs hole allocates the page, and SIGBUS when the tmpfs is
 * full, while a page nobody backed holds no proposal anyway.
 */
static bool entry_page_backed(struct usmc_clc_ln *ln, const struct usmc_clc_entry *e,
			      bool to_write)
{
	size_t off = (size_t)((const char *)e - (const char *)ln->idx) & ~(size_t)4095;
	size_t page = off / 4096;
	uint64_t bit = 1ULL << (page % 64);
	_Atomic uint64_t *w;

	if (page >= CLC_INDEX_PAGES)
		return false;
	w = &ln->backed[page / 64];
	if (LOAD_RELAXED(w) & bit)
		return true;
	if ((!to_write || usmc_fault(USMC_FAULT_CLC) || fallocate(ln->fd, 0, (off_t)off, 4096)) &&
	    lseek(ln->fd, (off_t)off, SEEK_DATA) != (off_t)off)
		return false;
	atomic_fetch_or(w, bit);
	return true;
}

static bool entry_backed(struct usmc_clc_ln *ln, const struct usmc_clc_entry *e)
{
	return entry_page_backed(ln, e, true);
}

static bool entry_readable(struct usmc_clc_ln *ln, const struct usmc_clc_entry *e)
{
	return entry_page_backed(ln, e, false);
}


static struct usmc_clc_entry *entry_of(struct usmc_clc_ln *ln, const struct usmc_addr *a,
				       uint64_t h)
{
	return &ln->idx->e[a->port][h % USMC_CLC_WAYS];
}

/* The index state d as it concerns a client: a decline made under a
 * version of the controls other than ours is stale (clc.h). */
static uint32_t degraded_now(uint32_t d)
{
	if ((d & CLC_LN_OFF) && CLC_LN_OFF_GEN(d) != usmc_ctl_gen())
		d &= ~CLC_LN_OFF_BITS;
	return d;
}

/* Why a client may not propose to an index in state d (non-zero).  The
 * word is the server's to write: a reason out of range is a policy one. */
static int degraded_reason(uint32_t d)
{
	if (d & CLC_LN_OFF) {
		unsigned int r = CLC_LN_OFF_REASON(d);

		return r && r < USMC_R_MAX ? (int)r : USMC_R_POLICY;
	}
	return d & CLC_LN_NOMARK ? USMC_R_MEM : USMC_R_LIMIT;
}

/* Can a client whose connect() began at epoch e0 take over word w? */
static bool mark_stale(uint64_t w, uint64_t e0)
{
	return CLC_IS_MARK(w) && !CLC_SEQ_AFTER(CLC_SEQ(w), (uint32_t)e0);
}

/* This tuple's claim or proposal, with or without W. */
static bool is_claimed(uint64_t w, uint64_t h)
{
	return (w & ~CLC_W) == CLC_WORD(h, CLC_CLAIM);
}

static bool is_proposed(uint64_t w, uint64_t h)
{
	return (w & ~CLC_W) == CLC_WORD(h, CLC_PROPOSED);
}

int usmc_clc_propose(struct usmc_clc_ln *ln, const struct usmc_clc_prop *p, bool *wake)
{
	uint64_t h = usmc_clc_tuple_hash(&p->client), w, claim;
	struct usmc_clc_entry *e = entry_of(ln, &p->client, h), tmp;
	unsigned int tries;
	bool always;
	uint32_t d;

	if (usmc_clc_ln_poisoned(ln))
		return USMC_R_RUNDIR;
	d = degraded_now(LOAD_ACQUIRE(&ln->idx->degraded));
	if (d)
		return degraded_reason(d);
	if (!entry_backed(ln, e))
		return USMC_R_MEM;
	/* A listener with TCP_DEFER_ACCEPT is accepted only once TCP data
	 * came: we send the wake message whatever the server does. */
	always = LOAD_ACQUIRE(&ln->idx->wake_always) != 0;
	w = LOAD_ACQUIRE(&e->word);
	for (tries = 0;; tries++) {
		if (tries == CLC_CAS_TRIES)
			return USMC_R_INDEX_BUSY;
		claim = CLC_WORD(h, CLC_CLAIM) | (always || p->inband ? CLC_W : 0);
		if (w && !mark_stale(w, p->epoch)) {
			/* A fresh mark for our address: the server runs this
			 * very connection as TCP, or accepted it undecided and
			 * waits for us. */
			if (CLC_HASH(w) == h && CLC_STATE(w) == CLC_TCP)
				return USMC_R_LATE;
			if (CLC_HASH(w) != h || CLC_STATE(w) != CLC_WAIT)
				return USMC_R_INDEX_BUSY;
			claim |= CLC_W;
		}
		if (atomic_compare_exchange_strong(&e->word, &w, claim))
			break;
	}
	/* Seq-cst after our CAS, against the server's store of degraded
	 * before its load of the word: one of us sees the other.  A waiting
	 * server then gets our TCP bytes instead of a wake message. */
	d = degraded_now(atomic_load(&ln->idx->degraded));
	if (d) {
		w = claim;
		for (tries = 0; tries < CLC_CAS_TRIES && is_claimed(w, h); tries++)
			if (atomic_compare_exchange_strong(&e->word, &w, 0))
				break;
		return degraded_reason(d);
	}

	memset(&tmp, 0, sizeof(tmp));
	tmp.word = claim;
	if (p->inband) {
		/* Nothing of the body here: it goes to the holder of the
		 * accepted socket only (clc_inband.h). */
		tmp.version = USMC_CLC_INBAND;
	} else {
		tmp.lgr_id = p->lgr_id;
		tmp.slot = p->slot;
		tmp.gen = p->gen;
		tmp.version = p->version;
		memcpy(tmp.devs, p->devs, sizeof(tmp.devs));
		tmp.client = p->client;
		tmp.uid = p->uid;
		tmp.pid = p->pid;
	}
	shm_store_words((char *)e + 8, (char *)&tmp + 8, sizeof(tmp) - 8);

	/* Publish: pairs with the acquire load in usmc_clc_match().  The
	 * server may have added W to our claim meanwhile: keep it. */
	w = claim;
	for (tries = 0; !atomic_compare_exchange_strong_explicit(&e->word, &w,
								  (w & CLC_W) | CLC_WORD(h, CLC_PROPOSED),
								  memory_order_acq_rel,
								  memory_order_acquire); tries++)
		if (w != (CLC_WORD(h, CLC_CLAIM) | CLC_W) || tries == CLC_CAS_TRIES)
			return USMC_R_LATE;	/* the server decided first: TCP(h) */
	/* Truncated meanwhile: our proposal went into zero pages. */
	if (usmc_clc_ln_poisoned(ln))
		return USMC_R_RUNDIR;
	*wake = w & CLC_W;
	return 0;
}

int usmc_clc_connect_begin(struct usmc_clc_ln *ln, uint64_t lgr_id, uint64_t *epoch)
{
	struct usmc_clc_index *x = ln->idx;
	unsigned int start = (unsigned int)(usmc_mix64(lgr_id) % USMC_CLC_CONNECTING), k;
	static _Atomic uint32_t seq;
	/* Unique among announcements (pid, sequence), never 0 or 1, and
	 * made before we hold 1: no system call in between. */
	uint64_t token = ((uint64_t)(uint32_t)usmc_getpid() << 32) |
			 (atomic_fetch_add_explicit(&seq, 1, memory_order_relaxed) << 2) | 2;

	/* Before the SYN: every mark made for this connection is newer. */
	*epoch = atomic_load(&x->epoch);
	for (k = 0; k < USMC_CLC_CONNECTING; k++) {
		unsigned int i = (start + k) % USMC_CLC_CONNECTING;
		uint64_t zero = 0;

		/* Seq-cst: visible before our SYN can reach the server.  1
		 * ("being written") already makes a server wait. */
		if (!atomic_compare_exchange_strong(&x->connecting[i], &zero, 1))
			continue;
		STORE_RELAXED(&x->connecting_lgr[i], lgr_id);
		STORE_RELAXED(&x->connecting_port[i], 0);
		STORE_RELAXED(&x->connecting_cpu[i], (uint32_t)(sched_getcpu() + 1));
		STORE_RELEASE(&x->connecting[i], token);
		return (int)i;
	}
	return -1;
}

void usmc_clc_connect_port(struct usmc_clc_ln *ln, int slot, uint16_t port)
{
	/* Servers of other ports stop waiting for us. */
	if (slot >= 0)
		atomic_store(&ln->idx->connecting_port[slot], port);
}

void usmc_clc_connect_end(struct usmc_clc_ln *ln, int slot)
{
	/* Release: our proposal (or our giving up) happened before. */
	if (slot >= 0)
		STORE_RELEASE(&ln->idx->connecting[slot], 0);
}

/* The owner of link group lgr_id (lg-ID/mem's lock); never blocks. */
static enum usmc_owner lgr_owner(uint64_t lgr_id)
{
	char name[64];

	snprintf(name, sizeof(name), "lg-%016llx/mem", (unsigned long long)lgr_id);
	return usmc_rundir_owner_alive(name);
}

/*
 * No proposal is posted: wait for the clients that were inside connect()
 * when we looked and could be ours (port not known yet, or our client's
 * port).  A client announces itself before its SYN, so once none is in
 * flight, the client of this connection, if it is a usmc client at all,
 * has posted.  Announcements made later cannot be our client's, so a stream
 * of new clients never holds us up; dead announcers are cleared.  The limit
 * only guards against a client stopped in that window: our mark (TCP, or
 * WAIT at accept) then decides, and both ends still agree.
 */
static void wait_connecting(struct usmc_clc_ln *ln, struct usmc_clc_entry *e, uint64_t h,
			    uint16_t port, uint64_t limit_ns)
{
	struct usmc_clc_index *x = ln->idx;
	uint64_t snap[USMC_CLC_CONNECTING];
	uint64_t start = 0, last_check = 0, now;
	uint32_t here = (uint32_t)(sched_getcpu() + 1);
	unsigned int i;

	for (i = 0; i < USMC_CLC_CONNECTING; i++)
		snap[i] = atomic_load(&x->connecting[i]);
	for (;;) {
		bool busy = false, same_cpu = false;

		if (is_proposed(LOAD_ACQUIRE(&e->word), h))
			return;
		for (i = 0; i < USMC_CLC_CONNECTING; i++) {
			uint64_t t;
			uint32_t p;

			if (!snap[i])
				continue;
			t = LOAD_ACQUIRE(&x->connecting[i]);
			p = LOAD_ACQUIRE(&x->connecting_port[i]);
			if (t != snap[i] && !(snap[i] == 1 && t > 1)) {
				snap[i] = 0;	/* ended; the slot may serve someone newer */
				continue;
			}
			if (t == 1 && snap[i] == 1) {
				busy = true;	/* still being written */
				continue;
			}
			snap[i] = t;
			if (p && p != port) {
				snap[i] = 0;	/* another connection's client */
				continue;
			}
			/* A client stores its link group before its token
			 * (release, pairs with our acquire load of t): a token
			 * without one was forged.  Cleared at first sight. */
			if (t > 1 && !LOAD_RELAXED(&x->connecting_lgr[i])) {
				atomic_compare_exchange_strong(&x->connecting[i], &t, 0);
				snap[i] = 0;
				continue;
			}
			busy = true;
			if (LOAD_RELAXED(&x->connecting_cpu[i]) == here)
				same_cpu = true;
		}
		if (!busy)
			return;
		now = usmc_now_ns();
		if (!start)
			start = last_check = now;
		if (now - start > limit_ns) {
			/* An announcement that outlived a whole decision wait is
			 * cleared, so that it holds up one decision at most (a
			 * client stopped that long loses its acceleration to our
			 * mark, never agreement). */
			for (i = 0; limit_ns >= CLC_DECIDE_WAIT_NS && i < USMC_CLC_CONNECTING; i++) {
				uint64_t t = snap[i];

				if (t > 1)
					atomic_compare_exchange_strong(&x->connecting[i], &t, 0);
			}
			return;
		}
		if (now - last_check > 200000) {
			last_check = now;
			for (i = 0; i < USMC_CLC_CONNECTING; i++) {
				uint64_t t = snap[i], id;
				enum usmc_owner o;

				/* Still "being written" long after we looked: its
				 * writer died between its two stores (three stores, no
				 * system call).  Were it only descheduled, clearing
				 * costs it at most its acceleration (our TCP mark then
				 * fails its proposal), never agreement. */
				if (t == 1 && now - start > CLC_HALF_WRITTEN_NS) {
					atomic_compare_exchange_strong(&x->connecting[i], &t, 0);
					snap[i] = 0;
					continue;
				}
				if (t <= 1)
					continue;
				id = LOAD_ACQUIRE(&x->connecting_lgr[i]);
				o = lgr_owner(id);
				if (o == USMC_OWNER_DEAD || o == USMC_OWNER_PLANTED)
					atomic_compare_exchange_strong(&x->connecting[i], &t, 0);
			}
		}
		/* A client on our CPU cannot post while we spin: let it run. */
		if (same_cpu || now - start > 20000)
			sched_yield();
		else
			cpu_relax();
	}
}

bool usmc_clc_withdraw(struct usmc_clc_ln *ln, const struct usmc_addr *client)
{
	uint64_t h = usmc_clc_tuple_hash(client);
	struct usmc_clc_entry *e = entry_of(ln, client, h);
	uint64_t w = LOAD_ACQUIRE(&e->word);

	return is_proposed(w, h) && atomic_compare_exchange_strong(&e->word, &w, 0);
}

int usmc_clc_prop_check(const struct usmc_clc_prop *p, const struct usmc_addr *client)
{
	if (p->version != USMC_PROTO_VERSION)
		return USMC_R_VERSION;
	if (client && (!usmc_addr_ip_eq(&p->client, client) || p->client.port != client->port))
		return USMC_R_INTERNAL;
	/* devs[0]: the device of the proposal's link group (dev.c). */
	if (!usmc_dev_get(p->devs[0]))
		return USMC_R_NO_DEVICE;
	if (!p->lgr_id)
		return USMC_R_INTERNAL;
	return 0;
}

static int match(struct usmc_clc_ln *ln, const struct usmc_addr *client,
		 struct usmc_clc_prop *p, int how, bool *planted)
{
	bool decide = how == CLC_DECIDE;
	uint64_t h = usmc_clc_tuple_hash(client), w;
	struct usmc_clc_entry *e = entry_of(ln, client, h), copy = { 0 };
	bool cleaned = false, waited = false, claimed;
	unsigned int tries = 0;
	char name[64];

	/* Unbacked page: nobody proposed here (a client backs it first).
	 * Deciding TCP, or waiting undecided, needs a mark we cannot write:
	 * degrade the listener so no client proposes any more, then look
	 * once more (a client that claimed meanwhile backed the page).  Still
	 * nothing: no client can post for this connection any more, so it is
	 * TCP now (undecided, nothing could wake us when a proposal came). */
	if (!entry_backed(ln, e)) {
		if (how == CLC_PEEK)
			return USMC_CLC_PENDING;
		atomic_fetch_or(&ln->idx->degraded, CLC_LN_NOMARK);
		if (!entry_readable(ln, e))
			return USMC_R_MEM;
	}
	for (;; tries++) {
		if (tries == CLC_CAS_TRIES)
			return USMC_R_INDEX_BUSY;
		w = LOAD_ACQUIRE(&e->word);
		if (is_proposed(w, h)) {
			shm_load_words(&copy, e, sizeof(copy));
			/* Still the same proposal after the copy (the client
			 * writes the fields only in CLAIM).  The answer's CAS
			 * makes us the only one to act on it. */
			if (LOAD_ACQUIRE(&e->word) != w)
				continue;
			memset(p, 0, sizeof(*p));
			p->lgr_id = copy.lgr_id;
			p->slot = copy.slot;
			p->gen = copy.gen;
			p->version = copy.version;
			p->uid = copy.uid;
			p->pid = copy.pid;
			memcpy(p->devs, copy.devs, sizeof(p->devs));
			p->wake = w & CLC_W;
			p->inband = copy.version == USMC_CLC_INBAND;
			/* In-band: the address the entry is for; the body's
			 * own comes on TCP. */
			p->client = p->inband ? *client : copy.client;
			return 0;
		}
		/* No proposal for us: the entry is free, our client is still
		 * writing one, or it holds a TCP or WAIT mark (an old one, or
		 * our own WAIT; a mark is only ever acted on by the client it
		 * was made for). */
		claimed = is_claimed(w, h);
		if (w == 0 || claimed || CLC_IS_MARK(w)) {
			uint64_t mark;

			if (how == CLC_PEEK)
				return USMC_CLC_PENDING;
			if (!waited) {
				/* At accept: a short look (the client of this
				 * connection is usually microseconds from posting);
				 * when acting: until our client, if it is still
				 * inside connect(), has posted or given up. */
				waited = true;
				wait_connecting(ln, e, h, client->port,
						decide ? CLC_DECIDE_WAIT_NS : CLC_ACCEPT_WAIT_NS);
				continue;
			}
			if (!decide && w == (CLC_WORD(h, CLC_CLAIM) | CLC_W))
				return USMC_CLC_PENDING;
			/* Undecided: WAIT (or W on our client's claim), so that
			 * a proposal brings a wake message.  Deciding: TCP.  Marks
			 * take a fresh epoch: our client, should it come late,
			 * sees a mark newer than its connect(). */
			if (!decide && claimed)
				mark = w | CLC_W;
			else
				mark = CLC_MARK_WORD(h, decide ? CLC_TCP : CLC_WAIT,
						     atomic_fetch_add(&ln->idx->epoch, 1) + 1);
			if (!atomic_compare_exchange_strong(&e->word, &w, mark))
				continue;
			if (!decide)
				return USMC_CLC_PENDING;
			return claimed ? USMC_R_LATE : USMC_R_PEER_NOT_USMC;
		}
		/* Another 4-tuple holds the entry; reclaim it if its owner
		 * died, or if what it names is no link group at all. */
		if (!cleaned) {
			enum usmc_owner o;

			snprintf(name, sizeof(name), "lg-%016llx/mem", (unsigned long long)
				 LOAD_RELAXED((_Atomic uint64_t *)&e->lgr_id));
			o = usmc_rundir_owner_alive(name);
			*planted |= o == USMC_OWNER_PLANTED;
			if (o == USMC_OWNER_DEAD || o == USMC_OWNER_PLANTED) {
				/* Planted: decide TCP now (a fresh mark), so the
				 * reason is counted for this very connection. */
				if (o == USMC_OWNER_PLANTED && how != CLC_PEEK)
					decide = true;
				cleaned = true;
				atomic_compare_exchange_strong(&e->word, &w, 0);
				continue;
			}
		}
		return USMC_R_INDEX_BUSY;
	}
}

int usmc_clc_match(struct usmc_clc_ln *ln, const struct usmc_addr *client,
		   struct usmc_clc_prop *p, int how)
{
	bool planted = false;
	int rc;

	if (usmc_clc_ln_poisoned(ln))
		return USMC_R_RUNDIR;
	rc = match(ln, client, p, how, &planted);
	/* Truncated under us: it holds zeros now and no proposal can come.
	 * A planted object in our way: say so rather than "not usmc". */
	if (rc && usmc_clc_ln_poisoned(ln))
		return USMC_R_RUNDIR;
	if (planted && rc == USMC_R_PEER_NOT_USMC)
		return USMC_R_RUNDIR;
	return rc;
}

bool usmc_clc_answer(struct usmc_clc_ln *ln, const struct usmc_addr *client, int reason)
{
	uint64_t h = usmc_clc_tuple_hash(client);
	struct usmc_clc_entry *e = entry_of(ln, client, h);
	uint64_t w = LOAD_ACQUIRE(&e->word);

	if (!is_proposed(w, h))
		return false;
	if (reason <= 0 || reason >= USMC_R_MAX)
		return atomic_compare_exchange_strong(&e->word, &w, 0);
	return atomic_compare_exchange_strong(&e->word, &w,
					      CLC_WORD(h, CLC_DECLINED | (unsigned int)reason));
}

int usmc_clc_declined(struct usmc_clc_ln *ln, const struct usmc_addr *client)
{
	uint64_t h = usmc_clc_tuple_hash(client);
	struct usmc_clc_entry *e = entry_of(ln, client, h);
	uint64_t w = LOAD_ACQUIRE(&e->word);
	unsigned int st = CLC_STATE(w), r;

	if (CLC_HASH(w) != h || !(st & CLC_DECLINED))
		return 0;
	r = st & ~(unsigned int)CLC_DECLINED;
	if (!atomic_compare_exchange_strong(&e->word, &w, 0))
		return 0;
	return r && r < USMC_R_MAX ? (int)r : USMC_R_INTERNAL;
}

bool usmc_clc_is_declined(struct usmc_clc_ln *ln, const struct usmc_addr *client)
{
	uint64_t h = usmc_clc_tuple_hash(client);
	struct usmc_clc_entry *e = entry_of(ln, client, h);
	uint64_t w;

	if (!entry_readable(ln, e))
		return false;
	w = LOAD_ACQUIRE(&e->word);
	return CLC_HASH(w) == h && (CLC_STATE(w) & CLC_DECLINED);
}

bool usmc_clc_has_proposal(struct usmc_clc_ln *ln, const struct usmc_addr *client)
{
	uint64_t h = usmc_clc_tuple_hash(client);
	struct usmc_clc_entry *e = entry_of(ln, client, h);

	return entry_readable(ln, e) && is_proposed(LOAD_ACQUIRE(&e->word), h);
}
