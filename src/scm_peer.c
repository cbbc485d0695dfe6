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
 *  - a UNIX listener is announced by every usmc process that listens on
 *    it (and, as any socket, by one that inherits it from a usmc image),
 *    and tainted as any socket: while none is tainted, whoever accepts
 *    from it runs libusmc.
 *
 * The sender asks the kernel for the inode of its socket's peer (sock_diag,
 * UNIX_DIAG_PEER) and adds its descriptors only if a live process
 * announced that inode and nobody tainted it, or else if the listener the
 * peer came from is announced and untainted: found among the listening
 * sockets by the client inodes in its queue (UNIX_DIAG_ICONS; a peer not
 * accepted yet has no inode of its own), or by the file it was accepted
 * through (UNIX_DIAG_VFS, which a live listener holds alone).  Dovecot's
 * imap-login hands each client to an imap process the master starts for
 * it once the login process connected: nobody accepted, nobody read.  Otherwise the sockets move to
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
#include "nl.h"
#include "real.h"
#include "rundir.h"
#include "sandbox.h"
#include "scm_peer.h"
#include "stats.h"
#include "sys.h"

#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/syscall.h>
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

	if (usmc_scm_unix_ino(fd, &ino))
		usmc_scm_taint(ino);
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

	if (usmc_scm_unix_ino(fd, &ino))
		usmc_scm_announce(ino);
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
 * other end (*peer: 0 none, or sock_diag refused) and, if asked, the file
 * it is bound to or was accepted through (*vfs; false if none).
 */
static bool unix_diag(uint64_t ino, uint64_t *peer, struct unix_diag_vfs *vfs)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req r;
	} req = {
		.nlh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = (uint32_t)ino,
		       .udiag_show = UDIAG_SHOW_PEER | (vfs ? UDIAG_SHOW_VFS : 0u),
		       .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } },
	};
	char buf[USMC_NL_BUF] __attribute__((aligned(8)));
	const struct unix_diag_msg *m;
	const struct rtattr *a;
	struct nlmsghdr *h;
	bool have_vfs = false;
	long alen;
	int nl;

	*peer = 0;
	if (ino > UINT32_MAX)
		return false;
	nl = usmc_nl_open(NETLINK_SOCK_DIAG);
	if (nl < 0)
		return false;
	if (usmc_nl_ask(nl, &req.nlh, buf, sizeof(buf), &h) || h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
	    h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)) || (m = NLMSG_DATA(h))->udiag_ino != (uint32_t)ino)
		goto out;
	alen = (long)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
	a = usmc_nl_attr((const struct rtattr *)(m + 1), alen, UNIX_DIAG_PEER);
	if (a && RTA_PAYLOAD(a) >= (int)sizeof(uint32_t))
		*peer = *(const uint32_t *)RTA_DATA(a);
	a = vfs ? usmc_nl_attr((const struct rtattr *)(m + 1), alen, UNIX_DIAG_VFS) : NULL;
	if (a && RTA_PAYLOAD(a) >= (int)sizeof(*vfs)) {
		memcpy(vfs, RTA_DATA(a), sizeof(*vfs));
		have_vfs = true;
	}
out:
	usmc_nl_close(nl);
	return have_vfs;
}

/* What listener_of looks for, and what it found. */
struct listener_find {
	uint64_t ino;				/* a client in the queue, or 0 */
	const struct unix_diag_vfs *vfs;	/* the listener's file, or NULL */
	uint64_t found;
};

/* Does listener message h queue client ino, or hold the file *vfs? */
static void listener_match(const struct nlmsghdr *h, void *arg)
{
	const struct unix_diag_msg *m = NLMSG_DATA(h);
	struct listener_find *q = arg;
	const struct rtattr *a;
	long alen;

	if (q->found || h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
	    h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return;
	alen = (long)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
	for (a = (const struct rtattr *)(m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
		if (q->ino && a->rta_type == UNIX_DIAG_ICONS) {
			const uint32_t *c = RTA_DATA(a);
			size_t i, nc = RTA_PAYLOAD(a) / sizeof(uint32_t);

			for (i = 0; i < nc; i++)
				if (c[i] == (uint32_t)q->ino)
					q->found = m->udiag_ino;
		}
		if (q->vfs && a->rta_type == UNIX_DIAG_VFS && RTA_PAYLOAD(a) >= (int)sizeof(*q->vfs) &&
		    !memcmp(RTA_DATA(a), q->vfs, sizeof(*q->vfs)))
			q->found = m->udiag_ino;
	}
}

/*
 * The inode of the UNIX listener in our namespace whose accept queue holds
 * client socket ino (ino != 0), or that holds file *vfs (its accepted
 * sockets carry it): one dump of the listening sockets.  0 if none.
 */
static uint64_t bound_of(uint32_t states, uint64_t ino, const struct unix_diag_vfs *vfs)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req r;
	} req = {
		.nlh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = states,
		       .udiag_show = UDIAG_SHOW_ICONS | UDIAG_SHOW_VFS,
		       .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } },
	};
	struct listener_find q = { ino, vfs, 0 };
	int nl = usmc_nl_open(NETLINK_SOCK_DIAG);

	if (nl < 0)
		return 0;
	usmc_nl_dump(nl, &req.nlh, listener_match, &q);
	usmc_nl_close(nl);
	return q.found;
}

static uint64_t listener_of(uint64_t ino, const struct unix_diag_vfs *vfs)
{
	return bound_of(1u << TCP_LISTEN, ino, vfs);
}

static int sock_type(int fd)
{
	socklen_t l = sizeof(int);
	int t = 0;

	if (usmc_sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_TYPE, (long)&t, (long)&l, 0))
		return -1;
	return t;
}

/*
 * The socket bound at the UNIX path a datagram goes to (sendmsg with a
 * msg_name on an unconnected socket, as squid's coordinator writes to its
 * SMP kids), by the identity of the path's file; 0
 * if none, or if the name is abstract or unnamed (not looked up).
 */
static uint64_t receiver_at(const struct msghdr *msg)
{
	const struct sockaddr_un *sun = msg ? msg->msg_name : NULL;
	char path[sizeof(sun->sun_path) + 1];
	struct unix_diag_vfs vfs;
	struct stat st;
	size_t n;

	if (!sun || msg->msg_namelen <= offsetof(struct sockaddr_un, sun_path) ||
	    msg->msg_namelen > sizeof(*sun) || sun->sun_family != AF_UNIX || !sun->sun_path[0])
		return 0;
	n = msg->msg_namelen - offsetof(struct sockaddr_un, sun_path);
	memcpy(path, sun->sun_path, n);
	path[n] = '\0';
	/* The kernel fills it; the analyser cannot see a raw call do so. */
	memset(&st, 0, sizeof(st));
	if (usmc_sys6(SYS_newfstatat, AT_FDCWD, (long)path, (long)&st, 0, 0, 0) ||
	    !S_ISSOCK(st.st_mode))
		return 0;
	/* sock_diag gives the kernel's own device number (MKDEV: 12 bits of
	 * major above 20 of minor), stat the exported encoding. */
	vfs.udiag_vfs_ino = (uint32_t)st.st_ino;
	vfs.udiag_vfs_dev = (uint32_t)((major(st.st_dev) << 20) | minor(st.st_dev));
	if (vfs.udiag_vfs_ino != st.st_ino || major(st.st_dev) >= (1u << 12) ||
	    minor(st.st_dev) >= (1u << 20))
		return 0;
	return bound_of(~0u & ~(1u << TCP_LISTEN), 0, &vfs);
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
 * A peer not accepted yet is decided once accepted, when the acceptor's
 * image is fixed: a child that execs a program without libusmc taints the
 * listener before that program can accept (Dovecot's master starts the
 * imap process that accepts once the login process connected).  The
 * sender waits for the accept up to ADOPT_ACCEPT_MS, then sends the
 * connection on TCP (handed_over): 200 ms was too short for the master to
 * start the first imap process on a loaded machine (the full suite:
 * test_dovecot_default_limits, once).
 */
#define ADOPT_ACCEPT_MS	1000

bool usmc_scm_peer_adopts(int fd, const struct msghdr *msg, bool wait)
{
	struct usmc_stats_file *f;
	struct unix_diag_vfs vfs;
	uint64_t ino, peer, lst;
	int slot, ms;

	if (usmc_stats_attach() || !(f = usmc_stats_self(&slot)) || !usmc_scm_unix_ino(fd, &ino))
		return false;
	/* A datagram to a name goes to the socket bound there, whatever fd's
	 * own peer (a connected datagram socket may still name another); a
	 * stream socket refuses a name, a seqpacket one ignores it. */
	if (msg && msg->msg_name && msg->msg_namelen && sock_type(fd) == SOCK_DGRAM) {
		peer = receiver_at(msg);
		return peer && !tainted(f, peer) && announced(f, slot, peer);
	}
	if (unix_diag(ino, &peer, NULL), peer) {
		if (tainted(f, peer))
			return false;
		if (announced(f, slot, peer))
			return true;
		/* Accepted, never read from: through which listener? */
		lst = unix_diag(peer, &(uint64_t){ 0 }, &vfs) ? listener_of(0, &vfs) : 0;
		return lst && !tainted(f, lst) && announced(f, slot, lst);
	}
	/* Connected to a listener, not accepted yet (no inode of its own). */
	lst = listener_of(ino, NULL);
	if (!wait || !lst || tainted(f, lst) || !announced(f, slot, lst))
		return false;
	for (ms = 0; ms < ADOPT_ACCEPT_MS && !peer; ms++) {
		usleep(1000);
		unix_diag(ino, &peer, NULL);
	}
	return peer && !tainted(f, peer) && !tainted(f, lst) && announced(f, slot, lst);
}

int usmc_scm_listen(int fd, int backlog)
{
	uint64_t ino;
	int rc = real.listen(fd, backlog);

	if (!rc && !usmc_sandboxed() && usmc_scm_unix_ino(fd, &ino))
		usmc_scm_announce(ino);
	return rc;
}
