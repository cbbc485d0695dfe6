// SPDX-License-Identifier: MIT
/*
 * listener.c - a listening socket made known to clients: its registry
 * record and its CLC index, one per kernel socket, answered by every
 * process that listens or accepts on it.
 *
 * One listening socket may be held by several processes: forked workers
 * (they share the index's open file description, and its lock, with their
 * parent), processes it was passed to with usmc's ticket (scm_recv.c: the
 * index's descriptor comes along), and processes that each call listen()
 * on a socket that was passed to them, or inherited, while only bound:
 * node's cluster with schedulingPolicy = none (the master binds, every
 * worker listens), a pre-fork server that binds before forking and
 * listens in each child.  The kernel gives each connection to whichever
 * of them accepts first, so all of them must answer proposals from one
 * index, and the index must live while any of them does:
 *
 *  - the index's liveness token is a read lock on byte 0 (clc.c), which
 *    several open file descriptions can hold at once; clients ask whether
 *    any lock is held (usmc_lock_held), as before;
 *  - the first listen() creates the index and the record, with the
 *    socket's inode in it (rec.ino); a later listen() of the same socket
 *    in another process finds that record (same inode, namespace, address
 *    and user; alive), opens the index by name on a description of its
 *    own, takes its own read lock, and uses the same record.  A record
 *    that disappears while we join (every holder closed at that moment)
 *    is not joined: we publish afresh;
 *  - creation and joining are serialised over the socket's shared half
 *    (sh->tx_lock, unused by listeners otherwise), which every holder that
 *    adopted the socket maps, so two first listen()s never make two
 *    records (a client would find the address ambiguous: TCP);
 *  - a holder that may not run usmc (the socket went to one by SCM_RIGHTS
 *    without a ticket, an exec without libusmc, a posix_spawn dup2 action)
 *    sets SKF_NOPUB in the shared half under the same lock and takes the
 *    publication down (handover.c): it could accept a connection whose
 *    client proposed and wait for bytes that sit in a ring.  From then on
 *    no holder publishes the socket;
 *  - a socket received without a ticket (SKF_HANDED: its other holders
 *    are unknown) never creates a publication, but joins one: whoever
 *    published it vouched that every holder answers proposals;
 *  - a process whose record of the socket is still "bound" (it passed the
 *    socket on and never listened itself) but that accepts on it joins at
 *    its first accept(), as if it had listened.
 *
 * The socket's last close in any process (sh->refs) removes the record and
 * the index; a holder that closes earlier drops only its own lock
 * (usmc_sock_detach_local).
 */
#include "clc.h"
#include "clc_bind.h"
#include "fdtab.h"
#include "lgr.h"
#include "listener.h"
#include "log.h"
#include "options.h"
#include "real.h"
#include "registry.h"
#include "rundir.h"
#include "sock.h"
#include "sys.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>

/* The kernel socket's inode: one per socket, whoever holds it. */
static uint64_t sock_ino(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? 0 : (uint64_t)st.st_ino;
}

/* Join the index another holder of this socket published.  Caller holds
 * sk->lock and the shared half's lock. */
static bool join(struct usmc_sock *sk, uint64_t ino)
{
	struct usmc_reg_listener rec;
	struct usmc_clc_ln *ln;
	int tries, i;

	for (tries = 0; tries < 3; tries++) {
		i = usmc_registry_find_socket(usmc_netns_self(), &sk->bound, ino, &rec);
		if (i < 0)
			return false;
		if (usmc_clc_ln_join(rec.id, &ln))
			continue;	/* closed meanwhile: look again */
		/* Locked by us now: the record, if still there, stays. */
		if (usmc_registry_names(i, rec.id, ino)) {
			sk->reg_idx = i;
			usmc_clc_ln_fit_lower(ln, usmc_lgr_fit());	/* accept.c */
			/* Pairs with the acquire load in usmc_listen_follow(). */
			__atomic_store_n(&sk->lst, ln, __ATOMIC_RELEASE);
			usmc_dbg(1, "listen: joined clc index %016llx of a socket another process listens on",
				 (unsigned long long)rec.id);
			return true;
		}
		usmc_clc_ln_put(ln);
	}
	return false;
}

/* No registry or no index (rc): why, for what accept() counts. */
static void not_registered(struct usmc_sock *sk, int rc)
{
	char a[64];

	/* A full tmpfs: the index header could not be backed.  An index
	 * beyond our share of RLIMIT_AS (vmbudget.h) or of the descriptors
	 * (ifd.c): limit_reached. */
	sk->lst_reason = rc == -ENOSPC || rc == -EDQUOT ? USMC_R_MEM :
			 rc == -E2BIG || rc == -EMFILE || rc == -ENFILE ? USMC_R_LIMIT :
			 USMC_R_RUNDIR;
	usmc_dbg(1, "listen %s: not registered (%s)", usmc_addr_str(&sk->bound, a, sizeof(a)),
		 usmc_reason_name(sk->lst_reason));
}

/* A new index and record for the socket. */
static void publish_new(struct usmc_sock *sk, int fd, uint64_t ino)
{
	struct usmc_reg_listener rec;
	struct sockaddr_storage ss;
	struct usmc_clc_ln *ln;
	socklen_t olen = sizeof(int);
	int rc, on = 0;
	char a[64];

	rc = usmc_clc_ln_create(&ln);
	if (rc) {
		not_registered(sk, rc);
		return;
	}
	memset(&rec, 0, sizeof(rec));
	rec.id = ln->id;
	rec.netns = usmc_netns_self();
	rec.addr = sk->bound;
	rec.uid = (uint32_t)geteuid();
	rec.pid = (uint32_t)usmc_getpid();
	rec.version = USMC_PROTO_VERSION;
	rec.allow_all = !strcmp(usmc_opt.allow, "all");
	/* Clients read it only with USMC_REG_F_REUSEPORT (reuseport.c);
	 * other holders of the socket find the record by it (join()). */
	rec.ino = ino;
	usmc_dev_list(rec.devs, 0);
	if (!real.getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &olen) && on)
		rec.flags |= USMC_REG_F_REUSEPORT;	/* alone in its group? (reuseport.c) */
	memset(&ss, 0, sizeof(ss));
	olen = sizeof(ss);
	if (!getsockname(fd, (struct sockaddr *)&ss, &olen) && ss.ss_family == AF_INET6) {
		olen = sizeof(on);
		if (!real.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, &olen) && on)
			rec.flags |= USMC_REG_F_V6ONLY;
	}
	usmc_registry_publish_addrs(true);
	/* Before anyone can find the record: every socket the kernel
	 * accepts from now on carries the mark clients look for. */
	rc = usmc_bind_mark(fd, USMC_BIND_LISTENER);
	if (rc) {
		not_registered(sk, rc);
		usmc_clc_ln_put(ln);
		return;
	}
	/* usmc_registry_add() first drops the dead records of this port: a
	 * server restarted on the same address, or a child that listens again
	 * on the socket its dead predecessor served (Varnish's cache child),
	 * never sits next to its killed predecessor's record. */
	sk->reg_idx = usmc_registry_add(&rec);
	if (sk->reg_idx < 0) {
		usmc_dbg(1, "listen %s: registry full", usmc_addr_str(&sk->bound, a, sizeof(a)));
		usmc_clc_ln_put(ln);
		return;
	}
	usmc_clc_ln_fit_lower(ln, usmc_lgr_fit());	/* accept.c */
	__atomic_store_n(&sk->lst, ln, __ATOMIC_RELEASE);
	usmc_dbg(1, "listen %s: registered for SMC-D (clc index %016llx)",
		 usmc_addr_str(&sk->bound, a, sizeof(a)), (unsigned long long)rec.id);
}

/*
 * sk became a listener here (listen(), or the first accept() on a socket
 * another holder made one): join its publication, or make it.
 */
/* true: the record and index are this call's own (not joined). */
static bool publish(struct usmc_sock *sk, int fd)
{
	bool locked, fixed = false, created = false;
	uint64_t ino;
	int rc, off;

	/* Refused by the environment: for the process's life.  By `usmc
	 * ctl`: published anyway, clients told to stay on TCP for now
	 * (usmc_clc_ln_off), so turning it on needs no restart. */
	off = usmc_policy_check(sk->bound.port, &fixed);
	if (off && fixed)
		return false;
	rc = usmc_registry_attach();
	if (rc) {
		not_registered(sk, rc);
		return false;
	}
	ino = sock_ino(fd);
	pthread_mutex_lock(&sk->lock);
	locked = !usmc_family_lock(&sk->sh->tx_lock);
	if (!sk->lst && !join(sk, ino)) {
		if (!locked || sk_flag(sk, SKF_NOPUB | SKF_HANDED)) {
			/* Another process may take its connections: ours to
			 * count as handed over (accept.c). */
			sk->lst_reason = USMC_R_HANDOVER;
			usmc_dbg(1, "fd %d: listening socket shared with processes that may not run usmc: not published",
				 fd);
		} else {
			publish_new(sk, fd, ino);
			created = sk->lst != NULL;
		}
	}
	if (sk->lst)
		usmc_clc_ln_off(sk->lst, off);
	if (locked)
		usmc_family_unlock(&sk->sh->tx_lock);
	pthread_mutex_unlock(&sk->lock);
	if (sk->lst) {
		usmc_listen_defer(sk, fd);
		usmc_stats_attach();
	}
	return created;
}

void usmc_listen_defer(struct usmc_sock *sk, int fd)
{
	struct usmc_clc_ln *ln = __atomic_load_n(&sk->lst, __ATOMIC_ACQUIRE);
	socklen_t len = sizeof(int);
	int secs = 0;

	if (ln && !real.getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, &len))
		usmc_clc_ln_wake_always(ln, secs > 0);
}

/* Our bound address and listener kind, from the kernel's socket. */
/* The address fd is bound to: 0, or -1 if it cannot be told. */
static int bound_addr(int fd, struct usmc_addr *a)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sslen = sizeof(ss);

	return getsockname(fd, (struct sockaddr *)&ss, &sslen) ||
	       usmc_addr_from_sa(a, (struct sockaddr *)&ss, sslen) ? -1 : 0;
}

static bool become_listener(struct usmc_sock *sk, int fd)
{
	sk->kind = SK_LISTEN;
	return !bound_addr(fd, &sk->bound);
}

/*
 * May the socket be published before the kernel listens?  Only a bound,
 * unconnected socket that listens nowhere yet: listen() binds a socket
 * bound to nothing (its port is known only after), and one another holder
 * made a listener joins that holder's record after (usmc_listen_follow).
 */
static bool listen_early(const struct usmc_sock *sk, int fd)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len = sizeof(ss);
	struct usmc_addr a;
	int acc = 1;

	if (sk->kind != SK_TCP || bound_addr(fd, &a) || !a.port)
		return false;
	if (!getpeername(fd, (struct sockaddr *)&ss, &len) || errno != ENOTCONN)
		return false;
	len = sizeof(acc);
	return !real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) && !acc;
}

/*
 * The record goes in before the kernel listens: a client that connects
 * the moment listen() returns (a reconnect loop: libzmq's, every 100 ms)
 * finds it.  Published after, it found none for as long as publishing
 * took, and stayed on TCP as if its peer were not usmc (19 of 20 runs of
 * a connect loop).  A client that finds the record sooner is refused by
 * the kernel, as it would be without usmc, and its proposal goes with its
 * connect (af_usmc.c).  A listen() that fails takes the record back.
 */
int usmc_sock_listen(struct usmc_sock *sk, int fd, int backlog)
{
	bool early = listen_early(sk, fd), created = false;
	int rc, err;

	if (early && become_listener(sk, fd))
		created = publish(sk, fd);
	rc = real.listen(fd, backlog);
	if (rc) {
		err = errno;
		if (early) {
			/* A record another holder published stays its own. */
			pthread_mutex_lock(&sk->lock);
			if (created) {
				usmc_listen_release(sk);
			} else if (sk->lst) {
				usmc_clc_ln_put(sk->lst);
				sk->lst = NULL;
			}
			sk->kind = SK_TCP;
			sk->lst_reason = 0;
			pthread_mutex_unlock(&sk->lock);
		}
		errno = err;
		return rc;
	}
	if (early || sk->kind == SK_LISTEN)
		return 0;
	if (become_listener(sk, fd))
		publish(sk, fd);
	return 0;
}

void usmc_listen_follow(struct usmc_sock *sk, int fd)
{
	int acc = 0;
	socklen_t l = sizeof(acc);

	if (sk->kind != SK_TCP || real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) || !acc)
		return;
	pthread_mutex_lock(&sk->lock);
	if (sk->kind == SK_TCP && !become_listener(sk, fd))
		sk->lst_reason = USMC_R_INTERNAL;
	pthread_mutex_unlock(&sk->lock);
	if (!__atomic_load_n(&sk->lst, __ATOMIC_ACQUIRE) && !sk->lst_reason)
		publish(sk, fd);
}

bool usmc_listen_nopub(struct usmc_sock *sk)
{
	bool locked = !usmc_family_lock(&sk->sh->tx_lock);
	bool first = !(atomic_fetch_or(&sk->sh->flags, SKF_NOPUB) & SKF_NOPUB);

	if (locked)
		usmc_family_unlock(&sk->sh->tx_lock);
	return first;
}

struct usmc_clc_ln *usmc_listen_find(int fd, int *reg_idx)
{
	struct usmc_reg_listener rec;
	struct sockaddr_storage ss = { 0 };
	socklen_t sslen = sizeof(ss);
	struct usmc_clc_ln *ln;
	struct usmc_addr a;
	int i;

	if (usmc_registry_attach() || getsockname(fd, (struct sockaddr *)&ss, &sslen) ||
	    usmc_addr_from_sa(&a, (struct sockaddr *)&ss, sslen))
		return NULL;
	i = usmc_registry_find_socket(usmc_netns_self(), &a, sock_ino(fd), &rec);
	if (i < 0 || usmc_clc_ln_get(rec.id, false, &ln))
		return NULL;
	*reg_idx = i;
	return ln;
}

void usmc_listen_release(struct usmc_sock *sk)
{
	if (!sk->lst)
		return;
	usmc_registry_del(sk->reg_idx, sk->lst->id);
	usmc_clc_ln_unpublish(sk->lst);
	usmc_clc_ln_put(sk->lst);
	sk->lst = NULL;
}

/*
 * The listener goes to a program that cannot answer proposals (an exec
 * without libusmc, a posix_spawn child): clients stop proposing to it, as
 * one that proposed and spoke first would wait forever on a server that
 * reads TCP.  We keep our index until we close it; our own accepts find no
 * proposal and stay TCP.
 */
/*
 * shutdown(SHUT_RD) or SHUT_RDWR on a listener: the kernel stops it
 * (inet_shutdown disconnects a listening socket, its queue is reset) and
 * keeps the socket bound.  Its record would leave the address with two
 * listeners for the next one bound there (SO_REUSEADDR), every client of
 * that one uncertain of its route (TCP).  No holder publishes it again:
 * a later listen() on it is served as TCP.
 */
void usmc_listen_shutdown(struct usmc_sock *sk, int fd)
{
	int acc = 1;
	socklen_t l = sizeof(acc);

	if (sk->kind != SK_LISTEN || real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) ||
	    acc)
		return;
	usmc_listen_nopub(sk);
	pthread_mutex_lock(&sk->lock);
	usmc_listen_unpublish(sk);
	pthread_mutex_unlock(&sk->lock);
}

void usmc_listen_unpublish(struct usmc_sock *sk)
{
	if (!sk->lst)
		return;
	usmc_registry_del(sk->reg_idx, sk->lst->id);
	usmc_clc_ln_unpublish(sk->lst);
}
