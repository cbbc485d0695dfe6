// SPDX-License-Identifier: MIT
/*
 * rundir.c - runtime directory: safe creation, safe opens, liveness locks,
 * garbage collection of objects whose owner died.
 *
 * Threat model: the directory may sit in a world-writable place (/dev/shm),
 * so every path is resolved relative to a directory fd opened with
 * O_NOFOLLOW, files are created O_EXCL, and opened objects are fstat()ed
 * before use.  Anything suspicious makes the caller fall back to TCP.
 */
#include "rundir.h"
#include "log.h"
#include "options.h"
#include "sys.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <time.h>

static pthread_mutex_t rundir_lock = PTHREAD_MUTEX_INITIALIZER;
static int rundir_dfd = -1;
static char rundir_path[256];

const char *usmc_rundir_path(void)
{
	return rundir_path;
}

int usmc_rundir_fd(void)
{
	return rundir_dfd;
}

static bool uid_allowed(uid_t uid)
{
	const char *p = usmc_opt.allow;

	if (uid == geteuid())
		return true;
	if (!strcmp(p, "all"))
		return true;
	while (*p) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);

		if (end == p)
			break;
		if (v == uid)
			return true;
		p = end;
		while (*p == ',' || *p == ' ')
			p++;
	}
	return false;
}

bool usmc_rundir_owner_ok(const struct stat *st)
{
	return uid_allowed(st->st_uid) && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* Why the directory was refused (for `usmc stat`); empty while usable. */
static char rundir_why[160];

const char *usmc_rundir_problem(void)
{
	return rundir_why;
}

static void default_path(char *buf, size_t len)
{
	struct statfs sfs;
	const char *xdg;

	if (statfs("/dev/shm", &sfs) == 0 && sfs.f_type == TMPFS_MAGIC) {
		snprintf(buf, len, "/dev/shm/usmc-%u", (unsigned)geteuid());
		return;
	}
	xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && *xdg && strlen(xdg) < len - 8) {
		snprintf(buf, len, "%s/usmc", xdg);
		return;
	}
	snprintf(buf, len, "/tmp/usmc-%u", (unsigned)geteuid());
}

int usmc_rundir_init(void)
{
	struct stat st;
	int dfd, rc = 0;
	bool dflt;

	if (rundir_dfd >= 0)
		return 0;
	pthread_mutex_lock(&rundir_lock);
	if (rundir_dfd >= 0)
		goto out;
	dflt = !usmc_opt.rundir[0];
	if (dflt)
		default_path(rundir_path, sizeof(rundir_path));
	else
		snprintf(rundir_path, sizeof(rundir_path), "%s", usmc_opt.rundir);

	if (mkdir(rundir_path, 0700) && errno != EEXIST) {
		rc = -errno;
		usmc_dbg(1, "runtime directory %s: mkdir: %s", rundir_path, strerror(errno));
		goto out;
	}
	dfd = sys_openat(AT_FDCWD, rundir_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (dfd < 0) {
		rc = -errno;
		snprintf(rundir_why, sizeof(rundir_why), "cannot be opened: %s%s", strerror(errno),
			 errno == ELOOP || errno == ENOTDIR ? " (not a directory of ours)" : "");
		usmc_dbg(1, "runtime directory %s: open: %s", rundir_path, strerror(errno));
		goto out;
	}
	/* Others may write a directory only when they cannot rename or
	 * remove what is ours in it (sticky, like /tmp). */
	if (fstat(dfd, &st) || !S_ISDIR(st.st_mode) || !uid_allowed(st.st_uid) ||
	    ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) ||
	    (dflt && (st.st_uid != geteuid() || (st.st_mode & 0077)))) {
		snprintf(rundir_why, sizeof(rundir_why),
			 "is not safe: owned by uid %u, mode %04o (this user is uid %u)",
			 (unsigned)st.st_uid, (unsigned)st.st_mode & 07777, (unsigned)geteuid());
		usmc_dbg(1, "runtime directory %s %s", rundir_path, rundir_why);
		usmc_ifd_close(dfd);
		rc = -EPERM;
		goto out;
	}
	usmc_ifd_mark(dfd);
	rundir_dfd = usmc_ifd_move_high(dfd, false);
out:
	pthread_mutex_unlock(&rundir_lock);
	return rc;
}

/*
 * Is an object another process could have planted what we expect?  Type
 * (regular file, or FIFO for doorbells), an allowed owner, and a mode that
 * lets nobody else write it.  -EINVAL: wrong type (never anything usmc
 * made); -EPERM: owner or mode not trusted.
 */
int usmc_rundir_check(int fd, bool fifo, struct stat *st)
{
	if (fstat(fd, st))
		return -errno;
	if (fifo ? !S_ISFIFO(st->st_mode) : !S_ISREG(st->st_mode))
		return -EINVAL;
	return usmc_rundir_owner_ok(st) ? 0 : -EPERM;
}

static int rundir_open_type(const char *name, int flags, mode_t mode, bool fifo, bool kept)
{
	struct stat st = { 0 };
	int fd, rc;

	if (rundir_dfd < 0)
		return -ENOENT;
	if (flags & O_CREAT)
		flags |= O_EXCL;
	/* O_NONBLOCK: a FIFO where a file should be never blocks the open. */
	fd = sys_openat(rundir_dfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	usmc_ifd_mark(fd);
	if (!(flags & O_CREAT)) {
		rc = usmc_rundir_check(fd, fifo, &st);
		if (rc) {
			usmc_dbg(1, "runtime directory: %s refused (%s, owner %u, mode %o)", name,
				 rc == -EINVAL ? "wrong type" : "untrusted", (unsigned)st.st_uid,
				 (unsigned)st.st_mode);
			usmc_ifd_close(fd);
			return rc;
		}
	}
	if (!kept)
		return usmc_ifd_move_high(fd, false);
	/* Kept past the call: above the program's numbers or not at all. */
	fd = usmc_ifd_move_high(fd, true);
	if (fd < 0 && (flags & O_CREAT))
		unlinkat(rundir_dfd, name, 0);	/* made just now: not left behind */
	return fd;
}

int usmc_rundir_open(const char *name, int flags, mode_t mode)
{
	return rundir_open_type(name, flags, mode, false, false);
}

int usmc_rundir_open_kept(const char *name, int flags, mode_t mode)
{
	return rundir_open_type(name, flags, mode, false, true);
}

int usmc_rundir_open_fifo(const char *name, int flags)
{
	return rundir_open_type(name, flags & ~O_CREAT, 0, true, false);
}

enum usmc_owner usmc_rundir_owner_alive(const char *name)
{
	int fd = usmc_rundir_open(name, O_RDONLY, 0);
	bool alive;

	if (fd == -ENOENT)
		return USMC_OWNER_DEAD;
	if (fd == -EINVAL)
		return USMC_OWNER_PLANTED;
	if (fd < 0)
		return USMC_OWNER_UNKNOWN;
	alive = usmc_lock_held(fd, 0);
	usmc_ifd_close(fd);
	return alive ? USMC_OWNER_ALIVE : USMC_OWNER_DEAD;
}

int usmc_rundir_mkdir(const char *name)
{
	if (rundir_dfd < 0)
		return -ENOENT;
	return mkdirat(rundir_dfd, name, 0700) ? -errno : 0;
}

int usmc_rundir_mkfifo(const char *name)
{
	if (rundir_dfd < 0)
		return -ENOENT;
	return mkfifoat(rundir_dfd, name, 0600) ? -errno : 0;
}

int usmc_rundir_rename(const char *from, const char *to)
{
	if (rundir_dfd < 0)
		return -ENOENT;
	return renameat(rundir_dfd, from, rundir_dfd, to) ? -errno : 0;
}

int usmc_rundir_unlink(const char *name, bool dir)
{
	if (rundir_dfd < 0)
		return -ENOENT;
	return unlinkat(rundir_dfd, name, dir ? AT_REMOVEDIR : 0) ? -errno : 0;
}

void *usmc_map_shared(int fd, size_t len)
{
	void *p;

	if (usmc_fault(USMC_FAULT_MMAP)) {
		errno = ENOMEM;
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int lock_op(int fd, int cmd, short type, off_t byte)
{
	struct flock fl = {
		.l_type = type,
		.l_whence = SEEK_SET,
		.l_start = byte,
		.l_len = 1,
	};

	if (sys_fcntl(fd, cmd, (long)&fl) < 0)
		return -errno;
	return cmd == F_OFD_GETLK ? fl.l_type : 0;
}

int usmc_lock_take(int fd, off_t byte)
{
	return lock_op(fd, F_OFD_SETLK, F_WRLCK, byte);
}

int usmc_lock_share(int fd, off_t byte)
{
	return lock_op(fd, F_OFD_SETLK, F_RDLCK, byte);
}

int usmc_lock_drop(int fd, off_t byte)
{
	return lock_op(fd, F_OFD_SETLK, F_UNLCK, byte);
}

bool usmc_lock_held(int fd, off_t byte)
{
	int t = lock_op(fd, F_OFD_GETLK, F_WRLCK, byte);

	/* On error assume alive: never destroy what we cannot judge. */
	return t < 0 || t != F_UNLCK;
}

/*
 * Owners build objects under a "t-" name, lock them, then rename them into
 * place, so an lg-/ln- object without a lock holder is always dead.  A "t-"
 * object is only garbage once it is older than this.
 */
#define GC_GRACE_SEC	60

static bool too_young(const char *name)
{
	struct timespec now;
	struct stat st;

	if (fstatat(rundir_dfd, name, &st, AT_SYMLINK_NOFOLLOW))
		return false;
	clock_gettime(CLOCK_REALTIME, &now);
	return now.tv_sec - st.st_ctim.tv_sec < GC_GRACE_SEC;
}

/* Remove a link group directory (lg-ID): FIFOs, memory file, directory. */
static int gc_lgr_dir(const char *name)
{
	char path[300];
	struct dirent *de;
	int dfd, fd, n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/mem", name);
	fd = usmc_rundir_open(path, O_RDONLY, 0);
	if (fd >= 0) {
		bool alive = usmc_lock_held(fd, 0);

		usmc_ifd_close(fd);
		if (alive)
			return 0;
	} else if (fd != -ENOENT) {
		return 0;	/* not ours to judge (or planted): left alone */
	}
	/* The owner is gone (or died before creating mem): remove it all. */
	dfd = sys_openat(rundir_dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (dfd < 0)
		return 0;
	d = fdopendir(dfd);
	if (!d) {
		usmc_ifd_close(dfd);
		return 0;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		unlinkat(dfd, de->d_name, 0);
	}
	closedir(d);
	if (!unlinkat(rundir_dfd, name, AT_REMOVEDIR))
		n++;
	return n;
}

/* Remove a listener index (ln-ID) and its doorbell when its owner died. */
static int gc_listener(const char *name)
{
	int fd = usmc_rundir_open(name, O_RDONLY, 0);
	bool alive;

	if (fd < 0)
		return 0;
	alive = usmc_lock_held(fd, 0);
	usmc_ifd_close(fd);
	if (alive)
		return 0;
	return unlinkat(rundir_dfd, name, 0) == 0;
}

int usmc_rundir_gc(void)
{
	struct dirent *de;
	int dfd, n = 0;
	DIR *d;

	if (usmc_rundir_init())
		return 0;
	dfd = sys_openat(rundir_dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (dfd < 0)
		return 0;
	d = fdopendir(dfd);
	if (!d) {
		usmc_ifd_close(dfd);
		return 0;
	}
	while ((de = readdir(d))) {
		if (!strncmp(de->d_name, "lg-", 3) && de->d_type == DT_DIR)
			n += gc_lgr_dir(de->d_name);
		else if (!strncmp(de->d_name, "ln-", 3) && de->d_type == DT_REG)
			n += gc_listener(de->d_name);
		else if (!strncmp(de->d_name, "t-", 2) && !too_young(de->d_name))
			n += de->d_type == DT_DIR ? gc_lgr_dir(de->d_name) :
			     !unlinkat(rundir_dfd, de->d_name, 0);
	}
	closedir(d);
	return n;
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held rundir_lock at the fork. */
void usmc_rundir_after_fork(void)
{
	pthread_mutex_init(&rundir_lock, NULL);
}
