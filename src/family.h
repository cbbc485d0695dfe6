/* SPDX-License-Identifier: MIT */
/*
 * family.h - fork-shared socket state (family.c): the shared halves of
 * sockets and the locks over them.
 */
#ifndef USMC_FAMILY_H
#define USMC_FAMILY_H

#include "usmc.h"

#include <pthread.h>
#include <sys/single_threaded.h>

struct usmc_sock_sh;

/*
 * A family lock (tx_lock, rx_lock): a robust process-shared mutex, taken
 * only while another thread or process could reach the socket.  While the
 * process has one thread (glibc's __libc_single_threaded, which never goes
 * back to true) and the socket was made after the process last forked
 * (gen == usmc_family_gen), nobody else can: the two atomic operations and
 * robust-list updates of the mutex were a fifth of a small send.  held
 * marks a lock taken that way: a signal handler that calls in again while
 * it is held gets EDEADLK (the mutex would deadlock; sends from handlers
 * never get here, tx.c queues them).
 */
struct usmc_flock {
	pthread_mutex_t m;
	uint32_t gen;			/* usmc_family_gen at creation; 0: always the mutex */
	uint32_t held;			/* taken without the mutex (one thread only) */
};

#define USMC_SH_PRIVATE	2	/* calloc'ed, not in the fork-shared region */
struct usmc_sock_sh *usmc_family_alloc(void);
struct usmc_sock_sh *usmc_family_alloc_private(void);
void usmc_family_free(struct usmc_sock_sh *sh);
/* Bumped before every fork(2) (both sides inherit the new value) and
 * before an exec that hands sockets over (a vfork parent sees it). */
extern _Atomic uint32_t usmc_family_gen;
int usmc_family_lock_slow(struct usmc_flock *l);

/* The lock as a flag; the caller checked that it may be one and is free. */
static inline void usmc_family_hold(struct usmc_flock *l)
{
	l->held = 1;
	atomic_signal_fence(memory_order_seq_cst);
}

static inline int usmc_family_lock(struct usmc_flock *l)
{
	if (likely(l->gen == LOAD_RELAXED(&usmc_family_gen) && __libc_single_threaded)) {
		if (l->held)
			return -EDEADLK;	/* a handler interrupted the holder */
		usmc_family_hold(l);
		return 0;
	}
	return usmc_family_lock_slow(l);
}

/* Without waiting: 0, or -EBUSY while someone holds it. */
int usmc_family_trylock_slow(struct usmc_flock *l);
static inline int usmc_family_trylock(struct usmc_flock *l)
{
	if (likely(l->gen == LOAD_RELAXED(&usmc_family_gen) && __libc_single_threaded)) {
		if (l->held)
			return -EBUSY;
		usmc_family_hold(l);
		return 0;
	}
	return usmc_family_trylock_slow(l);
}

static inline void usmc_family_unlock(struct usmc_flock *l)
{
	if (l->held) {
		atomic_signal_fence(memory_order_seq_cst);
		l->held = 0;
		return;
	}
	pthread_mutex_unlock(&l->m);
}

void usmc_family_before_fork(void);
void usmc_family_after_fork(void);
/* An object inherited across exec: always the mutex. */
void usmc_family_inherited(struct usmc_sock_sh *sh);
int usmc_family_fd(void);
/* Family regions mapped at once: ours, and those of processes that handed
 * us sockets (SCM_RIGHTS). */
#define USMC_FAMILY_REGIONS	16
#define USMC_FAMILY_OBJS	65536	/* shared halves per region */
int usmc_family_index(const struct usmc_sock_sh *sh);
struct usmc_sock_sh *usmc_family_at(int idx);
int usmc_family_adopt(int fd);
int usmc_family_foreign(int fd, bool *known);
int usmc_family_region_fd(int region);

#endif
