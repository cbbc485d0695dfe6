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
 * internal entry.
 */
#include "af_usmc.h"
#include "fdtab.h"
#include "sock.h"

#include <dlfcn.h>
#include <pthread.h>
#include <spawn.h>

#define EXPORT __attribute__((visibility("default")))

/* dup2 file actions of live posix_spawn_file_actions_t objects. */
#define SPAWN_DUPS	256

static struct {
	const posix_spawn_file_actions_t *fa;
	int fd;
} dups[SPAWN_DUPS];
static unsigned int ndups;
static bool dups_lost;		/* the table overflowed: treat every socket as passed */
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
	pthread_mutex_unlock(&dups_lock);
}

static bool dups_has(const posix_spawn_file_actions_t *fa, int fd)
{
	bool found = false;
	unsigned int i;

	pthread_mutex_lock(&dups_lock);
	for (i = 0; i < ndups && !found; i++)
		found = dups[i].fa == fa && dups[i].fd == fd;
	found |= fa && dups_lost;
	pthread_mutex_unlock(&dups_lock);
	return found;
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
	struct usmc_sock *sk;
	int rc;

	spawn_real_init();
	rc = real_adddup2(fa, fd, newfd);
	sk = rc ? NULL : usmc_fd_get(fd);
	if (!sk)
		return rc;
	usmc_sock_put(sk);
	pthread_mutex_lock(&dups_lock);
	if (ndups < SPAWN_DUPS) {
		dups[ndups].fa = fa;
		dups[ndups].fd = fd;
		ndups++;
	} else {
		dups_lost = true;
	}
	pthread_mutex_unlock(&dups_lock);
	return rc;
}

static void spawn_one(int fd, struct usmc_sock *sk, void *arg)
{
	const posix_spawn_file_actions_t *fa = arg;

	if (sk->kind == SK_CONN && dups_has(fa, fd))
		usmc_conn_leave(sk, fd, USMC_R_SPAWN);
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	spawn_real_init();
	if (fa)
		usmc_fd_foreach(spawn_one, (void *)fa);
	return real_spawn(pid, path, fa, attr, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	spawn_real_init();
	if (fa)
		usmc_fd_foreach(spawn_one, (void *)fa);
	return real_spawnp(pid, file, fa, attr, argv, envp);
}
