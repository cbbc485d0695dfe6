// SPDX-License-Identifier: MIT
/*
 * scm_recv.c - receiving descriptors on a UNIX socket (recvmsg, recvmmsg).
 *
 * A program that reads a UNIX socket with a control buffer may be handed
 * accelerated sockets by a usmc sender, with a ticket and the descriptors
 * needed to adopt them behind its own (scm.h).  So such a receive:
 *
 *  - announces that this process reads the socket with libusmc
 *    (scm_peer.c), before it reads: senders may add a ticket from now on;
 *  - reads into a control buffer of our own, larger than the program's by
 *    room for a full SCM_RIGHTS list, so that the kernel never truncates
 *    what a sender added;
 *  - takes the ticket and the extras out, adopts the sockets it names
 *    (adopt.c) and closes the extras it does not keep;
 *  - writes the control data into the program's buffer exactly as the
 *    kernel would have with the program's size (net/core/scm.c put_cmsg()
 *    and scm_detach_fds()): cmsgs in the kernel's order, a cmsg cut to
 *    the room left, SCM_RIGHTS with as many descriptors as fit (the rest
 *    closed, never seen), MSG_CTRUNC where the kernel sets it,
 *    msg_controllen the bytes used.
 *
 * Nothing in a ticket is trusted: indices are checked against the
 * message, family regions must be sealed memfds (family.c), and adopt.c
 * checks each socket against the kernel and the link group.  A ticket that
 * does not add up is removed with its extras and adopts nothing; a socket
 * it says is on shared memory is then reset (nobody here could read it),
 * the fate of a socket whose message never arrived.
 */
#include "adopt.h"
#include "fdtab.h"
#include "handover.h"
#include "log.h"
#include "real.h"
#include "sandbox.h"
#include "scm.h"
#include "scm_peer.h"
#include "sock.h"
#include "sys.h"

#include <netinet/in.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>

/* What we ask for beyond the program's control buffer. */
#define SCM_ROOM	CMSG_SPACE(USMC_SCM_MAX_FD * sizeof(int))
/* A ticket's largest size. */
#define TICKET_MAX	(sizeof(struct usmc_ticket) + USMC_SCM_MAX_FD * sizeof(struct usmc_ticket_rec))

struct scm_in {
	struct msghdr msg;	/* what we receive into */
	long stack[(2048 + SCM_ROOM) / sizeof(long)];
	void *control;		/* stack, or malloc'ed when the program's is large */
};

static bool in_prepare(struct scm_in *in, const struct msghdr *prog)
{
	size_t len = prog->msg_controllen + SCM_ROOM;

	in->msg = *prog;
	in->control = len <= sizeof(in->stack) ? in->stack : malloc(len);
	if (!in->control)
		return false;
	memset(in->control, 0, len);
	in->msg.msg_control = in->control;
	in->msg.msg_controllen = len;
	return true;
}

static void in_free(struct scm_in *in)
{
	if (in->control != in->stack)
		free(in->control);
}

/* A descriptor the program never sees: forget whatever we made of it. */
static void drop_fd(int fd)
{
	struct usmc_sock *sk = usmc_fd_remove(fd);

	if (sk)
		usmc_sock_put_closing(sk, fd);
	sys_close(fd);
}

/* A duplicate of an extra for us to keep, out of the program's numbers. */
static int keep_dup(int fd)
{
	int d = usmc_ifd_dup(fd);

	if (d < 0)
		return -1;
	usmc_ifd_unmark(d);	/* marked again by whoever keeps it */
	return d;
}

/* Is fds[pos] a ticket for a message of n descriptors?  Read into t. */
static bool read_ticket(int fd, uint32_t pos, uint32_t n, struct usmc_ticket *t)
{
	struct stat st;
	ssize_t r;

	memset(&st, 0, sizeof(st));	/* filled by a raw call the analyser cannot see */
	if (usmc_sys(SYS_fstat, fd, (long)&st, 0) || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size < sizeof(*t) || (size_t)st.st_size > TICKET_MAX)
		return false;
	r = (ssize_t)usmc_sys6(SYS_pread64, fd, (long)t, (long)st.st_size, 0, 0, 0);
	/* Fewer extras than it names: the kernel ran out of descriptors
	 * for us (it installs in order); still ours to take out. */
	return r == (ssize_t)st.st_size && t->magic == USMC_TICKET_MAGIC &&
	       t->version == USMC_PROTO_VERSION && t->nprog == pos &&
	       t->nrec <= pos && (size_t)r >= sizeof(*t) + t->nrec * sizeof(t->rec[0]) &&
	       t->nextra >= n - pos - 1 && t->nextra < USMC_SCM_MAX_FD;
}

/*
 * Position of the ticket among fds[0..n), n if none: it is behind the
 * program's descriptors, followed by regular files only (scm.h).
 */
static uint32_t find_ticket(const int *fds, uint32_t n, struct usmc_ticket *t)
{
	uint32_t i;

	for (i = n; i-- > 0; ) {
		struct stat st;

		memset(&st, 0, sizeof(st));
		if (usmc_sys(SYS_fstat, fds[i], (long)&st, 0) || !S_ISREG(st.st_mode))
			return n;
		if (read_ticket(fds[i], i, n, t))
			return i;
	}
	return n;
}

/* A socket the ticket says is on shared memory, not adopted: reset it. */
static void reset_unadopted(int fd, const struct usmc_ticket_rec *r)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (sk) {
		usmc_sock_put(sk);
		return;		/* adopted */
	}
	if (r->kind != SK_CONN || (r->mode != USMC_MODE_SMCD && r->mode != USMC_MODE_PROPOSED))
		return;
	usmc_log_write("received fd %d: its shared memory cannot be reached: reset", fd);
	real.connect(fd, &sa, sizeof(sa));
}

static void adopt_rec(const struct usmc_ticket_rec *r, const int *fds, const int *extra,
		      const int *region, uint32_t nextra, bool peek)
{
	struct usmc_adopt a = { .received = true, .peek = peek, .owner_fd = -1, .ln_fd = -1 };

	if (r->fam >= nextra || region[r->fam] < 0 || r->sh >= USMC_FAMILY_OBJS ||
	    (r->aux != USMC_TICKET_NONE && r->aux >= nextra))
		return;
	a.fd = fds[r->pos];
	a.sh = usmc_family_at(region[r->fam] * USMC_FAMILY_OBJS + (int)r->sh);
	a.role = r->role;
	a.mode = r->mode;
	a.lgr_id = r->lgr_id;
	a.slot = r->slot;
	a.gen = r->gen;
	a.ln_id = r->ln_id;
	a.reg_idx = r->reg_idx;
	a.local = r->local;
	a.peer = r->peer;
	if (r->kind == SK_CONN) {
		if (r->aux != USMC_TICKET_NONE)
			a.owner_fd = keep_dup(extra[r->aux]);
		usmc_adopt_conn(&a);
	} else if (r->kind == SK_TCP) {
		usmc_adopt_bound(&a);
	} else if (r->kind == SK_LISTEN && r->aux != USMC_TICKET_NONE) {
		a.ln_fd = keep_dup(extra[r->aux]);
		if (a.ln_fd >= 0)
			usmc_adopt_listener(&a);
	}
}

/* The sockets the ticket names become ours; the extras go. */
static void take_ticket(const struct usmc_ticket *t, const int *fds, uint32_t n, bool peek)
{
	const int *extra = fds + t->nprog + 1;
	uint32_t i, k, have = n - t->nprog - 1;
	int region[USMC_SCM_MAX_FD];

	for (i = 0; i < t->nextra; i++)
		region[i] = -2;		/* not named as a family, or not here */
	for (k = 0; k < t->nrec && have == t->nextra; k++)
		if (t->rec[k].fam < t->nextra)
			region[t->rec[k].fam] = -1;
	for (i = 0; i < t->nextra; i++) {
		bool known;
		int d;

		if (region[i] != -1)
			continue;
		/* A sealed memfd of a family's size (ours: region 0). */
		d = keep_dup(extra[i]);
		region[i] = d < 0 ? -1 : usmc_family_foreign(d, &known);
		if (d >= 0 && (known || region[i] < 0))
			sys_close(d);
	}
	for (k = 0; k < t->nrec && have == t->nextra; k++)
		if (t->rec[k].pos < t->nprog)
			adopt_rec(&t->rec[k], fds, extra, region, t->nextra, peek);
	for (k = 0; k < t->nrec && !peek; k++)
		if (t->rec[k].pos < t->nprog)
			reset_unadopted(fds[t->rec[k].pos], &t->rec[k]);
	for (i = t->nprog; i < n; i++)
		sys_close(fds[i]);
}

/*
 * The kernel's put_cmsg() into the program's buffer: a cmsg cut to the
 * room left (MSG_CTRUNC), the cursor moved by its aligned size or what is
 * left.  Returns the bytes of data that made it.
 */
struct scm_out_buf {
	char *p;
	size_t room;
	int flags;
};

static size_t put_cmsg(struct scm_out_buf *o, int level, int type, const void *data, size_t len)
{
	struct cmsghdr h;
	size_t cmlen = CMSG_LEN(len), adv;

	if (o->room < sizeof(h)) {
		o->flags |= MSG_CTRUNC;
		return 0;
	}
	if (o->room < cmlen) {
		o->flags |= MSG_CTRUNC;
		cmlen = o->room;
	}
	h.cmsg_len = cmlen;
	h.cmsg_level = level;
	h.cmsg_type = type;
	memcpy(o->p, &h, sizeof(h));
	memcpy(o->p + CMSG_LEN(0), data, cmlen - CMSG_LEN(0));
	adv = MIN(CMSG_SPACE(len), o->room);
	o->p += adv;
	o->room -= adv;
	return cmlen - CMSG_LEN(0);
}

/* The kernel's scm_detach_fds(): as many as fit, the rest never
 * installed (we close them), MSG_CTRUNC if any was left out. */
static void put_fds(struct scm_out_buf *o, const int *fds, uint32_t n)
{
	uint32_t fit = o->room <= sizeof(struct cmsghdr) ? 0 :
		       (uint32_t)((o->room - sizeof(struct cmsghdr)) / sizeof(int));
	uint32_t i = MIN(fit, n), k;

	if (i) {
		struct cmsghdr h = { .cmsg_len = CMSG_LEN(i * sizeof(int)), .cmsg_level = SOL_SOCKET,
				     .cmsg_type = SCM_RIGHTS };
		size_t adv = MIN(CMSG_SPACE(i * sizeof(int)), o->room);

		memcpy(o->p, &h, sizeof(h));
		memcpy(o->p + CMSG_LEN(0), fds, i * sizeof(int));
		o->p += adv;
		o->room -= adv;
	}
	if (i < n)
		o->flags |= MSG_CTRUNC;
	for (k = i; k < n; k++)
		drop_fd(fds[k]);
}

#ifndef SCM_PIDFD
#define SCM_PIDFD	0x04
#endif

/*
 * After a receive into in: take our part out of the descriptors, adopt,
 * and give the program what the kernel would have given it.
 */
static void in_finish(struct scm_in *in, struct msghdr *prog, int flags)
{
	struct scm_out_buf o = { prog->msg_control, prog->msg_controllen, in->msg.msg_flags };
	struct usmc_ticket *t = NULL;
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(&in->msg); c; c = CMSG_NXTHDR(&in->msg, c)) {
		size_t len = c->cmsg_len >= CMSG_LEN(0) ? c->cmsg_len - CMSG_LEN(0) : 0;

		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			uint32_t n = (uint32_t)(len / sizeof(int)), pos;
			int fds[USMC_SCM_MAX_FD + 1];

			n = MIN(n, (uint32_t)USMC_SCM_MAX_FD + 1);
			memcpy(fds, CMSG_DATA(c), n * sizeof(int));
			if (!t)
				t = malloc(TICKET_MAX);
			pos = t ? find_ticket(fds, n, t) : n;
			if (pos < n)
				take_ticket(t, fds, n, flags & MSG_PEEK);
			put_fds(&o, fds, pos);
			continue;
		}
		if (put_cmsg(&o, c->cmsg_level, c->cmsg_type, CMSG_DATA(c), len) < sizeof(int) &&
		    c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_PIDFD && len >= sizeof(int)) {
			int pidfd;

			memcpy(&pidfd, CMSG_DATA(c), sizeof(pidfd));
			sys_close(pidfd);	/* the kernel would not have installed it */
		}
	}
	free(t);
	prog->msg_namelen = in->msg.msg_namelen;
	prog->msg_controllen = prog->msg_controllen - o.room;
	prog->msg_flags = o.flags;
}

/* Can this receive carry descriptors to us?  Announces the socket. */
static bool scm_wanted(int fd, const struct msghdr *msg)
{
	uint64_t ino;

	if (!msg || !msg->msg_control || !msg->msg_controllen || usmc_sandboxed() ||
	    !usmc_scm_unix_ino(fd, &ino))
		return false;
	usmc_scm_announce(ino);
	return true;
}

ssize_t usmc_scm_recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct scm_in *in;
	ssize_t r;
	int saved;

	if (!scm_wanted(fd, msg) || !(in = malloc(sizeof(*in))))
		return usmc_handover_recv(real.recvmsg(fd, msg, flags), msg);
	if (!in_prepare(in, msg)) {
		free(in);
		return usmc_handover_recv(real.recvmsg(fd, msg, flags), msg);
	}
	r = real.recvmsg(fd, &in->msg, flags);
	saved = errno;
	if (r >= 0) {
		in_finish(in, msg, flags);
		usmc_handover_recv(r, msg);
	}
	in_free(in);
	free(in);
	errno = saved;
	return r;
}

int usmc_scm_recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *t)
{
	struct mmsghdr *w = NULL;
	struct scm_in *in = NULL;
	unsigned int i, k = 0;
	int r, saved;

	n = MIN(n, (unsigned int)IOV_MAX);
	for (i = 0; v && i < n && !k; i++)
		k = scm_wanted(fd, &v[i].msg_hdr);
	if (!k || !(w = calloc(n, sizeof(*w))) || !(in = calloc(n, sizeof(*in)))) {
		free(w);
		return usmc_handover_recvmm(real.recvmmsg(fd, v, n, flags, t), v);
	}
	for (i = 0; i < n; i++) {
		if (v[i].msg_hdr.msg_control && v[i].msg_hdr.msg_controllen &&
		    in_prepare(&in[i], &v[i].msg_hdr)) {
			w[i].msg_hdr = in[i].msg;
		} else {
			in[i].control = NULL;
			w[i].msg_hdr = v[i].msg_hdr;
		}
	}
	r = real.recvmmsg(fd, w, n, flags, t);
	saved = errno;
	for (i = 0; i < n; i++) {
		if (r > 0 && i < (unsigned int)r) {
			v[i].msg_len = w[i].msg_len;
			if (in[i].control) {
				in[i].msg = w[i].msg_hdr;
				in_finish(&in[i], &v[i].msg_hdr, flags);
			} else {
				v[i].msg_hdr.msg_namelen = w[i].msg_hdr.msg_namelen;
				v[i].msg_hdr.msg_controllen = w[i].msg_hdr.msg_controllen;
				v[i].msg_hdr.msg_flags = w[i].msg_hdr.msg_flags;
			}
			usmc_handover_recv(0, &v[i].msg_hdr);
		}
		if (in[i].control)
			in_free(&in[i]);
	}
	free(w);
	free(in);
	errno = saved;
	return r;
}
