// SPDX-License-Identifier: MIT
/*
 * epoll_list.c - the bottom of the epoll layer: instances by descriptor,
 * and the per-instance lists every other epoll file works on (ready, again,
 * watch), under ep_lock.
 */
#include "epoll_int.h"
#include "options.h"
#include "real.h"
#include "sock.h"

#include <stdlib.h>

/*
 * Adaptive: a thread that finds it taken spins a while before it sleeps in
 * futex_wait.  The sections are short (a kernel epoll_ctl at most), and
 * threads of one program that each run their own instance (wrk, memcached,
 * haproxy's threads) meet here on every call: with a plain mutex each
 * meeting was a sleep and a wake-up (nginx with Connection: close, wrk -t 8
 * on 16 CPUs: a quarter of TCP's rate, its threads asleep in futex_wait).
 */
pthread_mutex_t ep_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;

void ep_lock_reinit(void)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&ep_lock, &a);
	pthread_mutexattr_destroy(&a);
}

/*
 * epoll descriptor -> instance; small two-level table.  Written under
 * ep_lock, with release stores: usmc_epoll_closed() looks without the lock
 * (ep_known) on every close of every descriptor.
 */
#define EPT_SHIFT 10
static struct usmc_ep **ept_root[2048];
_Atomic uint32_t ep_live;	/* instances of ours (usmc_epoll_mark_nested) */

struct usmc_ep **ep_slot(int fd, bool create)
{
	unsigned int hi = (unsigned int)fd >> EPT_SHIFT;

	if (fd < 0 || hi >= ARRAY_SIZE(ept_root))
		return NULL;
	if (!ept_root[hi] && create)
		__atomic_store_n(&ept_root[hi], calloc(1u << EPT_SHIFT, sizeof(struct usmc_ep *)),
				 __ATOMIC_RELEASE);
	return ept_root[hi] ? &ept_root[hi][(unsigned int)fd & ((1u << EPT_SHIFT) - 1)] : NULL;
}

void ep_slot_set(struct usmc_ep **s, struct usmc_ep *ep)
{
	__atomic_store_n(s, ep, __ATOMIC_RELEASE);
}

/*
 * Whether fd may be one of our instances, without ep_lock.  fd is open in
 * the caller's hands (a close not yet done), so no other thread can make
 * an instance of that number meanwhile: a NULL seen here stays NULL.
 */
bool ep_known(int fd)
{
	unsigned int hi = (unsigned int)fd >> EPT_SHIFT;
	struct usmc_ep **t;

	if (fd < 0 || hi >= ARRAY_SIZE(ept_root))
		return false;
	t = __atomic_load_n(&ept_root[hi], __ATOMIC_ACQUIRE);
	return t && __atomic_load_n(&t[(unsigned int)fd & ((1u << EPT_SHIFT) - 1)],
				    __ATOMIC_ACQUIRE);
}

struct usmc_ep *ep_lookup(int epfd)
{
	struct usmc_ep **s = ep_slot(epfd, false);

	return s ? *s : NULL;
}

/* On the shared-memory path, or about to be (connecting with a proposal
 * out: the TCP entry reports completion, the rings everything after). */
bool ep_want_translated(struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return sk->kind == SK_CONN && (m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED ||
				       m == USMC_MODE_MIGRATING);
}

/*
 * A server connection accepted before its client's proposal was seen: its
 * TCP socket turns readable with the client's CLC wake message, which is not
 * the program's.  Its kernel entry has the program's events but our tag,
 * so that such an event settles the connection first (epoll_kernel.c).
 * So does a connection on TCP that still owes a byte that is not the
 * program's (a wake or DECLINE message, bytes a move to TCP sent again:
 * usmc_tcp_skip_wake): TCP would not be readable for it.
 */
bool ep_want_undecided(struct usmc_sock *sk)
{
	return sk->kind == SK_CONN && (sk_mode(sk) == USMC_MODE_UNDECIDED || sk_owes_bytes(sk));
}

/* FIN/RST/connect completion on the TCP entry: news for every record of
 * this socket here; once connected, stop watching EPOLLOUT. */
void ep_tcp_event(struct usmc_epreg *r)
{
	struct usmc_epreg *s;

	for (s = r->sk->epregs; s; s = s->sk_next)
		if (s->ep == r->ep && s->translated)
			s->tcp_edge = true;
	if (r->tcp_out && !sk_flag(r->sk, SKF_CONNECTING) &&
	    sk_mode(r->sk) != USMC_MODE_MIGRATING) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = ep_tag(r, EP_TAG_TCP) };
		int epfd = ep_fd_of(r->ep);

		ev.events |= r->events & EPOLLEXCLUSIVE ? 0 : EPOLLRDHUP;
		r->tcp_out = false;
		if (epfd >= 0 && !(r->events & EPOLLEXCLUSIVE))
			real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev);
	}
}

/*
 * Every enabled, translated record is on the ready list, on the watch list
 * or armed: whatever happens on its rings is seen by the next epoll_wait
 * (from the ready list), by a peek (watch list) or by the peer's doorbell
 * (armed).  Records leave the ready list for the watch list, and the watch
 * list for arming once idle.
 */
void ep_ready_push(struct usmc_epreg *r)
{
	r->armed = false;	/* conservative: re-armed once it leaves the list */
	if (r->on_ready)
		return;		/* stays where it is, as on the kernel's list */
	r->on_ready = true;
	r->on_again = false;
	r->ready_next = NULL;
	*r->ep->ready_tail = r;
	r->ep->ready_tail = &r->ready_next;
}

void ep_ready_remove(struct usmc_epreg *r)
{
	struct usmc_epreg **head = r->on_again ? &r->ep->again : &r->ep->ready;
	struct usmc_epreg ***tail = r->on_again ? &r->ep->again_tail : &r->ep->ready_tail;
	struct usmc_epreg **pp;

	if (!r->on_ready)
		return;
	for (pp = head; *pp; pp = &(*pp)->ready_next)
		if (*pp == r) {
			*pp = r->ready_next;
			if (!r->ready_next)
				*tail = pp;
			break;
		}
	r->on_ready = r->on_again = false;
}

void ep_watch(struct usmc_epreg *r)
{
	r->idle = 0;
	if (r->on_watch)
		return;
	r->on_watch = true;
	r->watch_next = r->ep->watch;
	r->ep->watch = r;
}

void ep_spin_feedback(struct usmc_ep *ep, bool hit, uint64_t spent)
{
	uint64_t max = (uint64_t)usmc_opt.spin_us * 1000, b = LOAD_RELAXED(&ep->spin_ns);

	if (hit)
		b = MIN(max, MAX(b, spent * 2 + EP_SPIN_MIN_NS));
	else
		b = MAX(EP_SPIN_MIN_NS, b / 2);
	STORE_RELAXED(&ep->spin_ns, (uint32_t)b);
}

struct ep_fdlist *ep_fds;

int ep_fd_of(struct usmc_ep *ep)
{
	struct ep_fdlist *e;

	for (e = ep_fds; e; e = e->next)
		if (e->ep == ep)
			return e->fd;
	return -1;
}
