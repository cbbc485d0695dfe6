// SPDX-License-Identifier: MIT
/*
 * epoll_wait.c - readiness and waiting for epoll instances that hold
 * shared-memory connections (registrations live in epoll.c).
 *
 * epoll_wait first collects the ready list, then spins lock-free over a
 * snapshot of the translated registrations for an adaptive budget, and
 * only then arms doorbells and sleeps in the real epoll_wait; kernel
 * events tagged with our records are translated back to the
 * application's events and data (epoll_kernel.c).
 *
 * Order: as the kernel's ready list, first come first served, as far as we
 * can tell.  Doorbells of armed records and the kernel's own events come in
 * the kernel's order, and records they make ready are reported before the
 * next event the kernel gave; records found ready by looking (spin, watch
 * list, arming) have no order among themselves.  Level-triggered records
 * reported and still ready go behind what turned ready meanwhile.  A
 * descriptor that is not ours and stays ready keeps its place among such
 * descriptors only, not among our records.
 */
#include "epoll.h"
#include "epoll_int.h"
#include "real.h"
#include "sock.h"


static _Atomic uint64_t wait_calls;

/* Every due record not on a ready list yet.  An armed one only if
 * armed_too: its news rang its doorbell, which the kernel reports in order,
 * unless the kernel had no more events for us (the doorbell is not in yet,
 * or the ring was spared: we were awake, wait.c); those a kick answered
 * first, in the order of the kicks, then the rest in registration order:
 * they turned ready while nobody could tell in which order.  Caller holds
 * ep_lock. */
static void push_due(struct usmc_ep *ep, bool armed_too)
{
	struct usmc_epreg *r;

	if (armed_too)
		ep_due_answered(ep);
	for (r = ep->regs; r; r = r->ep_next)
		if (r->translated && !r->disabled && !r->on_ready && (armed_too || !r->armed) &&
		    ep_reg_wants_look(r))
			ep_ready_push(r);
}

/* Convert records whose socket changed path since we last looked. */
static void ep_resync(struct usmc_ep *ep)
{
	uint64_t g = LOAD_ACQUIRE(&usmc_sock_mode_gen);
	struct usmc_epreg *r, *next;

	if (g == ep->seen_gen)
		return;
	ep->seen_gen = g;
	for (r = ep->regs; r; r = next) {
		next = r->ep_next;
		if (ep_want_translated(r->sk) != r->translated ||
		    (r->undecided && !ep_want_undecided(r->sk))) {
			ep_reg_sync(r);
		} else if (r->translated && !r->tcp_out && sk_mode(r->sk) == USMC_MODE_MIGRATING) {
			/* Migrating: TCP room moves our queued bytes on. */
			struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP,
						  .data.u64 = ep_tag(r, EP_TAG_TCP) };
			int epfd = ep_fd_of(ep);

			if (epfd >= 0 && !(r->events & EPOLLEXCLUSIVE) &&
			    !real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev)) {
				r->tcp_out = true;
				ep_sleep_order(ep);
			}
			ep_ready_push(r);
		}
	}
}

#define EP_IDLE_ARM	16	/* watch passes without news before arming */

/*
 * Look at the records that are neither ready nor armed.  Doorbells are
 * only worth their cost (a system call for the peer per message) while we
 * sleep, so a busy caller peeks at its connections instead; a record that
 * stays quiet for EP_IDLE_ARM calls is armed once and leaves the list, so
 * idle connections cost nothing per call.  Caller holds ep_lock.
 */
static void ep_watch_scan(struct usmc_ep *ep)
{
	struct usmc_epreg **pp = &ep->watch, *r;

	while ((r = *pp)) {
		if (r->on_ready || r->armed || r->disabled || !r->translated) {
			*pp = r->watch_next;
			r->on_watch = false;
			continue;
		}
		if (ep_reg_wants_look(r)) {
			*pp = r->watch_next;
			r->on_watch = false;
			ep_ready_push(r);
			continue;
		}
		if (++r->idle < EP_IDLE_ARM) {
			pp = &r->watch_next;
			continue;
		}
		*pp = r->watch_next;
		r->on_watch = false;
		if (ep_arm(r))
			ep_ready_push(r);
		else
			r->armed = true;
	}
}

/*
 * Every epoll_wait on an instance we know, with or without shared-memory
 * connections in it (another thread may add one while this one sleeps in
 * the kernel, or free one whose event is already on its way here): kernel
 * events tagged with our records are translated when the record is live
 * and this instance's, and dropped otherwise; a call whose kernel events
 * were all ours waits on until its timeout.
 */
/*
 * The level-triggered records the last call reported (ep->again), none of
 * them due any more: the program read or wrote what they said.  Dropping
 * them first leaves the call where one that found nothing is: it spins
 * and sleeps as usual (looking at the kernel while it spins, and once a
 * ring turns ready), instead of asking the kernel for its events first,
 * a system call per request for a server whose instance also holds its
 * listener.  The kernel drops such entries at its next look just the same.
 * Only records on the rings now; anything else takes the kernel's look.
 */
static bool again_stale(const struct usmc_ep *ep)
{
	const struct usmc_epreg *r;

	for (r = ep->again; r; r = r->ready_next)
		if (!r->translated || r->disabled || sk_mode(r->sk) != USMC_MODE_SMCD ||
		    sk_flag(r->sk, SKF_CONNECTING) || ep_reg_wants_look(r))
			return false;
	return true;
}

int usmc_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		    const struct timespec *ts, const sigset_t *mask, enum usmc_epw how)
{
	struct epoll_event kev[EP_MAXEV];
	uint64_t deadline = 0, call;
	struct usmc_ep *ep;
	bool exact = true;
	int n = 0, k, rc = 0;

	if (maxevents <= 0) {
		k = ep_kernel_wait(epfd, events, maxevents, timeout, ts, mask, how);
		return k < 0 ? -errno : k;
	}
	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	if (!ep) {
		/* Not an epoll instance of ours: it holds none of our entries. */
		pthread_mutex_unlock(&ep_lock);
		k = ep_kernel_wait(epfd, events, maxevents, timeout, ts, mask, how);
		return k < 0 ? -errno : k;
	}
	ep->waiters++;
	if (timeout > 0)
		deadline = usmc_now_ns() + (uint64_t)timeout * 1000000ull;
	call = atomic_fetch_add(&wait_calls, 1) + 1;
	for (;;) {
		int kt = timeout, room;
		uint64_t slept_ns = 0, harvest;
		bool hit = false, pending = false, inplace, sleeping = false, skip;

		ep_resync(ep);
		ep_watch_scan(ep);
		ep_progress_all(ep);
		ep_spared_scan(ep);
		n = ep_collect(ep, false, events, maxevents, call);
		if (!n && ep->again && again_stale(ep))
			n = ep_collect(ep, true, events, maxevents, call);
		room = MIN(maxevents - n, EP_MAXEV);
		k = 0;
		if (!n && !ep->again && timeout != 0 && ep->ntranslated) {
			k = ep_spin(ep, epfd, kev, room, &hit);
			if (!hit && !k) {
				/* Counted asleep before the last look (epoll_sleep.c). */
				ep_sleep_enter(ep);
				sleeping = true;
				if (ep_arm_all_pending(ep, &pending))
					n = ep_collect(ep, false, events, maxevents, call);
			}
		}
		/* The time the look took comes off the kernel's wait. */
		if (kt > 0)
			kt = (int)usmc_ms_left(deadline);
		/* Ready already (or news seen: the doorbells rung meanwhile say
		 * in which order): only look at the kernel. */
		if (n || k || hit || pending || ep->again || room <= 0)
			kt = 0;
		/* Asleep with nothing armed: records another thread adds
		 * meanwhile count us asleep (ep_fresh_wake). */
		if (kt && !sleeping) {
			ep_sleep_enter(ep);
			sleeping = true;
		}
		ep_selfev_update(ep, epfd);
		if (room <= 0 || ep->closed) {
			if (sleeping)
				ep_sleep_exit(ep);
			break;
		}
		/* No records: the kernel writes the program's array (as many
		 * events as it asked for), ours are taken out after. */
		inplace = !ep->regs && !n && !k;
		skip = ep_harvest_skip(ep, kt, n || hit || pending || ep->again);
		harvest = k || skip ? 0 : ++ep->harvests;
		pthread_mutex_unlock(&ep_lock);
		if (!k && !skip) {
			uint64_t t0 = kt ? usmc_now_ns() : 0;

			k = ep_kernel_wait(epfd, inplace ? events : kev, inplace ? maxevents : room, kt,
					exact && kt == timeout ? ts : NULL, mask, how);
			exact = false;
			if (kt && k > 0)
				slept_ns = usmc_now_ns() - t0;
		}
		rc = k < 0 ? -errno : 0;
		pthread_mutex_lock(&ep_lock);
		if (harvest) {
			/* Only an instance that may skip looks at the time. */
			if (ep_kernel_ours_only(ep))
				ep->harvest_ns = usmc_now_ns();
			if (k >= 0 && k < (inplace ? maxevents : room) && harvest > ep->harvest_quiet)
				ep->harvest_quiet = harvest;
		}
		if (sleeping)
			ep_sleep_exit(ep);
		if (rc) {
			if (n)
				rc = 0;
			break;
		}
		if (inplace)
			n = ep_kernel_events_inplace(ep, events, k, &slept_ns);
		else
			n += ep_kernel_events(ep, kev, k, events + n, maxevents - n, call, &slept_ns);
		if (ep->closed)
			break;
		if (hit || pending)
			push_due(ep, k < room);
		n += ep_collect(ep, false, events + n, maxevents - n, call);
		n += ep_collect(ep, true, events + n, maxevents - n, call);
		/* Zero events after a kernel wait that ran its full time: the
		 * kernel says the timeout has passed. */
		if (n || timeout == 0 || (!k && kt))
			break;
		if (timeout > 0 && !(timeout = (int)usmc_ms_left(deadline)))
			break;
	}
	if (!ep->closed) {
		if (ep->nested)
			ep_arm_all(ep);
		ep_selfev_update(ep, epfd);
		ep_pass_on(ep);
	}
	if (--ep->waiters == 0 && ep->closed)
		ep_free(ep);
	pthread_mutex_unlock(&ep_lock);
	return rc ? rc : n;
}

bool usmc_epoll_sock_resync(struct usmc_sock *sk)
{
	struct usmc_epreg *r, *next;

	if (!usmc_lock_bounded(&ep_lock))
		return false;
	for (r = sk->epregs; r; r = next) {
		next = r->sk_next;
		if (r->translated != ep_want_translated(sk))
			ep_reg_sync(r);
	}
	pthread_mutex_unlock(&ep_lock);
	return true;
}

bool usmc_epoll_has_ready(int epfd)
{
	struct usmc_ep *ep;
	bool r;

	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	r = ep && (ep->ready || ep->again);
	pthread_mutex_unlock(&ep_lock);
	return r;
}
