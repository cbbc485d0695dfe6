// SPDX-License-Identifier: MIT
/*
 * epoll.c - epoll over shared-memory connections.
 *
 * The application's epoll instance stays real.  For a connection on the
 * shared-memory path we register, instead of the application's entry, two
 * kernel entries tagged with our registration record: its doorbell FIFO
 * (EPOLLIN|EPOLLET, rung by the peer when we armed) and its TCP socket
 * (EPOLLET, FIN/RST = peer gone, EPOLLOUT = connect completed).  Their
 * events are translated back into the application's events and data from
 * the rings' state.  A ready list gives level-triggered semantics; edge and
 * one-shot semantics follow the kernel's rules per registration.
 *
 * Descriptors that are not ours (listeners, pipes, timerfds, plain TCP)
 * are passed through untouched.  A socket registered before it connects is
 * recorded and converted once it goes onto shared memory (and back when a
 * late decline moves it to TCP).
 *
 * Locking: ep_lock (one mutex) protects every registration list; it is not
 * held while sleeping in the kernel.  Readiness is computed lock-free.
 */
#include "epoll.h"
#include "fdtab.h"
#include "log.h"
#include "options.h"
#include "poll.h"
#include "real.h"
#include "sock.h"
#include "sys.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#define EPREG_LIVE	0x4745524550434d55ULL	/* "UMCPEREG" */
#define EPREG_DEAD	0
#define EP_ARENA_REGS	(1u << 18)
#define EP_TAG_TCP	1ULL
#define EP_TAG_SELF	2ULL
#define EP_SPIN_MAX	256	/* spin only over this many connections */
#define EP_SPIN_MIN_NS	2000
#define EP_MAXEV	256
#define EP_BELL_DRAIN	1024	/* drain a doorbell FIFO after this many events */

struct usmc_epreg {
	uint64_t magic;
	struct usmc_ep *ep;
	struct usmc_sock *sk;
	int fd;				/* the application's descriptor */
	uint32_t events;		/* application's interest and flags */
	uint64_t data;			/* application's epoll_data */
	bool translated;		/* kernel holds our tagged entries */
	bool bell;			/* this record owns the (ep, sk) doorbell entry */
	bool disabled;			/* EPOLLONESHOT fired */
	bool on_ready;
	bool edge;			/* an event arrived since last reported (ET) */
	uint64_t reported;		/* epoll_wait call that last reported it */
	bool tcp_out;			/* TCP entry watches EPOLLOUT (connect completion) */
	uint64_t seen_prod, seen_cons;	/* cursors when last reported (ET news) */
	uint32_t seen_pflags, seen_cflags;
	struct usmc_epreg *ep_next, *ep_prev;
	struct usmc_epreg *sk_next;
	struct usmc_epreg *ready_next;
	struct usmc_epreg *free_next;
} __attribute__((aligned(8)));

struct usmc_ep {
	int refs;			/* descriptors referring to this instance */
	uint32_t spin_ns;		/* adaptive spin budget */
	struct usmc_epreg *regs;
	struct usmc_epreg *ready;
	int ntranslated;
	int nforeign;			/* pass-through registrations (approximate) */
	uint64_t seen_gen;
	bool nested;			/* watched by another epoll / poll: keep selfev */
	int selfev;			/* eventfd readable while ready list is non-empty */
	bool selfev_set;
};

static pthread_mutex_t ep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usmc_epreg *arena, *reg_free;
static size_t arena_used;
static _Atomic uint64_t mode_gen;	/* bumped by every path-changing transition */

/* epoll descriptor -> instance; small two-level table under ep_lock */
#define EPT_SHIFT 10
static struct usmc_ep **ept_root[2048];

static struct usmc_ep **ept_slot(int fd, bool create)
{
	unsigned int hi = (unsigned int)fd >> EPT_SHIFT;

	if (fd < 0 || hi >= ARRAY_SIZE(ept_root))
		return NULL;
	if (!ept_root[hi] && create)
		ept_root[hi] = calloc(1u << EPT_SHIFT, sizeof(struct usmc_ep *));
	return ept_root[hi] ? &ept_root[hi][(unsigned int)fd & ((1u << EPT_SHIFT) - 1)] : NULL;
}

static struct usmc_ep *ep_lookup(int epfd)
{
	struct usmc_ep **s = ept_slot(epfd, false);

	return s ? *s : NULL;
}

static struct usmc_epreg *reg_alloc(void)
{
	struct usmc_epreg *r;

	if (reg_free) {
		r = reg_free;
		reg_free = r->free_next;
	} else {
		if (!arena) {
			void *p = mmap(NULL, sizeof(*arena) * EP_ARENA_REGS, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

			if (p == MAP_FAILED)
				return NULL;
			arena = p;
		}
		if (arena_used == EP_ARENA_REGS)
			return NULL;
		r = &arena[arena_used++];
	}
	memset(r, 0, sizeof(*r));
	r->magic = EPREG_LIVE;
	return r;
}

static void reg_release(struct usmc_epreg *r)
{
	r->magic = EPREG_DEAD;
	r->free_next = reg_free;
	reg_free = r;
}

/* Is a kernel event's data one of ours?  Returns the record or NULL. */
static struct usmc_epreg *reg_from_data(uint64_t data, struct usmc_ep *ep, unsigned int *tag)
{
	uint64_t base = (uint64_t)(uintptr_t)arena, p = data & ~3ULL, off;
	struct usmc_epreg *r;

	if (!arena || p < base)
		return NULL;
	off = p - base;
	if (off >= arena_used * sizeof(*arena) || off % sizeof(*arena))
		return NULL;
	r = (struct usmc_epreg *)(uintptr_t)p;
	*tag = (unsigned int)(data & 3);
	if (*tag == EP_TAG_SELF)
		return NULL;
	/* A stale event for a record freed (and maybe reused) meanwhile. */
	if (r->magic != EPREG_LIVE || r->ep != ep)
		return NULL;
	return r;
}

void usmc_epoll_mode_changed(void)
{
	atomic_fetch_add(&mode_gen, 1);
}

/* On the shared-memory path, or about to be (connecting with a proposal
 * out: the TCP entry reports completion, the rings everything after). */
static bool want_translated(struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return sk->kind == SK_CONN && (m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED ||
				       m == USMC_MODE_MIGRATING);
}

static int ep_fd_of(struct usmc_ep *ep);

/* FIN/RST/connect completion on the TCP entry: news for every record of
 * this socket here; once connected, stop watching EPOLLOUT. */
static void tcp_event(struct usmc_epreg *r)
{
	struct usmc_epreg *s;

	for (s = r->sk->epregs; s; s = s->sk_next)
		if (s->ep == r->ep && s->translated)
			s->edge = true;
	if (r->tcp_out && !sk_flag(r->sk, SKF_CONNECTING) &&
	    sk_mode(r->sk) != USMC_MODE_MIGRATING) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)(uintptr_t)r | EP_TAG_TCP };
		int epfd = ep_fd_of(r->ep);

		ev.events |= r->events & EPOLLEXCLUSIVE ? 0 : EPOLLRDHUP;
		r->tcp_out = false;
		if (epfd >= 0 && !(r->events & EPOLLEXCLUSIVE))
			real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev);
	}
}

static struct usmc_epreg *sibling_bell(struct usmc_epreg *r)
{
	struct usmc_epreg *s;

	for (s = r->sk->epregs; s; s = s->sk_next)
		if (s != r && s->ep == r->ep && s->bell)
			return s;
	return NULL;
}

static void ready_push(struct usmc_epreg *r)
{
	if (r->on_ready)
		return;
	r->on_ready = true;
	r->ready_next = r->ep->ready;
	r->ep->ready = r;
}

/* Kernel entries for a translated record. */
static int kernel_translate(int epfd, struct usmc_epreg *r, int op)
{
	struct epoll_event ev;
	uint32_t excl = r->events & EPOLLEXCLUSIVE;
	int rc;

	/* The TCP entry reports FIN/RST (and the wake byte) as EPOLLIN, and
	 * connect completion as EPOLLOUT while connecting; EPOLLEXCLUSIVE
	 * admits only IN/OUT/ET (FIN still shows as EPOLLIN). */
	r->tcp_out = sk_flag(r->sk, SKF_CONNECTING) || sk_mode(r->sk) == USMC_MODE_MIGRATING;
	ev.events = EPOLLIN | EPOLLET | (r->tcp_out ? EPOLLOUT : 0) | (excl ? excl : EPOLLRDHUP);
	ev.data.u64 = (uint64_t)(uintptr_t)r | EP_TAG_TCP;
	rc = real.epoll_ctl(epfd, op, r->fd, &ev);
	if (rc)
		return -errno;
	if (!sibling_bell(r)) {
		ev.events = EPOLLIN | EPOLLET | excl;
		ev.data.u64 = (uint64_t)(uintptr_t)r;
		if (real.epoll_ctl(epfd, EPOLL_CTL_ADD, r->sk->bell_own, &ev) && errno != EEXIST) {
			rc = -errno;
			real.epoll_ctl(epfd, EPOLL_CTL_DEL, r->fd, &ev);
			return rc;
		}
		r->bell = true;
	}
	r->translated = true;
	r->edge = true;
	r->seen_prod = r->seen_cons = ~0ULL;
	r->ep->ntranslated++;
	ready_push(r);
	if (r->ep->nested)
		usmc_arm(r->sk, USMC_WAIT_RX | USMC_WAIT_TX);
	return 0;
}

/* Drop our doorbell entry (hand it to a sibling record if there is one). */
static void kernel_bell_drop(int epfd, struct usmc_epreg *r)
{
	struct usmc_epreg *s;
	struct epoll_event ev;

	if (!r->bell)
		return;
	r->bell = false;
	for (s = r->sk->epregs; s; s = s->sk_next)
		if (s != r && s->ep == r->ep && s->translated)
			break;
	if (s) {
		ev.events = EPOLLIN | EPOLLET | (s->events & EPOLLEXCLUSIVE);
		ev.data.u64 = (uint64_t)(uintptr_t)s;
		if (!real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->sk->bell_own, &ev))
			s->bell = true;
		return;
	}
	real.epoll_ctl(epfd, EPOLL_CTL_DEL, r->sk->bell_own, &ev);
}

static void ep_spin_feedback(struct usmc_ep *ep, bool hit, uint64_t spent)
{
	uint64_t max = (uint64_t)usmc_opt.spin_us * 1000, b = ep->spin_ns;

	if (hit)
		b = MIN(max, MAX(b, spent * 2 + EP_SPIN_MIN_NS));
	else
		b = MAX(EP_SPIN_MIN_NS, b / 2);
	ep->spin_ns = (uint32_t)b;
}

/* Bring a record's kernel entries in line with the socket's current path. */
static void reg_sync(struct usmc_epreg *r)
{
	int epfd = ep_fd_of(r->ep);
	struct epoll_event ev;

	if (epfd < 0)
		return;
	if (want_translated(r->sk) == r->translated)
		return;
	if (!r->translated) {
		kernel_translate(epfd, r, EPOLL_CTL_MOD);
		return;
	}
	/* Back to plain TCP: the application's own entry, its data. */
	kernel_bell_drop(epfd, r);
	r->translated = false;
	r->ep->ntranslated--;
	ev.events = r->events;
	ev.data.u64 = r->data;
	real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev);
}

/* epoll descriptor numbers per instance, to find epfd from a record. */
struct ep_fdlist {
	int fd;
	struct usmc_ep *ep;
	struct ep_fdlist *next;
};
static struct ep_fdlist *ep_fds;

static int ep_fd_of(struct usmc_ep *ep)
{
	struct ep_fdlist *e;

	for (e = ep_fds; e; e = e->next)
		if (e->ep == ep)
			return e->fd;
	return -1;
}

static struct usmc_ep *ep_create(int epfd)
{
	struct usmc_ep **s = ept_slot(epfd, true), *ep;
	struct ep_fdlist *e;

	if (!s)
		return NULL;
	ep = calloc(1, sizeof(*ep));
	e = malloc(sizeof(*e));
	if (!ep || !e) {
		free(ep);
		free(e);
		return NULL;
	}
	ep->refs = 1;
	ep->selfev = -1;
	ep->spin_ns = (uint32_t)MIN(usmc_opt.spin_us * 1000L, 0xffffffffL);
	e->fd = epfd;
	e->ep = ep;
	e->next = ep_fds;
	ep_fds = e;
	*s = ep;
	return ep;
}

void usmc_epoll_created(int epfd)
{
	pthread_mutex_lock(&ep_lock);
	ep_create(epfd);
	pthread_mutex_unlock(&ep_lock);
}

static void reg_unlink(struct usmc_epreg *r)
{
	struct usmc_epreg **pp;

	if (r->ep_prev)
		r->ep_prev->ep_next = r->ep_next;
	else
		r->ep->regs = r->ep_next;
	if (r->ep_next)
		r->ep_next->ep_prev = r->ep_prev;
	for (pp = &r->sk->epregs; *pp; pp = &(*pp)->sk_next)
		if (*pp == r) {
			*pp = r->sk_next;
			break;
		}
	if (r->on_ready) {
		for (pp = &r->ep->ready; *pp; pp = &(*pp)->ready_next)
			if (*pp == r) {
				*pp = r->ready_next;
				break;
			}
	}
	if (r->translated)
		r->ep->ntranslated--;
	reg_release(r);
}

static void ep_free(struct usmc_ep *ep)
{
	while (ep->regs)
		reg_unlink(ep->regs);
	usmc_ifd_close(ep->selfev);
	free(ep);
}

/* The application closed an epoll descriptor (or dup'ed over it). */
bool usmc_epoll_closed(int fd)
{
	struct usmc_ep **s, *ep;
	struct ep_fdlist **pp, *e;

	pthread_mutex_lock(&ep_lock);
	s = ept_slot(fd, false);
	ep = s ? *s : NULL;
	if (!ep) {
		pthread_mutex_unlock(&ep_lock);
		return false;
	}
	*s = NULL;
	for (pp = &ep_fds; (e = *pp); pp = &e->next)
		if (e->fd == fd) {
			*pp = e->next;
			free(e);
			break;
		}
	if (--ep->refs == 0)
		ep_free(ep);
	pthread_mutex_unlock(&ep_lock);
	return true;
}

void usmc_epoll_dup(int oldfd, int newfd)
{
	struct usmc_ep *ep, **s;
	struct ep_fdlist *e;

	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(oldfd);
	s = ep ? ept_slot(newfd, true) : NULL;
	e = s ? malloc(sizeof(*e)) : NULL;
	if (e) {
		ep->refs++;
		*s = ep;
		e->fd = newfd;
		e->ep = ep;
		e->next = ep_fds;
		ep_fds = e;
	}
	pthread_mutex_unlock(&ep_lock);
}

/* The socket's last local reference is gone: forget all its records. */
void usmc_epoll_forget(struct usmc_sock *sk)
{
	pthread_mutex_lock(&ep_lock);
	while (sk->epregs) {
		struct usmc_epreg *r = sk->epregs;
		int epfd = ep_fd_of(r->ep);

		if (r->translated && epfd >= 0)
			kernel_bell_drop(epfd, r);
		reg_unlink(r);
	}
	pthread_mutex_unlock(&ep_lock);
}

static struct usmc_epreg *reg_find(struct usmc_ep *ep, int fd, struct usmc_sock *sk)
{
	struct usmc_epreg *r;

	for (r = sk->epregs; r; r = r->sk_next)
		if (r->ep == ep && r->fd == fd)
			return r;
	return NULL;
}

static bool ep_arm_all(struct usmc_ep *ep);
static void selfev_update(struct usmc_ep *ep, int epfd);

int usmc_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct usmc_sock *sk = NULL;
	struct usmc_epreg *r;
	struct usmc_ep *ep, *inner;
	int rc = USMC_PASS;

	if (fd == epfd)
		return USMC_PASS;	/* the kernel says EINVAL */
	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	inner = ep_lookup(fd);
	if (inner && op == EPOLL_CTL_ADD && !inner->nested) {
		struct usmc_epreg *q;

		/* Watched from outside: the kernel must see its readiness, so
		 * its doorbells stay armed whenever control leaves it. */
		inner->nested = true;
		for (q = inner->regs; q; q = q->ep_next)
			q->sk->in_nested = true;
		ep_arm_all(inner);
		selfev_update(inner, fd);
	}
	sk = usmc_fd_get(fd);
	if (!sk || (sk->kind != SK_TCP && sk->kind != SK_CONN)) {
		if (ep && op == EPOLL_CTL_ADD)
			ep->nforeign++;
		else if (ep && op == EPOLL_CTL_DEL && ep->nforeign > 0)
			ep->nforeign--;
		goto out;
	}
	if (!ep)
		ep = ep_create(epfd);
	if (!ep)
		goto out;
	r = reg_find(ep, fd, sk);
	switch (op) {
	case EPOLL_CTL_ADD:
		if (r) {
			rc = -EEXIST;
			break;
		}
		if (!ev) {
			rc = -EFAULT;
			break;
		}
		r = reg_alloc();
		if (!r) {
			rc = -ENOMEM;
			break;
		}
		r->ep = ep;
		r->sk = sk;
		r->fd = fd;
		r->events = ev->events;
		r->data = ev->data.u64;
		if (want_translated(sk)) {
			r->sk_next = sk->epregs;	/* visible to sibling_bell() */
			sk->epregs = r;
			rc = kernel_translate(epfd, r, EPOLL_CTL_ADD);
			sk->epregs = r->sk_next;
		} else {
			rc = real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, ev) ? -errno : 0;
		}
		if (rc) {
			reg_release(r);
			break;
		}
		r->ep_next = ep->regs;
		if (ep->regs)
			ep->regs->ep_prev = r;
		ep->regs = r;
		r->sk_next = sk->epregs;
		sk->epregs = r;
		if (ep->nested)
			sk->in_nested = true;
		break;
	case EPOLL_CTL_MOD:
		if (!r) {
			rc = USMC_PASS;		/* the kernel answers (ENOENT) */
			break;
		}
		if (!ev) {
			rc = -EFAULT;
			break;
		}
		if ((ev->events | r->events) & EPOLLEXCLUSIVE) {
			rc = -EINVAL;
			break;
		}
		if (r->translated) {
			/* Our kernel entries do not change; re-arm ours. */
			if (sys_fcntl(fd, F_GETFD, 0) < 0) {
				rc = -EBADF;
				break;
			}
			r->events = ev->events;
			r->data = ev->data.u64;
			r->disabled = false;
			r->edge = true;
			ready_push(r);
			rc = 0;
		} else {
			rc = real.epoll_ctl(epfd, op, fd, ev) ? -errno : 0;
			if (!rc) {
				r->events = ev->events;
				r->data = ev->data.u64;
			}
		}
		break;
	case EPOLL_CTL_DEL:
		if (!r) {
			rc = USMC_PASS;
			break;
		}
		rc = real.epoll_ctl(epfd, op, fd, ev) ? -errno : 0;
		if (rc)
			break;
		if (r->translated)
			kernel_bell_drop(epfd, r);
		reg_unlink(r);
		break;
	default:
		rc = USMC_PASS;
	}
out:
	pthread_mutex_unlock(&ep_lock);
	if (sk)
		usmc_sock_put(sk);
	return rc;
}

static uint32_t reg_ready(struct usmc_epreg *r)
{
	uint32_t want = r->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLRDNORM |
				     EPOLLWRNORM | EPOLLRDBAND | EPOLLWRBAND);
	uint32_t ev = usmc_sock_poll(r->sk);

	return ev & (want | EPOLLERR | EPOLLHUP);
}

/* Did something happen since r last reported?  (edge-triggered) */
static bool reg_news(const struct usmc_epreg *r)
{
	const struct usmc_sock *sk = r->sk;

	if (r->edge)
		return true;
	if ((r->events & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP)) &&
	    (LOAD_ACQUIRE(&sk->rx_p->prod) != r->seen_prod ||
	     LOAD_ACQUIRE(&sk->rx_p->flags) != r->seen_pflags))
		return true;
	if ((r->events & (EPOLLOUT | EPOLLWRNORM)) &&
	    (LOAD_ACQUIRE(&sk->tx_c->cons) != r->seen_cons ||
	     LOAD_ACQUIRE(&sk->tx_c->flags) != r->seen_cflags))
		return true;
	return false;
}

static void reg_seen(struct usmc_epreg *r)
{
	const struct usmc_sock *sk = r->sk;

	r->seen_prod = LOAD_ACQUIRE(&sk->rx_p->prod);
	r->seen_pflags = LOAD_ACQUIRE(&sk->rx_p->flags);
	r->seen_cons = LOAD_ACQUIRE(&sk->tx_c->cons);
	r->seen_cflags = LOAD_ACQUIRE(&sk->tx_c->flags);
	r->edge = false;
}

/* The events r should report now: level-triggered when ready, edge-
 * triggered only when something new happened as well. */
static uint32_t reg_due(const struct usmc_epreg *r)
{
	uint32_t ev = reg_ready((struct usmc_epreg *)r);

	if (ev && (r->events & EPOLLET) && !reg_news(r))
		return 0;
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
 * Walk the ready list: report what is ready, drop what is not.  Nothing is
 * armed here: a thread that goes on working does not need doorbells, and
 * every doorbell costs the peer a system call.  ep_arm_all() arms right
 * before we sleep.  Caller holds ep_lock.
 */
static _Atomic uint64_t wait_calls;

static int ready_collect(struct usmc_ep *ep, struct epoll_event *out, int max, uint64_t call)
{
	struct usmc_epreg **pp = &ep->ready, *r;
	int n = 0;

	while ((r = *pp) && n < max) {
		uint32_t ev;

		if (r->reported == call) {
			/* Once per epoll_wait, as the kernel does. */
			pp = &r->ready_next;
			continue;
		}
		if (r->disabled || !r->translated) {
			*pp = r->ready_next;
			r->on_ready = false;
			continue;
		}
		usmc_sock_refresh(r->sk, r->fd);
		if (!want_translated(r->sk)) {
			*pp = r->ready_next;
			r->on_ready = false;
			reg_sync(r);
			continue;
		}
		ev = reg_due(r);
		if (ev) {
			out[n].events = ev;
			out[n].data.u64 = r->data;
			n++;
			r->reported = call;
			reg_seen(r);
			if (r->events & EPOLLONESHOT)
				r->disabled = true;
			if (r->events & (EPOLLET | EPOLLONESHOT)) {
				*pp = r->ready_next;
				r->on_ready = false;
				continue;
			}
			pp = &r->ready_next;
			continue;
		}
		*pp = r->ready_next;
		r->on_ready = false;
	}
	return n;
}

/*
 * About to sleep: arm every live record's doorbell, then look once more
 * (the fence in usmc_arm() pairs with the producer's, cdc.h).  Returns true
 * when something turned ready meanwhile.
 */
static bool ep_arm_all(struct usmc_ep *ep)
{
	struct usmc_epreg *r;
	bool ready = false;

	for (r = ep->regs; r; r = r->ep_next) {
		if (!r->translated || r->disabled)
			continue;
		if (usmc_arm(r->sk, reg_what(r)) && reg_due(r)) {
			ready_push(r);
			ready = true;
		}
	}
	return ready;
}

static void selfev_update(struct usmc_ep *ep, int epfd)
{
	struct usmc_epreg *r;
	uint64_t v = 1;
	bool want = false;

	if (!ep->nested)
		return;
	/* Readable for an outer epoll/poll only if something is really due. */
	for (r = ep->ready; r && !want; r = r->ready_next)
		want = r->translated && !r->disabled && reg_due(r);

	if (!ep->nested)
		return;
	if (ep->selfev < 0) {
		struct epoll_event ev = { .events = EPOLLIN };

		ep->selfev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (ep->selfev < 0)
			return;
		usmc_ifd_mark(ep->selfev);
		ev.data.u64 = (uint64_t)(uintptr_t)arena | EP_TAG_SELF;
		real.epoll_ctl(epfd, EPOLL_CTL_ADD, ep->selfev, &ev);
	}
	if (want && !ep->selfev_set)
		sys_write(ep->selfev, &v, sizeof(v));
	else if (!want && ep->selfev_set)
		sys_read(ep->selfev, &v, sizeof(v));
	ep->selfev_set = want;
}

void usmc_epoll_mark_nested(int epfd)
{
	struct usmc_ep *ep;

	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	if (ep && !ep->nested) {
		ep->nested = true;
		selfev_update(ep, epfd);
	}
	pthread_mutex_unlock(&ep_lock);
}

/* Convert records whose socket changed path since we last looked. */
static void ep_resync(struct usmc_ep *ep)
{
	uint64_t g = LOAD_ACQUIRE(&mode_gen);
	struct usmc_epreg *r, *next;

	if (g == ep->seen_gen)
		return;
	ep->seen_gen = g;
	for (r = ep->regs; r; r = next) {
		next = r->ep_next;
		if (want_translated(r->sk) != r->translated) {
			reg_sync(r);
		} else if (r->translated && !r->tcp_out && sk_mode(r->sk) == USMC_MODE_MIGRATING) {
			/* Migrating: TCP room moves our queued bytes on. */
			struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP,
						  .data.u64 = (uint64_t)(uintptr_t)r | EP_TAG_TCP };
			int epfd = ep_fd_of(ep);

			if (epfd >= 0 && !(r->events & EPOLLEXCLUSIVE) &&
			    !real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev))
				r->tcp_out = true;
			ready_push(r);
		}
	}
}

#define EP_KPOLL_NS	8000	/* spinning: ask the kernel about other fds this often */

/*
 * Spin over the connections before sleeping: a peer on another CPU usually
 * answers within microseconds, a sleep costs tens.  Other descriptors in
 * the set are polled with a zero timeout every EP_KPOLL_NS.  Returns the
 * kernel events found (into kev), or 0; *hit is set when a connection
 * turned ready.  The budget adapts: spins that never pay off shrink it.
 */
static int ep_spin(struct usmc_ep *ep, int epfd, struct epoll_event *kev, int room, bool *hit)
{
	struct {
		struct usmc_epreg copy;	/* events, seen cursors: for reg_due() */
	} snap[EP_SPIN_MAX];
	uint64_t budget, t0, now, lastk;
	struct usmc_epreg *r;
	int i, k = 0, n = 0, cpu;
	bool peer_here = false;

	*hit = false;
	if (!ep->ntranslated || ep->ntranslated > EP_SPIN_MAX)
		return 0;
	budget = usmc_opt.busy_poll_us ? (uint64_t)usmc_opt.busy_poll_us * 1000 :
		 MIN((uint64_t)usmc_opt.spin_us * 1000, (uint64_t)ep->spin_ns);
	if (!budget)
		return 0;
	/* Spin without ep_lock (other threads' epoll calls go on): on a
	 * snapshot of the sockets, each pinned by a reference.  Not when a
	 * peer runs on our CPU: it could not make progress while we spin. */
	cpu = sched_getcpu();
	for (r = ep->regs; r; r = r->ep_next) {
		if (!r->translated || r->disabled)
			continue;
		usmc_publish_cpu(r->sk, cpu);
		if (usmc_peer_on_cpu(r->sk, cpu))
			peer_here = true;
	}
	if (peer_here)
		return 0;
	for (r = ep->regs; r && n < EP_SPIN_MAX; r = r->ep_next) {
		if (!r->translated || r->disabled)
			continue;
		usmc_sock_get(r->sk);
		snap[n].copy = *r;
		n++;
	}
	pthread_mutex_unlock(&ep_lock);
	t0 = lastk = usmc_now_ns();
	do {
		for (i = 0; i < 32; i++)
			cpu_relax();
		for (i = 0; i < n && !*hit; i++)
			if (reg_due(&snap[i].copy))
				*hit = true;
		now = usmc_now_ns();
		if (*hit)
			break;
		if (ep->nforeign && now - lastk > EP_KPOLL_NS) {
			lastk = now;
			k = real.epoll_wait(epfd, kev, room, 0);
			if (k > 0) {
				*hit = true;
				break;
			}
			k = 0;
		}
	} while (now - t0 < budget);
	for (i = 0; i < n; i++)
		usmc_sock_put(snap[i].copy.sk);
	pthread_mutex_lock(&ep_lock);
	ep_spin_feedback(ep, *hit, now - t0);
	if (*hit && !k)
		for (r = ep->regs; r; r = r->ep_next)
			if (r->translated && !r->disabled && reg_due(r))
				ready_push(r);
	return k;
}

int usmc_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		    const sigset_t *mask, bool use_mask)
{
	struct epoll_event kev[EP_MAXEV];
	uint64_t deadline = 0, call;
	struct usmc_ep *ep;
	int n, k, i, rc;

	if (maxevents <= 0)
		return USMC_PASS;
	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	if (!ep || !ep->regs) {
		pthread_mutex_unlock(&ep_lock);
		return USMC_PASS;
	}
	if (timeout > 0)
		deadline = usmc_now_ns() + (uint64_t)timeout * 1000000ull;
	call = atomic_fetch_add(&wait_calls, 1) + 1;
	for (;;) {
		int kt = timeout, room;
		uint64_t slept_ns = 0;
		bool hit = false;

		ep_resync(ep);
		n = ready_collect(ep, events, maxevents, call);
		room = MIN(maxevents - n, EP_MAXEV);
		k = 0;
		if (!n && timeout != 0) {
			k = ep_spin(ep, epfd, kev, room, &hit);
			if (hit && !k)
				n = ready_collect(ep, events, maxevents, call);
			if (!n && !k && ep_arm_all(ep))
				n = ready_collect(ep, events, maxevents, call);
		}
		if (n || k || room <= 0)
			kt = 0;
		selfev_update(ep, epfd);
		pthread_mutex_unlock(&ep_lock);
		if (room <= 0) {
			pthread_mutex_lock(&ep_lock);
			break;
		}
		if (!k) {
			uint64_t t0 = kt ? usmc_now_ns() : 0;

			if (use_mask)
				k = real.epoll_pwait(epfd, kev, room, kt, mask);
			else
				k = real.epoll_wait(epfd, kev, room, kt);
			if (kt && k > 0)
				slept_ns = usmc_now_ns() - t0;
		}
		rc = k < 0 ? -errno : 0;
		pthread_mutex_lock(&ep_lock);
		if (rc) {
			if (n)
				break;
			pthread_mutex_unlock(&ep_lock);
			return rc;
		}
		for (i = 0; i < k; i++) {
			unsigned int tag = 0;
			struct usmc_epreg *r = reg_from_data(kev[i].data.u64, ep, &tag);

			if (!r) {
				if (arena && kev[i].data.u64 ==
					     ((uint64_t)(uintptr_t)arena | EP_TAG_SELF))
					continue;
				events[n++] = kev[i];
				continue;
			}
			if (tag == EP_TAG_TCP) {
				int fd = usmc_sock_live_fd(r->sk, r->fd);

				if (fd >= 0) {
					usmc_check_tcp(r->sk, fd);
					usmc_sock_refresh(r->sk, fd);
				}
				tcp_event(r);
			} else if (++r->sk->bell_unread >= EP_BELL_DRAIN && r->sk->lgr) {
				/* Edge-triggered: the FIFO is never read otherwise;
				 * empty it before it fills (a full FIFO loses rings). */
				r->sk->lgr->dev->drain(r->sk->bell_own);
				r->sk->bell_unread = 0;
			}
			/* Woken by a peer soon after falling asleep: a longer
			 * spin would have caught it. */
			if (slept_ns && slept_ns < (uint64_t)usmc_opt.spin_us * 1000) {
				ep_spin_feedback(ep, true, slept_ns);
				slept_ns = 0;
			}
			/* Look at every record of this socket in this instance
			 * (the doorbell is shared; readiness comes from the rings). */
			{
				struct usmc_epreg *s;

				for (s = r->sk->epregs; s; s = s->sk_next)
					if (s->ep == ep && s->translated)
						ready_push(s);
			}
		}
		if (n < maxevents)
			n += ready_collect(ep, events + n, maxevents - n, call);
		if (n || timeout == 0)
			break;
		if (timeout > 0) {
			uint64_t now = usmc_now_ns();

			if (now >= deadline)
				break;
			timeout = (int)((deadline - now + 999999) / 1000000);
		}
	}
	if (ep->nested)
		ep_arm_all(ep);
	selfev_update(ep, epfd);
	pthread_mutex_unlock(&ep_lock);
	return n;
}

/* Does this epoll instance have level-triggered readiness the kernel
 * cannot see (for poll/select on an epoll descriptor)? */
void usmc_epoll_sock_changed(struct usmc_sock *sk)
{
	struct usmc_epreg *r;

	pthread_mutex_lock(&ep_lock);
	for (r = sk->epregs; r; r = r->sk_next)
		if (r->ep->nested)
			selfev_update(r->ep, ep_fd_of(r->ep));
	pthread_mutex_unlock(&ep_lock);
}

bool usmc_epoll_has_ready(int epfd)
{
	struct usmc_ep *ep;
	bool r;

	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(epfd);
	r = ep && ep->ready;
	pthread_mutex_unlock(&ep_lock);
	return r;
}

void usmc_epoll_after_fork(void)
{
	pthread_mutex_init(&ep_lock, NULL);
}
