// SPDX-License-Identifier: MIT
/*
 * scm_peer.c - will the process at the other end of a UNIX socket adopt
 * the usmc sockets we send it (SCM_RIGHTS)?
 *
 * A sender may add its own descriptors to a message (handover.c) only if
 * whoever reads the message strips them again, that is, runs libusmc.  A
 * UNIX socket says nothing about who reads it, so usmc processes say it
 * themselves, in the counters file (stats.h), where each live process
 * owns a slot (an OFD lock on its byte proves it alive):
 *
 *  - announce: an inode of a UNIX socket that this process reads
 *    descriptors from with libusmc (recvmsg/recvmmsg with a control
 *    buffer, scm_recv.c), or inherited across an exec from a usmc image
 *    (exec.c), goes into its slot's ring (the last USMC_UX_READ of them;
 *    only the owner writes it).  Not the ends of a socketpair()
 *    we make: it is made to be handed to a child, which may exec a
 *    program without libusmc before it taints them;
 *  - taint: an inode that a program without libusmc may read too goes
 *    into the file's taint ring (anyone writes it; the last USMC_UX_TAINT
 *    count).  Every UNIX socket that an exec without libusmc or a
 *    posix_spawn child inherits, and every UNIX socket passed in a message
 *    (its receiver is unknown), is tainted for good.
 *
 *  - a UNIX listener bound to a path: its file's identity (UNIX_DIAG_VFS,
 *    which every socket it accepts carries too) is announced by every usmc
 *    process that listens on it or inherits it from a usmc image, and
 *    tainted as its inode is.  While no program without libusmc holds
 *    it, whoever accepts from it runs libusmc: a connection to it may
 *    carry tickets before any process accepted it (Dovecot's imap-login
 *    hands each client to an imap process the master starts on demand).
 *
 * The sender asks the kernel for the inode of its socket's peer (sock_diag,
 * UNIX_DIAG_PEER, and that peer's UNIX_DIAG_VFS) and adds its descriptors
 * only if a live process announced that inode, or the listener's file the
 * peer was accepted from, and nobody tainted either.  Otherwise the sockets move to
 * TCP before they leave, as they always did.  What is not covered (a
 * receiver that execs a program without libusmc after the message was
 * queued, a holder that got the socket outside libusmc) is in
 * docs/design.md, Limits.  Announcements and taints are hints among
 * processes of one user and runtime directory: a forged one can only make
 * that user's own program receive usmc's descriptors or use TCP.
 *
 * Layer: process discovery for handover.c and scm_recv.c; raw system calls
 * (sys.h), no locks (words in the counters file, one writer per slot).
 */
#include "real.h"
#include "rundir.h"
#include "scm_peer.h"
#include "stats.h"
#include "sys.h"

#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

bool usmc_scm_unix_ino(int fd, uint64_t *ino)
{
	struct stat st;
	int dom = 0;
	socklen_t l = sizeof(dom);

	/* The kernel fills it; the analyser cannot see a raw call do so. */
	memset(&st, 0, sizeof(st));
	if (usmc_sys(SYS_fstat, fd, (long)&st, 0) || !S_ISSOCK(st.st_mode))
		return false;
	if (usmc_sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, (long)&dom, (long)&l, 0) ||
	    dom != AF_UNIX)
		return false;
	*ino = (uint64_t)st.st_ino;
	return true;
}

/*
 * A socket file's identity among the announced and tainted inodes: its
 * device and inode with the top bit set (a socket's own inode, from
 * sockfs, fits in 32 bits: the two never meet).
 */
static uint64_t vfs_id(const struct unix_diag_vfs *v)
{
	return 1ull << 63 | (uint64_t)(v->udiag_vfs_dev & 0x7fffffffu) << 32 | v->udiag_vfs_ino;
}

static void unix_diag(uint64_t ino, uint64_t *peer, uint64_t *vfs);

/* UNIX socket fd (inode ino) listens: the identity of its file, 0 if it
 * does not listen or is not bound to a path. */
static uint64_t listener_vfs(int fd, uint64_t ino)
{
	int on = 0;
	socklen_t l = sizeof(on);
	uint64_t vfs;

	if (usmc_sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_ACCEPTCONN, (long)&on, (long)&l, 0) || !on)
		return 0;
	unix_diag(ino, NULL, &vfs);
	return vfs;
}

void usmc_scm_announce(uint64_t ino)
{
	struct usmc_stats_proc *p;
	struct usmc_stats_file *f;
	uint32_t k;
	int slot, i;

	if (!ino || usmc_stats_attach())
		return;
	f = usmc_stats_self(&slot);
	if (!f)
		return;
	p = &f->procs[slot];
	for (i = 0; i < USMC_UX_READ; i++)
		if (LOAD_RELAXED(&p->ux_read[i]) == ino)
			return;
	/* Our own slot: threads of this process may announce at once. */
	k = atomic_fetch_add_explicit(&p->ux_next, 1, memory_order_relaxed) % USMC_UX_READ;
	/* Pairs with the acquire load in announced(). */
	STORE_RELEASE(&p->ux_read[k], ino);
}

void usmc_scm_taint(uint64_t ino)
{
	struct usmc_stats_file *f;
	uint32_t k;
	int slot, i;

	if (!ino || usmc_stats_attach())
		return;
	f = usmc_stats_self(&slot);
	if (!f)
		return;
	for (i = 0; i < USMC_UX_TAINT; i++)
		if (LOAD_RELAXED(&f->ux_taint[i]) == ino)
			return;
	k = atomic_fetch_add_explicit(&f->ux_taint_next, 1, memory_order_relaxed) % USMC_UX_TAINT;
	/* Seq-cst: before the message or the exec that gives the socket
	 * away; a sender's later check (acquire) sees it. */
	atomic_store(&f->ux_taint[k], ino);
}

void usmc_scm_taint_fd(int fd)
{
	uint64_t ino;

	if (usmc_scm_unix_ino(fd, &ino)) {
		usmc_scm_taint(ino);
		usmc_scm_taint(listener_vfs(fd, ino));
	}
}

/*
 * fn(fd) for every descriptor that survives an exec (no FD_CLOEXEC).  The
 * descriptors are listed from /proc/self/fd (one getdents64 per 64
 * entries), not probed one by one up to RLIMIT_NOFILE.
 */
static void each_inheritable(void (*fn)(int fd))
{
	long buf[512];
	long n;
	int dir = (int)usmc_sys6(SYS_openat, AT_FDCWD, (long)"/proc/self/fd",
				 O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, 0, 0);

	if (dir < 0)
		return;
	for (;;) {
		memset(buf, 0, sizeof(buf));	/* as above: filled by a raw call */
		n = usmc_sys(SYS_getdents64, dir, (long)buf, sizeof(buf));
		if (n <= 0)
			break;
		long off = 0;

		while (off < n) {
			/* struct linux_dirent64: ino, off, reclen, type, name */
			const char *d = (const char *)buf + off;
			unsigned short reclen;
			const char *name = d + 19;
			int fd = 0, fl;

			memcpy(&reclen, d + 16, sizeof(reclen));
			if (!reclen)
				break;
			off += reclen;
			if (*name < '0' || *name > '9')
				continue;
			for (; *name >= '0' && *name <= '9'; name++)
				fd = fd * 10 + (*name - '0');
			if (fd == dir)
				continue;
			fl = sys_fcntl(fd, F_GETFD, 0);
			if (fl >= 0 && !(fl & FD_CLOEXEC))
				fn(fd);
		}
	}
	sys_close(dir);
}

/* Every UNIX socket that survives an exec: the new program, or a
 * posix_spawn child, runs without libusmc and may read it. */
void usmc_scm_taint_inherited(void)
{
	each_inheritable(usmc_scm_taint_fd);
}

static void announce_fd(int fd)
{
	uint64_t ino;

	if (usmc_scm_unix_ino(fd, &ino)) {
		usmc_scm_announce(ino);
		usmc_scm_announce(listener_vfs(fd, ino));
	}
}

int usmc_scm_listen(int fd, int backlog)
{
	uint64_t ino;
	int rc = real.listen(fd, backlog);

	if (!rc && usmc_scm_unix_ino(fd, &ino))
		usmc_scm_announce(listener_vfs(fd, ino));
	return rc;
}

/*
 * An image that a usmc image exec'ed with libusmc (exec.c) reads the UNIX
 * sockets it inherited with libusmc, as that image did: announced before
 * the program runs, so a sender's first message may carry tickets (node's
 * cluster worker: the reply to its first request is the listening
 * socket, before it ever read its channel).  A program without libusmc
 * that shares them was given them by an exec or spawn that tainted them.
 */
void usmc_scm_announce_inherited(void)
{
	each_inheritable(announce_fd);
}

/*
 * What sock_diag says of UNIX socket ino: the inode of the socket at its
 * other end (*peer, if asked: 0 none, or sock_diag refused) and the
 * identity of the file it is bound to, or was accepted through (*vfs, if
 * asked: vfs_id(), 0 none).
 */
static void unix_diag(uint64_t ino, uint64_t *peer, uint64_t *vfs)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req r;
	} req = {
		.nlh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = (uint32_t)ino,
		       .udiag_show = (peer ? UDIAG_SHOW_PEER : 0u) | (vfs ? UDIAG_SHOW_VFS : 0u),
		       .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } },
	};
	long buf[256];
	struct nlmsghdr *h;
	long n;
	int nl;

	if (peer)
		*peer = 0;
	if (vfs)
		*vfs = 0;
	if (ino > UINT32_MAX)
		return;
	nl = (int)usmc_sys(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return;
	if (usmc_sys6(SYS_sendto, nl, (long)&req, sizeof(req), MSG_NOSIGNAL, 0, 0) != (long)sizeof(req))
		goto out;
	/* The kernel writes what it returns; the analyser cannot see a raw
	 * system call do so. */
	memset(buf, 0, sizeof(buf));
	n = usmc_sys6(SYS_recvfrom, nl, (long)buf, sizeof(buf), 0, 0, 0);
	for (h = (struct nlmsghdr *)buf; n > 0 && NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
		const struct unix_diag_msg *m = NLMSG_DATA(h);
		struct rtattr *a;
		int alen;

		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)) ||
		    m->udiag_ino != (uint32_t)ino)
			break;
		alen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
		for (a = (struct rtattr *)(m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
			if (peer && a->rta_type == UNIX_DIAG_PEER &&
			    RTA_PAYLOAD(a) >= (int)sizeof(uint32_t))
				*peer = *(const uint32_t *)RTA_DATA(a);
			if (vfs && a->rta_type == UNIX_DIAG_VFS &&
			    RTA_PAYLOAD(a) >= (int)sizeof(struct unix_diag_vfs))
				*vfs = vfs_id(RTA_DATA(a));
		}
		break;
	}
out:
	sys_close(nl);
}

static bool tainted(const struct usmc_stats_file *f, uint64_t ino)
{
	int i;

	for (i = 0; i < USMC_UX_TAINT; i++)
		if (atomic_load((_Atomic uint64_t *)&f->ux_taint[i]) == ino)
			return true;
	return false;
}

/* Does a live process (its slot's lock held; ours is, though our own
 * OFD lock never shows as a conflict to us) announce ino? */
static bool announced(struct usmc_stats_file *f, int self, uint64_t ino)
{
	int i, j, fd = usmc_stats_fd();

	for (i = 0; i < USMC_STATS_PROCS; i++) {
		struct usmc_stats_proc *p = &f->procs[i];

		if (LOAD_ACQUIRE(&p->state) != 1)
			continue;
		for (j = 0; j < USMC_UX_READ; j++)
			if (LOAD_ACQUIRE(&p->ux_read[j]) == ino)
				break;
		if (j < USMC_UX_READ && (i == self || usmc_lock_held(fd, USMC_STATS_LOCK_BASE + i)))
			return true;
	}
	return false;
}

/*
 * Connected to a listener, not accepted yet: the other end has no inode
 * (the kernel gives it one at accept).  If the file we connected to (its
 * name as getpeername() says it, looked up here: a hint only, a relative
 * name may lead elsewhere) is a listener usmc processes announced, wait
 * up to ADOPT_ACCEPT_MS for the accept: Dovecot's master starts the imap
 * process that accepts once the login process connected.  The inode of
 * the accepted end, 0 if none came.
 */
#define ADOPT_ACCEPT_MS	200

static uint64_t accepted_peer(int fd, uint64_t ino, struct usmc_stats_file *f, int slot)
{
	struct sockaddr_un a;
	socklen_t alen = sizeof(a);
	struct unix_diag_vfs v;
	struct stat st;
	uint64_t peer = 0;
	int ms;

	memset(&a, 0, sizeof(a));
	if (usmc_sys(SYS_getpeername, fd, (long)&a, (long)&alen) ||
	    alen <= offsetof(struct sockaddr_un, sun_path) + 1 || !a.sun_path[0] ||
	    alen >= sizeof(a))
		return 0;
	memset(&st, 0, sizeof(st));	/* filled by a raw call */
	if (usmc_sys6(SYS_newfstatat, AT_FDCWD, (long)a.sun_path, (long)&st, 0, 0, 0) ||
	    !S_ISSOCK(st.st_mode))
		return 0;
	/* The kernel's dev_t, as UNIX_DIAG_VFS reports it. */
	v.udiag_vfs_dev = (uint32_t)(major(st.st_dev) << 20 | minor(st.st_dev));
	v.udiag_vfs_ino = (uint32_t)st.st_ino;
	if (tainted(f, vfs_id(&v)) || !announced(f, slot, vfs_id(&v)))
		return 0;
	for (ms = 0; ms < ADOPT_ACCEPT_MS && !peer; ms++) {
		usleep(1000);
		unix_diag(ino, &peer, NULL);
	}
	return peer;
}

bool usmc_scm_peer_adopts(int fd)
{
	struct usmc_stats_file *f;
	uint64_t ino, peer, vfs;
	int slot;

	if (usmc_stats_attach() || !(f = usmc_stats_self(&slot)) || !usmc_scm_unix_ino(fd, &ino))
		return false;
	unix_diag(ino, &peer, NULL);
	if (!peer)
		peer = accepted_peer(fd, ino, f, slot);
	if (!peer || tainted(f, peer))
		return false;
	if (announced(f, slot, peer))
		return true;
	/* Not read yet: accepted from a listener only usmc processes hold? */
	unix_diag(peer, NULL, &vfs);
	return vfs && !tainted(f, vfs) && announced(f, slot, vfs);
}
