// SPDX-License-Identifier: MIT
/*
 * t_ring.c - the ring and cursor helpers of cdc.h against a reference model.
 *
 * No preload needed: this only includes src/cdc.h.  Checks, with a fixed
 * seed and thousands of random cases each:
 *   ring_put / ring_get     wraparound at random offsets and lengths, bytes
 *                           outside the copied span untouched
 *   ring_span               contiguous part at a position
 *   ring_used / ring_free   plain cursor differences
 *   ring_valid              head <= prod <= head + size, for arbitrary pairs
 *   ring_head               skip_to counts only inside (cons, prod]
 *   ring_rewind             next multiple of size at or after prod
 *   a producer/consumer simulation with rewinds (only when the ring is
 *   empty): every byte arrives in order, unread bytes are never overwritten,
 *   the first byte after a rewind sits at ring offset 0.
 *
 * usage: t_ring [cases]   (default 20000, fewer under sanitizers; T_SEED sets the seed)
 */
#include "cdc.h"
#include "t_util.h"

static uint64_t seed;

/* Power-of-two ring sizes, mostly small so wraps are frequent. */
static uint32_t rand_size(void)
{
	return 1u << t_rand_range(&seed, 4, 16);
}

/* A cursor: small, or large (as after terabytes of traffic). */
static uint64_t rand_cursor(void)
{
	switch (t_rand(&seed) % 4) {
	case 0:
		return t_rand(&seed) % 1024;
	case 1:
		return t_rand(&seed) % (1ULL << 32);
	case 2:
		return (1ULL << 62) + t_rand(&seed) % (1ULL << 40);
	default:
		return t_rand(&seed) >> 2;
	}
}

static void check_put_get(int cases)
{
	static uint8_t ring[1 << 16], model[1 << 16], src[1 << 16], dst[1 << 16 | 64];
	int i;

	for (i = 0; i < cases; i++) {
		uint32_t size = rand_size(), j;
		uint64_t pos = rand_cursor();
		size_t len, k, span;

		switch (t_rand(&seed) % 4) {
		case 0:
			len = size;
			break;
		case 1:
			len = t_rand(&seed) % 4;
			break;
		default:
			len = t_rand(&seed) % (size + 1);
			break;
		}
		/* Force some exact-edge cases. */
		if (i % 7 == 0)
			pos = (pos & ~((uint64_t)size - 1)) + size - len % (size + 1);
		for (j = 0; j < size; j++)
			ring[j] = model[j] = (uint8_t)t_rand(&seed);
		for (k = 0; k < len; k++)
			src[k] = (uint8_t)t_rand(&seed);

		ring_put(ring, size, pos, src, len);
		for (k = 0; k < len; k++)
			model[(pos + k) % size] = src[k];
		if (memcmp(ring, model, size))
			t_fail("ring_put size %u pos %llu len %zu: ring differs from model", size,
			       (unsigned long long)pos, len);

		memset(dst, 0xa5, len + 64);
		ring_get(ring, size, pos, dst, len);
		if (memcmp(dst, src, len))
			t_fail("ring_get size %u pos %llu len %zu: wrong bytes", size,
			       (unsigned long long)pos, len);
		for (k = len; k < len + 64; k++)
			if (dst[k] != 0xa5)
				t_fail("ring_get size %u pos %llu len %zu: wrote past len", size,
				       (unsigned long long)pos, len);

		span = ring_span(size, pos, len);
		if (span != MIN(len, size - pos % size))
			t_fail("ring_span size %u pos %llu len %zu = %zu", size,
			       (unsigned long long)pos, len, span);
	}
}

static void check_cursors(int cases)
{
	int i;

	for (i = 0; i < cases; i++) {
		uint32_t size = rand_size();
		uint64_t cons = rand_cursor(), d = t_rand(&seed) % (size + 1ULL);
		uint64_t prod = cons + d, head, skip, rw;
		bool want;

		if (ring_used(prod, cons) != d || ring_free(prod, cons, size) != size - d)
			t_fail("ring_used/free prod-cons %llu size %u", (unsigned long long)d, size);

		/* ring_valid on arbitrary pairs, both orders, around the edges. */
		head = rand_cursor();
		switch (t_rand(&seed) % 4) {
		case 0:
			prod = head + t_rand(&seed) % (2ULL * size + 2);
			break;
		case 1:
			prod = head - t_rand(&seed) % 3;
			break;
		case 2:
			prod = head + size + t_rand(&seed) % 2;
			break;
		default:
			prod = rand_cursor();
			break;
		}
		want = prod >= head && prod - head <= size;
		if (ring_valid(prod, head, size) != want)
			t_fail("ring_valid(prod %llu, head %llu, size %u) != %d",
			       (unsigned long long)prod, (unsigned long long)head, size, want);

		/* ring_head: skip_to only when cons < skip_to <= prod. */
		prod = cons + t_rand(&seed) % (size + 1ULL);
		switch (t_rand(&seed) % 5) {
		case 0:
			skip = cons - t_rand(&seed) % (cons + 1);	/* stale, at or before cons */
			break;
		case 1:
			skip = cons + t_rand(&seed) % (prod - cons + 1);	/* inside */
			break;
		case 2:
			skip = prod + 1 + t_rand(&seed) % size;		/* beyond prod (not yet) */
			break;
		case 3:
			skip = prod;
			break;
		default:
			skip = cons;
			break;
		}
		want = skip > cons && skip <= prod;
		if (ring_head(cons, skip, prod) != (want ? skip : cons))
			t_fail("ring_head(cons %llu, skip %llu, prod %llu) = %llu",
			       (unsigned long long)cons, (unsigned long long)skip,
			       (unsigned long long)prod,
			       (unsigned long long)ring_head(cons, skip, prod));

		/* ring_rewind: the next multiple of size, prod itself if aligned. */
		prod = rand_cursor();
		if (t_rand(&seed) % 4 == 0)
			prod &= ~((uint64_t)size - 1);
		rw = ring_rewind(prod, size);
		if (rw % size || rw < prod || rw - prod >= size)
			t_fail("ring_rewind(%llu, %u) = %llu", (unsigned long long)prod, size,
			       (unsigned long long)rw);
	}
}

/*
 * One ring, one producer, one consumer, driven step by step as tx.c and
 * rx.c would, the producer rewinding whenever it sees the ring empty (and
 * a coin says so).  owner[] remembers which stream offset each ring byte
 * holds, so an overwrite of unread data is caught where it happens.
 */
static void check_simulation(int rounds)
{
	static uint8_t ring[1 << 12], buf[1 << 12];
	static uint64_t owner[1 << 12];
	int r;

	for (r = 0; r < rounds; r++) {
		uint32_t size = 1u << t_rand_range(&seed, 4, 12);
		uint64_t base = rand_cursor() & ~((uint64_t)size - 1);
		uint64_t prod = base + t_rand(&seed) % size, cons = prod, skip = 0;
		uint64_t sent = 0, recvd = 0;	/* stream offsets, skips excluded */
		int step, rewinds = 0;

		for (size_t k = 0; k < size; k++)
			owner[k] = UINT64_MAX;
		for (step = 0; step < 400; step++) {
			uint64_t head = ring_head(cons, skip, prod);

			if (!ring_valid(prod, head, size))
				t_fail("round %d step %d: invalid cursors prod %llu head %llu", r,
				       step, (unsigned long long)prod, (unsigned long long)head);
			if (t_rand(&seed) % 2) {
				/* producer */
				size_t n, k;

				if (head == prod && t_rand(&seed) % 3 == 0) {
					uint64_t to = ring_rewind(prod, size);

					/* The span [prod, to) is skipped: not data. */
					prod = to;
					skip = to;
					rewinds++;
					head = ring_head(cons, skip, prod);
					if (head != prod)
						t_fail("round %d: after rewind head %llu != prod %llu",
						       r, (unsigned long long)head,
						       (unsigned long long)prod);
					if (prod % size)
						t_fail("round %d: rewind to offset %llu", r,
						       (unsigned long long)(prod % size));
				}
				n = (size_t)t_rand(&seed) % (size - (prod - head) + 1);
				if (!n)
					continue;
				for (k = 0; k < n; k++) {
					uint64_t at = (prod + k) & (size - 1);

					if (owner[at] != UINT64_MAX && owner[at] >= recvd)
						t_fail("round %d: overwrote unread stream byte %llu",
						       r, (unsigned long long)owner[at]);
					buf[k] = t_pat(7, sent + k);
					owner[at] = sent + k;
				}
				ring_put(ring, size, prod, buf, n);
				prod += n;
				sent += n;
			} else {
				/* consumer */
				uint64_t used = prod - head;
				size_t n = used ? (size_t)(t_rand(&seed) % used) + 1 : 0;
				long bad;

				if (!n)
					continue;
				ring_get(ring, size, head, buf, n);
				bad = t_pat_check(7, recvd, buf, n);
				if (bad >= 0)
					t_fail("round %d: stream byte %llu wrong after %d rewinds", r,
					       (unsigned long long)(recvd + (uint64_t)bad), rewinds);
				recvd += n;
				cons = head + n;
			}
		}
		/* Drain and check everything sent arrived. */
		{
			uint64_t head = ring_head(cons, skip, prod);
			size_t n = (size_t)(prod - head);

			ring_get(ring, size, head, buf, n);
			if (t_pat_check(7, recvd, buf, n) >= 0)
				t_fail("round %d: wrong bytes in the final drain", r);
			recvd += n;
			if (recvd != sent)
				t_fail("round %d: sent %llu stream bytes, received %llu", r,
				       (unsigned long long)sent, (unsigned long long)recvd);
		}
	}
}

/* Sanitizers slow the byte loops down a lot: fewer default cases. */
#if defined(__SANITIZE_THREAD__)
#define DEF_CASES	2000
#elif defined(__SANITIZE_ADDRESS__)
#define DEF_CASES	5000
#else
#define DEF_CASES	20000
#endif

int main(int argc, char **argv)
{
	int cases = argc > 1 ? atoi(argv[1]) : DEF_CASES;

	t_name = "t_ring";
	seed = (uint64_t)t_env_long("T_SEED", 0x5eed1234);
	if (cases <= 0)
		cases = DEF_CASES;
	check_put_get(cases);
	check_cursors(cases * 5);
	check_simulation(cases / 20 + 1);
	return T_EXIT_PASS;
}
