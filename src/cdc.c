// SPDX-License-Identifier: MIT
/*
 * cdc.c - Connection Data Control: the doorbell half of the protocol whose
 * lines and cursor rules cdc.h defines (the kernel's smc_cdc.c role).
 * Every store into a shared line is a cdc.h primitive; every kick, ring
 * and arm is here.  wait.c sleeps on what this publishes.
 *
 * Arm/kick protocol (pairs of full fences):
 *   waiter: sleepers++; armed++; fence; re-check; sleep; sleepers--
 *   kicker: publish cursor; fence;
 *           if (armed != rung) { rung = armed; (seq_cst) if (sleepers) ring }
 * An arm outlives the sleep it was made for (epoll keeps records armed
 * across calls: its re-check after sleepers++ also asks whether a kick
 * answered an arm made before, and arms anew if so, epoll_ready.c
 * ep_arm_all_pending), so the kicker rings only while a waiter of the other side
 * sleeps where only a ring wakes it: one blocked on this connection
 * (usmc_wait, poll: the waiting word of the line that holds the arm) or an
 * epoll instance on the link group (its side's word, lgr.h).  Either the
 * sleeper's re-check sees the cursor or the kicker sees the count; a kick
 * that finds nobody asleep still publishes what it answered (rung, with
 * its time), so a waiter that looks instead of sleeping sees the news and
 * its order, and costs the kicker no system call (doorbells_spared); it
 * bumps the group's spared count instead, which awake epoll instances look
 * at on every call (their armed records are not looked at otherwise).
 * The doorbell is the link group's, one per side for all its slots: the
 * kicker also publishes the armed value it rang for in its own line
 * (data_rung, space_rung), so that an epoll instance woken by the shared
 * doorbell tells which of its armed connections the ring was for
 * (usmc_rung_since).  Rings that are not answers to an arm (a reset, a
 * migration) publish every arm as answered; rings of our own doorbell
 * (shutdown wakes our own sleepers) count in sh->own_rung.
 * A device whose doorbell raises one edge per re-arm (dev.h progress:
 * SMC-R's CQ notification) is re-armed by every arm, before its fence,
 * by every epoll call before it looks (epoll_sleep.c ep_progress_all)
 * and by every edge an epoll instance takes (epoll_bell.c): a kick that
 * sees our arm finds the doorbell armed, and an edge one sleeper took
 * leaves it armed for the next ring another sleeper needs.
 */
#include "cdc.h"
#include "lgr.h"
#include "sock.h"
#include "stats.h"

/* Arm for what: bump our arm counters (seq: their new values, and our own
 * ring count), then the fence that pairs with a kicker's.  The caller
 * re-checks and sleeps only if nothing changed (wait.c). */
void usmc_cdc_arm(struct usmc_sock *sk, int what, uint32_t seq[3])
{
	seq[0] = seq[1] = 0;
	seq[2] = LOAD_ACQUIRE(&sk->sh->own_rung);
	if (sk->lgr)
		usmc_lgr_progress(sk->lgr);
	if (what & USMC_WAIT_RX)
		seq[0] = cdc_arm_data(sk->rx_c);
	if (what & USMC_WAIT_TX)
		seq[1] = cdc_arm_space(sk->tx_p);
	/* Pairs with the fence in usmc_kick_*(): either we see their cursor
	 * or they see our arm. */
	FENCE(memory_order_seq_cst);
}

/*
 * Has a ring answered the arm that returned seq?  The peer publishes what
 * it rang for after loading our counter past its fence, so a value at or
 * beyond ours means news since our arm.  0: no; else when the first ring
 * that did was sent (1 for our own), for epoll's first come, first served
 * order.  The peer's words: a lie only loses, adds or reorders wake-ups of
 * its own connections.
 */
uint64_t usmc_rung_since(struct usmc_sock *sk, int what, const uint32_t seq[3])
{
	uint64_t at = 0, t;

	if (LOAD_ACQUIRE(&sk->sh->own_rung) != seq[2])
		return 1;
	if ((what & USMC_WAIT_RX) && (int32_t)(LOAD_ACQUIRE(&sk->rx_p->data_rung) - seq[0]) >= 0)
		at = LOAD_RELAXED(&sk->rx_p->data_rung_ns) | 1;
	if ((what & USMC_WAIT_TX) && (int32_t)(LOAD_ACQUIRE(&sk->tx_c->space_rung) - seq[1]) >= 0) {
		t = LOAD_RELAXED(&sk->tx_c->space_rung_ns) | 1;
		at = at ? MIN(at, t) : t;
	}
	return at;
}

/* Our own line: only ever forward (two rings of one family may race);
 * the time first, so that whoever sees the count sees when.  seq_cst,
 * as kick_ring's loads after it: the count a kick answered comes before
 * its look at the sleepers in the single total order, so that a sleeper
 * it did not see finds the answer after its own fence (epoll_ready.c
 * ep_arm_all_pending: an arm answered while the instance was awake). */
static void rung_publish(_Atomic uint32_t *word, _Atomic uint64_t *ns, uint32_t v)
{
	uint32_t cur = LOAD_RELAXED(word);
	int i;

	STORE_RELAXED(ns, usmc_now_ns());
	CDC_MIRROR(ns);
	for (i = 0; i < 8 && (int32_t)(v - cur) > 0; i++)
		if (atomic_compare_exchange_weak_explicit(word, &cur, v, memory_order_seq_cst,
							  memory_order_relaxed)) {
			CDC_MIRROR(word);
			return;
		}
}

/* After a kick's fence: does a waiter of the peer sleep where only our
 * ring wakes it?  waiting: the peer's word in the line that holds its arm.
 * seq_cst loads, after rung_publish's seq_cst store: an epoll arm outlives
 * the sleep it was made for, so the kick's fence alone orders the arm we
 * answer, not our answer, against a later sleep's count and look. */
static void kick_ring(struct usmc_sock *sk, _Atomic uint32_t *waiting)
{
	int peer = usmc_lgr_side(sk->lgr) ^ 1;

	if (atomic_load(waiting) || atomic_load(usmc_lgr_sleepers(sk->lgr, peer))) {
		sk->lgr->dev->signal(sk->lgr, sk->bell_peer);
		STAT_INC(doorbells);
	} else {
		/* After rung_publish: whoever sees the count sees what the
		 * kick answered (epoll_sleep.c ep_spared_scan). */
		atomic_fetch_add_explicit(usmc_lgr_spared(sk->lgr, peer), 1, memory_order_release);
		STAT_INC(doorbells_spared);
	}
}

void usmc_kick_data(struct usmc_sock *sk)
{
	uint32_t armed;

	FENCE(memory_order_seq_cst);
	armed = LOAD_RELAXED(&sk->tx_c->data_armed);
	if (armed != sk->sh->data_rung) {
		sk->sh->data_rung = armed;
		rung_publish(&sk->tx_p->data_rung, &sk->tx_p->data_rung_ns, armed);
		kick_ring(sk, &sk->tx_c->waiting);
	}
}

void usmc_kick_space(struct usmc_sock *sk)
{
	uint32_t armed;

	FENCE(memory_order_seq_cst);
	armed = LOAD_RELAXED(&sk->rx_p->space_armed);
	if (armed != sk->sh->space_rung) {
		sk->sh->space_rung = armed;
		rung_publish(&sk->rx_c->space_rung, &sk->rx_c->space_rung_ns, armed);
		kick_ring(sk, &sk->rx_p->waiting);
	}
}

/*
 * A wait on sk (usmc_wait, poll) goes to sleep (delta 1) or is done (-1):
 * count it in the waiting word of each line that holds one of its arms,
 * before the arm's fence, so that a kick after the re-check rings (see
 * above).  Our own lines: they stay mapped while the connection does.
 */
void usmc_wait_count(struct usmc_sock *sk, int what, int delta)
{
	if (!sk->lgr || !sk->rx_c || !sk->tx_p)
		return;
	if (what & USMC_WAIT_RX)
		cdc_waiting_add(&sk->rx_c->waiting, delta);
	if (what & USMC_WAIT_TX)
		cdc_waiting_add(&sk->tx_p->waiting, delta);
}

void usmc_ring_lines(struct usmc_lgr *l, int bell, struct usmc_cdc_prod *my_p,
		     struct usmc_cdc_cons *my_c, struct usmc_cdc_cons *peer_c,
		     struct usmc_cdc_prod *peer_p)
{
	FENCE(memory_order_seq_cst);
	rung_publish(&my_p->data_rung, &my_p->data_rung_ns, LOAD_RELAXED(&peer_c->data_armed));
	rung_publish(&my_c->space_rung, &my_c->space_rung_ns, LOAD_RELAXED(&peer_p->space_armed));
	l->dev->signal(l, bell);
}

void usmc_ring_peer(struct usmc_sock *sk)
{
	usmc_ring_lines(sk->lgr, sk->bell_peer, sk->tx_p, sk->rx_c, sk->tx_c, sk->rx_p);
}

void usmc_ring_own(struct usmc_sock *sk)
{
	atomic_fetch_add(&sk->sh->own_rung, 1);
	sk->lgr->dev->signal(sk->lgr, sk->bell_own);
}

void usmc_publish_cpu(struct usmc_sock *sk, int cpu)
{
	/* Our CPU, in both of our own lines: a hint for the peer's decision
	 * to spin (spinning on the CPU the other side needs only delays it). */
	if (cpu < 0)
		return;
	cdc_cpu_hint(&sk->rx_c->cpu, cpu);
	cdc_cpu_hint(&sk->tx_p->cpu, cpu);
}

bool usmc_peer_on_cpu(struct usmc_sock *sk, int cpu)
{
	return cpu >= 0 && (LOAD_RELAXED(&sk->rx_p->cpu) == (uint32_t)cpu + 1 ||
			    LOAD_RELAXED(&sk->tx_c->cpu) == (uint32_t)cpu + 1);
}
