// SPDX-License-Identifier: MIT
/*
 * epoll_spin.c - epoll_wait's look before it sleeps: a spin over a
 * snapshot of the instance's shared-memory connections, or, with a peer on
 * our CPU, a few hand-overs of the CPU (wait.c's); the caller (epoll_wait.c)
 * arms and sleeps when neither finds news.
 */
#include "epoll_int.h"
#include "options.h"
#include "real.h"
#include "sock.h"
#include "wait.h"

#include <sched.h>

#define EP_KPOLL_NS	8000	/* spinning: ask the kernel about other fds this often */

/*
 * Spin over the connections before sleeping: a peer on another CPU usually
 * answers within microseconds, a sleep costs tens.  Other descriptors in
 * the set are polled with a zero timeout every EP_KPOLL_NS.  Returns the
 * kernel events found (into kev), or 0; *hit is set when a connection
 * turned ready (the caller asks the kernel for the doorbells rung
 * meanwhile, which tell in which order, then takes the rest: epoll_wait.c
 * push_due()).  The budget adapts: spins that never pay off shrink it.
 */
int ep_spin(struct usmc_ep *ep, int epfd, struct epoll_event *kev, int room, bool *hit)
{
	struct {
		struct usmc_epreg copy;	/* events, seen cursors: for ep_reg_due() */
	} snap[EP_SPIN_MAX];
	uint64_t budget, t0, now, lastk;
	struct usmc_epreg *r;
	int i, k = 0, n = 0, cpu, yields;
	bool peer_here = false;

	*hit = false;
	if (!ep->ntranslated || ep->ntranslated > EP_SPIN_MAX)
		return 0;
	budget = usmc_opt.busy_poll_us ? (uint64_t)usmc_opt.busy_poll_us * 1000 :
		 MIN((uint64_t)usmc_opt.spin_us * 1000, (uint64_t)LOAD_RELAXED(&ep->spin_ns));
	if (!budget)
		return 0;
	/* Spin without ep_lock (other threads' epoll calls go on): on a
	 * snapshot of the sockets, each pinned by a reference.  Not when a
	 * peer runs on our CPU: it could not make progress while we spin. */
	cpu = sched_getcpu();
	for (r = ep->regs; r; r = r->ep_next) {
		if (!r->translated || r->disabled)
			continue;
		usmc_publish_cpu(r->sk, cpu);
		if (usmc_peer_on_cpu(r->sk, cpu))
			peer_here = true;
	}
	/* ... it gets the CPU instead (wait.c's hand-over): a few yields,
	 * each followed by a look. */
	yields = peer_here ? USMC_WAIT_YIELDS : 0;
	for (r = ep->regs; r && n < EP_SPIN_MAX; r = r->ep_next) {
		/* A socket whose last reference went (its close is on its way
		 * to remove this record) must not be brought back. */
		if (!r->translated || r->disabled || !usmc_sock_get_live(r->sk))
			continue;
		snap[n].copy = *r;
		n++;
	}
	pthread_mutex_unlock(&ep_lock);
	now = t0 = lastk = usmc_now_ns();
	do {
		/* ~100 ns between sweeps (a pause is ~25 ns here): a wider
		 * gap only adds to the latency it is meant to save. */
		if (yields)
			sched_yield();
		else
			for (i = 0; i < 4; i++)
				cpu_relax();
		for (i = 0; i < n && !*hit; i++)
			if (ep_reg_due(&snap[i].copy))
				*hit = true;
		if (*hit)
			break;	/* no clock read on the way back (wait.c) */
		now = usmc_now_ns();
		/* Read without ep_lock (a hint; written under it). */
		if (LOAD_RELAXED(&ep->nforeign) && now - lastk > EP_KPOLL_NS) {
			lastk = now;
			k = real.epoll_wait(epfd, kev, room, 0);
			if (k > 0) {
				*hit = true;
				break;
			}
			k = 0;
		}
	} while (peer_here ? --yields > 0 : now - t0 < budget);
	for (i = 0; i < n; i++)
		usmc_sock_put(snap[i].copy.sk);
	pthread_mutex_lock(&ep_lock);
	if (!peer_here)		/* the spin budget learns from spins only */
		ep_spin_feedback(ep, *hit, now - t0);
	return k;
}
