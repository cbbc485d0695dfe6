// SPDX-License-Identifier: MIT
/*
 * waitset.c - each thread's own epoll instance for the doorbells it sleeps on.
 *
 * A link group has one doorbell per side (a FIFO), shared by every
 * connection on it and by every thread and process of that side that
 * waits for one of them.  Reading a FIFO to go to sleep would take a ring
 * meant for another waiter, so nobody sleeps on the FIFO itself: each
 * waiter watches it edge-triggered from an epoll instance of its own, the
 * kernel queues an edge in every instance on every write, and the bytes
 * are never read (lo_signal empties a full FIFO).  A blocked recv() or an
 * application's poll() puts its thread's instance into its kernel wait and
 * looks at the rings when it fires.
 *
 * One instance per thread and per signal-handler level: a handler's wait
 * must not take the edges the wait it interrupted is about to sleep on.
 * An instance watches exactly the doorbells of the wait in progress
 * (usmc_waitset_prune drops the others), so rings of link groups the
 * thread no longer waits for never wake it.  Registrations are remembered
 * by link group id and doorbell generation (a process-wide count: a
 * re-attached link group's doorbells are new files even where their
 * numbers repeat).
 *
 * Nothing here allocates or locks: a signal handler's first wait may come
 * while its thread is anywhere.  The instances live in thread-local
 * storage, are closed at thread exit (a key destructor) and, in a forked
 * child, all of them (their numbers are kept in a lock-free table).
 */
#include "lgr.h"
#include "sys.h"
#include "waitset.h"

#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>

#define WS_LEVELS	3		/* thread, handler, handler in a handler */
#define WS_WATCH	64		/* link groups one wait may watch */
#define WS_TRACK	4096		/* instances a fork child can find */

struct ws_entry {
	uint64_t id;
	uint32_t gen;
	int bell;			/* -1: free */
	uint32_t stamp;			/* the wait that last needed it */
};

struct waitset {
	int fd;
	uint32_t stamp;
	struct ws_entry e[WS_WATCH];
};

struct ws_thread {
	bool init;
	pid_t pid;			/* process the instances belong to */
	unsigned int depth;		/* waits in progress on this thread */
	struct waitset ws[WS_LEVELS];
};

static __thread struct ws_thread ws_self;
static pthread_key_t ws_key;
static bool ws_key_ok;
static _Atomic int ws_fds[WS_TRACK];	/* instance descriptor + 1, 0: free */

static void ws_track(int fd, bool add)
{
	int i, want = add ? 0 : fd + 1;

	for (i = 0; i < WS_TRACK; i++) {
		int cur = want;

		if (LOAD_RELAXED(&ws_fds[i]) == want &&
		    atomic_compare_exchange_strong(&ws_fds[i], &cur, add ? fd + 1 : 0))
			return;
	}
}

static void ws_reset(struct waitset *w)
{
	unsigned int i;

	w->fd = -1;
	w->stamp = 0;
	for (i = 0; i < WS_WATCH; i++)
		w->e[i].bell = -1;
}

static void ws_close(struct ws_thread *t)
{
	unsigned int i;

	for (i = 0; i < WS_LEVELS; i++) {
		if (t->ws[i].fd >= 0) {
			ws_track(t->ws[i].fd, false);
			usmc_ifd_close(t->ws[i].fd);
		}
		ws_reset(&t->ws[i]);
	}
}

/* Thread exit: its instances go with it.  A wait after this (another
 * key's destructor calling recv) starts afresh and sets the key again,
 * which has its destructor run once more. */
static void ws_thread_exit(void *arg)
{
	struct ws_thread *t = arg;

	if (t->pid == usmc_getpid())
		ws_close(t);
	t->init = false;
}

void usmc_waitset_init(void)
{
	ws_key_ok = !pthread_key_create(&ws_key, ws_thread_exit);
}

static struct ws_thread *ws_thread(void)
{
	struct ws_thread *t = &ws_self;
	unsigned int i;

	if (likely(t->init && t->pid == usmc_getpid()))
		return t;
	/* First use on this thread, or a child forked without our atfork
	 * handler (the instances would be the parent's): start afresh. */
	for (i = 0; i < WS_LEVELS; i++)
		ws_reset(&t->ws[i]);
	t->pid = usmc_getpid();
	t->depth = 0;
	if (ws_key_ok)
		(void)pthread_setspecific(ws_key, t);
	t->init = true;
	return t;
}

int usmc_waitset_enter(void)
{
	struct ws_thread *t = ws_thread();
	int level = (int)t->depth++;

	t->ws[MIN((unsigned int)level, WS_LEVELS - 1)].stamp++;
	return level;
}

void usmc_waitset_leave(int level)
{
	struct ws_thread *t = &ws_self;

	if (level >= 0 && t->depth)
		t->depth--;
}

/* The instance of this wait's level; deeper handlers share the last one
 * (usmc_waitset_nested tells them to wake the waits they interrupted).
 * Its descriptor must find room at the top of the table (ifd.c), or the
 * wait looks every few milliseconds instead (wait.c). */
static struct waitset *ws_get(int level)
{
	struct ws_thread *t = &ws_self;
	struct waitset *w;
	int fd;

	if (level < 0 || !t->init)
		return NULL;
	w = &t->ws[MIN((unsigned int)level, WS_LEVELS - 1)];
	if (w->fd >= 0)
		return w;
	fd = sys_epoll_create1(EPOLL_CLOEXEC);
	if (fd < 0)
		return NULL;
	usmc_ifd_mark(fd);
	fd = usmc_ifd_move_high(fd, true);
	if (fd < 0)
		return NULL;
	w->fd = fd;
	ws_track(fd, true);
	return w;
}

bool usmc_waitset_nested(int level)
{
	return level >= WS_LEVELS;
}

int usmc_waitset_fd(int level)
{
	struct waitset *w = ws_get(level);

	return w ? w->fd : -ENOMEM;
}

/* Does another entry of the wait in progress hold this number? */
static bool ws_needed(const struct waitset *w, const struct ws_entry *e)
{
	unsigned int j;

	for (j = 0; j < WS_WATCH; j++)
		if (&w->e[j] != e && w->e[j].bell == e->bell && w->e[j].stamp == w->stamp)
			return true;
	return false;
}

int usmc_waitset_watch(int level, struct usmc_lgr *l, int bell)
{
	struct waitset *w = ws_get(level);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
	uint32_t gen = LOAD_RELAXED(&l->bell_gen);
	struct ws_entry *e, *free = NULL;
	unsigned int i;
	int rc;

	if (!w)
		return -ENOMEM;
	for (i = 0; i < WS_WATCH; i++) {
		e = &w->e[i];
		if (e->bell == bell && e->id == l->id && e->gen == gen) {
			e->stamp = w->stamp;
			return 0;
		}
		/* The number names another file now: the entry's registration
		 * went with its own file (never DEL what the number is now). */
		if (e->bell == bell)
			e->bell = -1;
		if (!free && (e->bell < 0 || (e->stamp != w->stamp && level < WS_LEVELS)))
			free = e;
	}
	if (!free)
		return -ENOSPC;		/* more link groups than we watch at once */
	if (free->bell >= 0 && !ws_needed(w, free))
		(void)sys_epoll_ctl(w->fd, EPOLL_CTL_DEL, free->bell, &ev);
	free->bell = -1;
	ev.data.u64 = l->id;
	rc = sys_epoll_ctl(w->fd, EPOLL_CTL_ADD, bell, &ev);
	if (rc < 0 && rc != -EEXIST)
		return rc;
	free->id = l->id;
	free->gen = gen;
	free->bell = bell;
	free->stamp = w->stamp;
	return 0;
}

/*
 * Drop what the wait in progress does not watch.  A registration of a
 * descriptor closed since went with its file; if the number names another
 * doorbell now, that one has an entry of the current wait (watch dropped
 * the old entry when it registered it), which ws_needed keeps.
 */
void usmc_waitset_prune(int level)
{
	struct waitset *w = level < WS_LEVELS ? ws_get(level) : NULL;
	struct epoll_event ev;
	unsigned int i;

	/* Deeper handlers share the last instance with the wait they
	 * interrupted: leave that one's registrations alone. */
	for (i = 0; w && i < WS_WATCH; i++) {
		struct ws_entry *e = &w->e[i];

		if (e->bell < 0 || e->stamp == w->stamp)
			continue;
		if (!ws_needed(w, e))
			(void)sys_epoll_ctl(w->fd, EPOLL_CTL_DEL, e->bell, &ev);
		e->bell = -1;
	}
}

void usmc_waitset_clear(int level)
{
	struct waitset *w = ws_get(level);
	struct epoll_event ev[16];

	/* Edge-triggered: taking the events is all it needs. */
	while (w && sys_epoll_wait(w->fd, ev, 16, 0) == 16)
		;
}

int usmc_waitset_shed(void)
{
	struct ws_thread *t = &ws_self;
	unsigned int i;
	int n = 0;

	if (!t->init || t->pid != usmc_getpid())
		return 0;
	for (i = t->depth; i < WS_LEVELS; i++) {
		if (t->ws[i].fd < 0)
			continue;
		ws_track(t->ws[i].fd, false);
		usmc_ifd_close(t->ws[i].fd);
		ws_reset(&t->ws[i]);
		n++;
	}
	return n;
}

void usmc_waitset_after_fork(void)
{
	unsigned int i;
	int v;

	/* Every thread's instances came along as descriptors only. */
	for (i = 0; i < WS_TRACK; i++) {
		v = LOAD_RELAXED(&ws_fds[i]);
		if (v) {
			usmc_ifd_close(v - 1);
			STORE_RELAXED(&ws_fds[i], 0);
		}
	}
	/* Set up again on first use: no system call here (a child under a
	 * seccomp filter may not make one we would add, t_seccomp). */
	for (i = 0; i < WS_LEVELS; i++)
		ws_reset(&ws_self.ws[i]);
	ws_self.depth = 0;
	ws_self.init = false;
}
