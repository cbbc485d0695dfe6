/* SPDX-License-Identifier: MIT */
/*
 * cdc.h - Connection Data Control: the per-connection control block and the
 * ring (DMB) cursor rules, shared by both ends through the link group.
 *
 * Each direction has a DMB ring of size bytes (power of two) that the
 * sender writes straight into and the receiver reads from (the seeds'
 * "no-copy": the sender's sndbuf is the receiver's DMB), a producer line
 * written only by the sender and a consumer line written only by the
 * receiver.  Cursors are 64-bit byte counts that never wrap:
 *
 *     head = ring_head(cons, skip_to, prod)
 *     0 <= prod - head <= size          (bytes readable)
 *     prod < CDC_CURSOR_LIMIT           (nothing below ever wraps)
 *     position in the ring = cursor & (size - 1)
 *
 * Rewind: when the sender finds the ring empty (head == prod) it may move
 * prod up to the next multiple of size and publish that point in skip_to,
 * so the next message starts at offset 0 again.  Request/response traffic
 * then only ever touches the first pages of a ring, however large the ring
 * is; the bytes in [cons, skip_to) are not data and the reader jumps them.
 *
 * Everything read from the peer's lines is untrusted: it is loaded once,
 * checked against these invariants, and a violation aborts the connection
 * (ECONNRESET, reason protocol_violation).  A side never reads its own
 * cursors back from its lines: it keeps copies (sock.h), so what the peer
 * writes there only spoils the peer's own view, and it never loads a line
 * the other core is polling (that load missed on every other send).
 *
 * Ordering: the producer copies data, then store-releases prod; the
 * consumer load-acquires prod, copies data out, then store-releases cons;
 * the producer load-acquires cons before reusing that space.  Doorbells:
 * a side that wants to sleep bumps its *_armed counter, issues a full fence
 * and re-checks the cursors; the other side publishes its cursor, issues a
 * full fence and reads *_armed.  One of the two always sees the other.
 */
#ifndef USMC_CDC_H
#define USMC_CDC_H

#include "usmc.h"

#define CDC_F_DONE	0x1	/* producer: no bytes after prod (shutdown WR / close: FIN) */
#define CDC_F_ABORT	0x2	/* producer or consumer: connection reset (RST) */
#define CDC_F_CLOSED	0x4	/* consumer: closed, will never read (peer writes get EPIPE) */
#define CDC_F_MIGRATE	0x8	/* both lines: this end continues on TCP (migrate.c) */
#define CDC_F_RCVLIM	0x10	/* consumer: rcvbuf holds its SO_RCVBUF (af_usmc.c) */
#define CDC_F_MIGFROM	0x20	/* producer, after CDC_F_MIGRATE: mig_from is final (migrate.c) */

struct usmc_cdc_prod {			/* written by the sender only */
	_Atomic uint64_t prod;		/* bytes ever produced (skips included) */
	_Atomic uint64_t skip_to;	/* last rewind point: data resumes here */
	_Atomic uint32_t flags;		/* CDC_F_DONE | CDC_F_ABORT */
	_Atomic uint32_t space_armed;	/* bumped when the sender sleeps for space */
	_Atomic uint32_t cpu;		/* hint: last CPU of the sender */
	_Atomic uint32_t waiting;	/* waits of the sender asleep for room (wait.c
					 * usmc_wait_count): the receiver rings while non-zero */
	_Atomic uint64_t mig_from;	/* CDC_F_MIGFROM: our bytes from this cursor on go on TCP */
	_Atomic uint32_t data_rung;	/* the receiver's data_armed we last rang for */
	_Atomic uint64_t data_rung_ns;	/* ... when (CLOCK_MONOTONIC: epoll's ready order) */
} __cacheline;

/*
 * Two lines: the receiver stores cons on every read, and the sender loads
 * it only when its last look leaves too little room (tx.c), while it reads
 * the flags and data_armed on every send.  Together, every send would miss
 * on a line the last read dirtied.
 */
struct usmc_cdc_cons {			/* written by the receiver only */
	_Atomic uint64_t cons;		/* bytes ever consumed */
	_Atomic uint32_t flags __cacheline;	/* CDC_F_CLOSED | CDC_F_ABORT */
	_Atomic uint32_t data_armed;	/* bumped when the receiver sleeps for data */
	_Atomic uint32_t cpu;		/* hint: last CPU of the receiver */
	_Atomic uint32_t waiting;	/* waits of the receiver asleep for data (wait.c
					 * usmc_wait_count): the sender rings while non-zero */
	_Atomic uint32_t rcvbuf;	/* SO_RCVBUF as the kernel reports it, bytes (CDC_F_RCVLIM);
					 * untrusted: it only ever limits the sender's own use */
	_Atomic uint32_t space_rung;	/* the sender's space_armed we last rang for */
	_Atomic uint64_t space_rung_ns;	/* ... when */
} __cacheline;

enum usmc_slot_state {			/* client line: the owner's slot allocator */
	SLOT_FREE = 0,
	SLOT_BUSY = 1,			/* a connection uses it */
	SLOT_DRAIN = 2,			/* client closed; waiting for the server to let go */
};

struct usmc_cdc_client {		/* written by the client (link group owner) */
	_Atomic uint32_t state;		/* enum usmc_slot_state */
	_Atomic uint32_t gen;		/* incremented each time the slot is reused */
	struct usmc_addr client;	/* 4-tuple, for the server to cross-check */
	struct usmc_addr server;
	uint32_t pid;
} __cacheline;

#define CDC_ANS_NONE	0
#define CDC_ANS_ACCEPT	1
#define CDC_ANS_DECLINE	2
#define CDC_ANSWER(gen, ans, reason) \
	(((uint64_t)(gen) << 32) | ((uint64_t)(ans) << 16) | (uint64_t)(reason))
#define CDC_ANS_GEN(w)		((uint32_t)((w) >> 32))
#define CDC_ANS_KIND(w)		((unsigned int)(((w) >> 16) & 0xffff))
#define CDC_ANS_REASON(w)	((unsigned int)((w) & 0xffff))

struct usmc_cdc_server {		/* written by the server */
	_Atomic uint64_t answer;	/* CDC_ANSWER(gen, accept/decline, reason) */
	_Atomic uint32_t released_gen;	/* server is done with this generation */
	uint32_t pid;
} __cacheline;

/* One connection's control block: eight cache lines, one writer each. */
struct usmc_cdc_ctrl {
	struct usmc_cdc_client c;
	struct usmc_cdc_server s;
	struct usmc_cdc_prod c2s_p;	/* client -> server ring */
	struct usmc_cdc_cons c2s_c;	/* (two lines) */
	struct usmc_cdc_prod s2c_p;	/* server -> client ring */
	struct usmc_cdc_cons s2c_c;
};

/*
 * A device whose memory the peer does not map (USMC_DEV_F_MAPPED clear)
 * keeps the peer's lines as copies that CDC messages update: every store
 * below is followed by CDC_MIRROR of the words it wrote, which hands them
 * to the device (dev.h publish).  Only dev_copy, in test builds, works that
 * way today; elsewhere the macro is empty and the stores are all there is.
 */
#ifdef USMC_TEST_DEVICES
extern _Atomic bool usmc_cdc_mirroring;		/* a link group without mapping exists here */
void usmc_cdc_mirror(const volatile void *word, size_t len);
#define CDC_MIRROR(w)							\
	do {								\
		if (unlikely(LOAD_RELAXED(&usmc_cdc_mirroring)))	\
			usmc_cdc_mirror((w), sizeof(*(w)));		\
	} while (0)
#else
#define CDC_MIRROR(w)	do { } while (0)
#endif

static inline void cdc_reset_prod(struct usmc_cdc_prod *p)
{
	STORE_RELAXED(&p->prod, 0);
	STORE_RELAXED(&p->skip_to, 0);
	STORE_RELAXED(&p->flags, 0);
	STORE_RELAXED(&p->space_armed, 0);
	STORE_RELAXED(&p->waiting, 0);
	STORE_RELAXED(&p->mig_from, 0);
	STORE_RELAXED(&p->data_rung, 0);
	STORE_RELAXED(&p->data_rung_ns, 0);
	CDC_MIRROR(p);
}

static inline void cdc_reset_cons(struct usmc_cdc_cons *c)
{
	STORE_RELAXED(&c->cons, 0);
	STORE_RELAXED(&c->flags, 0);
	STORE_RELAXED(&c->rcvbuf, 0);
	STORE_RELAXED(&c->data_armed, 0);
	STORE_RELAXED(&c->waiting, 0);
	STORE_RELAXED(&c->space_rung, 0);
	STORE_RELAXED(&c->space_rung_ns, 0);
	CDC_MIRROR(c);
}

/*
 * -- publishing ------------------------------------------------------------
 *
 * The only stores into a shared line (tests/test_static.py checks): a
 * device whose memory the peer does not map (RDMA) sends these, and only
 * these, to the peer's copy of the line.  Memory orders as the cursor
 * rules above say.
 */

/* A cursor after the bytes or the free space it covers (release). */
static inline void cdc_pub_prod(struct usmc_cdc_prod *p, uint64_t prod)
{
	STORE_RELEASE(&p->prod, prod);
	CDC_MIRROR(&p->prod);
}

static inline void cdc_pub_skip(struct usmc_cdc_prod *p, uint64_t skip)
{
	STORE_RELEASE(&p->skip_to, skip);
	CDC_MIRROR(&p->skip_to);
}

static inline void cdc_pub_cons(struct usmc_cdc_cons *c, uint64_t cons)
{
	STORE_RELEASE(&c->cons, cons);
	CDC_MIRROR(&c->cons);
}

/* Flags only ever go up; mo: the order the caller's protocol needs. */
static inline void cdc_prod_flags(struct usmc_cdc_prod *p, uint32_t f, memory_order mo)
{
	atomic_fetch_or_explicit(&p->flags, f, mo);
	CDC_MIRROR(&p->flags);
}

static inline void cdc_cons_flags(struct usmc_cdc_cons *c, uint32_t f, memory_order mo)
{
	atomic_fetch_or_explicit(&c->flags, f, mo);
	CDC_MIRROR(&c->flags);
}

/* CDC_F_MIGFROM's cursor, before the flag (migrate.c). */
static inline void cdc_pub_mig_from(struct usmc_cdc_prod *p, uint64_t from)
{
	STORE_RELAXED(&p->mig_from, from);
	CDC_MIRROR(&p->mig_from);
}

/* SO_RCVBUF as the kernel reports it, before CDC_F_RCVLIM. */
static inline void cdc_pub_rcvbuf(struct usmc_cdc_cons *c, uint32_t v)
{
	STORE_RELAXED(&c->rcvbuf, v);
	CDC_MIRROR(&c->rcvbuf);
}

/* Arm counters: the new value (cdc.c usmc_cdc_arm). */
static inline uint32_t cdc_arm_data(struct usmc_cdc_cons *c)
{
	uint32_t v = atomic_fetch_add_explicit(&c->data_armed, 1, memory_order_relaxed) + 1;

	CDC_MIRROR(&c->data_armed);
	return v;
}

static inline uint32_t cdc_arm_space(struct usmc_cdc_prod *p)
{
	uint32_t v = atomic_fetch_add_explicit(&p->space_armed, 1, memory_order_relaxed) + 1;

	CDC_MIRROR(&p->space_armed);
	return v;
}

static inline void cdc_waiting_add(_Atomic uint32_t *waiting, int delta)
{
	atomic_fetch_add(waiting, (uint32_t)delta);
	CDC_MIRROR(waiting);
}

/* Hint: our CPU + 1, written only when it changed. */
static inline void cdc_cpu_hint(_Atomic uint32_t *word, int cpu)
{
	if (LOAD_RELAXED(word) != (uint32_t)cpu + 1) {
		STORE_RELAXED(word, (uint32_t)cpu + 1);
		CDC_MIRROR(word);
	}
}

/* Server: the answer to a proposal (release: what it accepted is set up);
 * done with a slot generation. */
static inline void cdc_answer(struct usmc_cdc_server *s, uint64_t answer)
{
	STORE_RELEASE(&s->answer, answer);
	CDC_MIRROR(&s->answer);
}

static inline void cdc_release_gen(struct usmc_cdc_server *s, uint32_t gen)
{
	STORE_RELEASE(&s->released_gen, gen);
	CDC_MIRROR(&s->released_gen);
}

/* Client (link group owner): the slot allocator's words (lgr.c). */
static inline bool cdc_slot_move(struct usmc_cdc_client *c, uint32_t *from, uint32_t to)
{
	bool moved = atomic_compare_exchange_strong(&c->state, from, to);

	if (moved)
		CDC_MIRROR(&c->state);
	return moved;
}

/* Client: the connection a proposed slot is for, which the server checks
 * (af_usmc.c); server: who answered (accept.c).  Before the proposal and
 * the answer that publish them. */
static inline void cdc_slot_ids(struct usmc_cdc_client *c, const struct usmc_addr *client,
				const struct usmc_addr *server, uint32_t pid)
{
	c->client = *client;
	c->server = *server;
	c->pid = pid;
	CDC_MIRROR(&c->client);
	CDC_MIRROR(&c->server);
	CDC_MIRROR(&c->pid);
}

static inline void cdc_server_pid(struct usmc_cdc_server *s, uint32_t pid)
{
	s->pid = pid;
	CDC_MIRROR(&s->pid);
}

static inline void cdc_slot_gen(struct usmc_cdc_client *c, uint32_t gen)
{
	STORE_RELEASE(&c->gen, gen);
	CDC_MIRROR(&c->gen);
}

/* -- ring arithmetic ------------------------------------------------------ */

/*
 * First unread byte: cons, or the sender's rewind point if it lies between
 * cons and prod (a rewind only ever starts where the ring was empty, i.e.
 * at the reader's cons).
 */
static inline uint64_t ring_head(uint64_t cons, uint64_t skip_to, uint64_t prod)
{
	return skip_to > cons && skip_to <= prod ? skip_to : cons;
}

/* Readable bytes.  Precondition: cons <= prod, prod - cons <= size. */
static inline uint64_t ring_used(uint64_t prod, uint64_t cons)
{
	return prod - cons;
}

/* Free bytes.  Same precondition. */
static inline uint64_t ring_free(uint64_t prod, uint64_t cons, uint32_t size)
{
	return size - (prod - cons);
}

/*
 * Cursors count bytes from 0 and stay below 2^63 (decades of traffic on one
 * slot generation), so prod + size, ring_rewind() and every difference of
 * two cursors are exact.  A peer that sets one beyond breaks the rules.
 */
#define CDC_CURSOR_LIMIT	(1ULL << 63)

/* A cursor pair is sane: head <= prod <= head + size (head from ring_head()),
 * prod below CDC_CURSOR_LIMIT. */
static inline bool ring_valid(uint64_t prod, uint64_t head, uint32_t size)
{
	return prod >= head && prod - head <= size && prod < CDC_CURSOR_LIMIT;
}

/* A view from loaded cursors: its head, and whether they keep the rules. */
static inline bool ring_view(uint64_t cons, uint64_t skip_to, uint64_t prod, uint32_t size,
			     uint64_t *head)
{
	*head = ring_head(cons, skip_to, prod);
	return prod >= cons && ring_valid(prod, *head, size);
}

/* Sender, ring empty at prod: where the next byte goes after a rewind.
 * Precondition: prod < CDC_CURSOR_LIMIT (ring_valid()). */
static inline uint64_t ring_rewind(uint64_t prod, uint32_t size)
{
	return (prod + size - 1) & ~((uint64_t)size - 1);
}

/* Copy len bytes into the ring at cursor pos.  Precondition: len <= size. */
static inline void ring_put(uint8_t *ring, uint32_t size, uint64_t pos,
			    const void *src, size_t len)
{
	size_t off = (size_t)(pos & (size - 1)), n1 = MIN(len, size - off);

	memcpy(ring + off, src, n1);
	if (len > n1)
		memcpy(ring, (const uint8_t *)src + n1, len - n1);
}

/* Copy len bytes out of the ring from cursor pos.  Precondition: len <= size. */
static inline void ring_get(const uint8_t *ring, uint32_t size, uint64_t pos,
			    void *dst, size_t len)
{
	size_t off = (size_t)(pos & (size - 1)), n1 = MIN(len, size - off);

	memcpy(dst, ring + off, n1);
	if (len > n1)
		memcpy((uint8_t *)dst + n1, ring, len - n1);
}

/* Contiguous span at pos, at most len bytes (for read(2)/write(2) into the ring). */
static inline size_t ring_span(uint32_t size, uint64_t pos, size_t len)
{
	size_t off = (size_t)(pos & (size - 1));

	return MIN(len, size - off);
}

/* cdc.c: the doorbell protocol (arm, kick, ring) and the CPU hints. */
struct usmc_sock;
struct usmc_lgr;
#define USMC_WAIT_RX	1
#define USMC_WAIT_TX	2
/* Bump our arm counters for what (seq: their values, and our own ring
 * count), then the fence; the caller re-checks before it sleeps (wait.c). */
void usmc_cdc_arm(struct usmc_sock *sk, int what, uint32_t seq[3]);
/* Ring the peer if it armed for data (after we produced) or space (after we consumed). */
void usmc_kick_data(struct usmc_sock *sk);
void usmc_kick_space(struct usmc_sock *sk);
/* A wait on sk sleeps (delta 1) or is done (-1): kicks for its arms ring. */
void usmc_wait_count(struct usmc_sock *sk, int what, int delta);
/* Did a ring answer that arm (epoll: which connection a shared doorbell
 * woke)?  0: no, else when it was sent (CLOCK_MONOTONIC ns, 1: ours). */
uint64_t usmc_rung_since(struct usmc_sock *sk, int what, const uint32_t seq[3]);
/* Ring the peer whatever it armed for (reset, migration, a declined
 * proposal): every arm it has out counts as answered.  _lines: the same
 * given our two lines, the peer's two, and the peer's doorbell. */
void usmc_ring_peer(struct usmc_sock *sk);
void usmc_ring_lines(struct usmc_lgr *l, int bell, struct usmc_cdc_prod *my_p,
		     struct usmc_cdc_cons *my_c, struct usmc_cdc_cons *peer_c,
		     struct usmc_cdc_prod *peer_p);
/* Wake our own side's waiters (shutdown): they look at their flags. */
void usmc_ring_own(struct usmc_sock *sk);
/* CPU hints in our CDC lines, for the peer's spin decision. */
void usmc_publish_cpu(struct usmc_sock *sk, int cpu);
bool usmc_peer_on_cpu(struct usmc_sock *sk, int cpu);

#endif
