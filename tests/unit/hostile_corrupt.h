// SPDX-License-Identifier: MIT
/*
 * hostile_corrupt.h - t_hostile's corruption classes: their names and
 * kinds, the hostile process's view of a connection's link group, and
 * corrupt(), one application of a class (see t_hostile.c for what each
 * class does and what the victim must observe).
 *
 * Not a general header: it is included by t_hostile.c alone.  Its
 * functions are static on purpose: exactly one translation unit includes
 * it, and every one of them is used there.
 */
#ifndef HOSTILE_CORRUPT_H
#define HOSTILE_CORRUPT_H

#include "cdc.h"
#include "lgr.h"

#include "t_util.h"

#include <stdatomic.h>
#include <sys/syscall.h>

enum {
	C_RX_PROD_AHEAD, C_RX_PROD_BEHIND, C_TX_CONS_AHEAD, C_TX_CONS_BEHIND, C_OWN_PROD,
	C_OWN_CONS, C_SKIP_TO, C_HUGE, C_TRUNCATE, C_TCP_BYTES,
	C_GARBAGE, C_FLAGS, C_CTRL, C_HINTS, C_HEADER,
	C_RESET_PROBE,
	C_COUNT
};

static const struct {
	const char *name;
	bool protocol;		/* the victim must detect a protocol violation */
} classes[C_COUNT] = {
	[C_RX_PROD_AHEAD] = { "rx_prod_ahead", true },
	[C_RX_PROD_BEHIND] = { "rx_prod_behind", true },
	[C_TX_CONS_AHEAD] = { "tx_cons_ahead", true },
	[C_TX_CONS_BEHIND] = { "tx_cons_behind", true },
	/* The victim never reads its own cursor lines back (it keeps its
	 * own copies, sock.h): what the peer writes there misleads only
	 * the peer, so there is nothing to detect, and nothing may break. */
	[C_OWN_PROD] = { "own_prod", false },
	[C_OWN_CONS] = { "own_cons", false },
	[C_SKIP_TO] = { "skip_to", true },
	[C_HUGE] = { "huge", true },
	[C_TRUNCATE] = { "truncate", true },
	[C_TCP_BYTES] = { "tcp_bytes", true },
	[C_GARBAGE] = { "garbage", false },
	[C_FLAGS] = { "flags", false },
	[C_CTRL] = { "ctrl", false },
	[C_HINTS] = { "hints", false },
	[C_HEADER] = { "header", false },
	[C_RESET_PROBE] = { "reset_then_bad_prod", false },
};

/* What the victim tells the hostile process once it is on shared memory. */
struct ready {
	int32_t pid, fd;	/* the victim's end, for `usmc stat` */
};

struct hostile {
	int sv;			/* to the victim */
	int fd;			/* our end of the connection (through libusmc) */
	bool server;		/* we are the connection's server */
	uint64_t rng;
	uint8_t *base;		/* our own mapping of lg-<id>/mem */
	size_t len;
	int mem_fd, bell;
	uint32_t size;
	struct usmc_cdc_ctrl *c;
	/* the victim's lines, as the victim sees them */
	struct usmc_cdc_prod *v_rx_p, *v_tx_p;
	struct usmc_cdc_cons *v_rx_c, *v_tx_c;
	uint8_t *v_rx_ring;
	bool truncated;
	struct ready victim;
};

#define LD(p)		atomic_load_explicit((p), memory_order_acquire)
#define ST(p, v)	atomic_store_explicit((p), (v), memory_order_release)

static uint64_t rnd(struct hostile *h, uint64_t n)
{
	return n ? t_rand(&h->rng) % n : t_rand(&h->rng);
}

/* One application of the corruption (repeated: the victim rewrites its own
 * lines as it goes on working). */
static void corrupt(struct hostile *h, int cls, int iter)
{
	uint64_t sz = h->size;
	uint32_t i;

	switch (cls) {
	case C_RX_PROD_AHEAD:
		ST(&h->v_rx_p->prod, LD(&h->v_rx_c->cons) + sz + 1 + rnd(h, sz));
		break;
	case C_RX_PROD_BEHIND:
		ST(&h->v_rx_p->prod, LD(&h->v_rx_c->cons) - 1 - rnd(h, 4096));
		break;
	case C_TX_CONS_AHEAD:
		ST(&h->v_tx_c->cons, LD(&h->v_tx_p->prod) + 1 + rnd(h, sz));
		break;
	case C_TX_CONS_BEHIND:
		ST(&h->v_tx_c->cons, LD(&h->v_tx_p->prod) - sz - 1 - rnd(h, sz));
		break;
	case C_OWN_PROD:
		ST(&h->v_tx_p->prod, (1ULL << 62) + rnd(h, 1ULL << 40));
		break;
	case C_OWN_CONS:
		ST(&h->v_rx_c->cons, LD(&h->v_rx_p->prod) + 1 + rnd(h, sz));
		break;
	case C_SKIP_TO: {
		uint64_t c = LD(&h->v_rx_c->cons);

		ST(&h->v_rx_p->skip_to, c + 1);
		ST(&h->v_rx_p->prod, c + 2 + sz);
		break;
	}
	case C_HUGE:
		ST(&h->v_rx_p->prod, (1ULL << 63) + rnd(h, 1ULL << 20));
		break;
	case C_TRUNCATE:
		if (!h->truncated) {
			/* Nothing of ours may touch the mapping after this. */
			h->truncated = true;
			t_ok(ftruncate(h->mem_fd, rnd(h, 2) ? 4096 : 0));
		}
		break;
	case C_TCP_BYTES:
		if (!iter) {
			/* Past libusmc: straight onto the TCP connection. */
			static const char x = 'x';

			if (syscall(SYS_sendto, h->fd, &x, 1, MSG_NOSIGNAL, NULL, 0) != 1)
				t_fail("hostile: raw send: %s", strerror(errno));
		}
		break;
	case C_GARBAGE: {
		uint64_t c = LD(&h->v_rx_c->cons), p = LD(&h->v_rx_p->prod);
		uint32_t off = (uint32_t)rnd(h, 65536), len = (uint32_t)rnd(h, 4096);

		for (i = 0; i < len; i++)
			h->v_rx_ring[(off + i) & (h->size - 1)] = (uint8_t)rnd(h, 256);
		/* Within the rules: what is there now is "data". */
		if (p >= c && p - c < sz)
			ST(&h->v_rx_p->prod, p + MIN(rnd(h, 8192), sz - (p - c)));
		break;
	}
	case C_FLAGS: {
		static const uint32_t some[] = { CDC_F_DONE, CDC_F_CLOSED, CDC_F_MIGRATE,
						 CDC_F_DONE | CDC_F_CLOSED, 0x80000000u, 0 };
		uint32_t f = rnd(h, 4) ? some[rnd(h, ARRAY_LEN(some))] : (uint32_t)rnd(h, 0);

		ST(rnd(h, 2) ? &h->v_rx_p->flags : &h->v_tx_c->flags, f & ~CDC_F_ABORT);
		break;
	}
	case C_CTRL:
		switch (rnd(h, 6)) {
		case 0:
			ST(&h->c->c.gen, (uint32_t)rnd(h, 0));
			break;
		case 1:
			ST(&h->c->c.state, (uint32_t)rnd(h, 5));
			break;
		case 2:
			ST(&h->c->s.answer, rnd(h, 0));
			break;
		case 3:
			ST(&h->c->s.released_gen, (uint32_t)rnd(h, 0));
			break;
		case 4:
			for (i = 0; i < sizeof(h->c->c.client.a); i++)
				h->c->c.client.a[i] = (uint8_t)rnd(h, 256);
			h->c->c.server.port = (uint16_t)rnd(h, 65536);
			break;
		default:
			h->c->c.pid = h->c->s.pid = (uint32_t)rnd(h, 0);
			break;
		}
		break;
	case C_HINTS:
		ST(&h->v_rx_p->space_armed, (uint32_t)rnd(h, 0));
		ST(&h->v_rx_c->data_armed, (uint32_t)rnd(h, 0));
		ST(&h->v_tx_p->space_armed, (uint32_t)rnd(h, 0));
		ST(&h->v_tx_c->data_armed, (uint32_t)rnd(h, 0));
		ST(&h->v_rx_p->cpu, (uint32_t)rnd(h, 0));
		ST(&h->v_tx_c->waiting, (uint32_t)rnd(h, 0));
		break;
	case C_HEADER:
		for (i = 0; i < 4; i++)
			h->base[rnd(h, sizeof(struct usmc_lgr_hdr))] = (uint8_t)rnd(h, 256);
		break;
	case C_RESET_PROBE:
		if (!iter)
			atomic_fetch_or(&h->v_rx_p->flags, CDC_F_ABORT);
		break;
	}
}

#endif /* HOSTILE_CORRUPT_H */
