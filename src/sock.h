/* SPDX-License-Identifier: MIT */
/*
 * sock.h - one TCP socket as libusmc sees it.
 *
 * struct usmc_sock is process-local (pointers into mappings, descriptors);
 * struct usmc_sock_sh is its fork-shared half (family.c): anything that a
 * parent and a forked child holding the same socket must agree on lives
 * there (locks, file-description flags, mode, references across processes).
 *
 * Connection state machine (mode):
 *
 *   client  connect() --match--> PROPOSED --accept--> SMCD --close--> (gone)
 *              |                    |  \--decline--> MIGRATING --> TCP
 *              \--no match--> TCP   \--TCP bytes seen, withdrawn--> TCP
 *   server  accept() --> UNDECIDED --proposal found--> SMCD
 *                           \--writes first / TCP bytes / EOF--> TCP
 *           (a proposal already there at accept goes straight to SMCD)
 *
 * SMCD never returns to TCP: it ends by close, reset or peer death.
 */
#ifndef USMC_SOCK_H
#define USMC_SOCK_H

#include "cdc.h"
#include "clc.h"

#include <sys/single_threaded.h>
#include "family.h"
#include "lgr.h"
#include "stats.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>

enum usmc_sock_kind {
	SK_TCP = 1,		/* stream socket, not (yet) connected or listening */
	SK_LISTEN,		/* listening socket */
	SK_CONN,		/* connected (or connecting) */
};

/* struct usmc_sock_sh.flags */
#define SKF_NONBLOCK	0x0001	/* O_NONBLOCK on the open file description */
#define SKF_SHUT_RD	0x0002	/* shutdown(SHUT_RD) */
#define SKF_SHUT_WR	0x0004	/* shutdown(SHUT_WR) */
#define SKF_TCP_EOF	0x0008	/* the TCP socket saw FIN/RST: peer closed or died */
#define SKF_RST_SEEN	0x0010	/* a write hit the closed peer: later writes EPIPE */
#define SKF_ABORTED	0x0020	/* connection reset; abort reason in sh->abort */
#define SKF_CONNECTING	0x0040	/* client: TCP connect in progress */
#define SKF_COUNTED	0x0080	/* smc_conns already counted */
#define SKF_FB_COUNTED	0x2000	/* tcp_conns/fallback already counted */
#define SKF_TCP_DATA	0x4000	/* MIGRATING: bytes wait on TCP behind the ring */
#define SKF_TCP_SHUT	0x8000	/* MIGRATING: our ring FIN was passed on to TCP */
#define SKF_LOST	0x10000	/* declined after the client left: its bytes are lost */
#define SKF_DECLINED	0x20000	/* client: the server declined; it never uses our slot */
#define SKF_ASYNC	0x40000	/* O_ASYNC on the open file description (SIGIO: TCP only) */
#define SKF_BUFLIM	0x80000	/* SO_SNDBUF set: sh->sndbuf limits what we have in flight */
#define SKF_HANDED	0x100000	/* listener received with SCM_RIGHTS: never published (handover.c) */
#define SKF_TCP_DUP	0x200000	/* TCP from the peer starts at ring cursor tcp_dup_from (migrate.c) */
#define SKF_NOPUB	0x400000	/* a holder may not run usmc: never published (listener.c) */
#define SKF_RESENT	0x800000	/* our ring bytes went out on TCP: a reset for them first (migrate.c) */
#define SKF_TFO		0x1000000	/* TCP_FASTOPEN_CONNECT: connect() sends no SYN, the first write does */
#define SKF_LOWAT	0x2000000	/* SO_RCVLOWAT above 1 (sh->rcvlowat) */
#define SKF_APP_NOPORT	0x4000000	/* the program set IP_BIND_ADDRESS_NO_PORT (clc_bind.c) */
#define SKF_APP_RFC4884	0x8000000	/* the program set IP_RECVERR_RFC4884 (clc_bind.c) */
#define SKF_MOVING	0x10000000	/* the move to TCP is claimed, by usmc_conn_to_tcp or
					 * usmc_migrate_follow, the first of them (one-shot;
					 * set and carried out under sh->move_lock) */
#define SKF_RXOPT	0x20000000	/* a receive option rings cannot honour was set on a
					 * socket not yet connected, or a listener (interpose.c) */
#define SKF_INQ		0x40000000	/* TCP_INQ on: ring reads add TCP_CM_INQ (interpose_io.c) */
#define SKF_INQ_KNOWN	0x80000000u	/* SKF_INQ says what the kernel's option is */
#define SKF_ERR_TAKEN	0x0100	/* the reset error was reported once */
#define SKF_LINGER0	0x0200	/* SO_LINGER {1, 0}: close sends RST */
#define SKF_WAKEBYTE	0x0400	/* one CLC message owed on TCP, not the program's
				 * (clc_inband.h): a server's proposal, a client's answer */
#define SKF_WAKE_SEND	0x0800	/* client: send the proposal on TCP once connected */
#define SKF_COUNT_LATER	0x1000	/* TCP-mode connect in progress: count when connected */

struct usmc_sock_sh {
	struct usmc_flock tx_lock;	/* robust, process-shared */
	struct usmc_flock rx_lock;
	struct usmc_flock move_lock;	/* held by the claimer of the move to TCP until the
					 * mode moved on (migrate.c): who finds the move
					 * claimed waits on it, and takes over from a
					 * claimer that died mid-move */
	_Atomic int32_t refs;		/* descriptors in all processes of the family */
	_Atomic uint32_t mode;		/* enum usmc_conn_mode */
	_Atomic uint32_t reason;	/* enum usmc_reason (TCP / MIGRATING) */
	_Atomic uint32_t flags;		/* SKF_* */
	_Atomic uint32_t abort;		/* enum usmc_abort */
	uint32_t data_rung;		/* peer data_armed value last rung (tx_lock) */
	uint32_t space_rung;		/* peer space_armed value last rung (rx_lock) */
	uint64_t tx_cons;		/* the peer's cons as the sender last loaded it (tx_lock), */
	uint64_t tx_cons_at;		/* ... when its prod was here */
	uint64_t tx_cons_rx;		/* ... and our receive cons here */
	/* Our own cursors as we last stored them, so that we never load the
	 * lines the peer polls: a load of a line the other core keeps reading
	 * missed, on every send, as often as not (and what the peer could
	 * scribble there no longer matters to us). */
	_Atomic uint64_t tx_prod, tx_skip;	/* our producer line (tx_lock; read lock-free) */
	_Atomic uint64_t rx_cons;	/* our consumer line (rx_lock; read lock-free) */
	_Atomic uint32_t spin_ns;	/* adaptive spin budget, hint only */
	_Atomic uint32_t tx_hw;		/* our tx ring is backed up to here (written under tx_lock,
					 * read relaxed by waiters as a hint) */
	_Atomic uint32_t tx_stuck;	/* backing it further failed (tmpfs full) */
	_Atomic uint32_t tx_nospace;	/* bumped by a send that found no room (tx_lock):
					 * TCP's SOCK_NOSPACE, for edge-triggered EPOLLOUT */
	_Atomic uint64_t tcp_looker;	/* tcp.c: thread looking at TCP (tid | pid << 32) */
	_Atomic uint32_t tcp_relook;	/* ... asked to look once more */
	_Atomic uint32_t own_rung;	/* bumped before ringing our own doorbell (shutdown):
					 * epoll's armed records count it as a ring (wait.c) */
	_Atomic uint32_t in_use;	/* family allocator: 0 free, 1 used, USMC_SH_PRIVATE */
	/* SO_RCVTIMEO / SO_SNDTIMEO as usmc_sock_timeout() returns them, so a
	 * wait costs no getsockopt(2): (timeo_ver << 32) | (ms + 2), 0 unknown;
	 * a SOL_SOCKET setsockopt bumps timeo_ver, which voids them. */
	_Atomic uint64_t timeo[2];
	_Atomic uint32_t timeo_ver;
	/* SO_SNDBUF / SO_RCVBUF as the kernel reports them (twice what was
	 * asked) once the application set them, else 0 (af_usmc.c). */
	_Atomic uint32_t sndbuf, rcvbuf;
	/* SO_RCVLOWAT as the kernel reports it, with SKF_LOWAT while above 1:
	 * readable from that many bytes on, and a blocking read waits for
	 * them (rx.c), as tcp_poll() and tcp_recvmsg() do. */
	_Atomic uint32_t rcvlowat;
	/* SKF_TCP_DUP: the peer's TCP bytes start at this cursor of our
	 * receive ring; those below tcp_dup_end we read from the ring already
	 * and drop from TCP (rx_lock). */
	_Atomic uint64_t tcp_dup_from, tcp_dup_end;
	/* The connection's entry in the statistics (stats.h conns[]) + 1, 0
	 * none, and its start_ns: the last holder frees it, also a copy
	 * forked before the entry was made (its own sk->st is NULL). */
	_Atomic uint32_t st_idx;
	_Atomic uint64_t st_start;
};

struct usmc_epreg;

/*
 * What the layers above the socket do when its last reference goes (the
 * close protocol, a listener's record: close.c usmc_sock_ops): given by
 * whoever makes the socket and inherited by one it accepts, as the
 * kernel's sk_prot.  A reference can go anywhere (a stale descriptor table
 * entry, an epoll record), and the release may settle the handshake or
 * move bytes to TCP: called through here, not by name, so that the
 * lower layers never call up.
 */
struct usmc_sock_ops {
	/* The family's last descriptor is gone: close protocol, free
	 * resources (fd: the descriptor being closed, or -1). */
	void (*release)(struct usmc_sock *sk, int fd);
};

struct usmc_sock {
	_Atomic int ref;		/* fd-table entries + in-flight calls */
	int kind;			/* enum usmc_sock_kind */
	int fd0;			/* descriptor it was created on (stats) */
	struct usmc_sock_sh *sh;
	pthread_mutex_t lock;		/* mode transitions, epoll registrations */

	/* connection */
	char role;			/* 'C' or 'S' */
	struct usmc_addr local, peer;
	struct usmc_clc_ln *ln;		/* listener index (client: proposal; server: TCP mark) */
	struct usmc_lgr *lgr;
	uint32_t slot, gen, size;
	_Atomic uint32_t idle_hw;	/* tx_hw at the last sleep (tx_backing.c; a reader's
					 * and a writer's thread may both sleep: relaxed) */
	struct usmc_cdc_ctrl *ctrl;
	struct usmc_cdc_prod *tx_p, *rx_p;	/* ours / the peer's */
	struct usmc_cdc_cons *tx_c, *rx_c;	/* the peer's / ours */
	uint8_t *tx_ring, *rx_ring;	/* tx_ring: the peer's DMB, or with tx_move
					 * our sndbuf (dev.h USMC_DEV_F_MAPPED) */
	bool tx_move;
	int bell_own, bell_peer;	/* loaded without sk->lock by calls holding a
					 * reference (shed.c closes them only when no
					 * call does) */
	int shed_entries;		/* fdtab.c usmc_fd_quiet's count, under fdtab_lock */
	struct usmc_stats_conn *st;
	uint64_t migrate_pos;		/* MIGRATING: next ring byte to send on TCP */
	uint64_t migrate_end;		/* ... and the end, fixed at the first pump */
#define MIGRATE_END_UNKNOWN	UINT64_MAX
	bool tx_done;			/* MIGRATING: all of it sent */
	uint64_t route_ns;		/* client: the listener's namespace when not ours,
					 * until the route to it is proven (af_usmc.c) */
	bool accept_proven;		/* client: the server end said it decided (clc_proof.c) */
	bool connect_checked;		/* client: usmc_connect_check_done ran */
	bool clc_inband;		/* client: the proposal's body travels on TCP
					 * (clc_inband.h): no USMC_DEV_F_CLC_INDEX */
	bool st_handed;			/* sent to a process that adopts it (scm_send.c): it
					 * lists the connection itself, and our entry goes
					 * when our last descriptor does (sock.c) */
	uint64_t st_start;		/* st's start_ns when it was made for us */
	_Atomic uint64_t alive_ns;	/* SMCD: when the peer was last known to hold
					 * its end (usmc_coarse_ns; tx.c tx_look_due) */

	/* listener */
	struct usmc_clc_ln *lst;	/* our CLC index (server) */
	int reg_idx;			/* registry record */
	uint8_t lst_reason;		/* no lst: why (enum usmc_reason), 0 unknown */
	struct usmc_addr bound;

	struct usmc_epreg *epregs;	/* epoll registrations (epoll.c, under lock) */
	unsigned int fork_gen;		/* fdtab.c: counted for the current fork */
	unsigned int exec_mark;		/* exec.c: (exec pass << 1) | kept open across it */
	_Atomic bool exit_dropped;	/* exit.c: its share already left (process exit) */
	bool in_nested;			/* registered in an epoll that is itself watched */
	/* A descriptor closed while a call was still in progress on the
	 * socket: our internal duplicate keeps the TCP socket open until the
	 * last reference goes, as the kernel's file reference would. */
	_Atomic int held_fd;
	const struct usmc_sock_ops *ops;
	struct usmc_sock *free_next;
};

/* The link group's ring we write: 0 client to server, 1 server to client. */
static inline int usmc_tx_dir(const struct usmc_sock *sk)
{
	return sk->role == 'C' ? 0 : 1;
}

/* The peer holds its end now: a client posts its proposal to a live
 * listener, a server takes one, or a look at TCP found no FIN (tcp.c).
 * Not when a client sees its accept: the server may have answered and
 * gone long before (a Java server's System.exit right after accept). */
static inline void sk_peer_seen(struct usmc_sock *sk)
{
	STORE_RELAXED(&sk->alive_ns, usmc_coarse_ns());
}

static inline uint32_t sk_mode(const struct usmc_sock *sk)
{
	return LOAD_ACQUIRE(&sk->sh->mode);
}

/*
 * Whoever watches sockets (epoll.c) is told through here, never called by
 * name: the socket layer sits below its watchers, as the kernel's
 * sk_data_ready and wait-queue callbacks do.  The watcher installs itself
 * (release) before its first registration exists; a socket with a
 * registration is reached only through a reference taken after that, so
 * a reader that needs the watcher sees it.
 */
struct usmc_sock_watcher {
	void (*forget)(struct usmc_sock *sk);	/* the last reference is gone */
	void (*changed)(struct usmc_sock *sk);	/* readiness a nested epoll shows */
	void (*edge)(struct usmc_sock *sk);	/* the program's own shutdown() */
};
extern const struct usmc_sock_watcher *_Atomic usmc_sock_watcher;
/* Bumped by every path change: watchers resync their registrations. */
extern _Atomic uint64_t usmc_sock_mode_gen;

static inline const struct usmc_sock_watcher *sk_watcher(void)
{
	return atomic_load_explicit(&usmc_sock_watcher, memory_order_acquire);
}

static inline void sk_watch_forget(struct usmc_sock *sk)
{
	const struct usmc_sock_watcher *w = sk_watcher();

	if (w)
		w->forget(sk);
}

static inline void sk_watch_changed(struct usmc_sock *sk)
{
	const struct usmc_sock_watcher *w = sk_watcher();

	if (w)
		w->changed(sk);
}

static inline void sk_watch_edge(struct usmc_sock *sk)
{
	const struct usmc_sock_watcher *w = sk_watcher();

	if (w)
		w->edge(sk);
}

/* Every path change goes through here: epoll registrations follow it. */
static inline void sk_set_mode(struct usmc_sock *sk, uint32_t mode)
{
	STORE_RELEASE(&sk->sh->mode, mode);
	if (sk->st)
		STORE_RELAXED(&sk->st->mode, (uint8_t)mode);
	atomic_fetch_add(&usmc_sock_mode_gen, 1);
}

static inline bool sk_flag(const struct usmc_sock *sk, uint32_t f)
{
	return LOAD_ACQUIRE(&sk->sh->flags) & f;
}

static inline void sk_set_flag(struct usmc_sock *sk, uint32_t f)
{
	atomic_fetch_or_explicit(&sk->sh->flags, f, memory_order_acq_rel);
}

static inline void sk_clear_flag(struct usmc_sock *sk, uint32_t f)
{
	atomic_fetch_and_explicit(&sk->sh->flags, ~f, memory_order_acq_rel);
}

/*
 * The two views of a ring, loaded and checked once per step.  Reader:
 * prod and the rewind point come from the peer (acquire: the data they
 * cover is visible).  Writer: cons comes from the peer.  false means the
 * peer broke the cursor rules (cdc.h).
 */
static inline bool usmc_rx_view(const struct usmc_sock *sk, uint64_t *head, uint64_t *prod)
{
	uint64_t cons = LOAD_RELAXED(&sk->sh->rx_cons);
	uint64_t p = LOAD_ACQUIRE(&sk->rx_p->prod);
	uint64_t skip = LOAD_ACQUIRE(&sk->rx_p->skip_to);

	*prod = p;
	return ring_view(cons, skip, p, sk->size, head);
}

/*
 * The receive view as the reader sees it, under rx_lock: a look without the
 * lock may pair our copy of cons from before another thread's read with the
 * peer's prod from after it, which breaks the rules only in appearance.
 * 0, -EPROTO (the peer broke them), or the lock's error.
 */
static inline int usmc_rx_view_locked(struct usmc_sock *sk, uint64_t *head, uint64_t *prod)
{
	int rc = usmc_family_lock(&sk->sh->rx_lock);

	if (rc)
		return rc;
	rc = usmc_rx_view(sk, head, prod) ? 0 : -EPROTO;
	usmc_family_unlock(&sk->sh->rx_lock);
	return rc;
}

/*
 * A proposed client reads nothing from its ring, takes no end-of-stream or
 * reset from it, and reuses none of the ring's space, until the server's
 * accept is proven (clc_proof.c): until then anyone could have written
 * there, and everything it queued may still have to go to TCP, from the
 * first byte (migrate.c).  An honest server writes nothing before its
 * accept.  Readiness is not held back: a call that acts looks at the
 * answer first.
 */
static inline bool usmc_unproven(const struct usmc_sock *sk)
{
	return unlikely(sk_mode(sk) == USMC_MODE_PROPOSED);
}

/* A reset from the peer after its FIN (DONE before ABORT on its line):
 * reads end at the FIN (rx.c rx_empty_state). */
static inline bool sk_fin_then_reset(const struct usmc_sock *sk)
{
	uint32_t why = LOAD_RELAXED(&sk->sh->abort);

	/* 0: an abort whose reason is still being stored (usmc_sock_abort
	 * sets the flag first); the peer's line says whose it is. */
	return (why == USMC_A_PEER_RESET || !why) && sk_mode(sk) == USMC_MODE_SMCD &&
	       sk->rx_p && !usmc_unproven(sk) &&
	       (LOAD_ACQUIRE(&sk->rx_p->flags) & (CDC_F_ABORT | CDC_F_DONE)) ==
	       (CDC_F_ABORT | CDC_F_DONE);
}

/*
 * The error a reset shows a sender (and SO_ERROR): ECONNRESET, but EPIPE
 * when the peer's FIN came first (it shut down, then closed with our
 * bytes unread), as TCP's reset of a socket in CLOSE_WAIT does
 * (tcp_reset).  Not after our own FIN too: LAST_ACK, ECONNRESET.
 */
static inline int sk_reset_errno(const struct usmc_sock *sk)
{
	return sk_fin_then_reset(sk) && !(LOAD_RELAXED(&sk->sh->flags) & SKF_SHUT_WR) ?
	       EPIPE : ECONNRESET;
}

/*
 * Our cursors go out in pairs: the line, for the peer (release: the bytes
 * or the free space they cover come first), and our own copy, the only one
 * we read back (sh).  Callers hold tx_lock / rx_lock.
 */
static inline void usmc_tx_publish(struct usmc_sock *sk, uint64_t prod)
{
	cdc_pub_prod(sk->tx_p, prod);
	STORE_RELAXED(&sk->sh->tx_prod, prod);
}

static inline void usmc_tx_publish_skip(struct usmc_sock *sk, uint64_t skip)
{
	cdc_pub_skip(sk->tx_p, skip);
	STORE_RELAXED(&sk->sh->tx_skip, skip);
}

static inline void usmc_rx_publish(struct usmc_sock *sk, uint64_t cons)
{
	cdc_pub_cons(sk->rx_c, cons);
	STORE_RELAXED(&sk->sh->rx_cons, cons);
}

static inline bool usmc_tx_view(const struct usmc_sock *sk, uint64_t *head, uint64_t *prod)
{
	uint64_t p = LOAD_RELAXED(&sk->sh->tx_prod);
	uint64_t cons = LOAD_ACQUIRE(&sk->tx_c->cons);
	uint64_t skip = LOAD_RELAXED(&sk->sh->tx_skip);

	*prod = p;
	return ring_view(cons, skip, p, sk->size, head);
}

/*
 * The sender's view for a write of want bytes, with the cons it loaded last
 * (sh->tx_cons) when that will do: the receiver stores cons on every read,
 * so each load of it pulls a cache line from the other core.  A cons loaded
 * earlier only understates the free space (an honest peer's cons never goes
 * back), so it will do while it leaves room for all of want, unless
 *  - TX_LAZY_WINDOW bytes went out since (sh->tx_cons_at): the sender looks
 *    again at least that often, finds the ring empty if the reader keeps
 *    up, and rewinds (cdc.h), so one-way traffic stays in the first pages;
 *  - we received since (our own cons moved from sh->tx_cons_rx) and we
 *    write TX_LAZY_REWIND or more into the ring: a reply came, the peer
 *    most likely read all we sent, and request/response traffic rewinds,
 *    so its messages keep landing in the same few lines.  Below that
 *    offset, small messages walk on without a look: loading cons there
 *    would pull the line the reader just wrote, and its next store to
 *    cons would have to take it back, both on the way to the reply
 *    (15 % of a 14 B round trip here).
 * What does not check out is loaded afresh and judged as usmc_tx_view()
 * does.  Caller holds tx_lock.
 */
#define TX_LAZY_WINDOW	(16u << 10)
#define TX_LAZY_REWIND	1024u

static inline bool usmc_tx_lazy_ok(uint64_t prod, uint64_t head, uint64_t cons, uint64_t at,
				   bool received, uint32_t size, size_t want)
{
	return (!received || (prod & (size - 1)) < TX_LAZY_REWIND) && prod >= at && prod - at < TX_LAZY_WINDOW && prod >= cons &&
	       ring_valid(prod, head, size) && ring_free(prod, head, size) >= want;
}

static inline __attribute__((always_inline)) bool usmc_tx_view_lazy(struct usmc_sock *sk, uint64_t *head, uint64_t *prod,
				     size_t want)
{
	uint64_t p = LOAD_RELAXED(&sk->sh->tx_prod);
	uint64_t skip = LOAD_RELAXED(&sk->sh->tx_skip);
	uint64_t rx = LOAD_RELAXED(&sk->sh->rx_cons);
	uint64_t cons = sk->sh->tx_cons;

	*prod = p;
	*head = ring_head(cons, skip, p);
	if (likely(usmc_tx_lazy_ok(p, *head, cons, sk->sh->tx_cons_at, rx != sk->sh->tx_cons_rx,
				   sk->size, want)))
		return true;
	cons = LOAD_ACQUIRE(&sk->tx_c->cons);
	if (!ring_view(cons, skip, p, sk->size, head))
		return false;
	sk->sh->tx_cons = cons;
	sk->sh->tx_cons_at = p;
	sk->sh->tx_cons_rx = rx;
	return true;
}

/* Does this socket go through shared memory right now (or may soon)? */
static inline bool sk_is_smc_path(const struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return sk->kind == SK_CONN && (m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED ||
				       m == USMC_MODE_MIGRATING || m == USMC_MODE_UNDECIDED);
}

/*
 * The peer left shared memory (CDC_F_MIGRATE on the line it writes for
 * us) while this end is still on the rings: it is owed the bytes it had
 * not read from our ring, on TCP (usmc_migrate_follow).
 */
static inline bool sk_peer_moved(const struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return (m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED) && sk->tx_c &&
	       (LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE);
}

/* On TCP with a byte still owed that is not the program's (a CLC wake or
 * DECLINE message, bytes a move to TCP sent again: usmc_tcp_skip_wake takes
 * them): the kernel says readable where TCP would not. */
static inline bool sk_owes_bytes(const struct usmc_sock *sk)
{
	return sk_mode(sk) == USMC_MODE_TCP && sk_flag(sk, SKF_WAKEBYTE | SKF_TCP_DUP);
}

/* At the last close or exit: the peer's CLC message is still unread, and
 * ours to take (tcp.c: a server's, declined or not; a client's once
 * on TCP, a moving one takes it as it moves). */
static inline bool sk_close_owes_byte(const struct usmc_sock *sk)
{
	return sk_flag(sk, SKF_WAKEBYTE) && (sk->role == 'S' || sk_mode(sk) == USMC_MODE_TCP);
}

/* sock.c: lifecycle.  ops: what the layers above do at the last
 * reference (struct usmc_sock_ops). */
struct usmc_sock *usmc_sock_new(int fd, int kind, const struct usmc_sock_ops *ops);
/* A local object for an existing shared half (exec adoption). */
struct usmc_sock *usmc_sock_wrap(int fd, int kind, struct usmc_sock_sh *sh,
				 const struct usmc_sock_ops *ops);
void usmc_sock_get(struct usmc_sock *sk);
/* A reference unless the last one is gone already (a close in progress
 * on another thread, before it takes the socket off epoll's lists). */
bool usmc_sock_get_live(struct usmc_sock *sk);
/* A reference goes, with the descriptor being closed (or -1); the last
 * one releases the socket (ops->release). */
void usmc_sock_put_closing(struct usmc_sock *sk, int fd);
void usmc_sock_put_last(struct usmc_sock *sk, int fd);

static inline void usmc_sock_put(struct usmc_sock *sk)
{
	if (local_fetch_add_int(&sk->ref, -1) == 1)
		usmc_sock_put_last(sk, -1);
}
void usmc_sock_detach_local(struct usmc_sock *sk);
/* A server end lets go of the client's link group here (sock.c). */
void usmc_conn_detach_lgr(struct usmc_sock *sk);

/*
 * Returned by data-path calls that did not handle the request because the
 * connection is (now) plain TCP: the wrapper makes the real call.
 */
#define USMC_PASS	(-100000)

/*
 * The fast path (usmc_rx_fast, usmc_tx_fast): a call with plain flags on a
 * connection in SMCD mode with none of the states below, in a process with
 * one thread that has not forked since the socket was made (its locks are
 * a flag, see usmc_flock), nobody in a call on it further up the stack (a
 * signal handler), no epoll that watches an epoll, and a peer that has not
 * moved to TCP.  It does what the general path does in that state, in a
 * few dozen instructions; any other state, or a step it does not take
 * (partial room, EOF, a reset, an invalid view), returns USMC_SLOW with
 * nothing consumed or produced, and the general path starts over.
 */
#define USMC_SLOW	(-100001)
#define SKF_FAST_BAD	(SKF_SHUT_RD | SKF_SHUT_WR | SKF_TCP_EOF | SKF_RST_SEEN | SKF_ABORTED | \
			 SKF_CONNECTING | SKF_TCP_DATA | SKF_LOST | SKF_BUFLIM | SKF_LOWAT)

static inline bool usmc_fast_ok(const struct usmc_sock *sk, const struct usmc_flock *l)
{
	return LOAD_ACQUIRE(&sk->sh->mode) == USMC_MODE_SMCD &&
	       l->gen == LOAD_RELAXED(&usmc_family_gen) && __libc_single_threaded && !l->held &&
	       !(LOAD_ACQUIRE(&sk->sh->flags) & SKF_FAST_BAD) && !sk->in_nested &&
	       !(LOAD_ACQUIRE(&sk->tx_c->flags) & (CDC_F_MIGRATE | CDC_F_RCVLIM));
}

/*
 * What we may have in flight (prod - head): the ring, or what TCP would
 * hold when the application set the buffer sizes (conn.c).  Both
 * limits exclude the fast path above.
 */
uint64_t usmc_tx_cap_slow(const struct usmc_sock *sk);
static inline uint64_t usmc_tx_cap(const struct usmc_sock *sk)
{
	if (likely(!(LOAD_RELAXED(&sk->sh->flags) & SKF_BUFLIM) &&
		   !(LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_RCVLIM)))
		return sk->size;
	return usmc_tx_cap_slow(sk);
}

/* The bytes a read waits for and readiness counts from (SO_RCVLOWAT). */
static inline uint64_t usmc_rcvlowat(const struct usmc_sock *sk, uint32_t flags)
{
	return unlikely(flags & SKF_LOWAT) ? LOAD_RELAXED(&sk->sh->rcvlowat) : 1;
}

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_sock_pool_after_fork(void);

#endif
