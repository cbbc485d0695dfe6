// SPDX-License-Identifier: MIT
/*
 * fuzz_cdc.c - the data path against a peer that writes anything into the
 * control block and the rings.
 *
 * One connection per input, driven through the library's real entry points
 * (usmc_rx, usmc_tx, usmc_rx_to_fd, usmc_tx_from_fd, usmc_sock_poll,
 * usmc_sock_inq, usmc_sock_refresh, usmc_sock_shutdown, the close
 * protocol, usmc_check_tcp).  The rings and the control block are separate
 * heap blocks, so ASan reports any access outside them.  Between calls the
 * input either plays an honest peer (produce, consume, rewind) or writes
 * raw values into any field of the control block or any byte of a ring:
 * cursors far ahead, behind, backwards, past 2^64, skip_to anywhere, flags,
 * answers, generations.
 *
 * Properties checked after every call (cdc.h is the specification):
 *   - bytes handed to the application come from the ring at the head the
 *     cursors named, and never more than prod - head of a valid view;
 *   - the sender writes only at its producer cursor, never over unread
 *     bytes [head, prod), never more than the free space, and publishes
 *     exactly what it wrote;
 *   - an invalid view (cons > prod, prod - head > size) on an established
 *     connection delivers and writes nothing and resets the connection with
 *     reason protocol (ECONNRESET), unless it was already reset;
 *   - poll reports an invalid view as readable / writable, so a waiting
 *     application comes to read the error;
 *   - a connection moved to TCP (CDC_F_MIGRATE, decline) re-sends at most
 *     one ring of bytes on TCP.
 *
 * Input: a header (role, ring size, mode, cursor base, backing), then ops.
 */
#include "fuzz.h"

#include "af_usmc.h"
#include "close.h"
#include "conn.h"
#include "lgr.h"
#include "rx.h"
#include "sock.h"
#include "tcp.h"
#include "tx.h"
#include "wait.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define MAX_OPS		96
#define MAX_RING	32768u

static struct usmc_sock *sk;
static struct usmc_lgr lg;
static struct usmc_clc_ln *ln;	/* a proposing client withdraws here */
static int mem_fd, src_fd, pipe_fd[2];
/* The link group's page 0 (lgr.h): its sleepers and spared words, which
 * a kick reads and bumps; the peer's sleepers word comes from the input. */
static uint8_t base_dummy[4096] __attribute__((aligned(64)));
static uint8_t src_data[MAX_RING * 2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t i;

	(void)argc;
	(void)argv;
	fz_setup(NULL);
	/* sendfile's EPIPE raises SIGPIPE, as the kernel does. */
	signal(SIGPIPE, SIG_IGN);
	sk = usmc_sock_new(-1, SK_CONN, &usmc_sock_ops);
	if (!sk || usmc_clc_ln_create(&ln))
		abort();
	mem_fd = memfd_create("fuzz-lgr", MFD_CLOEXEC);
	src_fd = memfd_create("fuzz-src", MFD_CLOEXEC);
	for (i = 0; i < sizeof(src_data); i++)
		src_data[i] = (uint8_t)(i * 7 + 3);
	if (mem_fd < 0 || src_fd < 0 || pwrite(src_fd, src_data, sizeof(src_data), 0) < 0 ||
	    pipe2(pipe_fd, O_NONBLOCK | O_CLOEXEC))
		abort();
	return 0;
}

/* What the reader may take: the cursor rules of cdc.h, independently. */
struct view {
	uint64_t cons, skip, prod, head;
	bool ok;
};

/*
 * A direction's cursors: the peer's from its line; the victim's own from
 * the copy it keeps (sock.h) when the victim's view is wanted, since what
 * the hostile peer scribbles on the victim's lines must not matter to it.
 * The honest peer reads the lines.
 */
static struct view view_at(const struct usmc_cdc_prod *p, const struct usmc_cdc_cons *c,
			   bool victim)
{
	struct view v;

	v.cons = LOAD_RELAXED(&c->cons);
	v.prod = LOAD_RELAXED(&p->prod);
	v.skip = LOAD_RELAXED(&p->skip_to);
	if (victim && c == sk->rx_c)
		v.cons = LOAD_RELAXED(&sk->sh->rx_cons);
	if (victim && p == sk->tx_p) {
		v.prod = LOAD_RELAXED(&sk->sh->tx_prod);
		v.skip = LOAD_RELAXED(&sk->sh->tx_skip);
	}
	v.head = ring_head(v.cons, v.skip, v.prod);
	v.ok = v.prod >= v.cons && v.prod >= v.head && v.prod - v.head <= sk->size &&
	       v.prod < CDC_CURSOR_LIMIT;
	return v;
}

static struct view view_of(const struct usmc_cdc_prod *p, const struct usmc_cdc_cons *c)
{
	return view_at(p, c, true);
}

static struct view peer_view(const struct usmc_cdc_prod *p, const struct usmc_cdc_cons *c)
{
	return view_at(p, c, false);
}

/*
 * A proposed client (sock.h usmc_unproven) looks at none of the peer's
 * lines until its accept is proven: it sends from its first byte without
 * reuse (cursor 0) and reads nothing.  Taken before a call; the mode after
 * it says whether the call used it (a call looks at the answer before it
 * touches the ring).
 */
static struct view unproven_view(const struct view *v, bool tx)
{
	struct view u = *v;

	u.cons = u.head = tx ? 0 : LOAD_RELAXED(&sk->sh->rx_cons);
	if (!tx)
		u.prod = u.head;
	u.ok = true;
	return u;
}

static void if_unproven(struct view *v, const struct view *u)
{
	if (sk_mode(sk) == USMC_MODE_PROPOSED)
		*v = *u;
}

static uint32_t mask(void)
{
	return sk->size - 1;
}

/*
 * The view a send starts from: the cons the sender loaded last, when the
 * lazy rule of sock.h lets it (a performance choice, so the rule itself is
 * not second-guessed here), else the line as it is.  A cached view must
 * pass the same checks as a fresh one.
 */
static struct view sender_view(const struct view *fresh, size_t want)
{
	struct view u = *fresh;

	u.cons = sk->sh->tx_cons;
	u.head = ring_head(u.cons, u.skip, u.prod);
	if (!usmc_tx_lazy_ok(u.prod, u.head, u.cons, sk->sh->tx_cons_at,
			     LOAD_RELAXED(&sk->sh->rx_cons) != sk->sh->tx_cons_rx, sk->size, want))
		return *fresh;
	u.ok = u.prod >= u.cons && u.prod >= u.head && u.prod - u.head <= sk->size &&
	       u.prod < CDC_CURSOR_LIMIT;
	FZ_CHECK(u.ok, "cached send view taken but invalid (cons %#llx prod %#llx)",
		 (unsigned long long)u.cons, (unsigned long long)u.prod);
	return u;
}

/* ---- the connection ------------------------------------------------------ */

struct conn {
	struct usmc_cdc_ctrl *ctrl;
	uint8_t *rx_ring, *tx_ring, *shadow;
	int tcp[2];
	uint64_t tcp_out;	/* bytes the victim sent on "TCP" (migration) */
	uint32_t tx_seq;	/* pattern position of the next application write */
};

static void conn_setup(struct conn *c, struct fz *f)
{
	uint8_t hdr = fz_u8(f), hw = fz_u8(f);
	uint32_t size = 4096u << ((hdr >> 1) & 3);
	uint64_t base = 0;
	uint32_t i;

	if (hdr & 0x20)
		base = fz_u64(f);
	c->ctrl = aligned_alloc(64, sizeof(*c->ctrl));
	c->rx_ring = malloc(size);
	c->tx_ring = malloc(size);
	c->shadow = malloc(size);
	if (!c->ctrl || !c->rx_ring || !c->tx_ring || !c->shadow ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, c->tcp))
		abort();
	memset(c->ctrl, 0, sizeof(*c->ctrl));
	for (i = 0; i < size; i++) {
		c->rx_ring[i] = (uint8_t)(i * 13 + 1);
		c->tx_ring[i] = (uint8_t)(i * 29 + 5);
	}
	c->tcp_out = 0;
	c->tx_seq = 0;

	memset(&lg, 0, sizeof(lg));
	lg.id = 0x1234;
	lg.dev = &usmc_dev_loopback;
	lg.owner = !(hdr & 1);
	lg.nslots = 1;
	lg.ring_size = size;
	lg.mem_fd = hdr & 0x40 ? -1 : mem_fd;	/* -1: backing fails (tmpfs full) */
	lg.guard = -1;
	memset(base_dummy, 0, sizeof(base_dummy));
	lg.base = lg.dmb = base_dummy;
	/* A peer asleep or awake: whether our kicks ring or are spared. */
	STORE_RELAXED(usmc_lgr_sleepers(&lg, usmc_lgr_side(&lg) ^ 1), (hdr >> 7) & 1);
	lg.ctrl = c->ctrl;
	lg.refs = 1;

	sk->kind = SK_CONN;
	sk->fd0 = c->tcp[0];
	sk->role = hdr & 1 ? 'S' : 'C';
	sk->lgr = &lg;
	sk->slot = 0;
	sk->gen = 1 + fz_u8(f);
	sk->size = size;
	sk->ctrl = c->ctrl;
	if (sk->role == 'C') {
		sk->tx_p = &c->ctrl->c2s_p;
		sk->tx_c = &c->ctrl->c2s_c;
		sk->rx_p = &c->ctrl->s2c_p;
		sk->rx_c = &c->ctrl->s2c_c;
	} else {
		sk->tx_p = &c->ctrl->s2c_p;
		sk->tx_c = &c->ctrl->s2c_c;
		sk->rx_p = &c->ctrl->c2s_p;
		sk->rx_c = &c->ctrl->c2s_c;
	}
	sk->tx_ring = c->tx_ring;
	sk->rx_ring = c->rx_ring;
	sk->bell_own = sk->bell_peer = -1;
	sk->st = NULL;
	sk->ln = ln;
	sk->migrate_pos = 0;
	sk->tx_done = false;
	sk->in_nested = false;
	c->ctrl->c.gen = sk->gen;
	c->ctrl->c.state = SLOT_BUSY;
	STORE_RELAXED(&sk->tx_p->prod, base);
	STORE_RELAXED(&sk->tx_p->skip_to, base);
	STORE_RELAXED(&sk->tx_c->cons, base);
	STORE_RELAXED(&sk->rx_p->prod, base);
	STORE_RELAXED(&sk->rx_p->skip_to, base);
	STORE_RELAXED(&sk->rx_c->cons, base);
	sk->sh->tx_cons = sk->sh->tx_cons_at = sk->sh->tx_cons_rx = base;	/* the sender's last look */
	STORE_RELAXED(&sk->sh->tx_prod, base);	/* its own cursors (af_usmc.c) */
	STORE_RELAXED(&sk->sh->tx_skip, base);
	STORE_RELAXED(&sk->sh->rx_cons, base);

	/* Fork-shared half: fresh for each connection.  Non-blocking, so no
	 * call ever sleeps (splice/sendfile look at the socket flag only). */
	STORE_RELAXED(&sk->sh->flags, SKF_NONBLOCK);
	STORE_RELAXED(&sk->sh->abort, USMC_A_NONE);
	STORE_RELAXED(&sk->sh->reason, USMC_R_NONE);
	sk->sh->data_rung = sk->sh->space_rung = 0;
	STORE_RELAXED(&sk->sh->tx_hw, hw ? (uint32_t)(((uint64_t)size * hw) >> 8) : size);
	STORE_RELAXED(&sk->sh->tx_stuck, 0);
	/* The client may still be waiting for the server's answer. */
	sk_set_mode(sk, sk->role == 'C' && (hdr & 0x18) == 0x18 ? USMC_MODE_PROPOSED :
			USMC_MODE_SMCD);
}

static void conn_teardown(struct conn *c)
{
	close(c->tcp[0]);
	close(c->tcp[1]);
	free(c->ctrl);
	free(c->rx_ring);
	free(c->tx_ring);
	free(c->shadow);
	sk->lgr = NULL;
	sk->ctrl = NULL;
	sk->tx_p = sk->rx_p = NULL;
	sk->tx_c = sk->rx_c = NULL;
	sk->tx_ring = sk->rx_ring = NULL;
	sk_set_mode(sk, USMC_MODE_NONE);
}

/* Whatever the victim sent on TCP: at most one ring's worth re-sent by a
 * move, and one ring's worth of its first send to a peer that is gone
 * (tx.c tx_to_gone), ever. */
static void drain_tcp(struct conn *c)
{
	uint8_t buf[65536];
	ssize_t n;

	while ((n = recv(c->tcp[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		c->tcp_out += (uint64_t)n;
	FZ_CHECK(c->tcp_out <= 2ULL * sk->size, "%llu bytes sent on TCP from a %u-byte ring",
		 (unsigned long long)c->tcp_out, sk->size);
}

/* ---- the honest peer ------------------------------------------------------ */

static void peer_produce(struct conn *c, struct fz *f)
{
	struct view v = peer_view(sk->rx_p, sk->rx_c);
	uint32_t n = fz_u16(f) % (sk->size + 1);
	uint64_t prod = v.prod;

	if (!v.ok)
		return;
	if (v.head == prod && (prod & mask()) && (n & 1)) {
		prod = ring_rewind(prod, sk->size);
		STORE_RELEASE(&sk->rx_p->skip_to, prod);
		v.head = prod;
	}
	n = (uint32_t)MIN((uint64_t)n, sk->size - (prod - v.head));
	ring_put(c->rx_ring, sk->size, prod, src_data + (prod & mask()), n);
	STORE_RELEASE(&sk->rx_p->prod, prod + n);
}

static void peer_consume(struct fz *f)
{
	struct view v = peer_view(sk->tx_p, sk->tx_c);
	uint32_t n = fz_u16(f);

	if (!v.ok)
		return;
	n = (uint32_t)MIN((uint64_t)n, v.prod - v.head);
	STORE_RELEASE(&sk->tx_c->cons, v.head + n);
}

/* ---- the hostile peer ----------------------------------------------------- */

static _Atomic uint64_t *field64(struct conn *c, unsigned int k)
{
	switch (k) {
	case 0: return &sk->rx_p->prod;
	case 1: return &sk->rx_p->skip_to;
	case 2: return &sk->rx_c->cons;
	case 3: return &sk->tx_p->prod;
	case 4: return &sk->tx_p->skip_to;
	case 5: return &sk->tx_c->cons;
	default: return &c->ctrl->s.answer;
	}
}

static _Atomic uint32_t *field32(struct conn *c, unsigned int k)
{
	switch (k) {
	case 0: return &sk->rx_p->flags;
	case 1: return &sk->rx_c->flags;
	case 2: return &sk->tx_p->flags;
	case 3: return &sk->tx_c->flags;
	case 4: return &c->ctrl->c.gen;
	case 5: return &c->ctrl->c.state;
	case 6: return &c->ctrl->s.released_gen;
	case 7: return &sk->rx_p->space_armed;
	case 8: return &sk->rx_c->data_armed;
	case 9: return &sk->tx_p->cpu;
	default: return &sk->tx_c->waiting;
	}
}

static void hostile_set64(struct conn *c, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	_Atomic uint64_t *fld = field64(c, sel % 7);
	uint64_t cur = LOAD_RELAXED(fld), v;

	if (sel % 7 == 6) {
		/* An answer: this generation or another, any kind, any reason. */
		uint8_t g = fz_u8(f);

		STORE_RELEASE(fld, CDC_ANSWER(g & 1 ? sk->gen : fz_u32(f), fz_u8(f) % 4, fz_u16(f)));
		return;
	}
	switch ((sel >> 3) % 6) {
	case 0:		/* anything */
		v = fz_u64(f);
		break;
	case 1:		/* near where it was */
		v = cur + (uint64_t)(int64_t)(int16_t)fz_u16(f);
		break;
	case 2:		/* whole rings ahead or behind */
		v = cur + (uint64_t)(int64_t)(int8_t)fz_u8(f) * sk->size;
		break;
	case 3:		/* relative to the other cursor of the direction */
		v = (sel % 7 < 3 ? LOAD_RELAXED(&sk->rx_c->cons) : LOAD_RELAXED(&sk->tx_c->cons)) +
		    (uint64_t)(int64_t)(int32_t)fz_u32(f);
		break;
	case 4:		/* relative to the producer */
		v = (sel % 7 < 3 ? LOAD_RELAXED(&sk->rx_p->prod) : LOAD_RELAXED(&sk->tx_p->prod)) +
		    (uint64_t)(int64_t)(int32_t)fz_u32(f);
		break;
	default:	/* near the top of the 64-bit range */
		v = UINT64_MAX - fz_u16(f);
		break;
	}
	STORE_RELEASE(fld, v);
}

static void hostile_set32(struct conn *c, struct fz *f)
{
	uint8_t sel = fz_u8(f);

	STORE_RELEASE(field32(c, sel % 11), sel & 0x80 ? fz_u32(f) : fz_u8(f) & 0xf);
}

static void hostile_garbage(struct conn *c, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	uint8_t *ring = sel & 1 ? c->rx_ring : c->tx_ring;
	uint32_t off = fz_u16(f) & mask(), len = fz_u8(f);

	len = MIN(len, sk->size - off);

	fz_bytes(f, ring + off, len);
}

/* ---- the application ------------------------------------------------------ */

static void check_rx_bytes(struct conn *c, const struct view *v, const uint8_t *buf, size_t n)
{
	size_t i;

	FZ_CHECK(v->ok, "%zu bytes delivered from an invalid view (cons %#llx skip %#llx prod %#llx)",
		 n, (unsigned long long)v->cons, (unsigned long long)v->skip,
		 (unsigned long long)v->prod);
	FZ_CHECK(n <= v->prod - v->head, "%zu bytes delivered, %llu readable", n,
		 (unsigned long long)(v->prod - v->head));
	for (i = 0; i < n; i++)
		FZ_CHECK(buf[i] == c->rx_ring[(v->head + i) & mask()],
			 "byte %zu is not the ring's byte at head", i);
}

/* An established connection with a broken view must reset, as cdc.h says. */
static void check_reset(uint32_t flags0, ssize_t r, const char *what)
{
	FZ_CHECK(r <= 0, "%s returned %zd on an invalid view", what, r);
	FZ_CHECK(sk_flag(sk, SKF_ABORTED), "%s: invalid view, connection not reset", what);
	if (!(flags0 & SKF_ABORTED))
		FZ_CHECK(LOAD_RELAXED(&sk->sh->abort) == USMC_A_PROTOCOL,
			 "%s: invalid view reset with reason %u", what,
			 LOAD_RELAXED(&sk->sh->abort));
}

static bool strict_mode(void)
{
	return sk_mode(sk) == USMC_MODE_SMCD && !(LOAD_RELAXED(&sk->tx_c->flags) & CDC_F_MIGRATE);
}

static void app_rx(struct conn *c, struct fz *f)
{
	static const int fl[] = { 0, MSG_PEEK, MSG_WAITALL, MSG_PEEK | MSG_WAITALL };
	uint8_t sel = fz_u8(f);
	size_t total = fz_u16(f) % (2 * sk->size + 2), cut = total ? fz_u16(f) % (total + 1) : 0;
	uint8_t *buf = malloc(total + 1);
	struct iovec iov[2] = { { buf, cut }, { buf + cut, total - cut } };
	struct view v = view_of(sk->rx_p, sk->rx_c), pv = unproven_view(&v, false);
	uint32_t flags0 = LOAD_RELAXED(&sk->sh->flags);
	bool strict = strict_mode(), peek = fl[sel & 3] & MSG_PEEK;
	ssize_t r;

	r = usmc_rx(sk, c->tcp[0], iov, sel & 4 ? 2 : 1, fl[sel & 3] | MSG_DONTWAIT);
	if_unproven(&v, &pv);
	if (!(sel & 4))
		total = cut;
	FZ_CHECK(r == USMC_PASS || r <= (ssize_t)total, "read %zd of %zu", r, total);
	if (r > 0) {
		check_rx_bytes(c, &v, buf, (size_t)r);
		if (!peek)
			FZ_CHECK(LOAD_RELAXED(&sk->rx_c->cons) == v.head + (uint64_t)r &&
				 LOAD_RELAXED(&sk->sh->rx_cons) == v.head + (uint64_t)r,
				 "cons not advanced by what was read (line and copy)");
	}
	if (strict && !v.ok)
		check_reset(flags0, r, "recv");
	free(buf);
}

static void app_splice(struct conn *c, struct fz *f)
{
	uint8_t buf[65536];
	struct view v = view_of(sk->rx_p, sk->rx_c), pv = unproven_view(&v, false);
	uint32_t flags0 = LOAD_RELAXED(&sk->sh->flags);
	bool strict = strict_mode();
	ssize_t r, n;

	r = usmc_rx_to_fd(sk, c->tcp[0], pipe_fd[1], fz_u16(f), SPLICE_F_NONBLOCK);
	if_unproven(&v, &pv);
	n = read(pipe_fd[0], buf, sizeof(buf));
	if (n < 0)
		n = 0;
	FZ_CHECK(r == USMC_PASS || n == (r > 0 ? r : 0), "splice returned %zd, pipe got %zd", r, n);
	if (n > 0)
		check_rx_bytes(c, &v, buf, (size_t)n);
	if (strict && !v.ok)
		check_reset(flags0, r, "splice");
}

/*
 * After a send of any kind: the sender wrote only at its producer cursor
 * (after a rewind: at the rewind point), never over unread bytes, at most
 * the free space, exactly the application's bytes, and published exactly
 * what it wrote.
 */
static void check_tx(struct conn *c, const struct view *v, const struct view *fresh,
		     uint32_t flags0, bool strict, size_t total, ssize_t r, const uint8_t *data,
		     const char *what)
{
	uint64_t p1 = LOAD_RELAXED(&sk->sh->tx_prod), start = v->prod, w, i;
	/* Unread bytes are the fresh view's; an old cons only understates. */
	uint64_t head = fresh->ok && fresh->head > v->head ? fresh->head : v->head;
	bool empty = v->head == v->prod || (fresh->ok && fresh->head == fresh->prod);

	if (p1 == v->prod) {
		FZ_CHECK(!memcmp(c->shadow, c->tx_ring, sk->size), "%s: ring written, prod kept", what);
	} else {
		FZ_CHECK(v->ok || fresh->ok, "%s: wrote through an invalid view", what);
		if (!fresh->ok) {
			/*
			 * The peer's cons already breaks the rules, and the send
			 * started from the one loaded earlier: a look at the line
			 * mid-call, after some bytes moved prod, may find it
			 * "valid" again (the peer spoils only its own stream).
			 * Still: in bounds (ASan), no more than was asked.
			 */
			FZ_CHECK(r <= (ssize_t)total, "%s: returned %zd of %zu", what, r, total);
			goto reset;
		}
		if (v->skip > v->prod) {
			/*
			 * A rewind point ahead of prod: only a peer writing into
			 * our own producer line makes one.  Once the sender's prod
			 * passes it, the rules declare [cons, skip_to) "not data"
			 * and the sender may reuse it: the peer spoils only its
			 * own stream (and a rewind may follow mid-call).  Still:
			 * in bounds (ASan), no more than was asked.
			 */
			FZ_CHECK(r <= (ssize_t)total, "%s: returned %zd of %zu", what, r, total);
			goto reset;
		}
		/* A rewind, seen in skip_to: only over a ring found empty (by
		 * the view the send started from, or the fresh one it loads
		 * when that leaves no room); and one it found empty it must. */
		if (LOAD_RELAXED(&sk->sh->tx_skip) != v->skip ||
		    (v->ok && v->head == v->prod && (v->prod & mask()))) {
			start = head = ring_rewind(v->prod, sk->size);
			FZ_CHECK(empty && (v->prod & mask()), "%s: rewind over unread bytes", what);
			FZ_CHECK(LOAD_RELAXED(&sk->tx_p->skip_to) == start &&
				 LOAD_RELAXED(&sk->sh->tx_skip) == start, "%s: rewind unpublished", what);
		}
		FZ_CHECK(LOAD_RELAXED(&sk->tx_p->prod) == p1, "%s: prod %#llx kept, line says %#llx",
			 what, (unsigned long long)p1,
			 (unsigned long long)LOAD_RELAXED(&sk->tx_p->prod));
		w = p1 - start;
		FZ_CHECK(w <= sk->size && p1 - head <= sk->size,
			 "%s: prod %#llx beyond the free space (head %#llx)", what,
			 (unsigned long long)p1, (unsigned long long)head);
		FZ_CHECK(r == (ssize_t)w || (!w && r < 0), "%s: returned %zd, published %llu", what,
			 r, (unsigned long long)w);
		for (i = 0; i < w; i++)
			FZ_CHECK(c->tx_ring[(start + i) & mask()] == data[i], "%s: byte %llu wrong", what,
				 (unsigned long long)i);
		/* Everything else, unread bytes included, is untouched. */
		for (i = w; i < sk->size; i++)
			FZ_CHECK(c->tx_ring[(start + i) & mask()] == c->shadow[(start + i) & mask()],
				 "%s: stray write at ring offset %llu", what,
				 (unsigned long long)((start + i) & mask()));
	}
reset:
	/* (A zero-length send looks at nothing, as with TCP.) */
	if (strict && total && !v->ok && !(flags0 & (SKF_SHUT_WR | SKF_TCP_EOF)) &&
	    !(LOAD_RELAXED(&sk->tx_c->flags) & (CDC_F_ABORT | CDC_F_CLOSED)))
		check_reset(flags0, r, what);
}

static void app_tx(struct conn *c, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	size_t total = fz_u16(f) % (2 * sk->size + 2), cut = total ? fz_u16(f) % (total + 1) : 0;
	uint8_t *buf = malloc(total + 1);
	struct iovec iov[2] = { { buf, cut }, { buf + cut, total - cut } };
	size_t want = sel & 1 ? total : cut;
	struct view v = view_of(sk->tx_p, sk->tx_c), u = sender_view(&v, want);
	struct view pv = unproven_view(&v, true);
	uint32_t flags0 = LOAD_RELAXED(&sk->sh->flags);
	bool strict = strict_mode();
	ssize_t r;
	size_t i;

	for (i = 0; i < total; i++)
		buf[i] = (uint8_t)(c->tx_seq + i) ^ 0xa5;
	memcpy(c->shadow, c->tx_ring, sk->size);
	r = usmc_tx(sk, c->tcp[0], iov, sel & 1 ? 2 : 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	if_unproven(&v, &pv);
	if_unproven(&u, &pv);
	if (r > 0)
		c->tx_seq += (uint32_t)r;
	check_tx(c, &u, &v, flags0, strict, want, r, buf, "send");
	free(buf);
}

static void app_sendfile(struct conn *c, struct fz *f)
{
	off_t off = fz_u16(f) % MAX_RING, off0 = off;
	size_t len = fz_u16(f) % (2 * sk->size + 2);
	struct view v = view_of(sk->tx_p, sk->tx_c), pv = unproven_view(&v, true);
	uint32_t flags0 = LOAD_RELAXED(&sk->sh->flags);
	bool strict = strict_mode();
	ssize_t r;

	memcpy(c->shadow, c->tx_ring, sk->size);
	r = usmc_tx_from_fd(sk, c->tcp[0], src_fd, &off, len, false);
	if_unproven(&v, &pv);
	if (r > 0 && LOAD_RELAXED(&sk->sh->tx_prod) != v.prod)
		FZ_CHECK(off == off0 + r, "sendfile: offset moved %lld for %zd bytes",
			 (long long)(off - off0), r);
	check_tx(c, &v, &v, flags0, strict, len, r, src_data + off0, "sendfile");
}

static void app_poll(void)
{
	struct view rv = view_of(sk->rx_p, sk->rx_c), tv = view_of(sk->tx_p, sk->tx_c);
	bool strict = strict_mode() && !sk_flag(sk, SKF_CONNECTING);
	unsigned int ev = usmc_sock_poll(sk);
	int inq = usmc_sock_inq(sk);

	if (strict && !rv.ok)
		FZ_CHECK(ev & POLLIN, "invalid receive view not readable (%#x)", ev);
	if (strict && !tv.ok)
		FZ_CHECK(ev & POLLOUT, "invalid send view not writable (%#x)", ev);
	FZ_CHECK(inq >= 0 && (uint32_t)inq <= sk->size, "FIONREAD %d", inq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int trace = -1;
	struct fz f = { data, size };
	struct conn c;
	int ops = 0;
	char b;

	if (trace < 0)
		trace = getenv("FUZZ_TRACE") != NULL;
	conn_setup(&c, &f);
	if (trace)
		fprintf(stderr, "role %c ring %u mode %u hw %u\n", sk->role, sk->size, sk_mode(sk),
			LOAD_RELAXED(&sk->sh->tx_hw));
	while (fz_more(&f) && ops++ < MAX_OPS) {
		uint8_t op = fz_u8(&f) % 16;

		if (trace)
			fprintf(stderr, "op %2u  rx %#llx/%#llx/%#llx f%#x  tx %#llx/%#llx/%#llx f%#x  "
				"mode %u abort %u\n", op,
				(unsigned long long)LOAD_RELAXED(&sk->rx_c->cons),
				(unsigned long long)LOAD_RELAXED(&sk->rx_p->skip_to),
				(unsigned long long)LOAD_RELAXED(&sk->rx_p->prod),
				LOAD_RELAXED(&sk->rx_p->flags),
				(unsigned long long)LOAD_RELAXED(&sk->tx_c->cons),
				(unsigned long long)LOAD_RELAXED(&sk->tx_p->skip_to),
				(unsigned long long)LOAD_RELAXED(&sk->tx_p->prod),
				LOAD_RELAXED(&sk->tx_c->flags), sk_mode(sk),
				LOAD_RELAXED(&sk->sh->abort));
		switch (op) {
		case 0:
		case 1:
			peer_produce(&c, &f);
			break;
		case 2:
			peer_consume(&f);
			break;
		case 3:
		case 4:
			hostile_set64(&c, &f);
			break;
		case 5:
			hostile_set32(&c, &f);
			break;
		case 6:
			hostile_garbage(&c, &f);
			break;
		case 7:
		case 8:
			app_rx(&c, &f);
			break;
		case 9:
			app_tx(&c, &f);
			break;
		case 10:
			app_splice(&c, &f);
			break;
		case 11:
			app_sendfile(&c, &f);
			break;
		case 12:
			app_poll();
			break;
		case 13:
			switch (fz_u8(&f) % 4) {
			case 0:
				usmc_sock_refresh(sk, c.tcp[0]);
				break;
			case 1:
				usmc_sock_shutdown(sk, c.tcp[0], fz_u8(&f) % 3);
				break;
			case 2:
				usmc_conn_close_protocol(sk);
				break;
			default:
				usmc_sock_check_reset(sk);
				break;
			}
			break;
		case 14:
			/* The peer talks on TCP, or closes it. */
			if (fz_u8(&f) & 1) {
				b = 'x';
				(void)send(c.tcp[1], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
			} else {
				shutdown(c.tcp[1], SHUT_WR);
			}
			usmc_check_tcp(sk, c.tcp[0]);
			break;
		default:
			app_poll();
			app_rx(&c, &f);
			app_tx(&c, &f);
			break;
		}
		drain_tcp(&c);
	}
	conn_teardown(&c);
	return 0;
}
