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
 *
 * A socket received from another usmc process (SCM_RIGHTS, scm_recv.c)
 * keeps its shared half in the sender's family: that region is mapped as a
 * foreign family (region 1.. FAMILY_REGIONS-1; region 0 is our own).  We
 * never allocate from a foreign region; a slot there is freed by whoever
 * holds its socket last, as in our own.  Regions are sealed against
 * shrinking (and growing) when created, and a foreign one is mapped only
 * with that seal: nobody can truncate it under us (no SIGBUS).  Indices
 * passed across exec are global: region * FAMILY_OBJS + slot.
 */
#include "family.h"
#include "log.h"
#include "sock.h"
#include "sys.h"

#include <pthread.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define FAMILY_OBJS	USMC_FAMILY_OBJS

/* Published once with release; readers that find it set may use the map. */
static _Atomic(struct usmc_sock_sh *) family_ptr;
static int family_fd = -1;
static pthread_mutex_t family_init_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned int family_hint;

#define FAMILY_LEN	(sizeof(struct usmc_sock_sh) * FAMILY_OBJS)
#define FAMILY_SEALS	(F_SEAL_SHRINK | F_SEAL_GROW)

/* Every family region mapped here, ours first (region 0, family_ptr).
 * Slots are filled under family_init_lock and never change afterwards
 * (base published with release last). */
struct family_region {
	_Atomic(struct usmc_sock_sh *) base;
	int fd;
	dev_t dev;
	ino_t ino;
};

static struct family_region regions[USMC_FAMILY_REGIONS];

/* A memfd rather than anonymous memory: an exec'ed image inherits it and
 * keeps sharing the sockets it was handed (exec.c). */
static int family_map(int fd)
{
	void *p = mmap(NULL, FAMILY_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	struct stat st;

	if (p == MAP_FAILED)
		return -errno;
	family_fd = fd;
	if (!fstat(fd, &st)) {
		regions[0].dev = st.st_dev;
		regions[0].ino = st.st_ino;
	}
	regions[0].fd = fd;
	STORE_RELEASE(&regions[0].base, (struct usmc_sock_sh *)p);
	STORE_RELEASE(&family_ptr, (struct usmc_sock_sh *)p);
	usmc_ifd_mark(fd);
	return 0;
}

static inline struct usmc_sock_sh *family_get(void)
{
	return LOAD_ACQUIRE(&family_ptr);
}

static int family_init(void)
{
	int fd, rc = 0;

	pthread_mutex_lock(&family_init_lock);
	if (!family_get()) {
		fd = usmc_fault(USMC_FAULT_MEMFD) ? -1 :
		     memfd_create("usmc-family", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd >= 0) {
			usmc_ifd_mark(fd);
			fd = usmc_ifd_move_high(fd, false);
		}
		/* Sealed: a process we hand a socket to maps it too (scm_recv.c)
		 * and must be sure that nobody can truncate it. */
		if (fd < 0 || ftruncate(fd, (off_t)FAMILY_LEN) ||
		    sys_fcntl(fd, F_ADD_SEALS, FAMILY_SEALS | F_SEAL_SEAL) || (rc = family_map(fd))) {
			usmc_ifd_close(fd);
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&family_init_lock);
	return family_get() ? 0 : rc;
}

int usmc_family_fd(void)
{
	return family_fd;
}

int usmc_family_index(const struct usmc_sock_sh *sh)
{
	int r;

	for (r = 0; r < USMC_FAMILY_REGIONS; r++) {
		struct usmc_sock_sh *b = LOAD_ACQUIRE(&regions[r].base);

		if (b && sh >= b && sh < b + FAMILY_OBJS)
			return r * FAMILY_OBJS + (int)(sh - b);
	}
	return -1;
}

int usmc_family_region_fd(int region)
{
	if (region < 0 || region >= USMC_FAMILY_REGIONS || !LOAD_ACQUIRE(&regions[region].base))
		return -1;
	return regions[region].fd;
}

/*
 * Map another process family's region, passed to us in fd (SCM_RIGHTS, or
 * across exec): a regular file of exactly our size, sealed against
 * shrinking and growing.  The same region twice (or our own: a sender we
 * forked from) is mapped once.  Returns the region (fd is then ours, kept
 * open for a later exec, unless the region was known: the caller closes
 * it), or -errno.
 */
int usmc_family_foreign(int fd, bool *known)
{
	struct stat st;
	int r, seals, rc = -ENOSPC;
	void *p;

	*known = false;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size != FAMILY_LEN)
		return -EINVAL;
	seals = sys_fcntl(fd, F_GET_SEALS, 0);
	if (seals < 0 || (seals & FAMILY_SEALS) != FAMILY_SEALS)
		return -EPERM;
	pthread_mutex_lock(&family_init_lock);
	for (r = 0; r < USMC_FAMILY_REGIONS; r++) {
		if (!LOAD_RELAXED(&regions[r].base)) {
			if (r && rc == -ENOSPC)
				rc = r;		/* first free foreign slot */
			continue;
		}
		if (regions[r].dev == st.st_dev && regions[r].ino == st.st_ino) {
			*known = true;
			rc = r;
			goto out;
		}
	}
	if (rc < 0)
		goto out;
	p = mmap(NULL, FAMILY_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	usmc_ifd_mark(fd);
	sys_fcntl(fd, F_SETFD, FD_CLOEXEC);
	regions[rc].fd = fd;
	regions[rc].dev = st.st_dev;
	regions[rc].ino = st.st_ino;
	/* Pairs with the acquire loads in usmc_family_at/_index. */
	STORE_RELEASE(&regions[rc].base, (struct usmc_sock_sh *)p);
out:
	pthread_mutex_unlock(&family_init_lock);
	return rc;
}

int usmc_family_adopt(int fd)
{
	struct stat st;

	if (family_get())
		return -EEXIST;
	if (fstat(fd, &st) || (size_t)st.st_size != FAMILY_LEN)
		return -EINVAL;
	sys_fcntl(fd, F_SETFD, FD_CLOEXEC);
	return family_map(fd);
}

/* A used shared half by global index (usmc_family_index), else NULL. */
struct usmc_sock_sh *usmc_family_at(int idx)
{
	struct usmc_sock_sh *fam;

	if (idx < 0 || idx >= USMC_FAMILY_REGIONS * FAMILY_OBJS)
		return NULL;
	fam = LOAD_ACQUIRE(&regions[idx / FAMILY_OBJS].base);
	idx %= FAMILY_OBJS;
	/* Another process's region holds anything: only a slot in use
	 * (1) is a socket's; USMC_SH_PRIVATE never lives in a region. */
	if (!fam || LOAD_ACQUIRE(&fam[idx].in_use) != 1)
		return NULL;
	return &fam[idx];
}

_Atomic uint32_t usmc_family_gen = 1;

static void mutex_init_robust(struct usmc_flock *l)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&l->m, &a);
	pthread_mutexattr_destroy(&a);
	l->gen = LOAD_RELAXED(&usmc_family_gen);
	l->held = 0;
}

struct usmc_sock_sh *usmc_family_alloc(void)
{
	struct usmc_sock_sh *family;
	unsigned int start, k;

	if (!family_get() && family_init())
		return NULL;
	family = family_get();
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
		mutex_init_robust(&sh->move_lock);
		STORE_RELAXED(&sh->refs, 0);
		STORE_RELAXED(&sh->mode, USMC_MODE_NONE);
		STORE_RELAXED(&sh->reason, 0);
		STORE_RELAXED(&sh->flags, 0);
		STORE_RELAXED(&sh->abort, 0);
		sh->data_rung = sh->space_rung = 0;
		STORE_RELAXED(&sh->spin_ns, 0);
		STORE_RELAXED(&sh->own_rung, 0);
		STORE_RELAXED(&sh->tcp_looker, 0);
		STORE_RELAXED(&sh->tcp_relook, 0);
		STORE_RELAXED(&sh->timeo[0], 0);
		STORE_RELAXED(&sh->timeo[1], 0);
		STORE_RELAXED(&sh->st_idx, 0);
		return sh;
	}
	return NULL;
}

/*
 * Process-private state for a socket that cannot share (see sock.c): it
 * never goes onto shared memory, so forked copies need not agree on more
 * than TCP already keeps in the kernel.
 */
struct usmc_sock_sh *usmc_family_alloc_private(void)
{
	struct usmc_sock_sh *sh = calloc(1, sizeof(*sh));

	if (!sh)
		return NULL;
	pthread_mutex_init(&sh->tx_lock.m, NULL);
	pthread_mutex_init(&sh->rx_lock.m, NULL);
	pthread_mutex_init(&sh->move_lock.m, NULL);
	sh->tx_lock.gen = sh->rx_lock.gen = sh->move_lock.gen = LOAD_RELAXED(&usmc_family_gen);
	STORE_RELAXED(&sh->in_use, USMC_SH_PRIVATE);
	return sh;
}

void usmc_family_free(struct usmc_sock_sh *sh)
{
	struct usmc_sock_sh *own = family_get();

	pthread_mutex_destroy(&sh->tx_lock.m);
	pthread_mutex_destroy(&sh->rx_lock.m);
	pthread_mutex_destroy(&sh->move_lock.m);
	if (LOAD_RELAXED(&sh->in_use) == USMC_SH_PRIVATE) {
		free(sh);
		return;
	}
	STORE_RELEASE(&sh->in_use, 0);
	/* The next one here takes this slot again: the pages a server
	 * touches stay those of its busiest moment (handing out slots in
	 * turn touched the whole region, 20 MB, 312 bytes per connection a
	 * long-running server ever had). */
	if (own && sh >= own && sh < own + FAMILY_OBJS)
		STORE_RELAXED(&family_hint, (unsigned int)(sh - own));
}

int usmc_family_lock_slow(struct usmc_flock *l)
{
	int rc = pthread_mutex_lock(&l->m);

	/* The holder died mid-call: cursors are only published after the
	 * copy completed, so the state is consistent; take it over. */
	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(&l->m);
	return -rc;
}

int usmc_family_trylock_slow(struct usmc_flock *l)
{
	int rc = pthread_mutex_trylock(&l->m);

	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(&l->m);
	return -rc;
}

/*
 * Every socket made so far may now be reached from two processes: before
 * fork() (atfork prepare) and before an exec that hands sockets over
 * (exec.c; in a clone(CLONE_VM) child that writes the parent's memory).
 * Not covered: a fork from a signal handler that interrupted a send
 * holding a lock taken without the mutex; the child would go on inside
 * that send.
 */
void usmc_family_before_fork(void)
{
	uint32_t g = LOAD_RELAXED(&usmc_family_gen) + 1;

	STORE_RELAXED(&usmc_family_gen, g ? g : 1);
}

void usmc_family_after_fork(void)
{
	pthread_mutex_init(&family_init_lock, NULL);
}

void usmc_family_inherited(struct usmc_sock_sh *sh)
{
	sh->tx_lock.gen = sh->rx_lock.gen = sh->move_lock.gen = 0;
}
