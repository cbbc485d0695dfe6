// SPDX-License-Identifier: MIT
/*
 * controls.c - runtime controls (`usmc ctl`) and the acceleration policy.
 *
 * `usmc ctl KEY=VALUE` writes the controls file in the runtime directory
 * (KEY=VALUE lines, '#' comments).  Every usmc process applies it to its
 * OPTF_CTL settings that its environment does not set, when it next makes
 * a connection or a listener: one fstatat per USMC_CTL_CHECK_NS at most,
 * a read only when the file changed.  So a change reaches new connections
 * of running programs within that time, without a restart.
 *
 * Nothing in the runtime directory is trusted: the file is opened with
 * rundir.c's checked open (O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, a regular
 * file of an allowed owner that nobody else may write), bounded by
 * USMC_CTL_MAX, and every line is checked like `usmc ctl` checks its
 * arguments; a line that does not pass is ignored (USMC_DEBUG names it).
 * Settings that widen trust (USMC_ALLOW, USMC_TRUST_SECCOMP) or that the
 * directory itself depends on (USMC_RUNDIR) are never read from it.
 *
 * Locking: ctl_lock serialises appliers (static buffers); readers of the
 * string rules copy them under rules_seq (odd while they change).
 */
#include "options.h"
#include "log.h"
#include "rundir.h"
#include "sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t ctl_next_ns;		/* next look at the file */
static struct {
	bool seen;				/* a file was applied */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
} ctl_id;					/* under ctl_lock */
static char ctl_buf[USMC_CTL_MAX + 1];		/* under ctl_lock */
static _Atomic uint32_t rules_seq;		/* odd while the rules change */
static _Atomic uint32_t ctl_gen;		/* usmc_ctl_gen() */

uint32_t usmc_ctl_gen(void)
{
	return LOAD_RELAXED(&ctl_gen);
}

/* 16 bits naming one version of the controls file (never 0). */
static uint32_t gen_of(const struct stat *st)
{
	uint64_t h = usmc_mix64((uint64_t)st->st_ino ^ ((uint64_t)st->st_dev << 40) ^
				(uint64_t)st->st_mtim.tv_nsec ^ ((uint64_t)st->st_mtim.tv_sec << 30) ^
				((uint64_t)st->st_size << 50));

	return (uint32_t)(h & 0xffff) | 1;
}

int usmc_ctl_read(char *buf, size_t len)
{
	struct stat st;
	size_t got = 0;
	ssize_t n;
	int fd, rc;

	if (len < 2)
		return -EINVAL;
	rc = usmc_rundir_init();
	if (rc)
		return rc;
	fd = usmc_rundir_open(USMC_CTL_FILE, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st)) {
		rc = -errno;
		goto out;
	}
	if (st.st_size > USMC_CTL_MAX || (size_t)st.st_size >= len) {
		rc = -EFBIG;
		goto out;
	}
	while (got < len - 1) {
		n = sys_read(fd, buf + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (!n)
			break;
		got += (size_t)n;
	}
	rc = -EFBIG;			/* grew while we read */
	if (got == len - 1)
		goto out;
	buf[got] = '\0';
	rc = -EINVAL;			/* not text */
	if (memchr(buf, '\0', got))
		goto out;
	rc = (int)got;
out:
	usmc_ifd_close(fd);
	return rc;
}

/* One line "KEY=VALUE" (spaces around both trimmed, in place): the
 * descriptor's index and *val, or -1 with *why. */
static int ctl_line(char *line, const char **val, const char **why)
{
	const struct usmc_opt_desc *d;
	char *eq = strchr(line, '='), *k, *v, *end;

	*why = "not KEY=VALUE";
	if (!eq)
		return -1;
	*eq = '\0';
	for (k = line; *k == ' ' || *k == '\t'; k++)
		;
	for (end = eq; end > k && (end[-1] == ' ' || end[-1] == '\t'); end--)
		end[-1] = '\0';
	for (v = eq + 1; *v == ' ' || *v == '\t'; v++)
		;
	for (end = v + strlen(v); end > v && strchr(" \t\r", end[-1]); end--)
		end[-1] = '\0';
	d = usmc_opt_find(k);
	*why = "unknown setting";
	if (!d)
		return -1;
	*why = "not a runtime control";
	if (!(d->flags & OPTF_CTL))
		return -1;
	if (usmc_opt_check(d, v, why))
		return -1;
	*val = v;
	return (int)(d - usmc_opt_table);
}

static int apply_locked(char *text)
{
	const char *vals[USMC_OPT_MAX] = { 0 };
	char *line = text, *next;
	unsigned int i;
	int bad = 0;

	for (; line && *line; line = next) {
		const char *why, *v;
		char shown[48];
		int k;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		if (!*line || *line == '#' || *line == '\r')
			continue;
		/* For the message: the line as it was, printable (untrusted). */
		for (i = 0; i + 1 < sizeof(shown) && line[i]; i++)
			shown[i] = line[i] >= 0x20 && line[i] < 0x7f ? line[i] : '?';
		shown[i] = '\0';
		k = ctl_line(line, &v, &why);
		if (k < 0) {
			usmc_dbg(1, "controls: line '%s' ignored: %s", shown, why);
			bad++;
			continue;
		}
		vals[k] = v;
	}
	atomic_fetch_add_explicit(&rules_seq, 1, memory_order_acq_rel);
	for (i = 0; i < usmc_opt_count; i++) {
		const struct usmc_opt_desc *d = &usmc_opt_table[i];

		if (!(d->flags & OPTF_CTL) || usmc_opt_src[i] == USMC_SRC_ENV)
			continue;
		usmc_opt_set(d, vals[i] ? vals[i] : d->def);
		usmc_opt_src[i] = vals[i] ? USMC_SRC_CTL : USMC_SRC_DEFAULT;
	}
	atomic_fetch_add_explicit(&rules_seq, 1, memory_order_release);
	return bad;
}

int usmc_options_apply_ctl(const char *text)
{
	int bad;

	pthread_mutex_lock(&ctl_lock);
	snprintf(ctl_buf, sizeof(ctl_buf), "%s", text);
	bad = apply_locked(ctl_buf);
	pthread_mutex_unlock(&ctl_lock);
	return bad;
}

static bool same_file(const struct stat *st)
{
	return ctl_id.seen && ctl_id.dev == st->st_dev && ctl_id.ino == st->st_ino &&
	       ctl_id.size == st->st_size &&
	       ctl_id.mtime.tv_sec == st->st_mtim.tv_sec &&
	       ctl_id.mtime.tv_nsec == st->st_mtim.tv_nsec &&
	       ctl_id.ctime.tv_sec == st->st_ctim.tv_sec &&
	       ctl_id.ctime.tv_nsec == st->st_ctim.tv_nsec;
}

void usmc_options_refresh(void)
{
	uint64_t now = usmc_now_ns();
	struct stat st;
	int n;

	if (now < LOAD_RELAXED(&ctl_next_ns))
		return;
	/* Someone else is looking: their result is as fresh as ours. */
	if (pthread_mutex_trylock(&ctl_lock))
		return;
	STORE_RELAXED(&ctl_next_ns, now + USMC_CTL_CHECK_NS);
	if (usmc_rundir_init())
		goto out;
	if (fstatat(usmc_rundir_fd(), USMC_CTL_FILE, &st, AT_SYMLINK_NOFOLLOW)) {
		if (errno == ENOENT && ctl_id.seen) {
			/* Removed (usmc ctl --reset): back to the defaults. */
			ctl_id.seen = false;
			ctl_buf[0] = '\0';
			apply_locked(ctl_buf);
			STORE_RELAXED(&ctl_gen, 0);
			usmc_dbg(1, "controls: removed, defaults apply");
		}
		goto out;
	}
	if (same_file(&st))
		goto out;
	n = usmc_ctl_read(ctl_buf, sizeof(ctl_buf));
	if (n < 0) {
		usmc_dbg(1, "controls file refused: %s", strerror(-n));
		goto out;
	}
	ctl_id.seen = true;
	ctl_id.dev = st.st_dev;
	ctl_id.ino = st.st_ino;
	ctl_id.size = st.st_size;
	ctl_id.mtime = st.st_mtim;
	ctl_id.ctime = st.st_ctim;
	n = apply_locked(ctl_buf);
	STORE_RELAXED(&ctl_gen, gen_of(&st));
	usmc_dbg(1, "controls applied (%d line(s) ignored)", n);
out:
	pthread_mutex_unlock(&ctl_lock);
}

/* "6379,8000-8100": is port in the list? */
static bool port_in_list(const char *list, uint16_t port)
{
	const char *p = list;

	while (*p) {
		char *end;
		long lo = strtol(p, &end, 10), hi;

		if (end == p)
			return false;
		hi = lo;
		if (*end == '-') {
			p = end + 1;
			hi = strtol(p, &end, 10);
			if (end == p)
				return false;
		}
		if (port >= lo && port <= hi)
			return true;
		p = end;
		while (*p == ',' || *p == ' ')
			p++;
	}
	return false;
}

/* "a,b,c": is name one of them? */
static bool name_in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	while (*list) {
		size_t k = strcspn(list, ",");

		if (k == n && !strncmp(list, name, n))
			return true;
		list += k + (list[k] == ',');
	}
	return false;
}

struct rules {
	char ports[256], exclude_ports[256], programs[256], exclude_programs[256], off_netns[256];
};

/* A consistent copy of the string rules (they change under rules_seq). */
static void rules_copy(struct rules *r)
{
	uint32_t seq;

	for (;;) {
		seq = LOAD_ACQUIRE(&rules_seq);
		if (seq & 1) {
			cpu_relax();
			continue;
		}
		memcpy(r->ports, usmc_opt.ports, sizeof(r->ports));
		memcpy(r->exclude_ports, usmc_opt.exclude_ports, sizeof(r->exclude_ports));
		memcpy(r->programs, usmc_opt.programs, sizeof(r->programs));
		memcpy(r->exclude_programs, usmc_opt.exclude_programs, sizeof(r->exclude_programs));
		memcpy(r->off_netns, usmc_opt.off_netns, sizeof(r->off_netns));
		FENCE(memory_order_acquire);
		if (LOAD_RELAXED(&rules_seq) == seq)
			break;
	}
	r->ports[sizeof(r->ports) - 1] = r->exclude_ports[sizeof(r->exclude_ports) - 1] = '\0';
	r->programs[sizeof(r->programs) - 1] = '\0';
	r->exclude_programs[sizeof(r->exclude_programs) - 1] = '\0';
	r->off_netns[sizeof(r->off_netns) - 1] = '\0';
}

/* Our network namespace's inode, as text ("" when unknown). */
static void netns_ino(char *buf, size_t len)
{
	struct stat st;

	buf[0] = '\0';
	if (!stat("/proc/self/ns/net", &st))
		snprintf(buf, len, "%llu", (unsigned long long)st.st_ino);
}

int usmc_policy_check(uint16_t port, bool *fixed)
{
	const char *key = NULL, *prog = program_invocation_short_name;
	struct rules r;
	char ns[24];
	int reason = 0;

	usmc_options_refresh();
	if (usmc_opt.disable) {
		key = "USMC_DISABLE";
		reason = USMC_R_DISABLED;
	} else if (!usmc_opt.loopback) {
		key = "USMC_LOOPBACK";
		reason = USMC_R_NO_DEVICE;
	} else {
		rules_copy(&r);
		reason = USMC_R_POLICY;
		if (r.ports[0] && !port_in_list(r.ports, port))
			key = "USMC_PORTS";
		else if (r.exclude_ports[0] && port_in_list(r.exclude_ports, port))
			key = "USMC_EXCLUDE_PORTS";
		else if (r.programs[0] && !name_in_list(r.programs, prog))
			key = "USMC_PROGRAMS";
		else if (r.exclude_programs[0] && name_in_list(r.exclude_programs, prog))
			key = "USMC_EXCLUDE_PROGRAMS";
		else if (r.off_netns[0] && (netns_ino(ns, sizeof(ns)), name_in_list(r.off_netns, ns)))
			key = "USMC_OFF_NETNS";
		else
			reason = 0;
	}
	if (reason) {
		const struct usmc_opt_desc *d = usmc_opt_find(key);
		int src = usmc_opt_src[d - usmc_opt_table];

		if (fixed)
			*fixed = src == USMC_SRC_ENV;
		usmc_dbg(1, "policy: port %u in %s: %s (set %s)", port, prog, key,
			 src == USMC_SRC_ENV ? "in the environment" :
			 src == USMC_SRC_CTL ? "by usmc ctl" : "by default");
	}
	return reason;
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held ctl_lock at the fork. */
void usmc_ctl_after_fork(void)
{
	pthread_mutex_init(&ctl_lock, NULL);
}
