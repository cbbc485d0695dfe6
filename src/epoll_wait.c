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
#include "fdtab.h"
#include "log.h"
#include "options.h"
#include "poll.h"
#include "real.h"
#include "rx.h"
#include "sock.h"
#include "sys.h"
#include "tx.h"
#include "wait.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/eventfd.h>

static uint32_t reg_ready(struct usmc_epreg *r)
{
	uint32_t want = r->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLRDNORM |
				     EPOLLWRNORM | EPOLLRDBAND | EPOLLWRBAND);
	uint32_t ev = usmc_sock_poll(r->sk);

	return ev & (want | EPOLLERR | EPOLLHUP);
}

/*
 * Did something happen since r last reported, given that it is ready for
 * ev now?  (edge-triggered)  As TCP: every arrival (bytes, flags) is
 * news; room is news only for a writer that ran out of it since EPOLLOUT
 * was last reported (sh->tx_nospace, TCP's SOCK_NOSPACE: the kernel wakes
 * writers only after a send found the buffer full), once there is room.
 * A writer that never filled the ring gets no edge per peer read.
 */
static bool reg_news(const struct usmc_epreg *r, uint32_t ev)
{
	const struct usmc_sock *sk = r->sk;

	if (r->edge)
		return true;
	if ((r->events & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP)) &&
	    (LOAD_ACQUIRE(&sk->rx_p->prod) != r->seen_prod ||
	     LOAD_ACQUIRE(&sk->rx_p->flags) != r->seen_pflags))
		return true;
	if ((r->events & (EPOLLOUT | EPOLLWRNORM)) &&
	    (LOAD_ACQUIRE(&sk->tx_c->flags) != r->seen_cflags ||
	     ((ev & (EPOLLOUT | EPOLLWRNORM)) &&
	      LOAD_RELAXED(&sk->sh->tx_nospace) != r->seen_nospace)))
		return true;
	return false;
}

/* What reg_news() compares. */
struct reg_cursors {
	uint64_t prod;
	uint32_t pflags, cflags, nospace;
};

static void reg_cursors(const struct usmc_epreg *r, struct reg_cursors *c)
{
	const struct usmc_sock *sk = r->sk;

	c->prod = LOAD_ACQUIRE(&sk->rx_p->prod);
	c->pflags = LOAD_ACQUIRE(&sk->rx_p->flags);
	c->cflags = LOAD_ACQUIRE(&sk->tx_c->flags);
	c->nospace = LOAD_RELAXED(&sk->sh->tx_nospace);
}

static bool reg_cursors_same(const struct reg_cursors *a, const struct reg_cursors *b)
{
	return a->prod == b->prod && a->pflags == b->pflags && a->cflags == b->cflags &&
	       a->nospace == b->nospace;
}

/* The events r should report now: level-triggered when ready, edge-
 * triggered only when something new happened as well. */
uint32_t ep_reg_due(const struct usmc_epreg *r)
{
	uint32_t ev = reg_ready((struct usmc_epreg *)r);

	if (ev && (r->events & EPOLLET) && !reg_news(r, ev))
		return 0;
	return ev;
}

/*
 * The peer moved the connection to TCP (migrate.c): the rings may have
 * nothing to report, but the record must be collected (its refresh
 * follows the peer: our unread bytes go to it on TCP, its bytes come
 * there) before this thread sleeps.  The peer rings our doorbell after
 * raising the flag, answering only an arm it saw: an arm after that must
 * see the flag (seq_cst: the fence in usmc_arm() against the one in
 * usmc_ring_lines()), or both would wait for the other for ever.
 */
static bool reg_peer_moved(const struct usmc_epreg *r)
{
	return sk_peer_moved(r->sk);
}

/* Due, or to be looked at: what arming and the watch list check. */
static bool reg_wants_look(const struct usmc_epreg *r)
{
	return ep_reg_due(r) || reg_peer_moved(r);
}

/*
 * Report r: its due events, and what it has seen, both from the same
 * look.  Seen must not be newer than the events reported: a send that
 * ran out of room after our look at the ring, counted as seen, would
 * leave an edge-triggered writer told "not writable" with nothing new to
 * be told ever again (a hang; the kernel's write-space callback would
 * queue the socket again).  So what reg_news() compares is loaded before
 * the events are computed and again after; when it moved meanwhile we
 * look once more, and after a few tries keep the older: at worst one edge
 * too many, never one lost.  A report without EPOLLOUT leaves a writer's
 * running out of room pending, as TCP's SOCK_NOSPACE stays set.
 */
static uint32_t reg_report(struct usmc_epreg *r)
{
	struct reg_cursors before, after;
	uint32_t ev = 0;
	int tries;

	for (tries = 0; tries < 3; tries++) {
		reg_cursors(r, &before);
		ev = ep_reg_due(r);
		if (!ev)
			return 0;
		reg_cursors(r, &after);
		if (reg_cursors_same(&before, &after))
			break;
	}
	r->seen_prod = before.prod;
	r->seen_pflags = before.pflags;
	r->seen_cflags = before.cflags;
	if (ev & (EPOLLOUT | EPOLLWRNORM))
		r->seen_nospace = before.nospace;
	r->edge = false;
	return ev;
}

static int reg_what(struct usmc_epreg *r)
{
	int what = 0;

	if (r->events & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP))
		what |= USMC_WAIT_RX;
	if (r->events & (EPOLLOUT | EPOLLWRNORM))
		what |= USMC_WAIT_TX;
	return what ? what : USMC_WAIT_RX;
}

/*
 * Walk one of the ready lists in order (ep->ready, or ep->again): report
 * what is ready, drop what is not.  A level-triggered record reported goes
 * to the tail of ep->again, as the kernel moves it to the tail of its
 * ready list; one already reported by this call stays for the next.
 * Nothing is armed here: a thread that goes on working does not need
 * doorbells, and every doorbell costs the peer a system call.
 * ep_arm_all() arms right before we sleep.  Caller holds ep_lock.
 */
static _Atomic uint64_t wait_calls;

/*
 * The kernel takes a file's entries off every epoll instance when its last
 * descriptor closes; ours go when that close gets ep_lock
 * (usmc_epoll_forget), or later, when a call in progress on another thread
 * drops the socket's last reference.  Meanwhile the record is reported no
 * more: its number may name the application's next socket already (a
 * multi-threaded proxy took a stale EPOLLRDHUP for a fresh client and
 * closed it, haproxy_eof.sh).  Caller holds ep_lock.
 */
bool ep_reg_closed(const struct usmc_epreg *r)
{
	return unlikely(usmc_fd_peek(r->fd) != r->sk) && !usmc_sock_app_open(r->sk, -1);
}

int ep_collect(struct usmc_ep *ep, bool again, struct epoll_event *out, int max,
	       uint64_t call)
{
	struct usmc_epreg **head = again ? &ep->again : &ep->ready;
	struct usmc_epreg ***tail = again ? &ep->again_tail : &ep->ready_tail;
	struct usmc_epreg *list = *head, **list_tail = *tail, *r;
	struct usmc_epreg *keep = NULL, **keep_tail = &keep;
	int n = 0;

	if (!list || max <= 0)
		return 0;
	/* Detached: what is pushed meanwhile queues up behind it. */
	*head = NULL;
	*tail = head;
	while ((r = list) && n < max) {
		uint32_t ev;

		list = r->ready_next;
		r->ready_next = NULL;
		if (r->reported == call) {
			/* Once per epoll_wait, as the kernel does. */
			*keep_tail = r;
			keep_tail = &r->ready_next;
			continue;
		}
		r->on_ready = r->on_again = false;
		if (r->disabled || !r->translated || ep_reg_closed(r))
			continue;
		if (sk_flag(r->sk, SKF_CONNECTING)) {
			/* Connect completion is a TCP event: the kernel entry
			 * (EPOLLOUT, edge) reports it, in the kernel's order
			 * among the program's other sockets; the kernel event
			 * settles it and queues r again. */
			continue;
		}
		/* What TCP says comes as kernel events (the socket's own
		 * entry, edge-triggered): once a kernel wait begun after the
		 * entry went in emptied the kernel's ready list, there is no
		 * news the kernel has not given us (kernel_event); before,
		 * look (a reset that came before the entry). */
		usmc_sock_refresh_seen(r->sk, r->fd, ep->harvest_quiet > r->tcp_since ? 0 : -1);
		if (!ep_want_translated(r->sk)) {
			ep_reg_sync(r);
			continue;
		}
		ev = reg_report(r);
		if (!ev) {
			ep_watch(r);
			continue;
		}
		out[n].events = ev;
		out[n].data.u64 = r->data;
		n++;
		r->reported = call;
		if (r->events & EPOLLONESHOT)
			r->disabled = true;
		if (r->events & (EPOLLET | EPOLLONESHOT)) {
			if (!r->disabled)
				ep_watch(r);	/* edge-triggered: news later */
			continue;
		}
		if (!r->on_ready) {
			r->on_ready = r->on_again = true;
			*ep->again_tail = r;
			ep->again_tail = &r->ready_next;
		}
	}
	/* Put back in front, in order: what was kept, what was not reached,
	 * then what queued up meanwhile. */
	if (list) {
		*list_tail = *head;
		if (*head == NULL)
			*tail = list_tail;
		*head = list;
	}
	if (keep) {
		*keep_tail = *head;
		if (*head == NULL)
			*tail = keep_tail;
		*head = keep;
	}
	return n;
}

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
		    reg_wants_look(r))
			ep_ready_push(r);
}

bool ep_arm(struct usmc_epreg *r)
{
	r->arm_what = (uint8_t)reg_what(r);
	return usmc_arm_seq(r->sk, r->arm_what, r->arm_seq) && reg_wants_look(r);
}

/*
 * About to sleep: arm every live record's doorbell, then look once more
 * (the fence in usmc_arm() pairs with the producer's, cdc.h).  Returns true
 * when something turned ready meanwhile.
 */
bool ep_arm_all(struct usmc_ep *ep)
{
	return ep_arm_all_pending(ep, NULL);
}

/* The same; *pending: an armed record has news whose doorbell we have not
 * seen (in the kernel, or on its way): look at the kernel, do not sleep. */
bool ep_arm_all_pending(struct usmc_ep *ep, bool *pending)
{
	struct usmc_epreg *r;
	bool ready = false;

	for (r = ep->regs; r; r = r->ep_next) {
		if (!r->translated || r->disabled)
			continue;
		/* Armed already, no doorbell seen since: news since then rang
		 * it, and the kernel tells in which order. */
		if (r->armed) {
			if (pending && !*pending && reg_wants_look(r))
				*pending = true;
			continue;
		}
		/* Going to sleep: a ring of ours that grew gives back what it
		 * no longer holds (tx_backing.c). */
		usmc_tx_idle_check(r->sk);
		if (ep_arm(r)) {
			ep_ready_push(r);
			ready = true;
		} else {
			r->armed = true;
		}
	}
	return ready;
}

void ep_selfev_update(struct usmc_ep *ep, int epfd)
{
	struct usmc_epreg *r;
	uint64_t v = 1;
	bool want = false;

	if (!ep->nested)
		return;
	/* Readable for an outer epoll/poll only if something is really due. */
	for (r = ep->ready; r && !want; r = r->ready_next)
		want = r->translated && !r->disabled && ep_reg_due(r);
	for (r = ep->again; r && !want; r = r->ready_next)
		want = r->translated && !r->disabled && ep_reg_due(r);

	if (!ep->nested)
		return;
	if (ep->selfev < 0) {
		struct epoll_event ev = { .events = EPOLLIN };

		ep->selfev = sys_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (ep->selfev < 0)
			return;
		usmc_ifd_mark(ep->selfev);
		ep->selfev = usmc_ifd_move_high(ep->selfev, false);
		ev.data.u64 = ep_self_tag();
		real.epoll_ctl(epfd, EPOLL_CTL_ADD, ep->selfev, &ev);
	}
	if (want && !ep->selfev_set)
		sys_write(ep->selfev, &v, sizeof(v));
	else if (!want && ep->selfev_set)
		sys_read(ep->selfev, &v, sizeof(v));
	ep->selfev_set = want;
}

/* Wake a thread asleep in the kernel on ep: an edge on the instance's wake
 * eventfd (created on first use; never read: every write is an edge). */
static void ep_wake(struct usmc_ep *ep)
{
	static const uint64_t one = 1;

	if (ep->wake < 0) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = ep_self_tag() };
		int epfd = ep_fd_of(ep), fd;

		if (epfd < 0)
			return;
		fd = sys_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (fd < 0)
			return;
		usmc_ifd_mark(fd);
		fd = usmc_ifd_move_high(fd, false);
		if (fd < 0)
			return;
		if (real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev)) {
			usmc_ifd_close(fd);
			return;
		}
		ep->wake = fd;
	}
	(void)sys_write(ep->wake, &one, sizeof(one));
}

/*
 * A record was (re)registered (ADD, MOD, a parked record revived) while
 * another thread may be asleep in the kernel on its instance, with the
 * doorbells it armed before this record was there: arm this one too, and
 * if it is due already wake a sleeper, as the kernel wakes a waiter when
 * an ADD or MOD finds the descriptor ready.  Caller holds ep_lock.
 */
void ep_fresh_wake(struct usmc_epreg *r)
{
	if (!r->ep->waiters || !r->translated || r->disabled)
		return;
	if (usmc_arm(r->sk, reg_what(r)) && ep_reg_due(r))
		ep_wake(r->ep);
}

/* Watched from outside (an outer epoll, poll, select): the kernel must see
 * its readiness, so its doorbells stay armed whenever control leaves it and
 * its eventfd is readable while a record is due.  Caller holds ep_lock. */
void ep_nest(struct usmc_ep *ep, int epfd)
{
	struct usmc_epreg *q;

	ep->nested = true;
	ep_sleep_order(ep);
	for (q = ep->regs; q; q = q->ep_next)
		q->sk->in_nested = true;
	ep_arm_all(ep);
	ep_selfev_update(ep, epfd);
}

/*
 * poll/select on an epoll descriptor (EventMachine waits so: ppoll on its
 * epoll descriptor and a pipe, then epoll_wait(0)): the descriptor turned
 * readable only for kernel events, never for shared-memory data, and the
 * program never called epoll_wait (thin hung).  Not an epoll of ours: one
 * atomic load.
 */
void usmc_epoll_mark_nested(int epfd)
{
	struct usmc_ep *ep;

	if (!LOAD_RELAXED(&ep_live))
		return;
	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	if (ep && !ep->nested)
		ep_nest(ep, epfd);
	pthread_mutex_unlock(&ep_lock);
}

/* Convert records whose socket changed path since we last looked. */
static void ep_resync(struct usmc_ep *ep)
{
	uint64_t g = LOAD_ACQUIRE(&ep_mode_gen);
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
		if (reg_wants_look(r)) {
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
		    sk_flag(r->sk, SKF_CONNECTING) || reg_wants_look(r))
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
	}
	if (--ep->waiters == 0 && ep->closed)
		ep_free(ep);
	pthread_mutex_unlock(&ep_lock);
	return rc ? rc : n;
}

/* Does this epoll instance have level-triggered readiness the kernel
 * cannot see (for poll/select on an epoll descriptor)? */
void usmc_epoll_sock_changed(struct usmc_sock *sk)
{
	struct usmc_epreg *r;

	pthread_mutex_lock(&ep_lock);
	for (r = sk->epregs; r; r = r->sk_next)
		if (r->ep->nested)
			ep_selfev_update(r->ep, ep_fd_of(r->ep));
	pthread_mutex_unlock(&ep_lock);
}

/*
 * The program's own shutdown() changed what the socket reports: the
 * kernel's state change wakes every waiter, and gives every registration
 * an edge (an edge-triggered loop waits for exactly that one: mio's and
 * tokio's shutdown events).
 */
void usmc_epoll_sock_edge(struct usmc_sock *sk)
{
	struct usmc_epreg *r;

	pthread_mutex_lock(&ep_lock);
	for (r = sk->epregs; r; r = r->sk_next) {
		if (!r->translated || r->disabled)
			continue;
		r->edge = true;
		ep_ready_push(r);
		ep_fresh_wake(r);
		if (r->ep->nested)
			ep_selfev_update(r->ep, ep_fd_of(r->ep));
	}
	pthread_mutex_unlock(&ep_lock);
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
