// SPDX-License-Identifier: MIT
/*
 * wait.c - waiting for a peer: adaptive spinning, then the doorbell.
 *
 * A sleeping wake-up (FIFO, eventfd, futex) costs about as much as a TCP
 * round trip on the machines we target, so a waiter first spins on the
 * cursors for up to a budget (USMC_BUSY_POLL, or the adaptive budget capped
 * by USMC_SPIN_US) unless the peer last ran on our CPU, where spinning only
 * delays it.  Then it arms, re-checks, and sleeps in poll(2) on its
 * thread's waitset (waitset.c: the link group's doorbell, edge-triggered)
 * and the TCP socket (FIN/RST there means the peer is gone).
 *
 * The arm/kick protocol that makes sleeping safe is CDC's (cdc.c): a
 * waiter arms, re-checks (wait_ready) and sleeps; a kicker publishes,
 * then rings only a waiter that sleeps where only a ring wakes it.
 */
#include "fdtab.h"
#include "options.h"
#include "real.h"
#include "sigrestart.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"
#include "tx.h"
#include "wait.h"
#include "waitset.h"

#include <fcntl.h>

#define SPIN_MIN_NS	2000
#define SPIN_CHECK	16	/* cursor checks (one pause each) between clock reads */

/* Would an operation of kind what make progress now (or fail)? */
static bool wait_ready(struct usmc_sock *sk, int what)
{
	uint32_t mode = sk_mode(sk);
	uint32_t f;

	if (mode != USMC_MODE_SMCD && mode != USMC_MODE_PROPOSED)
		return true;
	f = LOAD_ACQUIRE(&sk->sh->flags);
	if (f & (SKF_ABORTED | SKF_TCP_EOF))
		return true;
	if (sk->tx_c && (LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE))
		return true;	/* the peer moved to TCP: migrate.c */
	if (mode == USMC_MODE_PROPOSED) {
		uint64_t ans = LOAD_ACQUIRE(&sk->ctrl->s.answer);

		/* Nothing in the ring counts before the answer (usmc_unproven);
		 * our own shutdown does. */
		return (CDC_ANS_GEN(ans) == sk->gen && CDC_ANS_KIND(ans) != CDC_ANS_NONE) ||
		       ((what & USMC_WAIT_RX) && (f & SKF_SHUT_RD)) ||
		       ((what & USMC_WAIT_TX) && (f & SKF_SHUT_WR));
	}
	if (what & USMC_WAIT_RX) {
		uint64_t head, prod;

		if (f & SKF_SHUT_RD)
			return true;
		if (!usmc_rx_view(sk, &head, &prod))
			return true;
		if (prod != head) {
			/* Start pulling the first bytes from the writer's core
			 * now, under the way back to the copy (never faults). */
			__builtin_prefetch(sk->rx_ring + (head & (sk->size - 1)));
			return true;
		}
		if (LOAD_ACQUIRE(&sk->rx_p->flags) & (CDC_F_DONE | CDC_F_ABORT))
			return true;
	}
	if (what & USMC_WAIT_TX) {
		uint64_t head, prod;

		if (f & SKF_SHUT_WR)
			return true;
		if (!usmc_tx_view(sk, &head, &prod))
			return true;
		/* Free space we can use now, or by backing more of the ring:
		 * enough for a small write whole (tx.h). */
		if (prod - head < usmc_tx_cap(sk) &&
		    usmc_tx_cap(sk) - (prod - head) >= MAX(usmc_tx_whole(usmc_tx_cap(sk)), 1) &&
		    (prod == head || LOAD_RELAXED(&sk->sh->tx_hw) >= sk->size ||
		     (prod & (sk->size - 1)) < LOAD_RELAXED(&sk->sh->tx_hw) || !LOAD_RELAXED(&sk->sh->tx_stuck)))
			return true;
		if (LOAD_ACQUIRE(&sk->tx_c->flags) & (CDC_F_CLOSED | CDC_F_ABORT))
			return true;
	}
	return false;
}

bool usmc_arm(struct usmc_sock *sk, int what)
{
	uint32_t seq[3];

	return usmc_arm_seq(sk, what, seq);
}

/* One look at the open file, only where a sleep follows (it costs more);
 * what libc's fcntl and ioctl set we know already (interpose.c). */
bool usmc_sock_nonblock_now(struct usmc_sock *sk, int fd)
{
	int fl = fd >= 0 ? sys_fcntl(fd, F_GETFL, 0) : -1;

	if (fl < 0 || !(fl & O_NONBLOCK))
		return false;
	sk_set_flag(sk, SKF_NONBLOCK);
	return true;
}

int usmc_sock_timeout(struct usmc_sock *sk, int fd, int optname)
{
	_Atomic uint64_t *c = &sk->sh->timeo[optname == SO_SNDTIMEO];
	uint32_t ver = LOAD_ACQUIRE(&sk->sh->timeo_ver);
	uint64_t v = LOAD_RELAXED(c);
	struct timeval tv = { 0 };
	socklen_t len = sizeof(tv);
	int ms = -1;

	if (v && (uint32_t)(v >> 32) == ver)
		return (int)(uint32_t)v - 2;
	/* Asked after loading ver: a set that races with us bumps it later,
	 * and the value stored here is void. */
	if (!real.getsockopt(fd, SOL_SOCKET, optname, &tv, &len) && (tv.tv_sec || tv.tv_usec))
		ms = (int)MIN((long long)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000,
			      (long long)INT32_MAX - 2);
	STORE_RELAXED(c, ((uint64_t)ver << 32) | (uint32_t)(ms + 2));
	return ms;
}

bool usmc_arm_seq(struct usmc_sock *sk, int what, uint32_t seq[3])
{
	usmc_cdc_arm(sk, what, seq);
	return wait_ready(sk, what);
}

/* What the process's last spin feedback left: a new connection starts
 * there, not at the ceiling (short connections never learn their own). */
static _Atomic uint32_t spin_hint_ns;

static uint32_t spin_budget_ns(struct usmc_sock *sk, int what)
{
	uint32_t budget;

	(void)what;
	if (!usmc_opt.busy_poll_us && !usmc_opt.spin_us)
		return 0;
	/* The peer's last CPU (its own lines, a hint): spinning there starves
	 * it, in busy-poll mode too (it cannot run while we spin). */
	if (usmc_peer_on_cpu(sk, sched_getcpu()))
		return 0;
	if (usmc_opt.busy_poll_us)
		return (uint32_t)MIN(usmc_opt.busy_poll_us * 1000L, 1000000000L);
	budget = LOAD_RELAXED(&sk->sh->spin_ns);
	if (!budget)
		budget = LOAD_RELAXED(&spin_hint_ns);
	if (!budget)
		budget = (uint32_t)(usmc_opt.spin_us * 1000L);
	return budget;
}

/* Adapt: spinning that pays off keeps its budget, spinning that never
 * does shrinks (to SPIN_MIN_NS), so idle connections stop burning CPU. */
static void spin_feedback(struct usmc_sock *sk, bool hit, uint64_t spent)
{
	uint32_t max = (uint32_t)(usmc_opt.spin_us * 1000L), b = LOAD_RELAXED(&sk->sh->spin_ns);

	if (usmc_opt.busy_poll_us)
		return;
	if (!b)
		b = LOAD_RELAXED(&spin_hint_ns);
	if (!b)
		b = max;
	if (hit)
		b = (uint32_t)MIN((uint64_t)max, MAX((uint64_t)b, spent * 2 + SPIN_MIN_NS));
	else
		b = MAX(SPIN_MIN_NS, b / 2);
	/* Unchanged in the steady state: leave both lines alone (the hint
	 * is the whole process's, every spinning thread reads it). */
	if (LOAD_RELAXED(&sk->sh->spin_ns) != b)
		STORE_RELAXED(&sk->sh->spin_ns, b);
	if (LOAD_RELAXED(&spin_hint_ns) != b)
		STORE_RELAXED(&spin_hint_ns, b);
}

/* No waitset (no room for its descriptor): look at least this often. */
#define WAIT_SLICE_MIN_MS	1
#define WAIT_SLICE_MAX_MS	16

/*
 * Sleep until the condition holds, the TCP socket has news, the timeout
 * passes (-EAGAIN) or a signal comes (-EINTR).  A ring of the link group's
 * doorbell may be another connection's: look, arm again and sleep on with
 * what is left of the timeout, so that neighbours' traffic never stretches
 * SO_RCVTIMEO/SO_SNDTIMEO.
 */
static bool signal_due(const sigset_t *app);

static int wait_sleep_on(struct usmc_sock *sk, int fd, int what, int timeout_ms, int level,
			 int ws, const sigset_t *app)
{
	uint64_t t0 = usmc_now_ns(), now = t0, deadline = t0 + (uint64_t)timeout_ms * 1000000;
	int slice = WAIT_SLICE_MIN_MS, n, rc, ms;
	struct timespec ts;
	struct pollfd p[2];
	bool first = true;

	STAT_INC(sleeps);
	for (;;) {
		if (!first && usmc_arm(sk, what))
			return 0;
		first = false;
		n = 0;
		if (ws >= 0) {
			p[n].fd = ws;
			p[n].events = POLLIN;
			p[n].revents = 0;
			n++;
		}
		/* Watch TCP (peer death, TCP bytes) through a number that is
		 * still ours: the application may have closed fd meanwhile. */
		fd = usmc_sock_live_fd(sk, fd);
		if (fd >= 0 && !sk_flag(sk, SKF_TCP_EOF)) {
			p[n].fd = fd;
			p[n].events = POLLIN | POLLRDHUP;
			p[n].revents = 0;
			n++;
		}
		ms = timeout_ms < 0 ? -1 : (int)((deadline - now + 999999) / 1000000);
		if (ws < 0) {
			/* Nothing rings us: look, less often the longer it stays quiet. */
			ms = ms < 0 ? slice : MIN(ms, slice);
			slice = MIN(slice * 2, WAIT_SLICE_MAX_MS);
		}
		if (ms >= 0) {
			ts.tv_sec = ms / 1000;
			ts.tv_nsec = (long)(ms % 1000) * 1000000L;
		}
		rc = real.ppoll(p, (nfds_t)n, ms >= 0 ? &ts : NULL, app);
		if (rc < 0)
			return -errno;
		/* A signal came while the kernel had news for us: it stays
		 * pending (our mask is back) and is the caller's EINTR. */
		if (rc > 0 && signal_due(app))
			return -EINTR;
		if (ws >= 0 && rc > 0 && p[0].revents) {
			usmc_waitset_clear(level);
			/* Woken soon after falling asleep: a spin that long would
			 * have won. */
			if (usmc_now_ns() - t0 < (uint64_t)usmc_opt.spin_us * 1000)
				spin_feedback(sk, true, usmc_now_ns() - t0);
		}
		if (rc > 0 && p[n - 1].fd == fd && p[n - 1].revents) {
			usmc_check_tcp(sk, fd);
			return 0;	/* the caller looks at what TCP said */
		}
		if (wait_ready(sk, what))
			return 0;
		now = usmc_now_ns();
		if (timeout_ms >= 0 && now >= deadline)
			return -EAGAIN;
	}
}

/* Is a signal pending that the program's mask lets through and that runs
 * a handler?  (An ignored one interrupts no kernel call either.) */
static bool signal_due(const sigset_t *app)
{
	struct sigaction sa;
	sigset_t pend;
	int sig;

	if (sigpending(&pend))
		return false;
	for (sig = 1; sig < NSIG; sig++)
		if (sigismember(&pend, sig) == 1 && sigismember(app, sig) != 1 &&
		    real.sigaction && !real.sigaction(sig, NULL, &sa) && sa.sa_handler != SIG_IGN &&
		    sa.sa_handler != SIG_DFL)
			return true;
	return false;
}

/*
 * The kernel's blocking call returns EINTR for a signal that comes while it
 * waits; ours looks at the rings between sleeps, and a signal handled in
 * one of those moments would be lost (the JDK wakes a reader it closes the
 * socket under so: dup2 over the descriptor, then a signal without
 * SA_RESTART; its poll came back for the new file, the handler ran, and
 * the read slept on).  So signals stay blocked between our looks and only
 * the kernel's wait lets them in (ppoll with the program's mask): each one
 * interrupts a wait, now or at the next, or is seen pending after one.
 */
static int wait_sleep(struct usmc_sock *sk, int fd, int what, int timeout_ms, int level, int ws)
{
	sigset_t app;
	int rc;

	usmc_sig_block_nonfault(&app);
	rc = wait_sleep_on(sk, fd, what, timeout_ms, level, ws, &app);
	pthread_sigmask(SIG_SETMASK, &app, NULL);
	return rc;
}

/*
 * The peer last waited on our CPU: spinning would only keep it from
 * running, and a sleep costs a doorbell and a wake-up each way.  Hand the
 * CPU over instead (sched_yield) and look again: a peer that was waiting
 * in the same way runs at once, answers without ringing (we are not
 * armed) and hands it back, one system call and one context switch per
 * hop.  A peer that does not answer within USMC_WAIT_YIELDS looks leaves us to
 * sleep as usual; with nothing else runnable each look costs a system
 * call.  Off where spinning is (USMC_SPIN_US=0 and no USMC_BUSY_POLL).
 */
static bool wait_handover(struct usmc_sock *sk, int cpu, int what)
{
	int i;

	if ((!usmc_opt.busy_poll_us && !usmc_opt.spin_us) || !usmc_peer_on_cpu(sk, cpu))
		return false;
	for (i = 0; i < USMC_WAIT_YIELDS; i++) {
		sched_yield();
		if (wait_ready(sk, what)) {
			STAT_INC(spin_hits);
			return true;
		}
	}
	return false;
}

int usmc_wait(struct usmc_sock *sk, int fd, int what, int timeout_ms)
{
	uint32_t budget;
	uint64_t t0;
	int cpu, rc, level, ws;

	cpu = sched_getcpu();
	usmc_publish_cpu(sk, cpu);
	budget = timeout_ms == 0 ? 0 : spin_budget_ns(sk, what);
	if (budget) {
		uint64_t now;
		int i;

		/* A pause is 25 ns and a clock read as much on the machines we
		 * measure: look at the cursors after every pause, at the clock
		 * every SPIN_CHECK of them (a look is a few L1 hits until the
		 * peer's store takes the line away). */
		now = t0 = usmc_now_ns();
		do {
			for (i = 0; i < SPIN_CHECK; i++) {
				cpu_relax();
				if (wait_ready(sk, what)) {
					/* No clock read between the peer's store and
					 * our return: the last one is SPIN_CHECK
					 * pauses short at most, nothing next to the
					 * SPIN_MIN_NS the feedback adds. */
					spin_feedback(sk, true, now - t0);
					STAT_INC(spin_hits);
					return 0;
				}
			}
			now = usmc_now_ns();
		} while (now - t0 < budget);
		spin_feedback(sk, false, budget);
	}

	if (timeout_ms == 0) {
		usmc_arm(sk, what);
		return wait_ready(sk, what) ? 0 : -EAGAIN;
	}
	if (!budget && wait_handover(sk, cpu, what))
		return 0;
	/*
	 * Every waiter on its own instance (waitset.c): a reader and a writer
	 * of one socket, threads on different connections of one link group
	 * and forked workers each get every ring, and nobody's sleep takes
	 * another's.  The doorbell is watched before we arm, so a ring after
	 * the arm always leaves an edge; edges left from before only make us
	 * look again.  Each arms only its own direction: a reader's sleep
	 * does not make the peer ring for space it frees.
	 */
	/* Going to sleep: a ring of ours that grew gives back what it no
	 * longer holds (tx_backing.c). */
	usmc_tx_idle_check(sk);
	if (timeout_ms != 0 && usmc_sock_nonblock_now(sk, fd))
		return -EAGAIN;
	level = usmc_waitset_enter();
	ws = usmc_waitset_fd(level);
	if (ws >= 0 && (sk->bell_own < 0 || usmc_waitset_watch(level, sk->lgr, sk->bell_own)))
		ws = -1;
	if (ws >= 0)
		usmc_waitset_prune(level);
	usmc_wait_count(sk, what, 1);
	rc = usmc_arm(sk, what) ? 0 : wait_sleep(sk, fd, what, timeout_ms, level, ws);
	usmc_wait_count(sk, what, -1);
	/* A handler's wait on the instance of the wait it interrupted may
	 * have taken that one's edge: make it look again. */
	if (usmc_waitset_nested(level) && sk->bell_own >= 0)
		sk->lgr->dev->signal(sk->lgr, sk->bell_own);
	usmc_waitset_leave(level);
	return rc;
}
