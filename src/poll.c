// SPDX-License-Identifier: MIT
/*
 * poll.c - poll(2), ppoll(2), select(2), pselect(2) over sets that mix
 * shared-memory connections with anything else.
 *
 * A set without shared-memory connections goes straight to the kernel.
 * Otherwise: report what is ready now; if nothing is, spin briefly (only
 * when every descriptor is ours), arm, and sleep in the kernel on the
 * application's other descriptors, per connection its TCP socket (FIN/RST =
 * peer gone), and the thread's waitset watching the connections' link group
 * doorbells (waitset.c).  Readiness of a connection is always recomputed
 * from the rings, never taken from the doorbell.
 */
#include "accept.h"
#include "af_usmc.h"
#include "epoll.h"
#include "fdtab.h"
#include "log.h"
#include "migrate.h"
#include "options.h"
#include "poll.h"
#include "real.h"
#include "rx.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"
#include "tx.h"
#include "wait.h"
#include "waitset.h"

#include <stdlib.h>
#include <sys/select.h>

#define POLL_STACK	32

struct pent {
	struct usmc_sock *sk;
	int idx;			/* index in the application's array */
	int counted;			/* what usmc_wait_count() counted for the sleep */
};

static short app_mask(short events)
{
	return (short)(events | POLLERR | POLLHUP | POLLNVAL);
}

/* Readiness of a translated connection; may settle connect/CLC state. */
short usmc_poll_revents(struct usmc_sock *sk, int fd, short events)
{
	unsigned int ev;

	usmc_sock_refresh(sk, fd);
	ev = usmc_sock_poll(sk);
	/* Urgent data arrives on TCP only (tx.c), while the ring may still
	 * hold what came before it: the kernel tells. */
	if (unlikely(events & POLLPRI) && sk_mode(sk) == USMC_MODE_MIGRATING) {
		struct pollfd p = { .fd = fd, .events = POLLPRI };

		if (real.poll(&p, 1, 0) == 1)
			ev |= p.revents & POLLPRI;
	}
	return (short)(ev & (unsigned int)app_mask(events));
}

bool usmc_poll_translated(struct usmc_sock *sk)
{
	uint32_t m;

	if (sk->kind != SK_CONN)
		return false;
	m = sk_mode(sk);
	return m == USMC_MODE_SMCD || m == USMC_MODE_MIGRATING ||
	       (m == USMC_MODE_PROPOSED && !sk_flag(sk, SKF_CONNECTING));
}

/*
 * A server connection still undecided is polled as plain TCP; when its TCP
 * socket turns readable (the client's wake message, or real TCP bytes) it is
 * settled, and if it moved onto shared memory the poll starts over with
 * its readiness taken from the rings instead.
 */
static bool poll_undecided_moved(struct pollfd *fds, nfds_t n)
{
	bool moved = false;
	nfds_t j;

	for (j = 0; j < n; j++) {
		struct usmc_sock *sk;

		if (!(fds[j].revents & POLLIN) || fds[j].fd < 0)
			continue;
		sk = usmc_fd_get(fds[j].fd);
		if (!sk)
			continue;
		if (sk_mode(sk) == USMC_MODE_UNDECIDED) {
			usmc_server_resolve(sk, fds[j].fd, false);
			if (usmc_poll_translated(sk))
				moved = true;
		}
		usmc_sock_put(sk);
	}
	return moved;
}

/*
 * A connection on TCP that owes a byte that is not the program's (the
 * CLC wake or DECLINE message, bytes a move to TCP sent again) is readable to
 * the kernel for it, as TCP would not be: taken before the look when it is
 * there already; a connection still owing one is looked at again after
 * the kernel's answer.
 */
static bool poll_owes(struct usmc_sock *sk, int fd)
{
	if (!sk_owes_bytes(sk))
		return false;
	usmc_tcp_skip_wake(sk, fd, true);
	return sk_owes_bytes(sk);
}

/* After the kernel said readable: take what is owed, then ask the kernel
 * again for those descriptors.  Returns how many entries are ready. */
static int poll_settle_owed(struct pollfd *fds, nfds_t n)
{
	int ready = 0;
	nfds_t j;

	for (j = 0; j < n; j++) {
		struct usmc_sock *sk;

		if ((fds[j].revents & POLLIN) && fds[j].fd >= 0 &&
		    (sk = usmc_fd_get(fds[j].fd))) {
			if (sk_owes_bytes(sk)) {
				struct pollfd p = { .fd = fds[j].fd, .events = fds[j].events };

				usmc_tcp_skip_wake(sk, fds[j].fd, true);
				if (real.poll(&p, 1, 0) >= 0)
					fds[j].revents = p.revents;
			}
			usmc_sock_put(sk);
		}
		ready += !!fds[j].revents;
	}
	return ready;
}

/*
 * A connection left shared memory while we looked (its peer moved it to
 * TCP and a refresh followed): from now on only the kernel knows whether
 * it is readable, so the set is built again with it as a plain socket.
 * A connection leaves once and never comes back: this restarts at most
 * once per connection.
 */
static bool poll_left_shm(const struct pent *ent, int nent)
{
	int i;

	for (i = 0; i < nent; i++)
		if (!usmc_poll_translated(ent[i].sk))
			return true;
	return false;
}

/* Drop the set's references and whatever of it is on the heap. */
static void set_free(struct pent *ent, int nent, const struct pent *stack_ent,
		     struct pollfd *kfds, const struct pollfd *stack_k)
{
	int i;

	for (i = 0; i < nent; i++)
		usmc_sock_put(ent[i].sk);
	if (ent != stack_ent)
		free(ent);
	if (kfds != stack_k)
		free(kfds);
}

int usmc_poll(struct pollfd *fds, nfds_t n, int timeout, const sigset_t *mask, bool use_mask)
{
	struct pent stack_ent[POLL_STACK], *ent = stack_ent;
	struct pollfd stack_k[POLL_STACK * 2], *kfds = stack_k;
	uint64_t deadline = 0;
	int nent = 0, nk = 0, ready, rc, i, restarts = 0;
	bool undecided, owed;
	nfds_t j;

	if (timeout > 0)
		deadline = usmc_now_ns() + (uint64_t)timeout * 1000000ull;
restart:
	undecided = owed = false;
	for (j = 0; j < n; j++) {
		struct usmc_sock *sk = fds[j].fd >= 0 ? usmc_fd_get(fds[j].fd) : NULL;

		if (!sk) {
			/* An epoll descriptor of ours: readable when a record is. */
			if (fds[j].fd >= 0)
				usmc_epoll_mark_nested(fds[j].fd);
			continue;
		}
		usmc_sock_refresh(sk, fds[j].fd);
		if (sk_mode(sk) == USMC_MODE_UNDECIDED) {
			usmc_server_resolve(sk, fds[j].fd, false);
			undecided |= sk_mode(sk) == USMC_MODE_UNDECIDED;
		}
		if (!usmc_poll_translated(sk)) {
			if (sk_mode(sk) == USMC_MODE_MIGRATING)
				usmc_migrate_pump(sk, fds[j].fd, false);
			owed |= poll_owes(sk, fds[j].fd);
			usmc_sock_put(sk);
			continue;
		}
		if (nent == POLL_STACK && ent == stack_ent) {
			ent = malloc(sizeof(*ent) * n);
			kfds = malloc(sizeof(*kfds) * (n * 2));
			if (!ent || !kfds) {
				free(ent);
				free(kfds);
				usmc_sock_put(sk);
				for (i = 0; i < nent; i++)
					usmc_sock_put(stack_ent[i].sk);
				return -ENOMEM;
			}
			memcpy(ent, stack_ent, sizeof(stack_ent));
		}
		ent[nent].idx = (int)j;
		ent[nent].sk = sk;
		ent[nent].counted = 0;
		nent++;
	}
	if (!nent) {
		if (use_mask) {
			struct timespec ts, *tp = NULL;

			if (timeout >= 0) {
				ts.tv_sec = timeout / 1000;
				ts.tv_nsec = (timeout % 1000) * 1000000L;
				tp = &ts;
			}
			rc = real.ppoll(fds, n, tp, mask);
		} else {
			rc = real.poll(fds, n, timeout);
		}
		if (rc < 0)
			return -errno;
		if (rc > 0 && owed)
			rc = poll_settle_owed(fds, n);	/* 0: woken by an owed byte */
		if (((rc > 0 && undecided && poll_undecided_moved(fds, n)) ||
		     (owed && !rc && timeout)) && restarts++ < 8) {
			if (timeout > 0 && !(timeout = (int)usmc_ms_left(deadline)))
				return 0;
			goto restart;
		}
		return rc;
	}
	if (n >= POLL_STACK && kfds == stack_k) {
		kfds = malloc(sizeof(*kfds) * (n * 2));
		if (!kfds) {
			rc = -ENOMEM;
			goto out;
		}
	}
	for (;;) {
		bool all_ours = (nfds_t)nent == n;
		int kt = timeout, level = -1, ws = -1;

		/* 1. what is ready now */
		ready = 0;
		for (i = 0; i < nent; i++) {
			struct pollfd *p = &fds[ent[i].idx];

			p->revents = usmc_poll_revents(ent[i].sk, p->fd, p->events);
			if (p->revents)
				ready++;
		}
		/* 2. spin when nothing else could wake us anyway */
		if (!ready && all_ours && timeout != 0) {
			uint64_t t0 = usmc_now_ns(), budget;
			int cpu, yields = -1;	/* -1: spin on the clock */

			budget = usmc_opt.busy_poll_us ? (uint64_t)usmc_opt.busy_poll_us * 1000 :
				 (uint64_t)usmc_opt.spin_us * 1000;
			if (nent > 8)
				budget /= 4;
			/* Not while a peer runs on our CPU: it could not make
			 * progress while we spin; it gets the CPU instead, a
			 * few times (wait.c's hand-over). */
			for (i = 0, cpu = sched_getcpu(); i < nent && budget; i++)
				if (usmc_peer_on_cpu(ent[i].sk, cpu))
					yields = USMC_WAIT_YIELDS;
			while (!ready && (yields >= 0 ? yields-- > 0 : usmc_now_ns() - t0 < budget)) {
				if (yields >= 0)
					sched_yield();
				else
					for (i = 0; i < 4; i++)	/* ~100 ns, as epoll_wait.c */
						cpu_relax();
				for (i = 0; i < nent; i++) {
					struct pollfd *p = &fds[ent[i].idx];

					p->revents = usmc_poll_revents(ent[i].sk, p->fd, p->events);
					if (p->revents)
						ready++;
				}
			}
		}
		/* Left shared memory while we looked (a POLLOUT waiter would
		 * otherwise sleep on a TCP slot that watches POLLIN only). */
		if (poll_left_shm(ent, nent))
			goto again;
		/* The time the look took comes off the kernel's wait. */
		if (kt > 0)
			kt = (int)usmc_ms_left(deadline);
		/* 3. arm, then build the kernel set */
		nk = 0;
		for (j = 0; j < n; j++)
			kfds[nk++] = fds[j];
		if (!ready) {
			/* Watched before armed: a ring after the arm leaves an
			 * edge in the waitset (wait.c). */
			level = usmc_waitset_enter();
			ws = level < 0 ? -1 : usmc_waitset_fd(level);
			for (i = 0; i < nent; i++) {
				struct usmc_sock *sk = ent[i].sk;
				struct pollfd *p = &fds[ent[i].idx];
				int what = (p->events & (POLLIN | POLLRDNORM | POLLRDHUP) ? USMC_WAIT_RX : 0) |
					   (p->events & (POLLOUT | POLLWRNORM) ? USMC_WAIT_TX : 0);

				if (ws >= 0 && (sk->bell_own < 0 ||
						usmc_waitset_watch(level, sk->lgr, sk->bell_own)))
					ws = -1;
				usmc_tx_idle_check(sk);	/* going to sleep: tx_backing.c */
				what = what ? what : USMC_WAIT_RX;
				usmc_wait_count(sk, what, 1);
				ent[i].counted = what;
				if (usmc_arm(sk, what)) {
					p->revents = usmc_poll_revents(sk, p->fd, p->events);
					if (p->revents)
						ready++;
				}
			}
		}
		if (ready)
			kt = 0;
		for (i = 0; i < nent; i++) {
			struct pollfd *p = &kfds[ent[i].idx];
			struct usmc_sock *sk = ent[i].sk;

			/* The application's slot becomes the TCP watch (EOF/RST;
			 * while migrating also new bytes and room to send). */
			p->events = POLLIN | POLLRDHUP |
				    (sk_mode(sk) == USMC_MODE_MIGRATING ? POLLOUT | POLLPRI : 0);
			if (sk_flag(sk, SKF_TCP_EOF))
				p->fd = -1;
		}
		if (ws >= 0 && !ready) {
			usmc_waitset_prune(level);
			kfds[nk].fd = ws;
			kfds[nk].events = POLLIN;
			kfds[nk].revents = 0;
			nk++;
		} else if (!ready && (kt < 0 || kt > 1)) {
			kt = 1;		/* no waitset: nothing rings us, look every ms */
		}
		if (use_mask) {
			struct timespec ts, *tp = NULL;

			if (kt >= 0) {
				ts.tv_sec = kt / 1000;
				ts.tv_nsec = (kt % 1000) * 1000000L;
				tp = &ts;
			}
			rc = real.ppoll(kfds, (nfds_t)nk, tp, mask);
		} else {
			rc = real.poll(kfds, (nfds_t)nk, kt);
		}
		if (rc < 0)
			rc = -errno;
		for (i = 0; i < nent; i++)
			if (ent[i].counted) {
				usmc_wait_count(ent[i].sk, ent[i].counted, -1);
				ent[i].counted = 0;
			}
		if (ws >= 0 && !ready && rc > 0 && kfds[nk - 1].revents)
			usmc_waitset_clear(level);
		/* A handler's poll sharing the instance of the wait it
		 * interrupted: make that one look again. */
		for (i = 0; usmc_waitset_nested(level) && i < nent; i++)
			if (ent[i].sk->bell_own >= 0)
				ent[i].sk->lgr->dev->signal(ent[i].sk->lgr, ent[i].sk->bell_own);
		usmc_waitset_leave(level);
		if (rc < 0 && !ready)
			goto out;
		/* 4. merge */
		ready = 0;
		for (j = 0; j < n; j++)
			fds[j].revents = kfds[j].revents;
		for (i = 0; i < nent; i++) {
			struct pollfd *p = &fds[ent[i].idx];
			struct usmc_sock *sk = ent[i].sk;

			/* The program closed or replaced the descriptor while we
			 * slept: what the kernel saw there is the answer, as its
			 * poll looks at what a number names on every pass (the
			 * JDK closes a socket a poll waits on so: dup2 of a dead
			 * socketpair over it, then a signal). */
			if (usmc_fd_peek(p->fd) != sk) {
				p->revents = kfds[ent[i].idx].revents &
					     (p->events | POLLERR | POLLHUP | POLLNVAL);
				continue;
			}
			/* Writable alone (connect completed): nothing to read. */
			if (kfds[ent[i].idx].revents & (POLLIN | POLLRDNORM | POLLRDBAND | POLLPRI |
							POLLRDHUP | POLLERR | POLLHUP))
				usmc_check_tcp(sk, p->fd);
			p->revents = usmc_poll_revents(sk, p->fd, p->events);
		}
		if (poll_left_shm(ent, nent) ||
		    (undecided && poll_undecided_moved(fds, n) && restarts++ < 8))
			goto again;
		if (owed)
			ready = poll_settle_owed(fds, n);
		else
			for (j = 0; j < n; j++)
				if (fds[j].revents)
					ready++;
		if (ready || timeout == 0)
			break;
		if (timeout > 0) {
			timeout = (int)usmc_ms_left(deadline);
			if (!timeout)
				break;
		}
		/* A doorbell without readiness (stale wake-up): sleep again. */
	}
	rc = ready;
out:
	set_free(ent, nent, stack_ent, kfds, stack_k);
	return rc;
again:
	/* Build the set again; at the deadline, one look without waiting
	 * (what is ready now must still be reported). */
	set_free(ent, nent, stack_ent, kfds, stack_k);
	ent = stack_ent;
	kfds = stack_k;
	nent = 0;
	if (timeout > 0)
		timeout = (int)usmc_ms_left(deadline);
	goto restart;
}

/* select(2) family: any shared-memory connection in the sets? */
static bool sets_translated(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
	int fd;

	for (fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
		struct usmc_sock *sk;
		bool t;

		if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))))
			continue;
		sk = usmc_fd_get(fd);
		if (!sk) {
			usmc_epoll_mark_nested(fd);	/* as in usmc_poll */
			continue;
		}
		t = usmc_poll_translated(sk);
		usmc_sock_put(sk);
		if (t)
			return true;
	}
	return false;
}

int usmc_select(int nfds, fd_set *r, fd_set *w, fd_set *e, int timeout_ms,
		const sigset_t *mask, bool use_mask, bool *handled)
{
	struct pollfd stack[64], *p = stack;
	int n = 0, fd, rc, count = 0;

	*handled = false;
	if (nfds > FD_SETSIZE)
		nfds = FD_SETSIZE;
	if (nfds <= 0 || !sets_translated(nfds, r, w, e))
		return 0;
	*handled = true;
	if (nfds > 64) {
		p = malloc(sizeof(*p) * (size_t)nfds);
		if (!p)
			return -ENOMEM;
	}
	for (fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (r && FD_ISSET(fd, r))
			ev |= POLLIN;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT;
		if (e && FD_ISSET(fd, e))
			ev |= POLLPRI;
		if (!ev)
			continue;
		p[n].fd = fd;
		p[n].events = ev;
		p[n].revents = 0;
		n++;
	}
	rc = usmc_poll(p, (nfds_t)n, timeout_ms, mask, use_mask);
	if (rc < 0)
		goto out;
	if (r)
		FD_ZERO(r);
	if (w)
		FD_ZERO(w);
	if (e)
		FD_ZERO(e);
	for (fd = 0; fd < n; fd++) {
		short re = p[fd].revents;

		if (re & POLLNVAL) {
			rc = -EBADF;
			goto out;
		}
		/* select reports errors and hang-ups as readable/writable. */
		if (r && (p[fd].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(p[fd].fd, r);
			count++;
		}
		if (w && (p[fd].events & POLLOUT) && (re & (POLLOUT | POLLERR))) {
			FD_SET(p[fd].fd, w);
			count++;
		}
		if (e && (p[fd].events & POLLPRI) && (re & POLLPRI)) {
			FD_SET(p[fd].fd, e);
			count++;
		}
	}
	rc = count;
out:
	if (p != stack)
		free(p);
	return rc;
}
