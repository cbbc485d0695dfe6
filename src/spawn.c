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
 * A socket merely inherited (no FD_CLOEXEC, not closed by a file action)
 * goes to a child that loads libusmc as to an image we exec (exec.c): it
 * adopts it, its share counted here, before the spawn, so that our close
 * right after is not the last.  The close and closefrom file actions are
 * recorded as the dup2 ones, to know what the child will not have.  For a
 * child without libusmc (or one whose closefrom takes usmc's own
 * descriptors) an inherited connection stays on shared memory: almost
 * always an accident the child never touches (C programs that do not ask
 * for SOCK_CLOEXEC; `usmc stat` run from a program), and moving every such
 * connection to TCP at each spawn would cost it its acceleration; such a
 * child that does use one by number gets nothing on it (docs/design.md,
 * limits).  Not covered:
 * system() and popen(), which spawn through glibc's internal entry, nor
 * glibc 2.39's pidfd_spawn() (Debian 12 has 2.36).  A listener handed over
 * by a dup2 action is unpublished: the child cannot answer proposals, so
 * clients must not make them.
 */
#include "exec.h"
#include "export.h"
#include "fdtab.h"
#include "handover.h"
#include "migrate.h"
#include "real.h"
#include "scm_peer.h"
#include "sock.h"
#include "tcp.h"

#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdlib.h>

/* dup2 (source descriptor), close and closefrom (first descriptor) file
 * actions of live posix_spawn_file_actions_t objects, whatever the numbers
 * name now: the child gets what they name at the spawn. */
enum { FA_DUP2, FA_CLOSE, FA_CLOSEFROM };

struct spawn_dup {
	const posix_spawn_file_actions_t *fa;
	int fd;
	int kind;
};

static struct spawn_dup *dups;
static unsigned int ndups, cap;
static bool dups_lost;		/* out of memory once: treat every connection as passed */
static pthread_mutex_t dups_lock = PTHREAD_MUTEX_INITIALIZER;

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

static void dups_add(const posix_spawn_file_actions_t *fa, int fd, int kind)
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
	dups[ndups].kind = kind;
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
		if (dups[i].fa == fa && dups[i].kind == FA_DUP2)
			out[(*n)++] = dups[i].fd;
	pthread_mutex_unlock(&dups_lock);
	return out;
}

EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
	ENSURE_REAL(posix_spawn);
	dups_forget(fa);	/* the address of one destroyed earlier */
	return real.posix_spawn_file_actions_init(fa);
}

EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
	ENSURE_REAL(posix_spawn);
	dups_forget(fa);
	return real.posix_spawn_file_actions_destroy(fa);
}

EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
	int rc;

	ENSURE_REAL(posix_spawn);
	rc = real.posix_spawn_file_actions_adddup2(fa, fd, newfd);
	if (!rc)
		dups_add(fa, fd, FA_DUP2);
	return rc;
}

EXPORT int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *fa, int fd)
{
	int rc;

	ENSURE_REAL(posix_spawn);
	rc = real.posix_spawn_file_actions_addclose(fa, fd);
	if (!rc)
		dups_add(fa, fd, FA_CLOSE);
	return rc;
}

EXPORT int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa, int from)
{
	int rc;

	ENSURE_REAL(posix_spawn);
	if (!real.posix_spawn_file_actions_addclosefrom_np)
		return ENOSYS;
	rc = real.posix_spawn_file_actions_addclosefrom_np(fa, from);
	if (!rc)
		dups_add(fa, from, FA_CLOSEFROM);
	return rc;
}

/* What fa leaves the child of fd: closed (or lost track), or reused as a
 * dup2 target we cannot follow; nothing then. */
struct spawn_fa {
	const posix_spawn_file_actions_t *fa;
	int closefrom;		/* INT_MAX: none */
};

static bool fa_closes(int fd, void *arg)
{
	struct spawn_fa *f = arg;
	unsigned int i;
	bool closed = fd >= f->closefrom;

	if (!f->fa || closed)
		return closed;
	pthread_mutex_lock(&dups_lock);
	closed = dups_lost;
	for (i = 0; i < ndups && !closed; i++)
		closed = dups[i].fa == f->fa && (dups[i].kind == FA_CLOSE || dups[i].kind == FA_DUP2) &&
			 dups[i].fd == fd;
	pthread_mutex_unlock(&dups_lock);
	return closed;
}

static int fa_closefrom(const posix_spawn_file_actions_t *fa)
{
	unsigned int i;
	int from = INT_MAX;

	if (!fa)
		return from;
	pthread_mutex_lock(&dups_lock);
	for (i = 0; i < ndups; i++)
		if (dups[i].fa == fa && dups[i].kind == FA_CLOSEFROM && dups[i].fd < from)
			from = dups[i].fd;
	pthread_mutex_unlock(&dups_lock);
	return from;
}

/* A connection at fd leaves shared memory, a listener stops taking
 * proposals (a reference held throughout: another thread may close the
 * descriptor meanwhile). */
static void spawn_leave(int fd)
{
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (!sk)
		return;
	if (sk->kind == SK_CONN) {
		usmc_conn_leave(sk, fd, USMC_R_SPAWN);
		usmc_tcp_take_owed(sk, fd);	/* the child may read past usmc */
	} else if (sk->kind == SK_LISTEN)
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

/* The spawn itself, between the preparations above and exec.c's for a
 * child that loads libusmc and keeps what it needs to adopt. */
static int spawn_run(bool search, pid_t *pid, const char *path,
		     const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
		     char *const argv[], char *const envp[])
{
	struct spawn_fa f = { fa, fa_closefrom(fa) };
	struct exec_ctx *c = NULL;
	char **env = NULL;
	int rc;

	ENSURE_REAL(posix_spawn);
	spawn_prepare(fa, envp);
	if (usmc_env_has_usmc(envp) &&
	    (f.closefrom == INT_MAX || usmc_family_fd() < 0 || f.closefrom > usmc_family_fd()))
		c = usmc_spawn_prepare(envp, fa_closes, &f, &env);
	rc = (search ? real.posix_spawnp : real.posix_spawn)(pid, path, fa, attr, argv, env ? env : envp);
	usmc_spawn_finish(c, env, rc == 0);
	return rc;
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return spawn_run(false, pid, path, fa, attr, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return spawn_run(true, pid, file, fa, attr, argv, envp);
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held dups_lock at the fork. */
void usmc_spawn_after_fork(void)
{
	pthread_mutex_init(&dups_lock, NULL);
}
