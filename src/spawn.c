// SPDX-License-Identifier: MIT
/*
 * spawn.c - posix_spawn(): children that glibc starts without us.
 *
 * glibc's posix_spawn() runs the child's file actions and its exec inside
 * glibc, so nothing of ours runs there and the new program cannot adopt
 * an accelerated socket (exec.c): to it, an inherited one is a bare TCP
 * socket whose bytes the peer is not reading.  A connection handed to the
 * child on purpose, as the source of a dup2 file action (the CGI/inetd
 * way: the socket becomes the child's stdin/stdout), moves to TCP before
 * the spawn (migrate.c, every byte in order; reason spawned_child), for
 * the child and for us.  The dup2 actions are recorded when the
 * application adds them (the object is opaque).
 *
 * A connection merely inherited (no FD_CLOEXEC, no file action) stays on
 * shared memory: almost always it is an accident the child never touches
 * (C programs that do not ask for SOCK_CLOEXEC), and moving every such
 * connection to TCP at each spawn would cost them their acceleration.  A
 * child that does use one by number is not covered (docs/design.md,
 * limits), nor are system() and popen(), which spawn through glibc's
 * internal entry, nor glibc 2.39's pidfd_spawn() (Debian 12 has 2.36).
 * A listener handed over by a dup2 action is unpublished: the child cannot
 * answer proposals, so clients must not make them.
 */
#include "af_usmc.h"
#include "fdtab.h"
#include "handover.h"
#include "scm_peer.h"
#include "sock.h"

#include <dlfcn.h>
#include <pthread.h>
#include <spawn.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

/* dup2 file actions (source descriptors) of live posix_spawn_file_actions_t
 * objects, whatever the source is now: the child gets what the number names
 * at the spawn. */
struct spawn_dup {
	const posix_spawn_file_actions_t *fa;
	int fd;
};

static struct spawn_dup *dups;
static unsigned int ndups, cap;
static bool dups_lost;		/* out of memory once: treat every connection as passed */
static pthread_mutex_t dups_lock = PTHREAD_MUTEX_INITIALIZER;

static int (*real_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			 const posix_spawnattr_t *, char *const[], char *const[]);
static int (*real_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			  const posix_spawnattr_t *, char *const[], char *const[]);
static int (*real_adddup2)(posix_spawn_file_actions_t *, int, int);
static int (*real_fa_init)(posix_spawn_file_actions_t *);
static int (*real_fa_destroy)(posix_spawn_file_actions_t *);

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void real_lookup(void)
{
	real_spawn = dlsym(RTLD_NEXT, "posix_spawn");
	real_spawnp = dlsym(RTLD_NEXT, "posix_spawnp");
	real_adddup2 = dlsym(RTLD_NEXT, "posix_spawn_file_actions_adddup2");
	real_fa_init = dlsym(RTLD_NEXT, "posix_spawn_file_actions_init");
	real_fa_destroy = dlsym(RTLD_NEXT, "posix_spawn_file_actions_destroy");
}

static void spawn_real_init(void)
{
	pthread_once(&real_once, real_lookup);
}

static void dups_forget(const posix_spawn_file_actions_t *fa)
{
	unsigned int i;

	pthread_mutex_lock(&dups_lock);
	for (i = 0; i < ndups; )
		if (dups[i].fa == fa)
			dups[i] = dups[--ndups];
		else
			i++;
	if (!ndups)
		dups_lost = false;
	pthread_mutex_unlock(&dups_lock);
}

static void dups_add(const posix_spawn_file_actions_t *fa, int fd)
{
	pthread_mutex_lock(&dups_lock);
	if (ndups == cap) {
		unsigned int ncap = cap ? 2 * cap : 16;
		struct spawn_dup *n = realloc(dups, sizeof(*n) * ncap);

		if (!n) {
			dups_lost = true;
			pthread_mutex_unlock(&dups_lock);
			return;
		}
		dups = n;
		cap = ncap;
	}
	dups[ndups].fa = fa;
	dups[ndups].fd = fd;
	ndups++;
	pthread_mutex_unlock(&dups_lock);
}

/* The descriptors fa dup2s from (*all: every one, we lost track); the
 * caller frees the array. */
static int *dups_of(const posix_spawn_file_actions_t *fa, unsigned int *n, bool *all)
{
	unsigned int i;
	int *out;

	pthread_mutex_lock(&dups_lock);
	*all = dups_lost;
	*n = 0;
	out = malloc(sizeof(*out) * (ndups ? ndups : 1));
	if (!out)
		*all = true;
	for (i = 0; out && i < ndups; i++)
		if (dups[i].fa == fa)
			out[(*n)++] = dups[i].fd;
	pthread_mutex_unlock(&dups_lock);
	return out;
}

EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
	spawn_real_init();
	dups_forget(fa);	/* the address of one destroyed earlier */
	return real_fa_init(fa);
}

EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
	spawn_real_init();
	dups_forget(fa);
	return real_fa_destroy(fa);
}

EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
	int rc;

	spawn_real_init();
	rc = real_adddup2(fa, fd, newfd);
	if (!rc)
		dups_add(fa, fd);
	return rc;
}

/* A connection at fd leaves shared memory, a listener stops taking
 * proposals (a reference held throughout: another thread may close the
 * descriptor meanwhile). */
static void spawn_leave(int fd)
{
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (!sk)
		return;
	if (sk->kind == SK_CONN)
		usmc_conn_leave(sk, fd, USMC_R_SPAWN);
	else if (sk->kind == SK_LISTEN)
		usmc_handover_listener(sk);	/* the child cannot answer proposals */
	else
		usmc_handover_bound(sk, fd);	/* ... nor publish what it listens on */
	usmc_sock_put(sk);
}

static void spawn_one_any(int fd, struct usmc_sock *sk, void *arg)
{
	int *fds = arg;

	if (sk->kind == SK_CONN && fds[0] < 255)
		fds[++fds[0]] = fd;
}

/*
 * Before a spawn with file actions fa: their dup2 sources leave.  A child
 * without libusmc (none in envp's LD_PRELOAD) may read every UNIX socket it
 * gets: they are tainted (scm_peer.c), so that nobody sends usmc's
 * descriptors on them.
 */
static void spawn_prepare(const posix_spawn_file_actions_t *fa, char *const envp[])
{
	bool all, plain = !usmc_env_has_usmc(envp);
	unsigned int n, i;
	int *fds;

	if (plain)
		usmc_scm_taint_inherited();
	if (!fa)
		return;
	fds = dups_of(fa, &n, &all);
	for (i = 0; fds && i < n; i++) {
		if (plain)
			usmc_scm_taint_fd(fds[i]);
		spawn_leave(fds[i]);
	}
	free(fds);
	if (all) {
		/* Lost track (out of memory): every connection we can find. */
		int any[256] = { 0 };

		usmc_fd_foreach(spawn_one_any, any);
		for (i = 1; i <= (unsigned int)any[0]; i++)
			spawn_leave(any[i]);
	}
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	spawn_real_init();
	spawn_prepare(fa, envp);
	return real_spawn(pid, path, fa, attr, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	spawn_real_init();
	spawn_prepare(fa, envp);
	return real_spawnp(pid, file, fa, attr, argv, envp);
}
