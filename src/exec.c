// SPDX-License-Identifier: MIT
/*
 * exec.c - handing accelerated sockets across exec().
 *
 * An exec'ed program inherits descriptors but not our memory.  For every
 * inherited (not close-on-exec) socket we describe, in USMC_INHERIT, what
 * the new image needs to pick it up: the shared half in the family memfd
 * (which stays open across exec), the link group and slot, the CLC index,
 * the owner locks that must not drop.  The new image's constructor adopts
 * them, so the connection keeps working where TCP would have kept working.
 * If exec fails, everything is put back.
 *
 *   USMC_INHERIT=1,<family fd>;C,<fd>,<role>,<mode>,<sh>,<lgr>,<slot>,<gen>,
 *                <ln>,<ln fd>,<tcp mark>,<owner fd>,<local>,<peer>;L,<fd>,<sh>,
 *                <ln>,<ln fd>,<reg idx>,<bound>;T,<fd>,<sh>,<bound>
 * (USMC_INHERIT=1,-1 when there is nothing to adopt: the new image still
 * learns that a usmc image started it, and announces the UNIX sockets it
 * inherits, scm_peer.c).
 * Kind 2 instead of 1: a posix_spawn() child (spawn.c), whose shares the
 * spawner counted; records are checked as received ones (adopt.c).
 * vfork() is fork() here (interpose.c).  Not covered: system() and popen(),
 * whose spawn inside glibc cannot be interposed (docs/design.md, limits).
 */
#include "accept.h"
#include "adopt.h"
#include "exec.h"
#include "export.h"
#include "exit.h"
#include "fdtab.h"
#include "handover.h"
#include "lgr.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "rundir.h"
#include "sandbox.h"
#include "scm_peer.h"
#include "sock.h"
#include "stats.h"
#include "stdstream.h"
#include "sys.h"
#include "tcp.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INHERIT_ENV	"USMC_INHERIT"
#define INHERIT_MAX	65536
#define KEEP_MAX	1024

extern char **environ;

struct exec_ctx {
	char *buf;		/* "USMC_INHERIT=..." */
	size_t len;
	int keep[KEEP_MAX];	/* descriptors whose FD_CLOEXEC we cleared */
	int nkeep;
	int nsock;
	bool plain;		/* the new image will not load libusmc */
	bool spawn;		/* posix_spawn(): a new process gets them (spawn.c) */
	bool (*closed)(int fd, void *arg);	/* spawn: fd is not the child's */
	void *closed_arg;
	unsigned int pass;	/* exec_mark generation of this exec */
	/* Shares changed for the new image (a reference held on each): given
	 * up at exec (delta -1), counted for a spawned child (+1). */
	struct usmc_sock *held[KEEP_MAX];
	int nheld, delta;
};

/*
 * The kernel closes close-on-exec descriptors as the new image starts: a
 * socket all of whose descriptors are close-on-exec leaves this process,
 * and its share goes now, as a close makes it go.  A child forked while
 * its parent held connections counted a share of each; one that execs
 * another program used to keep them counted, so the parent's close was
 * never the last (no close protocol, the slot never freed).  Only a share
 * that others also hold is given up here: our last one is left to the
 * kernel's FIN, since the exec may still fail and a last close cannot be
 * taken back.  exec_undo() gives the shares back.
 */
static void mark_kept(int fd, struct usmc_sock *sk, void *arg)
{
	struct exec_ctx *c = arg;
	int fl = sys_fcntl(fd, F_GETFD, 0);

	if ((sk->exec_mark >> 1) != c->pass)
		sk->exec_mark = c->pass << 1;
	if (fl >= 0 && !(fl & FD_CLOEXEC))
		sk->exec_mark |= 1;
}

static void drop_closed(int fd __unused, struct usmc_sock *sk, void *arg)
{
	struct exec_ctx *c = arg;
	int32_t r;

	if (sk->exec_mark != c->pass << 1 || c->nheld == KEEP_MAX)
		return;
	sk->exec_mark |= 1;	/* once per socket */
	if (LOAD_RELAXED(&sk->sh->in_use) == USMC_SH_PRIVATE)
		return;
	r = atomic_load(&sk->sh->refs);
	while (r > 1)
		if (atomic_compare_exchange_weak(&sk->sh->refs, &r, r - 1)) {
			usmc_sock_get(sk);
			c->held[c->nheld++] = sk;
			return;
		}
}

static void exec_drop_closed(struct exec_ctx *c)
{
	static unsigned int passes;

	c->pass = ++passes & (UINT_MAX >> 1);
	c->delta = -1;
	usmc_fd_foreach(mark_kept, c);
	usmc_fd_foreach(drop_closed, c);
}

static void keep_open(struct exec_ctx *c, int fd)
{
	int i;

	if (fd < 0)
		return;
	for (i = 0; i < c->nkeep; i++)
		if (c->keep[i] == fd)
			return;
	if (c->nkeep == KEEP_MAX || sys_fcntl(fd, F_SETFD, 0) < 0)
		return;
	c->keep[c->nkeep++] = fd;
}

static void put_addr(struct exec_ctx *c, const struct usmc_addr *a)
{
	int i;

	c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len, ",");
	for (i = 0; i < 16; i++)
		c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len, "%02x", a->a[i]);
	c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len, ":%u", a->port);
}

/* Exec of a plain program, or a spawn while other threads run: moved
 * through the descriptor held for it (another thread may close fd and
 * reuse the number meanwhile, handover.c). */
static void leave_held(struct usmc_sock *sk, int d, void *arg)
{
	const struct exec_ctx *c = arg;

	usmc_conn_leave(sk, d, c->spawn ? USMC_R_SPAWN : USMC_R_EXEC_PLAIN);
	usmc_tcp_take_owed(sk, d);	/* it would read a CLC message */
}

static void collect(int fd, struct usmc_sock *sk, void *arg)
{
	struct exec_ctx *c = arg;
	int fl = sys_fcntl(fd, F_GETFD, 0);
	uint32_t mode;

	if (fl < 0 || (fl & FD_CLOEXEC) || c->len > INHERIT_MAX - 512 ||
	    (c->closed && c->closed(fd, c->closed_arg)))
		return;
	/* Never shared: plain TCP, adopted afresh by the new image. */
	if (LOAD_RELAXED(&sk->sh->in_use) == USMC_SH_PRIVATE)
		return;
	if (c->plain) {
		/* The new program will not have libusmc: its connections
		 * continue on TCP, every byte in order (migrate.c). */
		if (sk->kind == SK_CONN)
			usmc_fd_with_held(fd, leave_held, c);
		else if (sk->kind == SK_LISTEN)
			usmc_handover_listener(sk);
		else
			usmc_handover_bound(sk, fd);
		return;
	}
	/* A spawned child is one more holder: its share is counted now, so
	 * that our close right after the spawn is not the last (the child
	 * gives back those it does not adopt). */
	if (c->spawn && (c->nheld == KEEP_MAX || (sk->kind != SK_CONN && sk->kind != SK_TCP &&
						  !(sk->kind == SK_LISTEN && sk->lst))))
		return;
	if (c->spawn) {
		atomic_fetch_add(&sk->sh->refs, 1);
		usmc_sock_get(sk);
		c->held[c->nheld++] = sk;
	}
	if (sk->kind == SK_LISTEN && sk->lst) {
		keep_open(c, sk->lst->fd);
		c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len,
					   ";L,%d,%d,%llx,%d,%d", fd, usmc_family_index(sk->sh),
					   (unsigned long long)sk->lst->id, sk->lst->fd, sk->reg_idx);
		put_addr(c, &sk->bound);
		c->nsock++;
		return;
	}
	if (sk->kind == SK_TCP) {
		/* Still one shared half with its other holders: who may
		 * publish it when it listens (listener.c). */
		struct sockaddr_storage ss;
		struct usmc_addr b = { 0 };
		socklen_t l = sizeof(ss);

		if (!getsockname(fd, (struct sockaddr *)&ss, &l))
			usmc_addr_from_sa(&b, (struct sockaddr *)&ss, l);
		c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len, ";T,%d,%d", fd,
					   usmc_family_index(sk->sh));
		put_addr(c, &b);
		c->nsock++;
		return;
	}
	if (sk->kind != SK_CONN)
		return;
	/* The new image's stdin, stdout or stderr: its stdio may use it. */
	if (fd <= STDERR_FILENO)
		usmc_stdio_leave(fd);
	/* Settle what cannot travel half-done. */
	if (sk_mode(sk) == USMC_MODE_UNDECIDED)
		usmc_server_resolve(sk, fd, true);
	if (sk_mode(sk) == USMC_MODE_MIGRATING)
		usmc_migrate_pump(sk, fd, true);
	mode = sk_mode(sk);
	if (sk->lgr)
		keep_open(c, usmc_lgr_handle_fd(sk->lgr));
	if (sk->ln)
		keep_open(c, sk->ln->fd);
	c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len,
				   ";C,%d,%c,%u,%d,%llx,%u,%u,%llx,%d,%d", fd, sk->role ? sk->role : 'C',
				   mode, usmc_family_index(sk->sh),
				   (unsigned long long)(sk->lgr ? sk->lgr->id : 0), sk->slot, sk->gen,
				   (unsigned long long)(sk->ln ? sk->ln->id : 0), sk->ln ? sk->ln->fd : -1,
				   sk->lgr && sk->lgr->owner ? usmc_lgr_handle_fd(sk->lgr) : -1);
	put_addr(c, &sk->local);
	put_addr(c, &sk->peer);
	c->nsock++;
}

/* Will the new image preload libusmc (LD_PRELOAD in its environment)? */
bool usmc_env_has_usmc(char *const envp[])
{
	size_t i;

	for (i = 0; envp && envp[i]; i++)
		if (!strncmp(envp[i], "LD_PRELOAD=", 11) && strstr(envp[i], "libusmc"))
			return true;
	return false;
}

static char **with_env(struct exec_ctx *c, char *const envp[]);
static void exec_undo(struct exec_ctx *c, char **env);

/*
 * A new image with libusmc that adopts no socket still learns that a usmc
 * image started it (USMC_INHERIT=1,-1): it announces the UNIX sockets it
 * inherits (scm_peer.c).  NULL (no memory): the environment as it is.
 */
static char **bare_env(struct exec_ctx *c, char *const envp[])
{
	c->nkeep = 0;
	c->nsock = 0;
	c->buf = malloc(sizeof(INHERIT_ENV "=1,-1"));
	if (!c->buf)
		return NULL;
	memcpy(c->buf, INHERIT_ENV "=1,-1", sizeof(INHERIT_ENV "=1,-1"));
	return with_env(c, envp);
}

/*
 * Build the environment for the new image; NULL when it is envp as is.
 * c->spawn (and c->closed) set by the caller: a posix_spawn() child, which
 * adopts what it inherits as a forked child that execs would, its shares
 * counted here (USMC_INHERIT=2,...).
 */
static char **exec_prepare(struct exec_ctx *c, char *const envp[])
{
	int r;

	if (c->spawn)
		c->delta = 1;
	else
		exec_drop_closed(c);
	/* UNIX sockets it inherits are read without libusmc from now on:
	 * nobody may send them usmc's descriptors (scm_peer.c). */
	if (!usmc_env_has_usmc(envp))
		usmc_scm_taint_inherited();
	if (usmc_family_fd() < 0 && usmc_family_region_fd(1) < 0)
		return usmc_env_has_usmc(envp) ? bare_env(c, envp) : NULL;
	/* A child made with clone(CLONE_VM) by a spawning library other than
	 * glibc's (no atfork handlers; our vfork() is a fork) runs this in its
	 * parent's memory: from now on it locks every socket the new image
	 * may adopt. */
	usmc_family_before_fork();
	c->plain = !usmc_env_has_usmc(envp);
	/* The new image shares what it inherits with us (spawn) or takes it
	 * over (exec): a device that cannot do that hands it to TCP.  An exec
	 * closes what is close-on-exec (a spawn's dup2 actions may not). */
	if (!c->plain)
		usmc_conns_unshare(c->spawn ? USMC_DEV_F_FORK | USMC_DEV_F_EXEC : USMC_DEV_F_EXEC,
				   !c->spawn);
	if (c->plain) {
		usmc_fd_foreach(collect, c);
		return NULL;
	}
	c->buf = malloc(INHERIT_MAX);
	if (!c->buf)
		return NULL;
	c->len = (size_t)snprintf(c->buf, INHERIT_MAX, INHERIT_ENV "=%d,%d", c->spawn ? 2 : 1,
				  usmc_family_fd());
	/* Regions of sockets we received (SCM_RIGHTS), before their users. */
	for (r = 1; r < USMC_FAMILY_REGIONS; r++) {
		int fd = usmc_family_region_fd(r);

		if (fd < 0)
			continue;
		keep_open(c, fd);
		c->len += (size_t)snprintf(c->buf + c->len, INHERIT_MAX - c->len, ";F,%d,%d", r, fd);
	}
	usmc_fd_foreach(collect, c);
	if (!c->nsock) {
		for (r = 0; r < c->nkeep; r++)
			sys_fcntl(c->keep[r], F_SETFD, FD_CLOEXEC);
		free(c->buf);
		return bare_env(c, envp);
	}
	keep_open(c, usmc_family_fd());
	return with_env(c, envp);
}

/* envp with c->buf (USMC_INHERIT=...) in it, replacing any earlier one. */
static char **with_env(struct exec_ctx *c, char *const envp[])
{
	size_t n, i, j = 0;
	char **env;

	for (n = 0; envp && envp[n]; n++)
		;
	env = malloc(sizeof(*env) * (n + 2));
	if (!env) {
		exec_undo(c, NULL);	/* the exec goes on with envp as is */
		return NULL;
	}
	for (i = 0; i < n; i++)
		if (strncmp(envp[i], INHERIT_ENV "=", sizeof(INHERIT_ENV)))
			env[j++] = envp[i];
	env[j++] = c->buf;
	env[j] = NULL;
	if (c->nsock)
		usmc_dbg(2, "exec: handing %d socket(s) to the new image", c->nsock);
	return env;
}

/* exec failed: we are still the old image; close-on-exec goes back on,
 * the shares exec_drop_closed() gave up come back. */
static void exec_undo(struct exec_ctx *c, char **env)
{
	int i, saved = errno;

	for (i = 0; i < c->nkeep; i++)
		sys_fcntl(c->keep[i], F_SETFD, FD_CLOEXEC);
	for (i = 0; i < c->nheld; i++) {
		atomic_fetch_sub(&c->held[i]->sh->refs, c->delta);
		usmc_sock_put(c->held[i]);
	}
	free(env);
	free(c->buf);
	/* Once: with_env() may have undone it already. */
	c->nkeep = c->nheld = 0;
	c->buf = NULL;
	errno = saved;
}

/* The exported exec* call these, never each other (interpose_io.c). */
static int exec_ve(const char *path, char *const argv[], char *const envp[])
{
	struct exec_ctx c;
	char **env;

	ENSURE_REAL(execve);
	memset(&c, 0, sizeof(c));
	env = exec_prepare(&c, envp);
	real.execve(path, argv, env ? env : envp);
	exec_undo(&c, env);
	return -1;
}

static int exec_vpe(const char *file, char *const argv[], char *const envp[])
{
	struct exec_ctx c;
	char **env;

	ENSURE_REAL(execve);
	memset(&c, 0, sizeof(c));
	env = exec_prepare(&c, envp);
	real.execvpe(file, argv, env ? env : envp);
	exec_undo(&c, env);
	return -1;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	return exec_ve(path, argv, envp);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	return exec_vpe(file, argv, envp);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	struct exec_ctx c;
	char **env;

	ENSURE_REAL(execve);
	memset(&c, 0, sizeof(c));
	env = exec_prepare(&c, envp);
	real.fexecve(fd, argv, env ? env : envp);
	exec_undo(&c, env);
	return -1;
}

/*
 * posix_spawn(): glibc's child execs without running anything of ours, so
 * what it inherits (not close-on-exec, not closed by a file action) goes
 * to it as to an image we exec, prepared here in the parent: described in
 * USMC_INHERIT (kind 2: each record's share counted for the child), or,
 * for a program without libusmc, moved to TCP.  Our close-on-exec flags
 * go back on once the spawn returned, and the shares too if it failed.
 */
struct exec_ctx *usmc_spawn_prepare(char *const envp[], bool (*closed)(int fd, void *arg),
				    void *arg, char ***env)
{
	struct exec_ctx *c = calloc(1, sizeof(*c));

	*env = NULL;
	if (!c)
		return NULL;
	c->spawn = true;
	c->closed = closed;
	c->closed_arg = arg;
	*env = exec_prepare(c, envp);
	return c;
}

void usmc_spawn_finish(struct exec_ctx *c, char **env, bool spawned)
{
	int i;

	if (!c)
		return;
	if (spawned) {
		for (i = 0; i < c->nkeep; i++)
			sys_fcntl(c->keep[i], F_SETFD, FD_CLOEXEC);
		for (i = 0; i < c->nheld; i++)
			usmc_sock_put(c->held[i]);
		free(env);
		free(c->buf);
	} else {
		exec_undo(c, env);
	}
	free(c);
}

/*
 * The end of the process, from our destructor (exit()) or from _exit(),
 * which a forked child calls to leave without running its parent's
 * handlers (Python's ForkingMixIn, most fork-per-connection servers):
 * our sockets' shared counts lose this process (fdtab.c), link groups we
 * own lose their names, our counters are folded.
 */
void usmc_process_exit(bool settle)
{
	if (usmc_sandboxed())
		return;		/* nothing the program would not do itself (sandbox.c) */
	usmc_socks_exit(settle);
	usmc_lgr_exit();
	usmc_stats_detach();
}

/* A child made with clone(CLONE_VM) by a spawning library (no atfork
 * handlers: the pid we cached is its parent's) leaves without it: it
 * runs in its parent's memory, and its parent's sockets are not its own. */
static __attribute__((noreturn)) void exit_now(int status)
{
	if ((pid_t)usmc_sys(SYS_getpid, 0, 0, 0) == usmc_getpid())
		usmc_process_exit(false);
	ENSURE_REAL(_exit);
	if (real._exit)
		real._exit(status);
	usmc_sys(SYS_exit_group, status, 0, 0);
	__builtin_unreachable();
}

EXPORT __attribute__((noreturn)) void _exit(int status)
{
	exit_now(status);
}

EXPORT __attribute__((noreturn)) void _Exit(int status)
{
	exit_now(status);
}

EXPORT int execv(const char *path, char *const argv[])
{
	return exec_ve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
	return exec_vpe(file, argv, environ);
}

/* execl family: gather the variadic arguments, then the vector form. */
static char **va_argv(const char *arg0, va_list ap, char ***envp_out)
{
	size_t n = 1, cap = 16;
	char **v = malloc(sizeof(*v) * cap), *a;

	if (!v)
		return NULL;
	v[0] = (char *)arg0;
	while (arg0 && (a = va_arg(ap, char *))) {
		if (n + 2 > cap) {
			char **nv = realloc(v, sizeof(*v) * (cap *= 2));

			if (!nv) {
				free(v);
				return NULL;
			}
			v = nv;
		}
		v[n++] = a;
	}
	v[n] = NULL;
	if (envp_out)
		*envp_out = va_arg(ap, char **);
	return v;
}

EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	char **v;

	va_start(ap, arg);
	v = va_argv(arg, ap, NULL);
	va_end(ap);
	if (!v) {
		errno = ENOMEM;
		return -1;
	}
	exec_ve(path, v, environ);
	free(v);
	return -1;
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	char **v;

	va_start(ap, arg);
	v = va_argv(arg, ap, NULL);
	va_end(ap);
	if (!v) {
		errno = ENOMEM;
		return -1;
	}
	exec_vpe(file, v, environ);
	free(v);
	return -1;
}

EXPORT int execle(const char *path, const char *arg, ...)
{
	char **v, **envp = NULL;
	va_list ap;

	va_start(ap, arg);
	v = va_argv(arg, ap, &envp);
	va_end(ap);
	if (!v) {
		errno = ENOMEM;
		return -1;
	}
	exec_ve(path, v, envp);
	free(v);
	return -1;
}

/* ---- the new image ---------------------------------------------------- */

static int get_addr(const char **p, struct usmc_addr *a)
{
	unsigned int i, b, port;
	int n;

	if (**p != ',')
		return -1;
	(*p)++;
	memset(a, 0, sizeof(*a));
	for (i = 0; i < 16; i++) {
		if (sscanf(*p, "%2x", &b) != 1)
			return -1;
		a->a[i] = (uint8_t)b;
		*p += 2;
	}
	if (sscanf(*p, ":%u%n", &port, &n) != 1)
		return -1;
	a->port = (uint16_t)port;
	*p += n;
	return 0;
}

/* Family regions of the old image (USMC_INHERIT's F records) -> ours. */
static int region_map[USMC_FAMILY_REGIONS];
/* Kind 2: started by posix_spawn() in a usmc process, which counted each
 * record's share for us: records are checked as received ones are (a file
 * action may have closed or replaced a descriptor), and one we do not
 * adopt gives its share back. */
static bool inherit_counted;

static void adopt_result(const struct usmc_adopt *a, int rc)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	if (rc >= 0 || !inherit_counted || !a->sh)
		return;
	atomic_fetch_sub(&a->sh->refs, 1);
	/* Our descriptor of a connection whose rings we cannot reach: its
	 * holders read ECONNRESET rather than wait for bytes on TCP. */
	if (rc != -EINVAL && (a->mode == USMC_MODE_SMCD || a->mode == USMC_MODE_PROPOSED)) {
		usmc_log_write("spawned: fd %d: its shared memory cannot be reached: reset", a->fd);
		real.connect(a->fd, &sa, sizeof(sa));
	}
}

static struct usmc_sock_sh *sh_at(int idx)
{
	int r = idx / USMC_FAMILY_OBJS;

	if (idx < 0 || r >= USMC_FAMILY_REGIONS || region_map[r] < 0)
		return NULL;
	return usmc_family_at(region_map[r] * USMC_FAMILY_OBJS + idx % USMC_FAMILY_OBJS);
}

/* F,<old region>,<fd>: a family region of sockets received (SCM_RIGHTS). */
static void adopt_region(const char **p)
{
	int r, fd, n;
	bool known;

	if (sscanf(*p, ",%d,%d%n", &r, &fd, &n) != 2 || r <= 0 || r >= USMC_FAMILY_REGIONS)
		return;
	*p += n;
	region_map[r] = usmc_family_foreign(fd, &known);
	if (known)
		sys_close(fd);
}

static void adopt_conn(const char **p)
{
	struct usmc_adopt a = { .received = inherit_counted };
	int shidx, n;
	unsigned long long lgr_id, ln_id;

	if (sscanf(*p, ",%d,%c,%u,%d,%llx,%u,%u,%llx,%d,%d%n", &a.fd, &a.role, &a.mode, &shidx,
		   &lgr_id, &a.slot, &a.gen, &ln_id, &a.ln_fd, &a.owner_fd, &n) != 10)
		return;
	*p += n;
	a.lgr_id = lgr_id;
	a.ln_id = ln_id;
	a.sh = sh_at(shidx);
	if (get_addr(p, &a.local) || get_addr(p, &a.peer))
		return;
	adopt_result(&a, usmc_adopt_conn(&a));
}

static void adopt_bound(const char **p)
{
	struct usmc_adopt a = { .received = inherit_counted, .owner_fd = -1, .ln_fd = -1 };
	int shidx, n;

	if (sscanf(*p, ",%d,%d%n", &a.fd, &shidx, &n) != 2)
		return;
	*p += n;
	a.sh = sh_at(shidx);
	if (get_addr(p, &a.local))
		return;
	adopt_result(&a, usmc_adopt_bound(&a));
}

static void adopt_listener(const char **p)
{
	struct usmc_adopt a = { .received = inherit_counted, .owner_fd = -1 };
	unsigned long long ln_id;
	int shidx, n;

	if (sscanf(*p, ",%d,%d,%llx,%d,%d%n", &a.fd, &shidx, &ln_id, &a.ln_fd, &a.reg_idx, &n) != 5)
		return;
	*p += n;
	a.ln_id = ln_id;
	a.sh = sh_at(shidx);
	if (get_addr(p, &a.local))
		return;
	adopt_result(&a, usmc_adopt_listener(&a));
}

void usmc_exec_adopt(void)
{
	const char *env = getenv(INHERIT_ENV), *p;
	int kind, famfd, n, i;

	/* Cached now, in the process itself, for _exit() to compare. */
	(void)usmc_getpid();
	if (!env)
		return;
	if (usmc_rundir_init() || sscanf(env, "%d,%d%n", &kind, &famfd, &n) != 2 ||
	    (kind != 1 && kind != 2) || (famfd >= 0 && usmc_family_adopt(famfd))) {
		usmc_dbg(1, "exec: cannot adopt inherited sockets (%s)", env);
		goto out;
	}
	usmc_dbg(2, "exec: adopting %s", env);
	inherit_counted = kind == 2;
	region_map[0] = 0;
	for (i = 1; i < USMC_FAMILY_REGIONS; i++)
		region_map[i] = -1;
	for (p = env + n; *p == ';'; ) {
		p++;
		if (*p == 'F') {
			p++;
			adopt_region(&p);
		} else if (*p == 'C') {
			p++;
			adopt_conn(&p);
		} else if (*p == 'L') {
			p++;
			adopt_listener(&p);
		} else if (*p == 'T') {
			p++;
			adopt_bound(&p);
		}
		while (*p && *p != ';')
			p++;
	}
out:
	/* Started by a usmc image: we read what it gave us with libusmc. */
	if (!usmc_sandboxed())
		usmc_scm_announce_inherited();
	unsetenv(INHERIT_ENV);
}
