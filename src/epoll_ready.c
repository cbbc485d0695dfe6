// SPDX-License-Identifier: MIT
/*
 * epoll_ready.c - what a registration reports: its events from the rings,
 * arming before a sleep, waking a sleeper for a fresh or changed record,
 * and readiness for an outer epoll, poll or select (nested).
 */
#include "epoll.h"
#include "epoll_int.h"
#include "fdtab.h"
#include "real.h"
#include "rx.h"
#include "sock.h"
#include "sys.h"
#include "tx.h"
#include "wait.h"

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
	/* The TCP entry's event is news unless the rings told the close
	 * already (the last report saw their FIN or reset) and it adds no
	 * event: that FIN firing the entry is the same close, one edge as
	 * TCP's (tokio's reactor saw the peer's close twice).  A peer gone
	 * without a word in the rings (killed), a reset, a connect's end,
	 * bytes on TCP while moving: news, even when the events are the
	 * ones last reported (EPOLLIN for data, then for the EOF). */
	if (r->tcp_edge && (!(r->seen_pflags & (CDC_F_DONE | CDC_F_ABORT)) || (ev & ~r->seen_ev) ||
			    sk_mode(sk) == USMC_MODE_MIGRATING))
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
bool ep_reg_wants_look(const struct usmc_epreg *r)
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
uint32_t ep_reg_report(struct usmc_epreg *r)
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
	r->edge = r->tcp_edge = false;
	r->seen_ev = ev;
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
 * The kernel takes a file's entries off every epoll instance when its last
 * descriptor closes; ours go when that close gets ep_lock
 * (ep_sock_forget), or later, when a call in progress on another thread
 * drops the socket's last reference.  Meanwhile the record is reported no
 * more: its number may name the application's next socket already (a
 * multi-threaded proxy took a stale EPOLLRDHUP for a fresh client and
 * closed it, haproxy_eof.sh).  Caller holds ep_lock.
 */
bool ep_reg_closed(const struct usmc_epreg *r)
{
	return unlikely(usmc_fd_peek(r->fd) != r->sk) && !usmc_sock_app_open(r->sk, -1);
}

bool ep_arm(struct usmc_epreg *r)
{
	r->arm_what = (uint8_t)reg_what(r);
	return usmc_arm_seq(r->sk, r->arm_what, r->arm_seq) && ep_reg_wants_look(r);
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
			if (ep_reg_wants_look(r)) {
				if (pending)
					*pending = true;
				continue;
			}
			/* But an arm is answered once (cdc.c: the peer rings
			 * again only for a newer one), and a kick may answer it
			 * with nothing for us to report (the server's accept,
			 * a space kick to a reader), spared while we were
			 * awake between two sleeps, after this call's
			 * ep_spared_scan: slept on, the record would wait for a
			 * ring that never comes.  A spent arm is made anew
			 * below.  After our count's fence (ep_sleep_enter):
			 * a kick that found us not counted published what it
			 * answered before it looked (cdc.c kick_ring). */
			if (!usmc_rung_since(r->sk, r->arm_what, r->arm_seq))
				continue;
			r->armed = false;
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
 * A call returns leaving due records on the ready list (it had room for
 * fewer, or found them after the kernel woke it) while another thread of
 * the instance sleeps in the kernel: wake one, as the kernel's scan wakes
 * another waiter when its ready list is not empty.  Without it that
 * thread sleeps through them: their doorbell edge was the one this
 * thread took (one edge per re-arm: dev.h progress).  Caller holds
 * ep_lock, and is not counted asleep itself.
 */
void ep_pass_on(struct usmc_ep *ep)
{
	struct usmc_epreg *r;

	if (!ep->sleeping)
		return;
	for (r = ep->ready; r; r = r->ready_next)
		if (r->translated && !r->disabled && ep_reg_wants_look(r)) {
			ep_wake(ep);
			return;
		}
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

/* Does this epoll instance have level-triggered readiness the kernel
 * cannot see (for poll/select on an epoll descriptor)? */
void ep_sock_changed(struct usmc_sock *sk)
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
void ep_sock_edge(struct usmc_sock *sk)
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
