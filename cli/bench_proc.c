// SPDX-License-Identifier: MIT
/*
 * bench_proc.c - worker processes of `usmc bench`: start, listen, reap,
 * kill; the usmc counter check; removal of runtime directories.
 *
 * A worker is `/proc/self/exe bench --worker ...`, started with fork+execve
 * and an environment built here: LD_PRELOAD=libusmc.so and a private
 * USMC_RUNDIR for the usmc transport, neither LD_PRELOAD nor USMC_* for
 * TCP and UNIX.  Each worker dies with the bench (PR_SET_PDEATHSIG), has
 * its own alarm(), and is SIGKILLed by the parent past its deadline; the
 * parent's SIGINT/SIGTERM handler SIGKILLs every live worker first.
 */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define PATH_MAX_BENCH 512

#define MAX_LIVE 8
static volatile pid_t live[MAX_LIVE];
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	int i;

	interrupted = sig;
	for (i = 0; i < MAX_LIVE; i++)
		if (live[i] > 0)
			kill(live[i], SIGKILL);
}

void bench_signals_init(void)
{
	struct sigaction sa = { .sa_handler = on_signal };	/* no SA_RESTART */

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

bool bench_interrupted(void)
{
	return interrupted != 0;
}

static void live_set(pid_t old, pid_t pid)
{
	int i;

	for (i = 0; i < MAX_LIVE; i++)
		if (live[i] == old) {
			live[i] = pid;
			return;
		}
}

/*
 * environ without LD_PRELOAD and USMC_*, plus what the transport needs; the
 * strings from index *own on are ours to free (free_env).
 */
static char **build_env(const struct bench_env *env, int tr, size_t *own)
{
	size_t n = 0, k = 0, i;
	bool ok = true;
	char **e;

	while (environ[n])
		n++;
	for (i = 0; env->extra && env->extra[i]; i++)
		n++;
	e = calloc(n + 8, sizeof(*e));
	if (!e)
		return NULL;
	for (i = 0; environ[i]; i++) {
		const char *v = environ[i];

		if (!strncmp(v, "LD_PRELOAD=", 11) || !strncmp(v, "USMC_RUNDIR=", 12))
			continue;
		/* The user's USMC_* settings apply to the usmc transport only. */
		if (!strncmp(v, "USMC_", 5) && tr != TR_USMC)
			continue;
		e[k++] = (char *)v;
	}
	*own = k;
	if (tr == TR_USMC || tr < 0)
		ok = asprintf(&e[k++], "USMC_RUNDIR=%s", env->rundir) >= 0;
	if (ok && tr == TR_USMC) {
		ok = asprintf(&e[k++], "LD_PRELOAD=%s", env->lib) >= 0;
		if (ok && env->busy_poll)
			ok = asprintf(&e[k++], "USMC_BUSY_POLL=%s", env->busy_poll) >= 0;
		for (i = 0; ok && env->extra && env->extra[i]; i++)
			ok = (e[k++] = strdup(env->extra[i])) != NULL;
	}
	if (!ok) {
		e[k - 1] = NULL;	/* a failed asprintf leaves it undefined */
		for (i = *own; e[i]; i++)
			free(e[i]);
		free(e);
		return NULL;
	}
	return e;
}

static void free_env(char **e, size_t own)
{
	size_t i;

	if (!e)
		return;
	for (i = own; e[i]; i++)
		free(e[i]);
	free(e);
}

int bench_spawn(struct bench_proc *p, char **argv, const struct bench_env *env, int tr,
		bool capture_stdout)
{
	char *av[64], num[16];
	pid_t parent = getpid(), pid;
	int pfd[2], n = 0, rc;
	char **envp = NULL;
	size_t own = 0;

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->fd = -1;
	if (pipe2(pfd, O_CLOEXEC))
		return -errno;
	envp = build_env(env, tr, &own);
	if (!envp) {
		rc = -ENOMEM;
		goto err;
	}
	av[n++] = "usmc";
	while (*argv && n < 60)
		av[n++] = *argv++;
	if (!capture_stdout) {
		snprintf(num, sizeof(num), "%d", pfd[1]);
		av[n++] = "--report-fd";
		av[n++] = num;
	}
	av[n] = NULL;
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		goto err;
	}
	if (pid == 0) {
		/* Die with the bench; if it is already gone, do not start. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		if (capture_stdout) {
			dup2(pfd[1], STDOUT_FILENO);
		} else {
			fcntl(pfd[1], F_SETFD, 0);
			dup2(STDERR_FILENO, STDOUT_FILENO);	/* keep --json output clean */
		}
		execve("/proc/self/exe", av, envp);
		_exit(127);
	}
	free_env(envp, own);
	close(pfd[1]);
	p->pid = pid;
	p->fd = pfd[0];
	live_set(0, pid);
	return 0;
err:
	free_env(envp, own);
	close(pfd[0]);
	close(pfd[1]);
	return rc;
}

int bench_read_line(struct bench_proc *p, char *line, size_t len, double deadline)
{
	for (;;) {
		char *nl = memchr(p->buf, '\n', p->len);
		struct pollfd pf = { .fd = p->fd, .events = POLLIN };
		double left;
		ssize_t r;

		if (nl || (p->eof && p->len) || p->len == sizeof(p->buf)) {
			size_t n = nl ? (size_t)(nl - p->buf) : p->len, used = nl ? n + 1 : n;

			if (n >= len)
				n = len - 1;
			memcpy(line, p->buf, n);
			line[n] = '\0';
			memmove(p->buf, p->buf + used, p->len - used);
			p->len -= used;
			return 1;
		}
		if (p->eof)
			return 0;
		if (interrupted)
			return -EINTR;
		left = deadline - bench_now();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pf, 1, (int)(left * 1000) + 1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!pf.revents)
			continue;
		r = read(p->fd, p->buf + p->len, sizeof(p->buf) - p->len);
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (r == 0)
			p->eof = true;
		if (r > 0)
			p->len += (size_t)r;
	}
}

void bench_kill(struct bench_proc *p)
{
	if (p->pid > 0)
		kill(p->pid, SIGKILL);
}

int bench_reap(struct bench_proc *p, double deadline)
{
	struct timespec ms = { 0, 500000 };
	int st = 0, rc;
	pid_t r;

	if (p->pid <= 0)
		return -ECHILD;
	for (;;) {
		r = waitpid(p->pid, &st, WNOHANG);
		if (r == p->pid) {
			rc = st;
			break;
		}
		if (r < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (interrupted || bench_now() > deadline) {
			kill(p->pid, SIGKILL);
			while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
				;
			rc = interrupted ? -EINTR : -ETIMEDOUT;
			break;
		}
		nanosleep(&ms, NULL);
	}
	live_set(p->pid, 0);
	p->pid = -1;
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	return rc;
}

/* ---- worker records: "ok key=value ...", "ready port=N", "error text" ---- */

int bench_parse_rec(const char *line, struct bench_rec *r)
{
	static const char *const keys[K_MAX] = {
		[K_OPS] = "ops", [K_TOTAL] = "total", [K_SECS] = "secs", [K_CPU] = "cpu",
		[K_MEAN] = "mean", [K_P50] = "p50", [K_P99] = "p99", [K_P999] = "p999",
		[K_PORT] = "port", [K_FLOOR_PP] = "floor_pp", [K_FLOOR_PP_MEAN] = "floor_pp_mean",
		[K_PIPE_64K] = "pipe64k", [K_PIPE_1M] = "pipe1m", [K_DUP] = "dup", [K_STALE] = "stale",
	};
	const char *p;
	int k;

	memset(r, 0, sizeof(*r));
	if (!strncmp(line, "error", 5)) {
		snprintf(r->error, sizeof(r->error), "%s", line[5] ? line + 6 : "worker failed");
		return -EIO;
	}
	if (strncmp(line, "ok", 2) && strncmp(line, "ready", 5)) {
		snprintf(r->error, sizeof(r->error), "unexpected worker output: %.200s", line);
		return -EPROTO;
	}
	for (p = strchr(line, ' '); p; p = strchr(p + 1, ' ')) {
		const char *eq = strchr(p + 1, '=');

		if (!eq)
			break;
		for (k = 0; k < K_MAX; k++)
			if (strlen(keys[k]) == (size_t)(eq - p - 1) &&
			    !strncmp(p + 1, keys[k], (size_t)(eq - p - 1))) {
				r->v[k] = strtod(eq + 1, NULL);
				r->has[k] = true;
			}
	}
	return 0;
}

/* ---- did the usmc run really use shared memory? ---- */

static uint64_t json_u64(const char *js, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(js, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

static void json_obj(const char *js, const char *key, char *out, size_t len)
{
	char pat[64];
	const char *p, *e;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\": {", key);
	p = strstr(js, pat);
	if (!p)
		return;
	p += strlen(pat);
	e = strchr(p, '}');
	if (e)
		snprintf(out, len, "%.*s", (int)(e - p), p);
}

/*
 * `usmc stat --json` with USMC_RUNDIR=rundir, after every worker exited:
 * ok when endpoints moved data through shared memory and none stayed on or
 * fell back to TCP.
 */
int bench_usmc_check(const char *rundir, struct bench_check *c)
{
	struct bench_env env = { .rundir = rundir };
	char *argv[] = { "stat", "--json", NULL };
	struct bench_proc p;
	double deadline = bench_now() + 10;
	char *js = calloc(1, 1 << 16);
	size_t len = 0;
	int rc, st;

	memset(c, 0, sizeof(*c));
	if (!js)
		return -ENOMEM;
	rc = bench_spawn(&p, argv, &env, -1, true);
	if (rc < 0)
		goto out;
	while ((rc = bench_read_line(&p, js + len, (1 << 16) - len - 1, deadline)) > 0) {
		len += strlen(js + len);
		if (len < (1 << 16) - 2)
			js[len++] = '\n';
	}
	st = bench_reap(&p, deadline);
	if (rc < 0 || st < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		rc = rc < 0 ? rc : st < 0 ? st : -EIO;
		goto out;
	}
	c->ran = true;
	c->smc_conns = json_u64(js, "smc_conns");
	c->tcp_conns = json_u64(js, "tcp_conns");
	c->handshake_errors = json_u64(js, "handshake_errors");
	c->tx_bytes = json_u64(js, "tx_bytes");
	c->rx_bytes = json_u64(js, "rx_bytes");
	c->tx_calls = json_u64(js, "tx_calls");
	c->rx_calls = json_u64(js, "rx_calls");
	c->tx_fast = json_u64(js, "tx_fast");
	c->rx_fast = json_u64(js, "rx_fast");
	c->doorbells = json_u64(js, "doorbells");
	c->sleeps = json_u64(js, "sleeps");
	c->spin_hits = json_u64(js, "spin_hits");
	json_obj(js, "tcp_fallback", c->fallback, sizeof(c->fallback));
	json_obj(js, "aborts", c->aborts, sizeof(c->aborts));
	c->ok = c->smc_conns > 0 && c->tcp_conns == 0 && !c->fallback[0];
	rc = 0;
out:
	free(js);
	return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) ? -1 : 0;
}

int bench_rmtree(const char *path)
{
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS))
		return errno == ENOENT ? 0 : -errno;
	return 0;
}

/*
 * The bench's own directory (base/usmc-bench-XXXXXX): UNIX socket, one
 * runtime directory per usmc run, the plot's JSON.  A bench that is
 * SIGKILLed cannot remove it, so every bench holds a lock on DIR/lock for
 * its lifetime, and each new one removes the directories of dead ones.
 */
int bench_tmpdir_create(const char *base, char *dir, size_t len)
{
	char lock[PATH_MAX_BENCH];
	struct dirent *de;
	DIR *d = opendir(base);
	int fd;

	while (d && (de = readdir(d))) {
		struct stat st;

		if (strncmp(de->d_name, "usmc-bench-", 11))
			continue;
		snprintf(lock, sizeof(lock), "%s/%s", base, de->d_name);
		if (lstat(lock, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
			continue;
		snprintf(lock, sizeof(lock), "%s/%s/lock", base, de->d_name);
		fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			/* No lock yet: only a bench that died while starting. */
			if (st.st_mtime + 60 < time(NULL)) {
				snprintf(lock, sizeof(lock), "%s/%s", base, de->d_name);
				bench_rmtree(lock);
			}
			continue;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			snprintf(lock, sizeof(lock), "%s/%s", base, de->d_name);
			bench_rmtree(lock);
		}
		close(fd);
	}
	if (d)
		closedir(d);
	snprintf(dir, len, "%s/usmc-bench-XXXXXX", base);
	if (!mkdtemp(dir))
		return -errno;
	snprintf(lock, sizeof(lock), "%s/lock", dir);
	/* Held (never closed) until the bench exits; workers do not inherit it. */
	fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB)) {
		int rc = -errno;

		bench_rmtree(dir);
		return rc;
	}
	return 0;
}
