// SPDX-License-Identifier: MIT
/*
 * wait.c - waiting for a peer: adaptive spinning, then the doorbell.
 *
 * A sleeping wake-up (FIFO, eventfd, futex) costs about as much as a TCP
 * round trip on the machines we target, so a waiter first spins on the
 * cursors for up to a budget (USMC_BUSY_POLL, or the adaptive budget capped
 * by USMC_SPIN_US) unless the peer last ran on our CPU, where spinning only
 * delays it.  Then it arms its doorbell, re-checks, and sleeps in poll(2)
 * on the doorbell and the TCP socket (FIN/RST there means the peer is gone).
 *
 * Arm/kick protocol (pairs of full fences, see cdc.h):
 *   waiter: drain bell; armed++; fence; re-check; sleep
 *   kicker: publish cursor; fence; if (armed != rung) { rung = armed; ring }
 * The drain happens before arming so a wake-up for this arm is never eaten.
 */
#include "af_usmc.h"
#include "epoll.h"
#include "log.h"
#include "options.h"
#include "real.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>

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

		if (CDC_ANS_GEN(ans) == sk->gen && CDC_ANS_KIND(ans) != CDC_ANS_NONE)
			return true;
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
		/* Free space we can use now, or by backing more of the ring. */
		if (prod - head < usmc_tx_cap(sk) &&
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
	if (what & USMC_WAIT_RX)
		atomic_fetch_add_explicit(&sk->rx_c->data_armed, 1, memory_order_relaxed);
	if (what & USMC_WAIT_TX)
		atomic_fetch_add_explicit(&sk->tx_p->space_armed, 1, memory_order_relaxed);
	/* Pairs with the fence in usmc_kick_*(): either we see their cursor
	 * or they see our arm. */
	FENCE(memory_order_seq_cst);
	return wait_ready(sk, what);
}

void usmc_kick_data(struct usmc_sock *sk)
{
	uint32_t armed;

	FENCE(memory_order_seq_cst);
	armed = LOAD_RELAXED(&sk->tx_c->data_armed);
	if (armed != sk->sh->data_rung) {
		sk->sh->data_rung = armed;
		sk->lgr->dev->signal(sk->bell_peer);
		STAT_INC(doorbells);
	}
}

void usmc_kick_space(struct usmc_sock *sk)
{
	uint32_t armed;

	FENCE(memory_order_seq_cst);
	armed = LOAD_RELAXED(&sk->rx_p->space_armed);
	if (armed != sk->sh->space_rung) {
		sk->sh->space_rung = armed;
		sk->lgr->dev->signal(sk->bell_peer);
		STAT_INC(doorbells);
	}
}

void usmc_check_tcp(struct usmc_sock *sk, int fd)
{
	usmc_check_tcp_fd(sk, fd, true);
}

void usmc_check_tcp_fd(struct usmc_sock *sk, int fd, bool installed)
{
	char c;
	ssize_t n;

	/* A connect that failed reports it here too (POLLERR/EPOLLERR), and
	 * a peek would take the kernel's pending error: settle the connect
	 * first, so the application's SO_ERROR still finds it. */
	if (sk_flag(sk, SKF_CONNECTING) && usmc_sock_connect_done(sk, fd))
		return;
	if (usmc_sock_proposal_reset(sk, fd))
		return;
	while (!sk_flag(sk, SKF_TCP_EOF)) {
		/* The client's wake byte comes first on TCP: a descriptor
		 * nobody else can have reused gives it up without a look. */
		bool take = !installed && sk_flag(sk, SKF_WAKEBYTE);

		n = real.recv(fd, &c, 1, MSG_DONTWAIT | (take ? 0 : MSG_PEEK));
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		/* The application closed this number under us (another thread
		 * still in a call on the socket, as the kernel allows): not the
		 * peer's doing; the socket lives on until that call returns. */
		if ((n < 0 && (errno == EBADF || errno == ENOTSOCK)) ||
		    (installed && usmc_sock_live_fd(sk, fd) != fd))
			return;
		if (n <= 0) {
			/* FIN or RST: every process on the other side closed it. */
			sk_set_flag(sk, SKF_TCP_EOF);
			return;
		}
		if (take) {
			sk_clear_flag(sk, SKF_WAKEBYTE);
			continue;
		}
		if (sk_flag(sk, SKF_WAKEBYTE)) {
			/* The client's CLC wake byte (clc.h): consume it. */
			if (real.recv(fd, &c, 1, MSG_DONTWAIT) == 1)
				sk_clear_flag(sk, SKF_WAKEBYTE);
			continue;
		}
		if (sk_mode(sk) == USMC_MODE_PROPOSED) {
			bool declined = false;

			/* A TCP byte on a proposed connection: the server's
			 * decline byte (its answer is in the index, clc.h), or
			 * the server is not taking part (a NAT, a listener we
			 * could not see): withdraw.  Queued bytes follow on TCP. */
			pthread_mutex_lock(&sk->lock);
			if (usmc_migrate_declined(sk)) {
				declined = true;
			} else if (sk_mode(sk) == USMC_MODE_PROPOSED &&
				   usmc_clc_withdraw(sk->ln, &sk->local)) {
				STORE_RELAXED(&sk->sh->reason, USMC_R_WITHDRAWN);
				sk->migrate_pos = LOAD_RELAXED(&sk->tx_c->cons);
				sk->migrate_end = MIGRATE_END_UNKNOWN;
				sk_set_mode(sk, USMC_MODE_MIGRATING);
				usmc_dbg(1, "fd %d: proposal withdrawn, queued bytes move to TCP", fd);
			}
			pthread_mutex_unlock(&sk->lock);
			if (declined)
				continue;	/* consume the decline byte */
			return;
		}
		if (sk_mode(sk) == USMC_MODE_MIGRATING) {
			sk_set_flag(sk, SKF_TCP_DATA);	/* the peer's bytes after the switch */
			return;
		}
		if (sk->tx_c && (LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE)) {
			/* The peer moved to TCP and already sent there. */
			usmc_migrate_follow(sk, fd);
			sk_set_flag(sk, SKF_TCP_DATA);
			return;
		}
		if (sk_mode(sk) == USMC_MODE_SMCD) {
			/* An honest peer sends nothing on TCP once on SMC. */
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			sk_set_flag(sk, SKF_TCP_EOF);
		}
		return;
	}
}

void usmc_publish_cpu(struct usmc_sock *sk, int cpu)
{
	/* Our CPU, in both of our own lines: a hint for the peer's decision
	 * to spin (spinning on the CPU the other side needs only delays it). */
	if (cpu < 0)
		return;
	if (LOAD_RELAXED(&sk->rx_c->cpu) != (uint32_t)cpu + 1)
		STORE_RELAXED(&sk->rx_c->cpu, (uint32_t)cpu + 1);
	if (LOAD_RELAXED(&sk->tx_p->cpu) != (uint32_t)cpu + 1)
		STORE_RELAXED(&sk->tx_p->cpu, (uint32_t)cpu + 1);
}

bool usmc_peer_on_cpu(struct usmc_sock *sk, int cpu)
{
	return cpu >= 0 && (LOAD_RELAXED(&sk->rx_p->cpu) == (uint32_t)cpu + 1 ||
			    LOAD_RELAXED(&sk->tx_c->cpu) == (uint32_t)cpu + 1);
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

/* Followers sleep here; 0 when woken (or the word moved), -EAGAIN on
 * timeout, -EINTR.  The family region is MAP_SHARED: a shared futex. */
static int futex_wait(_Atomic uint32_t *word, uint32_t seq, int timeout_ms)
{
	struct timespec ts, *tp = NULL;
	long rc;

	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
		tp = &ts;
	}
	rc = sys_ret(usmc_sys6(SYS_futex, (long)word, FUTEX_WAIT, seq, (long)tp, 0, 0));
	if (rc < 0 && errno == ETIMEDOUT)
		return -EAGAIN;
	if (rc < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

/*
 * A follower sleeps until the leader wakes.  Should the leader's process
 * die while leading (SIGKILL of a forked worker), nobody would bump the
 * word: so a follower looks, every FOLLOW_CHECK_MS, whether the leader
 * still exists and takes its place if not.
 */
#define FOLLOW_CHECK_MS	250

static int follower_wait(struct usmc_sock *sk, uint32_t seq, uint32_t leader, int timeout_ms)
{
	int slice, rc;

	for (;;) {
		slice = timeout_ms < 0 || timeout_ms > FOLLOW_CHECK_MS ? FOLLOW_CHECK_MS : timeout_ms;
		rc = futex_wait(&sk->sh->wake_seq, seq, slice);
		if (rc != -EAGAIN)
			return rc;
		if (timeout_ms >= 0 && (timeout_ms -= slice) <= 0)
			return -EAGAIN;
		if (sys_ret(usmc_sys(SYS_tgkill, LOAD_RELAXED(&sk->sh->bell_owner_pid), leader, 0)) &&
		    errno == ESRCH && atomic_compare_exchange_strong(&sk->sh->bell_owner, &leader, 0))
			return 0;	/* the leader is gone: look again (and lead) */
		if (LOAD_ACQUIRE(&sk->sh->bell_owner) != leader)
			return 0;
	}
}

/* Let the followers look again (they re-check readiness themselves).
 * Seq-cst: against a follower's increment of followers before its load of
 * wake_seq; either it sees the new seq or we see it counted. */
static void wake_followers(struct usmc_sock *sk)
{
	atomic_fetch_add(&sk->sh->wake_seq, 1);
	if (atomic_load(&sk->sh->followers))
		usmc_sys6(SYS_futex, (long)&sk->sh->wake_seq, FUTEX_WAKE, INT_MAX, 0, 0, 0);
}

/* The leader woke (or gave up). */
static void leader_done(struct usmc_sock *sk)
{
	STORE_RELEASE(&sk->sh->bell_owner, 0);
	wake_followers(sk);
}

/*
 * The end of a nested lead (a signal handler's wait while this thread
 * already leads further up its stack, see usmc_wait): the lead stays with
 * the outer wait.  We may have drained a ring meant for it, and it may be
 * just about to sleep (the signal came before its poll): ring our own
 * doorbell so that it looks again instead.
 */
static void nested_done(struct usmc_sock *sk)
{
	sk->lgr->dev->signal(sk->bell_own);
	wake_followers(sk);
}

int usmc_wait(struct usmc_sock *sk, int fd, int what, int timeout_ms)
{
	struct pollfd p[2];
	uint32_t budget, seq, leader, me;
	uint64_t t0;
	int cpu, n, rc, err;
	bool nested;

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
	/*
	 * One doorbell per side, possibly many waiting threads (a reader and
	 * a writer of one socket, or two readers): draining it for one must
	 * never swallow the wake-up of another.  So only one thread at a
	 * time, the leader, drains and sleeps on the doorbell; the others arm
	 * for what they wait for (the peer rings the same doorbell) and sleep
	 * on a futex in the family region that the leader bumps whenever it
	 * wakes, and whenever it drained rings that may have been theirs.
	 * Each arms only its own direction: a reader's sleep does not make
	 * the peer ring for space it frees.
	 */
	leader = 0;
	me = (uint32_t)gettid();
	/* Already ours: a signal handler called into us while this thread
	 * leads a wait on this socket further up its stack (a send from a
	 * handler that interrupted a blocked send or recv, as TCP allows).
	 * Following would wait for ourselves forever: lead here too. */
	nested = LOAD_RELAXED(&sk->sh->bell_owner) == me;
	if (!nested && !atomic_compare_exchange_strong(&sk->sh->bell_owner, &leader, me)) {
		atomic_fetch_add(&sk->sh->followers, 1);
		seq = atomic_load(&sk->sh->wake_seq);
		if (usmc_arm(sk, what)) {
			atomic_fetch_sub(&sk->sh->followers, 1);
			return 0;
		}
		STAT_INC(sleeps);
		rc = follower_wait(sk, seq, leader, timeout_ms);
		atomic_fetch_sub(&sk->sh->followers, 1);
		return rc;
	}
	STORE_RELAXED(&sk->sh->bell_owner_pid, (uint32_t)usmc_getpid());
	sk->lgr->dev->drain(sk->bell_own);
	if (atomic_load(&sk->sh->followers))
		wake_followers(sk);
	if (usmc_arm(sk, what)) {
		if (nested)
			nested_done(sk);
		else
			leader_done(sk);
		return 0;
	}
	p[0].fd = sk->bell_own;
	p[0].events = POLLIN;
	p[0].revents = 0;
	n = 1;
	/* Watch TCP (peer death, TCP bytes) through a number that is still
	 * ours: the application may have closed fd while we wait. */
	fd = usmc_sock_live_fd(sk, fd);
	if (fd >= 0 && !sk_flag(sk, SKF_TCP_EOF)) {
		p[1].fd = fd;
		p[1].events = POLLIN | POLLRDHUP;
		p[1].revents = 0;
		n = 2;
	}
	STAT_INC(sleeps);
	t0 = usmc_now_ns();
	rc = real.poll(p, (nfds_t)n, timeout_ms);
	err = rc < 0 ? -errno : 0;
	if (rc > 0 && n == 2 && p[1].revents)
		usmc_check_tcp(sk, fd);
	if (nested)
		nested_done(sk);
	else
		leader_done(sk);
	if (err)
		return err;
	/* Woken soon after falling asleep: spinning that long would have won. */
	if (rc > 0 && p[0].revents)
		spin_feedback(sk, true, usmc_now_ns() - t0);
	if (rc == 0)
		return -EAGAIN;
	return 0;
}
