// SPDX-License-Identifier: MIT
/*
 * adopt.c - a socket that another image or process made becomes ours.
 *
 * Two ways in: an exec'ed image picks up what its old image described in
 * USMC_INHERIT (exec.c: our own words, from the same process), and a
 * process receives a descriptor with SCM_RIGHTS together with the sender's
 * ticket (scm_recv.c: another process's words).  Either way the socket's
 * shared half already lives in a family region mapped here (family.c), the
 * link group and CLC index are reached by id in the runtime directory, and
 * the owner locks that must not drop come as descriptors.
 *
 * References (sh->refs counts the processes that hold the socket): an
 * exec'ed image is the same process.  A received descriptor was counted by
 * its sender while in flight; that count becomes ours, or is dropped when
 * we hold the socket already (it came back, or twice).  A peek (MSG_PEEK)
 * leaves the message and its count queued, so the peeker counts itself.
 *
 * Received words are checked before use: the kernel socket must be a TCP
 * socket with the recorded addresses (listening, for a listener), the link
 * group's control block must name this connection (generation, 4-tuple),
 * an owner lock must be the link group's file, an index must carry its id
 * and our format.  A record that fails leaves the descriptor untracked
 * (plain TCP); a connection whose shared memory cannot be reached although
 * its shared half says it uses it is reset, so no holder reads a clean end
 * of a stream short of its bytes.
 */
#include "adopt.h"
#include "clc.h"
#include "close.h"
#include "conn.h"
#include "fdtab.h"
#include "lgr.h"
#include "log.h"
#include "real.h"
#include "registry.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/syscall.h>

struct same_sh {
	struct usmc_sock_sh *sh;
	struct usmc_sock *sk;
	int fd;
};

static void find_sh(int fd, struct usmc_sock *sk, void *arg)
{
	struct same_sh *c = arg;

	if (!c->sk && sk->sh == c->sh) {
		c->sk = sk;
		c->fd = fd;
	}
}

/* Do descriptors a and b refer to one kernel socket? */
static bool same_socket(int a, int b)
{
	struct stat x, y;

	return !fstat(a, &x) && !fstat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/*
 * Descriptors of one socket (inetd's 0 and 1, a dup, one received twice)
 * refer to one struct usmc_sock, as dup() would make them, so that closing
 * one of them is not the socket's last close.  1 if fd was adopted so, 0
 * if we hold no socket with that shared half, -EINVAL if we hold another
 * socket with it: a forged record, which must never give the program's
 * descriptor another connection's bytes.
 */
static int adopt_dup(const struct usmc_adopt *a)
{
	struct same_sh c = { a->sh, NULL, -1 };

	usmc_fd_foreach(find_sh, &c);
	if (!c.sk)
		return 0;
	if (!same_socket(a->fd, c.fd))
		return -EINVAL;
	usmc_sock_get(c.sk);
	if (usmc_fd_install(a->fd, c.sk))
		usmc_sock_put(c.sk);
	/* Ours already: the sender's count for the one in flight goes. */
	if (a->received && !a->peek)
		atomic_fetch_sub(&a->sh->refs, 1);
	return 1;
}

static struct usmc_sock *adopt_wrap(const struct usmc_adopt *a, int kind)
{
	struct usmc_sock *sk;

	usmc_family_inherited(a->sh);	/* others have it too: always the mutex */
	sk = usmc_sock_wrap(a->fd, kind, a->sh, &usmc_sock_ops);
	if (sk && a->received && a->peek)
		atomic_fetch_add(&a->sh->refs, 1);
	return sk;
}

static int sockopt(int fd, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);

	if (usmc_sys6(SYS_getsockopt, fd, SOL_SOCKET, name, (long)&v, (long)&l, 0))
		return -1;
	return v;
}

/*
 * A received record names fd's kernel socket: TCP, with these addresses.
 * kind: SK_CONN (connected to a->peer), SK_LISTEN (listening), SK_TCP
 * (bound, not connected; another holder may have made it listen already).
 */
static bool tcp_matches(const struct usmc_adopt *a, int kind)
{
	struct sockaddr_storage ss;
	struct usmc_addr x;
	socklen_t l = sizeof(ss);
	int dom = sockopt(a->fd, SO_DOMAIN), proto = sockopt(a->fd, SO_PROTOCOL);
	int acc = sockopt(a->fd, SO_ACCEPTCONN);

	if ((dom != AF_INET && dom != AF_INET6) || sockopt(a->fd, SO_TYPE) != SOCK_STREAM ||
	    (proto && proto != IPPROTO_TCP) || acc < 0 || (kind == SK_CONN && acc) ||
	    (kind == SK_LISTEN && !acc))
		return false;
	if (getsockname(a->fd, (struct sockaddr *)&ss, &l) ||
	    usmc_addr_from_sa(&x, (struct sockaddr *)&ss, l) || memcmp(&x, &a->local, sizeof(x)))
		return false;
	if (kind != SK_CONN) {
		int saved = errno;
		bool unconnected;

		l = sizeof(ss);
		unconnected = acc || (getpeername(a->fd, (struct sockaddr *)&ss, &l) && errno == ENOTCONN);
		errno = saved;
		return unconnected;
	}
	l = sizeof(ss);
	return !getpeername(a->fd, (struct sockaddr *)&ss, &l) &&
	       !usmc_addr_from_sa(&x, (struct sockaddr *)&ss, l) && !memcmp(&x, &a->peer, sizeof(x));
}

/* The slot's control block names this connection (the client wrote it). */
static bool ctrl_matches(struct usmc_lgr *l, const struct usmc_adopt *a)
{
	struct usmc_cdc_ctrl *c;
	struct usmc_addr cl, sv;

	if (a->slot >= l->nslots)
		return false;
	if (!a->received)
		return true;
	c = usmc_lgr_ctrl(l, a->slot);
	cl = c->c.client;
	sv = c->c.server;
	return LOAD_ACQUIRE(&c->c.gen) == a->gen &&
	       !memcmp(&cl, a->role == 'C' ? &a->local : &a->peer, sizeof(cl)) &&
	       !memcmp(&sv, a->role == 'C' ? &a->peer : &a->local, sizeof(sv));
}

/* Its shared memory cannot be reached: fail loudly, never hang. */
static void conn_unreachable(struct usmc_sock *sk, const struct usmc_adopt *a)
{
	usmc_log_write("%s: fd %d: link group %016llx unreachable",
		       a->received ? "received" : "exec", a->fd, (unsigned long long)a->lgr_id);
	sk->lgr = NULL;
	sk_set_mode(sk, USMC_MODE_TCP);
	if (a->received) {
		/* Every holder reads ECONNRESET (connect(AF_UNSPEC): RST). */
		struct sockaddr sa = { .sa_family = AF_UNSPEC };

		real.connect(a->fd, &sa, sizeof(sa));
	} else {
		/* Shutting the TCP socket down gives both ends EOF. */
		real.shutdown(a->fd, SHUT_RDWR);
	}
}

/* A mode whose socket reads and writes rings (sk_is_smc_path). */
static bool mode_on_rings(uint32_t m)
{
	return m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED || m == USMC_MODE_MIGRATING ||
	       m == USMC_MODE_UNDECIDED;
}

/*
 * The link group and slot of a connection on shared memory.  A received
 * record is checked before anything of the socket is touched: the kernel
 * socket (tcp_matches), the shared half (its mode agrees with the record:
 * none says rings where we would have none), the slot's control block
 * (ctrl_matches).  -errno: not adopted (the caller resets it).
 */
static int conn_lgr(const struct usmc_adopt *a, struct usmc_lgr **l)
{
	bool rings = a->mode == USMC_MODE_SMCD || a->mode == USMC_MODE_PROPOSED;
	int owner_fd = a->owner_fd, rc;

	*l = NULL;
	if (!rings) {
		if (owner_fd >= 0 && a->received)
			sys_close(owner_fd);	/* not needed */
		return a->received && mode_on_rings(LOAD_ACQUIRE(&a->sh->mode)) ? -EINVAL : 0;
	}
	/* Only a device that survives exec and SCM_RIGHTS travels.  A server
	 * end attaches by name, else through the sender's copy of the file
	 * (the client is gone: its bytes are still in the ring). */
	rc = a->role == 'C' ? usmc_lgr_adopt(a->lgr_id, owner_fd, l) :
	     usmc_lgr_attach_fd(a->lgr_id, USMC_DEV_LOOPBACK, owner_fd, l);
	if (!rc && !ctrl_matches(*l, a)) {
		usmc_lgr_put(*l);
		rc = -EINVAL;
	}
	if (rc)
		*l = NULL;
	return rc;
}

int usmc_adopt_conn(const struct usmc_adopt *a)
{
	struct usmc_sock *sk;
	struct usmc_lgr *l;
	int owner_fd = a->owner_fd, rc;

	if (!a->sh || (a->role != 'C' && a->role != 'S') || (a->received && !tcp_matches(a, SK_CONN))) {
		if (a->received && owner_fd >= 0)
			sys_close(owner_fd);
		return -EINVAL;
	}
	rc = adopt_dup(a);
	if (rc) {
		if (a->received && owner_fd >= 0)
			sys_close(owner_fd);
		return rc < 0 ? rc : 0;
	}
	rc = conn_lgr(a, &l);
	if (rc && a->received) {
		usmc_log_write("received fd %d: link group %016llx unreachable, or the record does not match",
			       a->fd, (unsigned long long)a->lgr_id);
		return rc;	/* reset, never wrapped: nothing of the sender's is touched */
	}
	sk = adopt_wrap(a, SK_CONN);
	if (!sk) {
		if (l)
			usmc_lgr_put(l);
		return -ENOMEM;
	}
	sk->role = a->role;
	sk->local = a->local;
	sk->peer = a->peer;
	if (a->ln_fd >= 0) {
		usmc_ifd_mark(a->ln_fd);
		sys_fcntl(a->ln_fd, F_SETFD, FD_CLOEXEC);
	}
	if (a->ln_id && usmc_clc_ln_get(a->ln_id, false, &sk->ln))
		sk->ln = NULL;
	if (a->mode == USMC_MODE_SMCD || a->mode == USMC_MODE_PROPOSED) {
		if (rc || usmc_conn_bind_slot(sk, l, a->slot, a->gen, false)) {
			if (!rc)
				usmc_lgr_put(l);
			conn_unreachable(sk, a);
		}
	} else if (owner_fd >= 0 && !a->received) {
		/* Not on shared memory: its link group's owner lock is kept
		 * as the old image kept it. */
		usmc_ifd_mark(owner_fd);
		sys_fcntl(owner_fd, F_SETFD, FD_CLOEXEC);
	}
	usmc_conn_stats_open(sk, a->fd);
	if (usmc_fd_install(a->fd, sk))
		usmc_sock_put(sk);
	return 0;
}

int usmc_adopt_listener(const struct usmc_adopt *a)
{
	struct usmc_clc_ln *ln;
	struct usmc_sock *sk;
	int rc;

	if (!a->sh || (a->received && !tcp_matches(a, SK_LISTEN))) {
		if (a->received && a->ln_fd >= 0)
			sys_close(a->ln_fd);
		return -EINVAL;
	}
	rc = adopt_dup(a);
	if (rc) {
		if (a->received && a->ln_fd >= 0)
			sys_close(a->ln_fd);	/* we hold the index already */
		return rc < 0 ? rc : 0;
	}
	/* Checked before the shared half is touched (conn_lgr()). */
	if ((a->received && LOAD_ACQUIRE(&a->sh->mode) != USMC_MODE_NONE) ||
	    usmc_clc_ln_adopt(a->ln_id, a->ln_fd, &ln)) {
		if (a->received) {
			sys_close(a->ln_fd);
			return -EBADMSG;
		}
		/* exec: dropping our object drops the count we took over. */
		sk = adopt_wrap(a, SK_LISTEN);
		if (sk)
			usmc_sock_put(sk);
		return -EBADMSG;
	}
	sk = adopt_wrap(a, SK_LISTEN);
	if (!sk) {
		usmc_clc_ln_put(ln);
		return -ENOMEM;
	}
	sk->bound = a->local;
	sk->lst = ln;
	/* Under an address-space limit (Dovecot's login processes): clients
	 * size link groups for us before our first accept. */
	usmc_clc_ln_fit_lower(ln, usmc_lgr_fit());
	sk->reg_idx = a->reg_idx;
	/* Our last close unregisters it (usmc_listen_release). */
	usmc_registry_attach();
	if (a->received)
		usmc_stats_attach();
	if (usmc_fd_install(a->fd, sk))
		usmc_sock_put(sk);
	return 0;
}

int usmc_adopt_bound(const struct usmc_adopt *a)
{
	struct usmc_sock *sk;
	int rc;

	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);

	if (!a->sh || (a->received && !tcp_matches(a, SK_TCP)))
		return -EINVAL;
	rc = adopt_dup(a);
	if (rc)
		return rc < 0 ? rc : 0;
	/* Bound only: nothing of it may say rings. */
	if (a->received && LOAD_ACQUIRE(&a->sh->mode) != USMC_MODE_NONE)
		return -EINVAL;
	sk = adopt_wrap(a, SK_TCP);
	if (!sk)
		return -ENOMEM;
	if (a->received)
		sk->bound = a->local;
	else if (!getsockname(a->fd, (struct sockaddr *)&ss, &l))
		usmc_addr_from_sa(&sk->bound, (struct sockaddr *)&ss, l);
	if (a->received)
		usmc_stats_attach();
	if (usmc_fd_install(a->fd, sk))
		usmc_sock_put(sk);
	return 0;
}
