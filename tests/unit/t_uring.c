// SPDX-License-Identifier: MIT
/*
 * t_uring.c - epoll registrations made through io_uring, as libuv (1.45
 * on: node 20, uvloop) makes them: it creates a ring with
 * syscall(SYS_io_uring_setup) and submits IORING_OP_EPOLL_CTL, falling
 * back to epoll_ctl() when the ring cannot be had.  usmc never sees a
 * registration made in a ring, so epoll_wait missed every byte that came
 * on shared memory (uvloop's own tests hung).  Under usmc the ring is
 * refused (ENOSYS, as by a kernel without io_uring) and the fallback is
 * seen.
 *
 *   epoll_ctl_ring   register a connection the libuv way, the peer writes:
 *                    epoll_wait reports it, recv reads it
 *
 * Differential (t_selfdiff.h): the same transcript with USMC_DISABLE=1,
 * where the ring is used.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <linux/io_uring.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define OBS	T_OBS

/* One EPOLL_CTL through a fresh ring: 0, or -errno (no ring: the caller
 * falls back, as libuv does). */
static int ring_epoll_ctl(int ep, int op, int fd, struct epoll_event *ev)
{
	struct io_uring_params p;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
	size_t sq_len, cq_len;
	uint8_t *sq, *cq;
	uint32_t *tail, *array, mask;
	int ring, rc;

	memset(&p, 0, sizeof(p));
	ring = (int)syscall(SYS_io_uring_setup, 4, &p);
	if (ring < 0)
		return -errno;
	sq_len = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
	cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
	cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_CQ_RING);
	sqes = mmap(NULL, p.sq_entries * sizeof(*sqes), PROT_READ | PROT_WRITE, MAP_SHARED, ring,
		    IORING_OFF_SQES);
	t_assert(sq != MAP_FAILED && cq != MAP_FAILED && sqes != MAP_FAILED, "ring mmap: %s",
		 t_errname(errno));
	memset(&sqes[0], 0, sizeof(sqes[0]));
	sqes[0].opcode = IORING_OP_EPOLL_CTL;
	sqes[0].fd = ep;
	sqes[0].len = (uint32_t)op;
	sqes[0].off = (uint64_t)fd;
	sqes[0].addr = (uint64_t)(uintptr_t)ev;
	tail = (uint32_t *)(sq + p.sq_off.tail);
	array = (uint32_t *)(sq + p.sq_off.array);
	mask = *(uint32_t *)(sq + p.sq_off.ring_mask);
	array[*tail & mask] = 0;
	__atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
	rc = (int)syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0);
	t_assert(rc == 1, "io_uring_enter: %d %s", rc, t_errname(errno));
	cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	rc = cqes[*(uint32_t *)(cq + p.cq_off.head) & *(uint32_t *)(cq + p.cq_off.ring_mask)].res;
	munmap(sqes, p.sq_entries * sizeof(*sqes));
	munmap(cq, cq_len);
	munmap(sq, sq_len);
	close(ring);
	return rc;
}

static void sc_epoll_ctl_ring(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 7 }, got;
	int c, s, ep, rc, n;
	char b[8];

	t_pair_smc(&c, &s);
	ep = t_ok(epoll_create1(EPOLL_CLOEXEC));
	rc = ring_epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	if (rc == -ENOSYS || rc == -EPERM || rc == -EINVAL)
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));	/* libuv's fallback */
	else
		t_assert(rc == 0, "IORING_OP_EPOLL_CTL: %d", rc);
	t_write_all(c, "request", 7);
	n = epoll_wait(ep, &got, 1, 2000);
	OBS("epoll_wait after the peer wrote: %d, data %llu\n", n,
	    n == 1 ? (unsigned long long)got.data.u64 : 0ULL);
	n = (int)recv(s, b, sizeof(b), MSG_DONTWAIT);
	OBS("recv: %d [%.*s]\n", n, n > 0 ? n : 0, b);
	close(ep);
	close(c);
	close(s);
}

static const struct t_scenario scenarios[] = {
	{ "epoll_ctl_ring", sc_epoll_ctl_ring },
};

int main(int argc, char **argv)
{
	t_name = "t_uring";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
