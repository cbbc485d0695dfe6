// SPDX-License-Identifier: MIT
/*
 * epoll_bell.c - a link group's doorbell rang in an epoll instance.
 *
 * The doorbell is shared by the group's connections, and the kernel
 * coalesces its edges into one event: which armed records of the instance
 * the rings answered, and in which order they were sent, comes from the
 * words the ringing side publishes (wait.c usmc_rung_since).
 */
#include "epoll_int.h"
#include "lgr.h"

#define EP_BELL_BATCH	64

struct ep_due {
	uint64_t at;
	struct usmc_epreg *r;
};

/* Push in the order the rings were sent; the kernel coalesced them. */
static void due_push(struct ep_due *due, int n)
{
	int i, j;

	for (i = 1; i < n; i++) {
		struct ep_due d = due[i];

		for (j = i; j > 0 && due[j - 1].at > d.at; j--)
			due[j] = due[j - 1];
		due[j] = d;
	}
	for (i = 0; i < n; i++)
		ep_ready_push(due[i].r);
}

/* s is due if a kick answered its arm: into due[] (flushed in kick order
 * when full). */
static void due_add(struct usmc_epreg *s, struct ep_due *due, int *n)
{
	uint64_t at;

	if (!s->armed || !s->translated)
		return;
	at = usmc_rung_since(s->sk, s->arm_what, s->arm_seq);
	if (!at)
		return;
	if (*n == EP_BELL_BATCH) {
		due_push(due, *n);
		*n = 0;
	}
	due[*n].at = at;
	due[*n].r = s;
	(*n)++;
}

/*
 * The link group's doorbell rang: its armed records in this instance whose
 * arm a ring answered are due, in the order the rings were sent (the
 * kernel's order, had each had a doorbell of its own).  Unarmed records
 * are on the ready or the watch list: seen anyway.  Caller holds ep_lock.
 */
void ep_bell_event(struct usmc_ep *ep, struct usmc_lgr *l)
{
	struct ep_due due[EP_BELL_BATCH];
	struct usmc_epreg *s;
	int n = 0;

	/* An edge taken is a doorbell to re-arm (dev.h progress) before we
	 * look: another thread of the instance, or its watcher, may sleep
	 * on it, and a ring dropped meanwhile is seen by the look below
	 * (the kicker stored what it answered before its exchange). */
	if (l && usmc_lgr_progress(l))
		FENCE(memory_order_seq_cst);
	for (s = l ? l->epregs : NULL; s; s = s->lg_next)
		if (s->ep == ep)
			due_add(s, due, &n);
	due_push(due, n);
}

/* Armed records of ep whose arm a kick answered, whether it rang or was
 * spared (wait.c), in the order of the kicks.  Caller holds ep_lock. */
void ep_due_answered(struct usmc_ep *ep)
{
	struct ep_due due[EP_BELL_BATCH];
	struct usmc_epreg *s;
	int n = 0;

	for (s = ep->regs; s; s = s->ep_next)
		if (!s->disabled && !s->on_ready)
			due_add(s, due, &n);
	due_push(due, n);
}
