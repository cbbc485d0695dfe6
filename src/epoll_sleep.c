// SPDX-License-Identifier: MIT
/*
 * epoll_sleep.c - which link groups' doorbells an epoll instance sleeps on.
 *
 * A kick rings the peer's doorbell only while a waiter of that side sleeps
 * (wait.c): for epoll instances, the side's word in the link group
 * (usmc_lgr_sleepers).  Records stay armed across calls, so without it
 * the peer would ring for every armed record while the program is busy
 * (a write(2) per message for a waiter that is not asleep).
 *
 * An instance counts once per link group its records use (struct ep_lg,
 * one per group, kept by ep_lg_join/ep_lg_leave), while ep->sleeping:
 * a thread is between ep_sleep_enter (before its last look: arming and
 * re-checking, ep_arm_all_pending) and ep_sleep_exit (back from the
 * kernel).  A group joined while the instance sleeps counts at once,
 * before the record is armed (ep_fresh_wake).  A group left counts no
 * more, before the record's reference to it goes.
 *
 * Order: a spared ring is news found by looking, ordered among our records
 * by the kicks' times (epoll_bell.c ep_due_answered), but not against
 * events the kernel reports to the program directly: another descriptor
 * (a pipe, a listener), a connection on plain TCP or undecided, a connect
 * completing.  An instance that has any of those, or is watched from
 * outside (nested: whoever watches it may sleep any time), is *ordered*:
 * it counts all the time, so every kick rings and the kernel orders it, as
 * before.  It becomes ordered as soon as one comes (ep_sleep_order), and
 * is looked at again only when its last sleeper leaves.
 *
 * A count that is never taken back (a thread killed asleep, a process
 * gone, a group whose entry could not be allocated) only makes the peer
 * ring as it did before: never a lost wake-up.  Everything under ep_lock.
 */
#include "epoll_int.h"
#include "lgr.h"

#include <stdlib.h>

static void lg_count(struct ep_lg *e, int delta)
{
	atomic_fetch_add(usmc_lgr_sleepers(e->l, usmc_lgr_side(e->l)), (uint32_t)delta);
	e->counted = delta > 0;
}

/* The records of a link group's sockets that hold kernel entries, in
 * every instance (the group's epregs list); each keeps the link group
 * alive.  And the instance's entry for the group. */
void ep_lg_join(struct usmc_epreg *r)
{
	struct usmc_lgr *l = r->sk->lgr;
	struct usmc_ep *ep = r->ep;
	struct ep_lg *e;

	if (r->bell_lg || !l)
		return;
	usmc_lgr_hold(l);
	r->bell_lg = l;
	r->lg_prev = NULL;
	r->lg_next = l->epregs;
	if (l->epregs)
		l->epregs->lg_prev = r;
	l->epregs = r;
	for (e = ep->lgs; e; e = e->next)
		if (e->l == l)
			break;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			/* Untracked: the peer rings for this group for good. */
			atomic_fetch_add(usmc_lgr_sleepers(l, usmc_lgr_side(l)), 1);
			r->eplg = NULL;
			return;
		}
		e->l = l;
		e->spared_seen = LOAD_RELAXED(usmc_lgr_spared(l, usmc_lgr_side(l)));
		e->next = ep->lgs;
		ep->lgs = e;
	}
	e->records++;
	r->eplg = e;
	if ((ep->sleeping || ep->ordered) && !e->counted) {
		lg_count(e, 1);
		FENCE(memory_order_seq_cst);	/* before the record's arm and look */
	}
}

/* The instance's count for the group goes before the record's reference
 * to it. */
void ep_lg_leave(struct usmc_epreg *r)
{
	struct usmc_lgr *l = r->bell_lg;
	struct ep_lg *e = r->eplg, **pp;

	if (!l)
		return;
	r->eplg = NULL;
	if (e && !--e->records) {
		if (e->counted)
			lg_count(e, -1);
		for (pp = &r->ep->lgs; *pp; pp = &(*pp)->next)
			if (*pp == e) {
				*pp = e->next;
				break;
			}
		free(e);
	}
	if (r->lg_prev)
		r->lg_prev->lg_next = r->lg_next;
	else
		l->epregs = r->lg_next;
	if (r->lg_next)
		r->lg_next->lg_prev = r->lg_prev;
	r->bell_lg = NULL;
	r->lg_next = r->lg_prev = NULL;
	usmc_lgr_put(l);
}

/* Count the instance in every group it does not count in yet, then the
 * fence that pairs with the kick's (wait.c): our look after this sees its
 * cursor, or it sees our count. */
static void lgs_count_all(struct usmc_ep *ep)
{
	struct ep_lg *e;

	for (e = ep->lgs; e; e = e->next)
		if (!e->counted)
			lg_count(e, 1);
	FENCE(memory_order_seq_cst);
}

void ep_sleep_enter(struct usmc_ep *ep)
{
	if (ep->sleeping++ == 0)
		lgs_count_all(ep);
	else
		FENCE(memory_order_seq_cst);	/* counted already: the fence only */
}

/* Does the kernel report r's events to the program directly (plain TCP,
 * undecided, a connect completing), in an order against our records only
 * it knows (see above)? */
static bool reg_needs_order(const struct usmc_epreg *r)
{
	return !r->parked && !r->disabled && (!r->translated || r->undecided || r->tcp_out);
}

static bool ep_needs_order(struct usmc_ep *ep)
{
	struct usmc_epreg *r;

	if (ep->nested || LOAD_RELAXED(&ep->nforeign))
		return true;
	for (r = ep->regs; r; r = r->ep_next)
		if (reg_needs_order(r))
			return true;
	return false;
}

void ep_sleep_exit(struct usmc_ep *ep)
{
	struct ep_lg *e;

	if (--ep->sleeping)
		return;
	ep->ordered = ep_needs_order(ep);
	if (ep->ordered)
		return;
	for (e = ep->lgs; e; e = e->next)
		if (e->counted)
			lg_count(e, -1);
}

void ep_sleep_order(struct usmc_ep *ep)
{
	if (ep->ordered)
		return;
	ep->ordered = true;
	lgs_count_all(ep);
}

void ep_sleep_check(struct usmc_epreg *r)
{
	if (reg_needs_order(r))
		ep_sleep_order(r->ep);
}

/*
 * Every call: a kick the peer spared (nobody of ours asleep) answered an
 * arm that no doorbell will report, and an armed record is looked at only
 * before a sleep.  The group's spared count says which groups to look at
 * (acquire: pairs with the kicker's release after it published what it
 * answered).  Also while ordered: a kick that loaded the count just
 * before the instance counted itself may bump the spared count just after
 * it looked.  A group nobody spares stays in our cache: a load each.
 */
void ep_spared_scan(struct usmc_ep *ep)
{
	struct ep_lg *e;
	uint32_t v;

	for (e = ep->lgs; e; e = e->next) {
		v = atomic_load_explicit(usmc_lgr_spared(e->l, usmc_lgr_side(e->l)),
					 memory_order_acquire);
		if (v != e->spared_seen) {
			e->spared_seen = v;
			ep_bell_event(ep, e->l);
		}
	}
}

/*
 * Every call, before its looks: re-arm the doorbell of every group the
 * instance watches (dev.h progress).  An armed record stays armed across
 * calls, so no fresh arm would do it for its group; and an instance
 * watched from outside sleeps in its watcher's wait, which only its next
 * call here follows.  Each edge the instance takes re-arms its group too
 * (epoll_bell.c ep_bell_event).
 */
void ep_progress_all(struct usmc_ep *ep)
{
	struct usmc_epreg *r;
	struct ep_lg *e;

	if (likely(!LOAD_RELAXED(&usmc_dev_progressing)))
		return;
	for (e = ep->lgs; e; e = e->next)
		usmc_lgr_progress(e->l);
	/* Records whose group entry could not be allocated (ep_lg_join). */
	for (r = ep->regs; r; r = r->ep_next)
		if (r->bell_lg && !r->eplg)
			usmc_lgr_progress(r->bell_lg);
}

/* Fork child: the counts are the parent's, and so are its sleepers; an
 * ordered instance counts anew for the child. */
void ep_sleep_after_fork(struct usmc_ep *ep)
{
	struct ep_lg *e;
	bool ordered = ep->ordered;

	ep->sleeping = 0;
	ep->ordered = false;
	for (e = ep->lgs; e; e = e->next)
		e->counted = false;
	if (ordered)
		ep_sleep_order(ep);
}
