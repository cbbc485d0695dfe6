/* SPDX-License-Identifier: MIT */
/*
 * epoll_int.h - what epoll.c (registrations) and epoll_wait.c (readiness,
 * waiting) share.  Registration lists are under ep_lock.
 */
#ifndef USMC_EPOLL_INT_H
#define USMC_EPOLL_INT_H

#include "epoll.h"
#include "sock.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#define EPREG_LIVE	0x4745524550434d55ULL	/* "UMCPEREG" */
#define EPREG_DEAD	0
#define EP_ARENA_REGS	(1u << 18)
/*
 * Kernel entries we own carry a tag as their data: a record's address (in
 * ep_arena, below 2^48), its kind in bits 0-1, and the record's generation
 * in bits 48-63 (bumped on every reuse, so that an event queued for a freed
 * record never reaches its successor).  No such value ever reaches the
 * program, and no program data in the arena's range reaches the kernel
 * (epoll_tag.c aliases it): ep_data_ours() says which kernel events to
 * translate or drop.
 */
#define EP_TAG_BELL	0ULL
#define EP_TAG_TCP	1ULL
#define EP_TAG_SELF	2ULL	/* the instance's eventfds (selfev, wake) */
#define EP_TAG_UND	3ULL	/* undecided server connection: the program's events */
#define EP_GEN_SHIFT	48
#define EP_ADDR_MASK	((1ULL << EP_GEN_SHIFT) - 1)
#define EP_SPIN_MAX	256	/* spin only over this many connections */
#define EP_SPIN_MIN_NS	2000
#define EP_MAXEV	256
#define EP_HARVEST_NS	20000	/* ask the kernel at least this often while busy */

struct usmc_epreg {
	uint64_t magic;
	uint16_t gen;			/* generation: kept across reuse, see above */
	struct usmc_ep *ep;
	struct usmc_sock *sk;
	int fd;				/* the application's descriptor */
	uint32_t events;		/* application's interest and flags */
	uint64_t data;			/* application's epoll_data */
	bool translated;		/* kernel holds our tagged entries */
	bool undecided;			/* kernel entry: the program's events, EP_TAG_UND */
	bool bell;			/* this record owns the (ep, link group) doorbell entry */
	uint32_t bell_gen;		/* ... of the doorbell opened then (lgr.h bell_gen) */
	bool disabled;			/* EPOLLONESHOT fired, or parked */
	bool parked;			/* deleted by the application; kernel entries kept */
	bool on_ready;			/* on ep->ready, or on ep->again if on_again */
	bool on_again;
	bool on_watch;			/* on ep->watch: looked at by every call */
	bool armed;			/* our arm is out: the peer rings on news */
	uint8_t arm_what;		/* ... for this (USMC_WAIT_*), */
	uint32_t arm_seq[3];		/* ... as usmc_arm_seq() returned it */
	uint8_t idle;			/* watch passes without news */
	bool edge;			/* an event arrived since last reported (ET) */
	bool tcp_edge;			/* the TCP entry fired since (ET news if it adds
					 * to seen_ev: epoll_ready.c reg_news) */
	uint32_t seen_ev;		/* the events last reported */
	uint64_t reported;		/* epoll_wait call that last reported it */
	bool tcp_out;			/* TCP entry watches EPOLLOUT (connect completion) */
	uint64_t tcp_since;		/* ep->harvests when the TCP entry went in */
	uint64_t seen_prod;		/* peer's cursor when last reported (ET news) */
	uint32_t seen_pflags, seen_cflags;	/* ... flags */
	uint32_t seen_nospace;		/* sh->tx_nospace when EPOLLOUT last reported */
	struct usmc_epreg *ep_next, *ep_prev;
	struct usmc_epreg *sk_next;
	struct usmc_lgr *bell_lg;	/* translated: on this link group's list */
	struct ep_lg *eplg;		/* ... and the instance's entry for it (epoll_sleep.c) */
	struct usmc_epreg *lg_next, *lg_prev;
	struct usmc_epreg *ready_next;
	struct usmc_epreg *watch_next;
	struct usmc_epreg *free_next;
} __attribute__((aligned(8)));

/* A link group records of an instance use (epoll_sleep.c). */
struct ep_lg {
	struct usmc_lgr *l;
	uint32_t records;		/* records of the instance on it */
	bool counted;			/* in its side's sleepers word */
	uint32_t spared_seen;		/* its side's spared count when last looked at */
	struct ep_lg *next;
};

struct usmc_ep {
	int refs;			/* descriptors referring to this instance */
	_Atomic uint32_t spin_ns;	/* adaptive spin budget (relaxed: a hint) */
	struct usmc_epreg *regs;
	/* May be ready, first come first served (the kernel's ready list):
	 * looked at by every call.  again: reported level-triggered and
	 * still ready, behind everything that turned ready meanwhile. */
	struct usmc_epreg *ready, **ready_tail;
	struct usmc_epreg *again, **again_tail;
	struct usmc_epreg *watch;	/* not ready, not armed: peeked by every call */
	int ntranslated;
	_Atomic int nforeign;		/* pass-through registrations (approximate;
					 * written under ep_lock, read by spins
					 * without it: relaxed atomics) */
	uint64_t seen_gen;
	bool nested;			/* watched by another epoll / poll: keep selfev */
	int selfev;			/* eventfd readable while ready list is non-empty */
	bool selfev_set;
	int waiters;			/* threads inside usmc_epoll_wait() on it */
	bool closed;			/* last descriptor closed: freed by the last waiter */
	int wake;			/* eventfd (EPOLLET, EP_TAG_SELF): wakes a sleeper */
	struct ep_alias *aliases;	/* the program's entries with tag-like data */
	struct ep_lg *lgs;		/* link groups its records use */
	int sleeping;			/* threads about to sleep or asleep */
	bool ordered;			/* counts asleep all the time (epoll_sleep.c) */
	bool forked;			/* inherited at a fork: the kernel instance is
					 * shared with the parent (epoll.c) */
	/* Kernel waits begun, and the latest of them that emptied the
	 * kernel's ready list (fewer events than room): a TCP entry added
	 * before that one has no news the kernel has not told us. */
	uint64_t harvests, harvest_quiet;
	uint64_t harvest_ns;		/* when a call last asked the kernel */
};

extern pthread_mutex_t ep_lock;
extern struct usmc_epreg *ep_arena;	/* registration records; data tags point here */

int ep_fd_of(struct usmc_ep *ep);
struct usmc_ep *ep_lookup(int epfd);
/* The table slot for an epoll descriptor (created on demand). */
struct usmc_ep **ep_slot(int fd, bool create);
/* Set a slot (a release store: ep_known reads without ep_lock). */
void ep_slot_set(struct usmc_ep **s, struct usmc_ep *ep);
bool ep_known(int fd);
/* The fork child's ep_lock, adaptive like the parent's. */
void ep_lock_reinit(void);
/* epoll descriptor numbers per instance, to find epfd from a record. */
struct ep_fdlist {
	int fd;
	struct usmc_ep *ep;
	struct ep_fdlist *next;
};
extern struct ep_fdlist *ep_fds;
/* A translated record's events now, from its rings (epoll_ready.c). */
uint32_t ep_reg_report(struct usmc_epreg *r);
/* Anything on its rings a look would report? */
bool ep_reg_wants_look(const struct usmc_epreg *r);
void ep_spin_feedback(struct usmc_ep *ep, bool hit, uint64_t spent);
void ep_ready_push(struct usmc_epreg *r);
void ep_ready_remove(struct usmc_epreg *r);
void ep_watch(struct usmc_epreg *r);
/* epoll_wait.c */
int ep_collect(struct usmc_ep *ep, bool again, struct epoll_event *out, int max, uint64_t call);
bool ep_reg_closed(const struct usmc_epreg *r);
/* epoll_kernel.c: the kernel's events; under ep_lock but ep_kernel_wait */
int ep_kernel_wait(int epfd, struct epoll_event *kev, int room, int ms,
		   const struct timespec *ts, const sigset_t *mask, enum usmc_epw how);
int ep_kernel_events(struct usmc_ep *ep, const struct epoll_event *kev, int k,
		     struct epoll_event *out, int max, uint64_t call, uint64_t *slept_ns);
int ep_kernel_events_inplace(struct usmc_ep *ep, struct epoll_event *ev, int k,
			     uint64_t *slept_ns);
bool ep_harvest_skip(struct usmc_ep *ep, int kt, bool ready);
/* All the kernel holds for ep are usmc's own entries: no other descriptor,
 * no record whose events the kernel orders, not watched from outside. */
static inline bool ep_kernel_ours_only(const struct usmc_ep *ep)
{
	return !ep->ordered && !LOAD_RELAXED(&ep->nforeign) && !ep->nested;
}
/* epoll_tag.c: the arena of records and aliases; under ep_lock */
int ep_tags_init(void);
struct usmc_epreg *ep_reg_alloc(void);
void ep_reg_release(struct usmc_epreg *r);
struct usmc_epreg *ep_reg_from_data(uint64_t data, struct usmc_ep *ep, unsigned int *tag);
bool ep_data_ours(uint64_t data);
bool ep_tag_is_alias(uint64_t data);
bool ep_alias_event(struct usmc_ep *ep, uint64_t data, uint64_t *prog);
bool ep_alias_has(struct usmc_ep *ep, int fd);
void ep_alias_drop(struct usmc_ep *ep, int fd);
void ep_alias_free_all(struct usmc_ep *ep);
void ep_alias_restore(struct usmc_ep *ep, int epfd);
int ep_prog_ctl(struct usmc_ep *ep, int epfd, int op, int fd, const struct epoll_event *ev);
void ep_free(struct usmc_ep *ep);
void ep_fresh_wake(struct usmc_epreg *r);
/* The socket layer's callbacks (sock.h struct usmc_sock_watcher). */
void ep_sock_forget(struct usmc_sock *sk);
void ep_sock_changed(struct usmc_sock *sk);
void ep_sock_edge(struct usmc_sock *sk);

static inline uint64_t ep_tag(const struct usmc_epreg *r, uint64_t tag)
{
	return (uint64_t)(uintptr_t)r | tag | ((uint64_t)r->gen << EP_GEN_SHIFT);
}

static inline uint64_t ep_self_tag(void)
{
	return (uint64_t)(uintptr_t)ep_arena | EP_TAG_SELF;
}
void ep_reg_sync(struct usmc_epreg *r);
void ep_tcp_event(struct usmc_epreg *r);
bool ep_want_translated(struct usmc_sock *sk);
bool ep_want_undecided(struct usmc_sock *sk);
bool ep_arm_all(struct usmc_ep *ep);
bool ep_arm_all_pending(struct usmc_ep *ep, bool *pending);
/* Arm r for a doorbell (r->armed stays the caller's to set); true: due. */
bool ep_arm(struct usmc_epreg *r);
/* epoll_wait.c: what r should report now (edge-triggered: news too). */
uint32_t ep_reg_due(const struct usmc_epreg *r);
/* epoll_spin.c: look before sleeping; called and returns with ep_lock held. */
int ep_spin(struct usmc_ep *ep, int epfd, struct epoll_event *kev, int room, bool *hit);
/* epoll_bell.c: l's doorbell rang in ep (caller holds ep_lock). */
struct usmc_lgr;
void ep_bell_event(struct usmc_ep *ep, struct usmc_lgr *l);
/* ... the armed records a kick answered, rung or spared, in kick order. */
void ep_due_answered(struct usmc_ep *ep);
/* epoll_sleep.c: the link groups an instance sleeps on (ep_lock held). */
void ep_lg_join(struct usmc_epreg *r);
void ep_lg_leave(struct usmc_epreg *r);
void ep_sleep_enter(struct usmc_ep *ep);
void ep_sleep_exit(struct usmc_ep *ep);
void ep_sleep_after_fork(struct usmc_ep *ep);
void ep_sleep_order(struct usmc_ep *ep);
void ep_spared_scan(struct usmc_ep *ep);
/* Re-arm the doorbells of its groups before it looks (dev.h progress). */
void ep_progress_all(struct usmc_ep *ep);
void ep_sleep_check(struct usmc_epreg *r);
void ep_selfev_update(struct usmc_ep *ep, int epfd);
/* Due records left on the ready list: wake a thread asleep in the kernel. */
void ep_pass_on(struct usmc_ep *ep);
/* Watched from outside from now on (epoll_wait.c); caller holds ep_lock. */
void ep_nest(struct usmc_ep *ep, int epfd);
extern _Atomic uint32_t ep_live;	/* epoll instances of ours (epoll.c) */

#endif
