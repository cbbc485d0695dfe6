// SPDX-License-Identifier: MIT
/*
 * scm_send.c - sending accelerated sockets to a process that adopts them.
 *
 * A message that carries tracked sockets (SCM_RIGHTS) on a UNIX socket
 * whose reader runs libusmc (scm_peer.c) goes out with a ticket and the
 * descriptors the reader needs to adopt them (scm.h): the sockets stay as
 * they are, on shared memory, in the receiver as in our copy (one socket
 * for both, as TCP would have it).  Otherwise, and whenever the ticket
 * cannot be made (no memfd, too many descriptors), handover.c moves them
 * to TCP first, as before.
 *
 * Before the message leaves, for each socket:
 *  - what cannot travel half-done is settled, as for exec (exec.c): an
 *    undecided server connection is decided, a migration is pumped;
 *  - its locks become the mutex for good (usmc_family_inherited): another
 *    process is about to use them, so "one thread, no fork since" no
 *    longer makes a flag enough;
 *  - its shared count gains the descriptor in flight (sh->refs), so that
 *    our close right after sendmsg is not the socket's last; the receiver
 *    takes that count over (adopt.c).  A send that fails gives it back.
 *    A message never received (its receiver died first) keeps the count:
 *    the kernel closes the TCP socket with the message, the peer sees its
 *    FIN or RST as after a crash, and our shared half and the slot stay
 *    until this process family ends (docs/design.md, Limits).
 */
#include "accept.h"
#include "fdtab.h"
#include "handover.h"
#include "lgr.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "sandbox.h"
#include "scm.h"
#include "scm_peer.h"
#include "sock.h"
#include "sys.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>

struct scm_out {
	struct usmc_sock *sk[USMC_SCM_MAX_FD];	/* referenced; NULL: not ours */
	int fds[USMC_SCM_MAX_FD];		/* the program's, flattened */
	int nfds;
	int extra[USMC_SCM_MAX_FD];		/* descriptors the ticket names */
	int nextra;
	int nsock;
	int ticket;				/* its memfd, -1 none */
	struct msghdr msg;			/* what goes out */
	void *control;				/* ... its control buffer (malloc) */
	bool counted;				/* refs raised */
};

static void out_init(struct scm_out *o)
{
	o->nfds = o->nextra = o->nsock = 0;
	o->ticket = -1;
	o->control = NULL;
	o->counted = false;
}

/*
 * Can sk travel with a ticket?  A connection; a published listener (its
 * index goes along); a socket bound but not connected, which the receiver
 * may listen on as we may (node's cluster with schedulingPolicy = none:
 * the index is made by the first holder that listens, listener.c).
 */
static bool ticketable(struct usmc_sock *sk, int fd)
{
	struct sockaddr_storage ss;
	struct usmc_addr a;
	socklen_t l = sizeof(ss);
	int saved = errno;
	bool ok;

	if (sk->kind == SK_CONN) {
		/* Sender and receiver share it, and the receiver attaches its
		 * link group afresh (as after exec): its device must allow it. */
		usmc_conn_unshare(sk, fd, USMC_DEV_F_FORK | USMC_DEV_F_EXEC);
		return true;
	}
	if (sk->kind == SK_LISTEN)
		return sk->lst != NULL;
	if (sk->kind != SK_TCP || getsockname(fd, (struct sockaddr *)&ss, &l) ||
	    usmc_addr_from_sa(&a, (struct sockaddr *)&ss, l) || !a.port)
		return false;
	l = sizeof(ss);
	ok = getpeername(fd, (struct sockaddr *)&ss, &l) && errno == ENOTCONN;
	errno = saved;
	return ok;
}

/* The program's descriptors, and which of them are our sockets.  false:
 * more than a message can carry (the kernel will refuse it anyway). */
static bool out_collect(struct scm_out *o, const struct msghdr *msg)
{
	struct msghdr *m = (struct msghdr *)msg;	/* CMSG_NXTHDR's prototype */
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		size_t i, n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			struct usmc_sock *sk;
			int fd;

			if (o->nfds == USMC_SCM_MAX_FD)
				return false;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			sk = usmc_fd_get(fd);
			if (sk && (LOAD_RELAXED(&sk->sh->in_use) == USMC_SH_PRIVATE ||
				   !ticketable(sk, fd))) {
				/* Never published where it goes (listener.c). */
				if (sk->kind == SK_LISTEN)
					usmc_handover_listener(sk);
				else if (sk->kind == SK_TCP)
					usmc_handover_bound(sk, fd);
				usmc_sock_put(sk);
				sk = NULL;
			}
			if (!sk)
				usmc_scm_taint_fd(fd);	/* a UNIX socket: its next reader is unknown */
			o->nsock += sk != NULL;
			o->sk[o->nfds] = sk;
			o->fds[o->nfds++] = fd;
		}
	}
	return true;
}

static void out_release(struct scm_out *o)
{
	int i;

	for (i = 0; i < o->nfds; i++)
		if (o->sk[i])
			usmc_sock_put(o->sk[i]);
	if (o->ticket >= 0)
		sys_close(o->ticket);
	free(o->control);
	out_init(o);
}

/* Index of fd among the extras, added if new; NONE when full. */
static uint32_t extra_of(struct scm_out *o, int fd)
{
	int i;

	for (i = 0; i < o->nextra; i++)
		if (o->extra[i] == fd)
			return (uint32_t)i;
	if (o->nfds + 1 + o->nextra >= USMC_SCM_MAX_FD)
		return USMC_TICKET_NONE;
	o->extra[o->nextra] = fd;
	return (uint32_t)o->nextra++;
}

/* Settle what cannot travel half-done (as exec.c does), then describe. */
static bool describe(struct scm_out *o, struct usmc_sock *sk, int fd, struct usmc_ticket_rec *r)
{
	int idx = usmc_family_index(sk->sh);

	if (idx < 0)
		return false;
	memset(r, 0, sizeof(*r));
	r->kind = (uint32_t)sk->kind;
	r->fam = extra_of(o, usmc_family_region_fd(idx / USMC_FAMILY_OBJS));
	r->sh = (uint32_t)(idx % USMC_FAMILY_OBJS);
	r->aux = USMC_TICKET_NONE;
	r->reg_idx = -1;
	if (sk->kind == SK_TCP) {
		struct sockaddr_storage ss;
		socklen_t l = sizeof(ss);

		return !getsockname(fd, (struct sockaddr *)&ss, &l) &&
		       !usmc_addr_from_sa(&r->local, (struct sockaddr *)&ss, l) &&
		       r->fam != USMC_TICKET_NONE;
	}
	if (sk->kind == SK_LISTEN) {
		r->aux = extra_of(o, sk->lst->fd);
		r->ln_id = sk->lst->id;
		r->reg_idx = sk->reg_idx;
		r->local = sk->bound;
		return r->fam != USMC_TICKET_NONE && r->aux != USMC_TICKET_NONE;
	}
	if (sk_mode(sk) == USMC_MODE_UNDECIDED)
		usmc_server_resolve(sk, fd, true);
	if (sk_mode(sk) == USMC_MODE_MIGRATING)
		usmc_migrate_pump(sk, fd, true);
	r->mode = sk_mode(sk);
	r->role = sk->role ? sk->role : 'C';
	r->lgr_id = sk->lgr ? sk->lgr->id : 0;
	r->slot = sk->slot;
	r->gen = sk->gen;
	r->ln_id = sk->ln ? sk->ln->id : 0;
	r->local = sk->local;
	r->peer = sk->peer;
	/* The link group's file: the owner's lock must not drop, and a
	 * server end's receiver attaches it by name, or through this copy
	 * once the client is gone (it unpublished the name; its bytes are
	 * still in the ring). */
	if (sk->lgr && usmc_lgr_handle_fd(sk->lgr) >= 0)
		r->aux = extra_of(o, usmc_lgr_handle_fd(sk->lgr));
	return r->fam != USMC_TICKET_NONE && (!(sk->lgr && sk->lgr->owner) || r->aux != USMC_TICKET_NONE);
}

/* The ticket memfd for o's sockets; false: send them the TCP way. */
static bool out_ticket(struct scm_out *o)
{
	size_t len = sizeof(struct usmc_ticket) + (size_t)o->nsock * sizeof(struct usmc_ticket_rec);
	struct usmc_ticket *t = calloc(1, len);
	int i, k = 0;

	if (!t)
		return false;
	for (i = 0; i < o->nfds; i++) {
		if (!o->sk[i])
			continue;
		if (!describe(o, o->sk[i], o->fds[i], &t->rec[k]))
			goto fail;
		t->rec[k++].pos = (uint32_t)i;
	}
	t->magic = USMC_TICKET_MAGIC;
	t->version = USMC_PROTO_VERSION;
	t->nprog = (uint32_t)o->nfds;
	t->nextra = (uint32_t)o->nextra;
	t->nrec = (uint32_t)k;
	o->ticket = usmc_fault(USMC_FAULT_MEMFD) ? -1 : memfd_create("usmc-ticket", MFD_CLOEXEC);
	if (o->ticket < 0 || sys_write(o->ticket, t, len) != (ssize_t)len)
		goto fail;
	free(t);
	return true;
fail:
	free(t);
	return false;
}

/* The message as it goes out: the program's control data, then one
 * SCM_RIGHTS of ticket and extras (the kernel joins all SCM_RIGHTS of a
 * message into one list, in order). */
static bool out_build(struct scm_out *o, const struct msghdr *msg)
{
	size_t n = 1 + (size_t)o->nextra, off = msg->msg_controllen;
	struct cmsghdr *c;

	/* Our cmsg starts where the program's last one ends, aligned. */
	off = CMSG_ALIGN(off);
	o->control = calloc(1, off + CMSG_SPACE(n * sizeof(int)));
	if (!o->control)
		return false;
	memcpy(o->control, msg->msg_control, msg->msg_controllen);
	c = (struct cmsghdr *)((char *)o->control + off);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), &o->ticket, sizeof(int));
	memcpy(CMSG_DATA(c) + sizeof(int), o->extra, (size_t)o->nextra * sizeof(int));
	o->msg = *msg;
	o->msg.msg_control = o->control;
	o->msg.msg_controllen = off + CMSG_SPACE(n * sizeof(int));
	return true;
}

static void out_count(struct scm_out *o, int delta)
{
	int i;

	for (i = 0; i < o->nfds; i++)
		if (o->sk[i]) {
			if (delta > 0)
				usmc_family_inherited(o->sk[i]->sh);
			atomic_fetch_add(&o->sk[i]->sh->refs, delta);
		}
	o->counted = delta > 0;
}

/*
 * The reader announces itself when it first receives (scm_recv.c), which
 * may come just after our send: CPython's resource sharer answers a
 * request with the descriptors, and the requester's recvmsg follows.  When
 * the TCP way would reset a socket (its peer closed with bytes in our
 * ring), the reader gets ADOPT_WAIT_MS to say it adopts; the TCP way
 * otherwise, as before.  Only that case waits.
 */
#define ADOPT_WAIT_MS	200

static bool adopts(struct scm_out *o, int fd, const struct msghdr *msg)
{
	int i, ms;

	if (usmc_scm_peer_adopts(fd, msg, true))
		return true;
	for (i = 0; i < o->nfds; i++)
		if (o->sk[i] && usmc_handover_strands(o->sk[i], o->fds[i]))
			break;
	if (i == o->nfds)
		return false;
	for (ms = 0; ms < ADOPT_WAIT_MS; ms++) {
		usleep(1000);
		if (usmc_scm_peer_adopts(fd, msg, false))
			return true;
	}
	return false;
}

/*
 * Make o->msg, the message that goes out on UNIX socket fd: with a ticket
 * when its reader adopts our sockets, else the program's own after its
 * sockets moved to TCP (handover.c).
 */
static void out_prepare(struct scm_out *o, int fd, const struct msghdr *msg)
{
	int i;
	bool whole;

	out_init(o);
	o->msg = *msg;
	whole = out_collect(o, msg);
	if (!o->nsock)
		return;
	if (whole && adopts(o, fd, msg) && out_ticket(o) && out_build(o, msg)) {
		out_count(o, 1);
		usmc_dbg(2, "fd %d: %d socket(s) passed to a process that adopts them", fd, o->nsock);
		return;
	}
	/* The TCP way. */
	for (i = 0; i < o->nfds; i++)
		if (o->sk[i])
			usmc_handover_fd(o->fds[i]);
	out_release(o);
	o->msg = *msg;
}

/* After the send: sent (the ticket's count stays in flight) or not. */
static void out_done(struct scm_out *o, bool sent)
{
	int i;

	if (o->counted && !sent)
		out_count(o, -1);
	for (i = 0; o->counted && sent && i < o->nfds; i++)
		if (o->sk[i])
			o->sk[i]->st_handed = true;
	out_release(o);
}

ssize_t usmc_scm_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct scm_out *o;
	ssize_t r;
	int saved;

	if (usmc_sandboxed())
		return real.sendmsg(fd, msg, flags);
	o = malloc(sizeof(*o));
	if (!o) {
		usmc_handover_send_slow(msg);
		return real.sendmsg(fd, msg, flags);
	}
	out_prepare(o, fd, msg);
	r = real.sendmsg(fd, &o->msg, flags);
	saved = errno;
	out_done(o, r >= 0);
	free(o);
	errno = saved;
	return r;
}

int usmc_scm_sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	struct mmsghdr *w = NULL;
	struct scm_out *o = NULL;
	unsigned int i;
	int r, saved;

	if (usmc_sandboxed())
		return real.sendmmsg(fd, v, n, flags);
	n = MIN(n, (unsigned int)IOV_MAX);
	if (n) {
		w = malloc(n * sizeof(*w));
		o = malloc(n * sizeof(*o));
	}
	if (!w || !o) {
		free(w);
		free(o);
		usmc_handover_sendmm(v, n);
		return real.sendmmsg(fd, v, n, flags);
	}
	for (i = 0; i < n; i++) {
		out_prepare(&o[i], fd, &v[i].msg_hdr);
		w[i].msg_hdr = o[i].msg;
		w[i].msg_len = 0;
	}
	r = real.sendmmsg(fd, w, n, flags);
	saved = errno;
	for (i = 0; i < n; i++) {
		if (r > 0 && i < (unsigned int)r)
			v[i].msg_len = w[i].msg_len;
		out_done(&o[i], r > 0 && i < (unsigned int)r);
	}
	free(w);
	free(o);
	errno = saved;
	return r;
}
