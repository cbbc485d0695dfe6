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
 * Registrations stay (a FIFO's entry goes away with its last descriptor);
 * a small cache keyed by link group id and doorbell generation saves the
 * epoll_ctl.  Instances are closed at thread exit and, in a forked child,
 * for every thread that did not come along.
 */
#include "lgr.h"
#include "sys.h"
#include "waitset.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define WS_LEVELS	3		/* thread, handler, handler in a handler */
#define WS_CACHE	16		/* registrations remembered per instance */

struct waitset {
	int fd;
	uint64_t id[WS_CACHE];
	uint32_t gen[WS_CACHE];
	int bell[WS_CACHE];
	unsigned int next;
};

struct ws_thread {
	pid_t pid;			/* process the instances belong to */
	unsigned int depth;		/* waits in progress on this thread */
	struct waitset ws[WS_LEVELS];
	struct ws_thread *next;		/* all threads' (ws_lock) */
};

static __thread struct ws_thread *ws_self;
static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ws_thread *ws_all;
static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;

static void ws_close(struct ws_thread *t)
{
	unsigned int i;

	for (i = 0; i < WS_LEVELS; i++) {
		usmc_ifd_close(t->ws[i].fd);
		t->ws[i].fd = -1;
	}
}

static void ws_unlink(struct ws_thread *t)
{
	struct ws_thread **pp;

	for (pp = &ws_all; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
}

/* Thread exit: its instances go with it. */
static void ws_thread_exit(void *arg)
{
	struct ws_thread *t = arg;

	pthread_mutex_lock(&ws_lock);
	ws_unlink(t);
	pthread_mutex_unlock(&ws_lock);
	if (t->pid == usmc_getpid())
		ws_close(t);
	if (ws_self == t)
		ws_self = NULL;
	free(t);
}

static void ws_key_init(void)
{
	(void)pthread_key_create(&ws_key, ws_thread_exit);
}

static struct ws_thread *ws_thread(void)
{
	struct ws_thread *t = ws_self;
	unsigned int i;

	if (likely(t && t->pid == usmc_getpid()))
		return t;
	if (t) {
		/* A forked child's copy: the instances are the parent's. */
		t->pid = usmc_getpid();
		for (i = 0; i < WS_LEVELS; i++)
			memset(&t->ws[i], 0, sizeof(t->ws[i]));
		for (i = 0; i < WS_LEVELS; i++)
			t->ws[i].fd = -1;
		return t;
	}
	if (pthread_once(&ws_once, ws_key_init))
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->pid = usmc_getpid();
	for (i = 0; i < WS_LEVELS; i++)
		t->ws[i].fd = -1;
	if (pthread_setspecific(ws_key, t)) {
		free(t);
		return NULL;
	}
	pthread_mutex_lock(&ws_lock);
	t->next = ws_all;
	ws_all = t;
	pthread_mutex_unlock(&ws_lock);
	ws_self = t;
	return t;
}

int usmc_waitset_enter(void)
{
	struct ws_thread *t = ws_thread();

	if (!t)
		return -ENOMEM;
	return (int)t->depth++;
}

void usmc_waitset_leave(int level)
{
	struct ws_thread *t = ws_self;

	if (level >= 0 && t && t->depth)
		t->depth--;
}

/* The instance of this wait's level; deeper handlers share the last one
 * (usmc_waitset_nested tells them to wake the waits they interrupted). */
static struct waitset *ws_get(int level)
{
	struct ws_thread *t = ws_self;
	struct waitset *w;
	int fd;

	if (level < 0 || !t)
		return NULL;
	w = &t->ws[MIN((unsigned int)level, WS_LEVELS - 1)];
	if (w->fd >= 0)
		return w;
	fd = sys_epoll_create1(EPOLL_CLOEXEC);
	if (fd < 0)
		return NULL;
	usmc_ifd_mark(fd);
	fd = usmc_ifd_move_high(fd, false);
	memset(w, 0, sizeof(*w));
	w->fd = fd;
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

int usmc_waitset_watch(int level, struct usmc_lgr *l, int bell)
{
	struct waitset *w = ws_get(level);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
	uint32_t gen = LOAD_RELAXED(&l->bell_gen);
	unsigned int i;
	int rc;

	if (!w)
		return -ENOMEM;
	for (i = 0; i < WS_CACHE; i++)
		if (w->id[i] == l->id && w->gen[i] == gen && w->bell[i] == bell)
			return 0;
	ev.data.u64 = l->id;
	rc = sys_epoll_ctl(w->fd, EPOLL_CTL_ADD, bell, &ev);
	if (rc < 0 && rc != -EEXIST)
		return rc;
	i = w->next++ % WS_CACHE;
	w->id[i] = l->id;
	w->gen[i] = gen;
	w->bell[i] = bell;
	return 0;
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
	struct ws_thread *t = ws_self;
	unsigned int i;
	int n = 0;

	if (!t || t->pid != usmc_getpid())
		return 0;
	for (i = t->depth; i < WS_LEVELS; i++) {
		if (t->ws[i].fd < 0)
			continue;
		usmc_ifd_close(t->ws[i].fd);
		memset(&t->ws[i], 0, sizeof(t->ws[i]));
		t->ws[i].fd = -1;
		n++;
	}
	return n;
}

void usmc_waitset_after_fork(void)
{
	struct ws_thread *t, *next, *self = ws_self;

	/* Single-threaded child: the other threads' instances came along as
	 * descriptors only; ours is replaced on first use (ws_thread). */
	pthread_mutex_init(&ws_lock, NULL);
	for (t = ws_all; t; t = next) {
		next = t->next;
		ws_close(t);
		if (t != self)
			free(t);
	}
	ws_all = self;
	if (self) {
		self->next = NULL;
		self->depth = 0;
		self->pid = usmc_getpid();
	}
}
