// SPDX-License-Identifier: MIT
/*
 * family.c - state shared by a process and its forked children.
 *
 * A forked child inherits the parent's sockets; both may keep using them
 * (nginx master/workers, a fork-per-connection server that closes its copy).
 * Whatever they must agree on lives in one MAP_SHARED region created before
 * the first fork: an array of struct usmc_sock_sh, handed out with an
 * atomic in_use flag.  The peer never maps it, so locks here cannot be held
 * hostage by the other end of a connection.
 */
#include "log.h"
#include "sock.h"
#include "sys.h"

#include <pthread.h>
#include <sys/mman.h>

#define FAMILY_OBJS	65536

static struct usmc_sock_sh *family;
static pthread_mutex_t family_init_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned int family_hint;

static int family_init(void)
{
	size_t len = sizeof(struct usmc_sock_sh) * FAMILY_OBJS;
	void *p;

	pthread_mutex_lock(&family_init_lock);
	if (!family) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED)
			family = p;
	}
	pthread_mutex_unlock(&family_init_lock);
	return family ? 0 : -ENOMEM;
}

static void mutex_init_robust(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

struct usmc_sock_sh *usmc_family_alloc(void)
{
	unsigned int start, k;

	if (!family && family_init())
		return NULL;
	start = atomic_fetch_add_explicit(&family_hint, 1, memory_order_relaxed);
	for (k = 0; k < FAMILY_OBJS; k++) {
		struct usmc_sock_sh *sh = &family[(start + k) % FAMILY_OBJS];
		uint32_t zero = 0;

		if (LOAD_RELAXED(&sh->in_use))
			continue;
		if (!atomic_compare_exchange_strong(&sh->in_use, &zero, 1))
			continue;
		mutex_init_robust(&sh->tx_lock);
		mutex_init_robust(&sh->rx_lock);
		STORE_RELAXED(&sh->refs, 0);
		STORE_RELAXED(&sh->mode, USMC_MODE_NONE);
		STORE_RELAXED(&sh->reason, 0);
		STORE_RELAXED(&sh->flags, 0);
		STORE_RELAXED(&sh->abort, 0);
		STORE_RELAXED(&sh->so_error, 0);
		sh->data_rung = sh->space_rung = 0;
		sh->spin_ns = 0;
		return sh;
	}
	return NULL;
}

void usmc_family_free(struct usmc_sock_sh *sh)
{
	pthread_mutex_destroy(&sh->tx_lock);
	pthread_mutex_destroy(&sh->rx_lock);
	STORE_RELEASE(&sh->in_use, 0);
}

int usmc_family_lock(pthread_mutex_t *m)
{
	int rc = pthread_mutex_lock(m);

	/* The holder died mid-call: cursors are only published after the
	 * copy completed, so the state is consistent; take it over. */
	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(m);
	return -rc;
}

void usmc_family_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
}

void usmc_family_after_fork(void)
{
	pthread_mutex_init(&family_init_lock, NULL);
}
