// SPDX-License-Identifier: MIT
/*
 * epoll.c - epoll over shared-memory connections.
 *
 * The application's epoll instance stays real.  For a connection on the
 * shared-memory path we register, instead of the application's entry, its
 * TCP socket (EPOLLET, FIN/RST = peer gone, EPOLLOUT = connect completed),
 * tagged with our registration record, and, once per link group in the
 * instance, the link group's doorbell FIFO (EPOLLIN|EPOLLET, rung by the
 * peer when we armed), tagged with one of the group's records.  A doorbell
 * event goes to the group's armed records whose arm a ring answered
 * (usmc_rung_since).  Events are translated back into the application's
 * events and data from the rings' state.  A ready list gives
 * level-triggered semantics; edge and one-shot semantics follow the
 * kernel's rules per registration.
 *
 * Descriptors that are not ours (listeners, pipes, timerfds, plain TCP)
 * are passed through untouched.  A socket registered before it connects is
 * recorded and converted once it goes onto shared memory (and back when a
 * late decline moves it to TCP).
 *
 * Locking: ep_lock (one mutex) protects every registration list; it is not
 * held while sleeping in the kernel.  Readiness is computed lock-free.
 */
#include "af_usmc.h"
#include "epoll.h"
#include "epoll_int.h"
#include "fdtab.h"
#include "options.h"
#include "real.h"
#include "sock.h"
#include "sys.h"
#include "wait.h"

#include <stdlib.h>

/* The record of r's instance that holds the link group's doorbell entry
 * (for the doorbell open now: one closed by a shed took its entries along,
 * r->bell_gen tells). */
static struct usmc_epreg *sibling_bell(struct usmc_epreg *r)
{
	struct usmc_epreg *s;

	for (s = r->bell_lg ? r->bell_lg->epregs : NULL; s; s = s->lg_next)
		if (s != r && s->ep == r->ep && s->bell &&
		    s->bell_gen == LOAD_RELAXED(&r->bell_lg->bell_gen))
			return s;
	return NULL;
}

/* A record (re)registered on the rings: report its state as new, as the
 * kernel does for an ADD. */
static void reg_fresh(struct usmc_epreg *r)
{
	r->edge = true;
	r->seen_prod = ~0ULL;
	r->seen_ev = 0;
	ep_ready_push(r);
	if (r->ep->nested)
		usmc_arm(r->sk, USMC_WAIT_RX | USMC_WAIT_TX);
	ep_fresh_wake(r);
}

/*
 * A record moved onto the rings because its socket's path changed (the
 * program did nothing): no edge of its own.  TCP-level edges (connect
 * completion: the kernel queues it when our entry is set) come from the
 * kernel entry; bytes in the ring the program has not read are news.
 */
static void reg_moved(struct usmc_epreg *r)
{
	const struct usmc_sock *sk = r->sk;

	r->edge = false;
	r->seen_ev = 0;
	r->seen_prod = LOAD_RELAXED(&sk->sh->rx_cons);
	r->seen_pflags = LOAD_ACQUIRE(&sk->rx_p->flags);
	r->seen_cflags = LOAD_ACQUIRE(&sk->tx_c->flags);
	r->seen_nospace = LOAD_RELAXED(&sk->sh->tx_nospace);
	ep_ready_push(r);
	if (r->ep->nested)
		usmc_arm(r->sk, USMC_WAIT_RX | USMC_WAIT_TX);
}

static void reg_drop_parked(struct usmc_epreg *r);

/* Kernel entries for a translated record; fresh: registered by the program
 * (ADD), else moved (reg_moved). */
static int kernel_translate(int epfd, struct usmc_epreg *r, int op, bool fresh)
{
	struct epoll_event ev;
	uint32_t excl = r->events & EPOLLEXCLUSIVE;
	int rc;

	/* The TCP entry reports FIN/RST (and the wake message) as EPOLLIN, and
	 * connect completion as EPOLLOUT while connecting; EPOLLEXCLUSIVE
	 * admits only IN/OUT/ET (FIN still shows as EPOLLIN). */
	r->tcp_out = sk_flag(r->sk, SKF_CONNECTING) || sk_mode(r->sk) == USMC_MODE_MIGRATING;
	ev.events = EPOLLIN | EPOLLET | (r->tcp_out ? EPOLLOUT : 0) | (excl ? excl : EPOLLRDHUP);
	if (r->tcp_out)
		ep_sleep_order(r->ep);
	ev.data.u64 = ep_tag(r, EP_TAG_TCP);
	rc = real.epoll_ctl(epfd, op, r->fd, &ev);
	if (rc)
		return -errno;
	r->tcp_since = r->ep->harvests;
	ep_alias_drop(r->ep, r->fd);
	ep_lg_join(r);
	if (!sibling_bell(r)) {
		/* Never EPOLLEXCLUSIVE: the doorbell is the link group's, and
		 * an exclusive entry would wake one instance for another's
		 * connection (the kernel may wake several: "one or more"). */
		ev.events = EPOLLIN | EPOLLET;
		ev.data.u64 = ep_tag(r, EP_TAG_BELL);
		/* An entry left for this doorbell would carry another tag. */
		if (real.epoll_ctl(epfd, EPOLL_CTL_ADD, r->sk->bell_own, &ev) &&
		    (errno != EEXIST || real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->sk->bell_own, &ev))) {
			rc = -errno;
			real.epoll_ctl(epfd, EPOLL_CTL_DEL, r->fd, &ev);
			ep_lg_leave(r);
			return rc;
		}
		r->bell = true;
		r->bell_gen = LOAD_RELAXED(&r->bell_lg->bell_gen);
	}
	r->translated = true;
	r->undecided = false;
	r->ep->ntranslated++;
	if (fresh)
		reg_fresh(r);
	else
		reg_moved(r);
	return 0;
}

/* Leave the link group's list; drop the doorbell entry if we hold it
 * (hand it to a sibling record of the instance if there is one). */
static void kernel_bell_drop(int epfd, struct usmc_epreg *r)
{
	struct usmc_epreg *s;
	struct epoll_event ev;
	struct usmc_lgr *l = r->bell_lg;
	int bell;

	/* An instance we inherited at a fork is our parent's too (one kernel
	 * instance): its entries stay as they are for it, as the kernel keeps
	 * a file's entry until its last descriptor closes.  An event one of
	 * them brings us later names a record we freed: ep_reg_from_data
	 * drops it by its generation. */
	if (!r->bell || !l || r->ep->forked) {
		r->bell = false;
		ep_lg_leave(r);
		return;
	}
	r->bell = false;
	/* Our entry went with the doorbell a shed closed (its generation is
	 * past ours): never touch the number, it may be the new doorbell's,
	 * registered by a sibling of its own. */
	bell = usmc_lgr_bell_own(l);
	for (s = l->epregs; s; s = s->lg_next)
		if (s != r && s->ep == r->ep && s->translated)
			break;
	if (bell < 0 || r->bell_gen != LOAD_RELAXED(&l->bell_gen)) {
		/* nothing of ours left in the kernel */
	} else if (s) {
		ev.events = EPOLLIN | EPOLLET;
		ev.data.u64 = ep_tag(s, EP_TAG_BELL);
		if (!real.epoll_ctl(epfd, EPOLL_CTL_MOD, bell, &ev)) {
			s->bell = true;
			s->bell_gen = r->bell_gen;
		}
	} else {
		real.epoll_ctl(epfd, EPOLL_CTL_DEL, bell, &ev);
	}
	ep_lg_leave(r);
}

/* Bring a record's kernel entries in line with the socket's current path. */
void ep_reg_sync(struct usmc_epreg *r)
{
	int epfd = ep_fd_of(r->ep);
	struct epoll_event ev;

	if (epfd < 0)
		return;
	if (r->undecided && !ep_want_undecided(r->sk) && !ep_want_translated(r->sk)) {
		/* Settled as TCP: the program's own entry (the kernel reports
		 * again what is pending). */
		ev.events = r->events;
		ev.data.u64 = r->data;
		if (!ep_prog_ctl(r->ep, epfd, EPOLL_CTL_MOD, r->fd, &ev))
			r->undecided = false;
		ep_sleep_check(r);
		return;
	}
	if (ep_want_translated(r->sk) == r->translated)
		return;
	if (!r->translated) {
		kernel_translate(epfd, r, EPOLL_CTL_MOD, false);
		return;
	}
	if (r->parked) {
		reg_drop_parked(r);
		return;
	}
	/* Back to plain TCP: the application's own entry, its data; our tag
	 * while a byte that is not the program's is owed. */
	kernel_bell_drop(epfd, r);
	r->translated = false;
	r->ep->ntranslated--;
	ev.events = r->events;
	ev.data.u64 = r->data;
	if (ep_want_undecided(r->sk) && !(r->events & EPOLLEXCLUSIVE)) {
		ev.data.u64 = ep_tag(r, EP_TAG_UND);
		if (!real.epoll_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev)) {
			ep_alias_drop(r->ep, r->fd);
			r->undecided = true;
		}
	} else {
		ep_prog_ctl(r->ep, epfd, EPOLL_CTL_MOD, r->fd, &ev);
	}
	ep_sleep_check(r);
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
		ev = ep_reg_report(r);
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

/* Fork child: only this thread exists; nobody waits on any instance. */
void usmc_epoll_after_fork(void)
{
	struct ep_fdlist *e;

	ep_lock_reinit();
	for (e = ep_fds; e; e = e->next) {
		e->ep->waiters = 0;
		e->ep->forked = true;
		ep_sleep_after_fork(e->ep);
	}
}

static const struct usmc_sock_watcher ep_watcher = {
	.forget = ep_sock_forget,
	.changed = ep_sock_changed,
	.edge = ep_sock_edge,
};

static struct usmc_ep *ep_create(int epfd)
{
	struct usmc_ep **s = ep_slot(epfd, true), *ep;
	struct ep_fdlist *e;

	if (!s)
		return NULL;
	/* Every registration hangs off an instance made here. */
	atomic_store_explicit(&usmc_sock_watcher, &ep_watcher, memory_order_release);
	ep = calloc(1, sizeof(*ep));
	e = malloc(sizeof(*e));
	if (!ep || !e) {
		free(ep);
		free(e);
		return NULL;
	}
	atomic_fetch_add(&ep_live, 1);
	ep->refs = 1;
	ep->ready_tail = &ep->ready;
	ep->again_tail = &ep->again;
	ep->selfev = -1;
	ep->wake = -1;
	ep->spin_ns = (uint32_t)MIN(usmc_opt.spin_us * 1000L, 0xffffffffL);
	e->fd = epfd;
	e->ep = ep;
	e->next = ep_fds;
	ep_fds = e;
	ep_slot_set(s, ep);
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
	ep_ready_remove(r);
	if (r->on_watch) {
		for (pp = &r->ep->watch; *pp; pp = &(*pp)->watch_next)
			if (*pp == r) {
				*pp = r->watch_next;
				break;
			}
	}
	if (r->translated)
		r->ep->ntranslated--;
	ep_lg_leave(r);
	ep_reg_release(r);
}

/* Caller holds ep_lock; no thread is inside usmc_epoll_wait() on ep. */
void ep_free(struct usmc_ep *ep)
{
	atomic_fetch_sub(&ep_live, 1);
	while (ep->regs)
		reg_unlink(ep->regs);
	ep_alias_free_all(ep);
	usmc_ifd_close(ep->selfev);
	usmc_ifd_close(ep->wake);
	free(ep);
}

/* Forget epoll descriptor fd (closed, or never an instance).  Caller holds
 * ep_lock.  Returns whether it was one we knew. */
static bool ep_forget_fd(int fd)
{
	struct usmc_ep **s, *ep;
	struct ep_fdlist **pp, *e;

	s = ep_slot(fd, false);
	ep = s ? *s : NULL;
	if (!ep)
		return false;
	ep_slot_set(s, NULL);
	for (pp = &ep_fds; (e = *pp); pp = &e->next)
		if (e->fd == fd) {
			*pp = e->next;
			free(e);
			break;
		}
	if (--ep->refs == 0) {
		ep->closed = true;
		if (!ep->waiters)
			ep_free(ep);
	}
	return true;
}

/* The application closed an epoll descriptor (or dup'ed over it). */
bool usmc_epoll_closed(int fd)
{
	bool known;

	if (!ep_known(fd))
		return false;		/* (most closes: sockets, files) */
	pthread_mutex_lock(&ep_lock);
	known = ep_forget_fd(fd);
	pthread_mutex_unlock(&ep_lock);
	return known;
}

void usmc_epoll_dup(int oldfd, int newfd)
{
	struct usmc_ep *ep, **s;
	struct ep_fdlist *e;

	pthread_mutex_lock(&ep_lock);
	ep = ep_lookup(oldfd);
	s = ep ? ep_slot(newfd, true) : NULL;
	e = s ? malloc(sizeof(*e)) : NULL;
	if (e) {
		ep->refs++;
		ep_slot_set(s, ep);
		e->fd = newfd;
		e->ep = ep;
		e->next = ep_fds;
		ep_fds = e;
	}
	pthread_mutex_unlock(&ep_lock);
}

/* The socket's last local reference is gone: forget all its records.
 * Nobody can add one now (an ADD holds a reference), so a socket that
 * never had any needs no lock: the last put made every write visible. */
void ep_sock_forget(struct usmc_sock *sk)
{
	if (!__atomic_load_n(&sk->epregs, __ATOMIC_RELAXED))
		return;
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

/*
 * Event loops delete and re-add a connection's registration around every
 * request (redis' ae, libevent with one-shot interest): for a translated
 * record that would be four kernel calls per cycle.  EPOLL_CTL_DEL parks
 * it instead: disabled, off every list, its kernel entries kept; to the
 * application it does not exist (MOD/DEL: ENOENT).  A later ADD revives it
 * without a system call.  Kernel events for a parked record find it
 * disabled and are dropped.  It is really removed when its socket leaves
 * shared memory (ep_reg_sync), when an ADD needs different kernel entries,
 * and with its socket or epoll instance.
 */
static void reg_park(struct usmc_epreg *r)
{
	r->parked = true;
	r->disabled = true;
	r->armed = false;
}

/* Remove a parked record's kernel entries and the record. */
static void reg_drop_parked(struct usmc_epreg *r)
{
	int epfd = ep_fd_of(r->ep);
	struct epoll_event ev = { 0 };

	if (epfd >= 0) {
		kernel_bell_drop(epfd, r);
		real.epoll_ctl(epfd, EPOLL_CTL_DEL, r->fd, &ev);
		ep_alias_drop(r->ep, r->fd);
	}
	reg_unlink(r);
}

static void reg_revive(struct usmc_epreg *r, const struct epoll_event *ev)
{
	r->parked = false;
	r->disabled = false;
	r->events = ev->events;
	r->data = ev->data.u64;
	reg_fresh(r);
}

/* A descriptor usmc does not translate (a listener, a pipe) whose entry
 * needs an alias (epoll_tag.c); the instance becomes known if it was not.
 * Caller holds ep_lock. */
static int prog_ctl_foreign(struct usmc_ep *ep, int epfd, int op, int fd,
			    const struct epoll_event *ev)
{
	bool fresh = !ep;
	int rc;

	if (!ep)
		ep = ep_create(epfd);
	if (!ep)
		return -ENOMEM;
	rc = ep_prog_ctl(ep, epfd, op, fd, ev);
	if (rc && fresh)
		ep_forget_fd(epfd);	/* not an epoll instance at all, perhaps */
	return rc;
}

int usmc_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct usmc_sock *sk = NULL;
	struct usmc_epreg *r;
	struct usmc_ep *ep, *inner;
	int rc = USMC_PASS;

	if (fd == epfd)
		return USMC_PASS;	/* the kernel says EINVAL */
	/* Taken (and dropped, below) outside ep_lock: a reference dropped
	 * here may be the socket's last, whose release takes ep_lock. */
	sk = usmc_fd_get(fd);
	pthread_mutex_lock(&ep_lock);
	/* Before any program data reaches the kernel: its range is known. */
	if (ep_tags_init()) {
		rc = -ENOMEM;
		goto out;
	}
	ep = ep_lookup(epfd);
	inner = ep_lookup(fd);
	if (inner && op == EPOLL_CTL_ADD && !inner->nested)
		ep_nest(inner, fd);
	if (!sk || (sk->kind != SK_TCP && sk->kind != SK_CONN)) {
		if (ep && op == EPOLL_CTL_ADD) {
			STORE_RELAXED(&ep->nforeign, LOAD_RELAXED(&ep->nforeign) + 1);
			ep_sleep_order(ep);
		}
		else if (ep && op == EPOLL_CTL_DEL && LOAD_RELAXED(&ep->nforeign) > 0)
			STORE_RELAXED(&ep->nforeign, LOAD_RELAXED(&ep->nforeign) - 1);
		/* Data that looks like our tags, or an entry that has an alias. */
		if ((op != EPOLL_CTL_DEL && ev && ep_data_ours(ev->data.u64)) ||
		    ep_alias_has(ep, fd))
			rc = prog_ctl_foreign(ep, epfd, op, fd, ev);
		goto out;
	}
	if (!ep)
		ep = ep_create(epfd);
	if (!ep)
		goto out;
	r = reg_find(ep, fd, sk);
	if (r && r->parked) {
		if (op == EPOLL_CTL_ADD && ev && !(ev->events & EPOLLEXCLUSIVE) &&
		    ep_want_translated(sk)) {
			reg_revive(r, ev);
			rc = 0;
			goto out;
		}
		if (op != EPOLL_CTL_ADD) {
			rc = -ENOENT;
			goto out;
		}
		reg_drop_parked(r);
		r = NULL;
	}
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
		r = ep_reg_alloc();
		if (!r) {
			rc = -ENOMEM;
			break;
		}
		r->ep = ep;
		r->sk = sk;
		r->fd = fd;
		r->events = ev->events;
		r->data = ev->data.u64;
		if (ep_want_translated(sk)) {
			r->sk_next = sk->epregs;	/* visible to sibling_bell() */
			sk->epregs = r;
			rc = kernel_translate(epfd, r, EPOLL_CTL_ADD, true);
			sk->epregs = r->sk_next;
		} else if (ep_want_undecided(sk) && !(ev->events & EPOLLEXCLUSIVE)) {
			struct epoll_event kev = { .events = ev->events,
						   .data.u64 = ep_tag(r, EP_TAG_UND) };

			rc = real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &kev) ? -errno : 0;
			if (!rc)
				ep_alias_drop(ep, fd);
			r->undecided = true;
		} else {
			rc = ep_prog_ctl(ep, epfd, EPOLL_CTL_ADD, fd, ev);
		}
		if (rc) {
			ep_reg_release(r);
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
		ep_sleep_check(r);
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
			/* Our kernel entries do not change; re-arm ours.  (The
			 * descriptor is open: our close() clears its entry.) */
			r->events = ev->events;
			r->data = ev->data.u64;
			r->disabled = false;
			r->edge = true;
			ep_ready_push(r);
			ep_fresh_wake(r);
			rc = 0;
		} else {
			struct epoll_event kev = *ev;

			if (r->undecided) {
				kev.data.u64 = ep_tag(r, EP_TAG_UND);
				rc = real.epoll_ctl(epfd, op, fd, &kev) ? -errno : 0;
			} else {
				rc = ep_prog_ctl(ep, epfd, op, fd, ev);
			}
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
		if (r->translated && !(r->events & EPOLLEXCLUSIVE)) {
			reg_park(r);
			rc = 0;
			break;
		}
		rc = r->translated ? (real.epoll_ctl(epfd, op, fd, ev) ? -errno : 0) :
				     ep_prog_ctl(ep, epfd, op, fd, ev);
		if (rc)
			break;
		if (r->translated)
			kernel_bell_drop(epfd, r);
		reg_unlink(r);
		break;
	default:
		rc = USMC_PASS;
	}
	/* Watched from outside: a record added with bytes already in its
	 * ring rings nobody; its readiness must show on the descriptor now. */
	if (ep && ep->nested && !rc)
		ep_selfev_update(ep, epfd);
out:
	pthread_mutex_unlock(&ep_lock);
	if (sk)
		usmc_sock_put(sk);
	return rc;
}
