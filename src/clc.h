/* SPDX-License-Identifier: MIT */
/*
 * clc.h - Connection Layer Control: the handshake that decides, for one TCP
 * connection, whether both ends move its bytes through shared memory.
 *
 * Kernel SMC exchanges CLC proposal/accept/confirm/decline messages over the
 * TCP connection, after an option in the SYN said both ends can.  usmc
 * cannot set TCP options: the client posts its proposal in the listener's
 * CLC index, in the entry both ends can compute from the 4-tuple (indexed
 * by client port, one of USMC_CLC_WAYS ways by a hash of the client
 * address), and sends on TCP only what a usmc server holding the
 * connection is sure to take (clc_inband.h).  One 64-bit word per entry
 * decides:
 *
 *   client:  EMPTY -> CLAIM(h) -> PROPOSED(h)        (fields written in CLAIM)
 *            WAIT(h, new seq) -> CLAIM(h)+W -> PROPOSED(h)+W, then its PROPOSAL on TCP
 *   server:  PROPOSED(h)[+W] -> EMPTY                 accept: once attached, before answering
 *            PROPOSED(h)[+W] -> DECLINED(h, reason)   decline, then a DECLINE on TCP
 *            EMPTY | TCP | WAIT -> WAIT(h, seq)       accept found nothing: wake me
 *            CLAIM(h) -> CLAIM(h)+W                   (the same, client still writing)
 *            EMPTY | CLAIM(h)[+W] | TCP | WAIT
 *                          -> TCP(h, seq)             must act first: TCP, blocks late proposals
 *   client:  PROPOSED(h)[+W] -> EMPTY                 withdraw (TCP bytes seen, connect failed)
 *            DECLINED(h, r) -> EMPTY                  decline seen (the DECLINE wakes it)
 *            TCP | WAIT (*, old seq) -> CLAIM(h)      a mark older than our connect() is stale
 *
 * TCP and WAIT marks are never cleared: each carries the listener's epoch
 * counter at the time of marking, and a client compares it with the epoch it
 * read before its SYN.  A mark made after that is for this very connection
 * (the server accepted it first); an older one is left over from an earlier
 * connection that used the same client address, and is taken over.  So a
 * client descheduled inside connect() for any length of time can never
 * propose into a connection the server already runs as TCP.
 *
 * Whoever's compare-and-swap lands first decides and both ends agree; no one
 * ever waits on a timeout.  On loopback the TCP handshake completes inside
 * the client's connect(), so the server usually accepts before the proposal
 * exists; it waits briefly for a client announced in flight, and normally
 * finds the proposal.  Otherwise the accepted connection stays undecided
 * until the server must act (it writes first: TCP; TCP bytes or EOF arrive:
 * TCP; the proposal appears: SMC), and a server waiting undecided sleeps on
 * its TCP socket.  So before it returns from accept() undecided it says so
 * in the entry (WAIT, or +W on a claim), and a client whose proposal lands on
 * such a word (PROPOSED(h)+W) sends its PROPOSAL on TCP once, which wakes
 * the server, and which it takes when it matches.  No W, no message: a
 * server that matched at accept costs the client no TCP send and itself no
 * wake-up.  On a device without USMC_DEV_F_CLC_INDEX the entry holds no
 * body and always W: the PROPOSAL on TCP is the body (clc_inband.h).  A server that cannot
 * write the mark (index page unbacked, tmpfs full) degrades the listener
 * first, as for a TCP mark, so no client proposes any more, and runs the
 * connection as TCP (out_of_memory) instead of waiting undecided.
 * A peer that is not usmc never gets a message: W is only ever written by a
 * usmc server or, on such a device, a client that found a usmc listener
 * certainly reached.  An accept is answered in the connection's control
 * block (cdc.h); a decline in the index entry itself, so that a server that
 * cannot even attach the client's link group (out of memory or descriptors)
 * can still say no, followed by a DECLINE on TCP that wakes the client,
 * which knows to take it, as the server takes the PROPOSAL.
 */
#ifndef USMC_CLC_H
#define USMC_CLC_H

#include "dev.h"
#include "guard.h"
#include "registry.h"
#include "usmc.h"

#define USMC_CLC_MAGIC		0x58444e49434c4355ULL	/* "UCLCINDX" */
#define USMC_CLC_WAYS		4
#define USMC_CLC_PORTS		65536

enum usmc_clc_state {
	CLC_EMPTY = 0,
	CLC_CLAIM = 1,		/* client writing its proposal */
	CLC_PROPOSED = 2,	/* proposal complete, waiting for the server */
	CLC_TCP = 3,		/* server accepted this 4-tuple as TCP */
	CLC_WAIT = 4,		/* server accepted it undecided: a proposal wakes it */
	CLC_DECLINED = 0x40,	/* | reason: the server declined the proposal */
};

/* word: seq (32, TCP and WAIT marks only) | hash (24) | W (1) | state (7) */
#define CLC_HASH_BITS		24
#define CLC_WORD(h, st)		(((uint64_t)(h) << 8) | (uint64_t)(st))
#define CLC_MARK_WORD(h, st, seq) (((uint64_t)(uint32_t)(seq) << 32) | CLC_WORD(h, st))
#define CLC_HASH(w)		(((w) >> 8) & ((1ULL << CLC_HASH_BITS) - 1))
#define CLC_STATE(w)		((unsigned int)((w) & 0x7f))
#define CLC_W			0x80ULL	/* on CLAIM/PROPOSED: the server waits, wake it */
#define CLC_IS_MARK(w)		(CLC_STATE(w) == CLC_TCP || CLC_STATE(w) == CLC_WAIT)
#define CLC_SEQ(w)		((uint32_t)((w) >> 32))
/* Serial-number order of 32-bit epochs (they wrap). */
#define CLC_SEQ_AFTER(a, b)	((int32_t)((uint32_t)(a) - (uint32_t)(b)) > 0)

/* The hash of a client address that picks its way and tags its word
 * (odd, CLC_HASH_BITS wide). */
static inline uint64_t usmc_clc_tuple_hash(const struct usmc_addr *a)
{
	uint64_t x, y;

	memcpy(&x, a->a, 8);
	memcpy(&y, a->a + 8, 8);
	x = usmc_mix64(x ^ usmc_mix64(y ^ ((uint64_t)a->port << 48)));
	return (x & ((1ULL << CLC_HASH_BITS) - 1)) | 1;
}

/* One proposal slot; written by the client, validated by the server. */
struct usmc_clc_entry {
	_Atomic uint64_t word;		/* CLC_WORD(hash, state) */
	uint64_t lgr_id;		/* client's link group: lg-<id> */
	uint32_t slot;			/* connection slot in that link group */
	uint32_t gen;			/* slot generation for this connection */
	uint32_t version;		/* USMC_PROTO_VERSION */
	uint8_t devs[4];		/* [0] its link group's device, then the
				 * others the client can use, best first */
	struct usmc_addr client;	/* the client's address as it sees it */
	uint32_t uid;			/* client's euid (informational; checked by fstat) */
	uint32_t pid;
} __cacheline;

#define USMC_CLC_CONNECTING	64

/* Listener index states that stop proposals. */
#define CLC_LN_NOMARK	1u	/* sticky: a TCP decision could not be marked (tmpfs full) */
#define CLC_LN_BUSY	2u	/* the server is short of descriptors for now */
/* The server's controls decline for now: why in bits 8..15, and in bits
 * 16..31 the version of the controls file that said so (usmc_ctl_gen).  A
 * client that sees another version proposes anyway: the server decides
 * again at accept, and marks again. */
#define CLC_LN_OFF	0x10u
#define CLC_LN_OFF_BITS		0xffffff10u
#define CLC_LN_OFF_REASON(d)	(((d) >> 8) & 0xffu)
#define CLC_LN_OFF_GEN(d)	((d) >> 16)

struct usmc_clc_index {
	uint64_t magic;
	uint32_t version;
	uint32_t ways;
	uint64_t id;
	_Atomic uint32_t closed;	/* listener closed gracefully */
	/* CLC_LN_*: clients do not propose while set (checked before and
	 * after their CLAIM, clc.c). */
	_Atomic uint32_t degraded;
	_Atomic uint64_t epoch;		/* bumped by every TCP mark (see above) */
	/* Clients between connect() and their proposal (clc.c,
	 * wait_connecting): a token per announcement (0 free, 1 being
	 * written), the client's link group (for liveness) and its port
	 * once connect() returned (0 until then).  A server that must decide
	 * first waits for the announcements that could be its client. */
	_Atomic uint64_t connecting[USMC_CLC_CONNECTING];
	_Atomic uint64_t connecting_lgr[USMC_CLC_CONNECTING];
	_Atomic uint32_t connecting_port[USMC_CLC_CONNECTING];
	_Atomic uint32_t connecting_cpu[USMC_CLC_CONNECTING];	/* CPU + 1, a hint */
	/* Non-zero: every client sends the wake message (posts W).  The
	 * listener has TCP_DEFER_ACCEPT: the kernel wakes accept() only once
	 * TCP data came, and a proposed client sends none otherwise. */
	_Atomic uint32_t wake_always;
	/* Non-zero: the most KiB one link group's rings may reserve, the
	 * least any server process of the listener can map (its address-space
	 * limit: lgr.c usmc_lgr_fit); clients size theirs to it.  A forged
	 * value only changes the sizes of new link groups (or sends new
	 * connections to TCP, limit_reached). */
	_Atomic uint32_t lgr_fit_kib;
	uint8_t __hdr_pad[4096 - 48 - 24 * USMC_CLC_CONNECTING];
	struct usmc_clc_entry e[USMC_CLC_PORTS][USMC_CLC_WAYS];
};

/* A listener index as one process sees it (server: owner; client: cache). */
#define CLC_INDEX_PAGES	(sizeof(struct usmc_clc_index) / 4096 + 1)

struct usmc_clc_ln {
	_Atomic int refs;
	uint64_t id;
	int fd;				/* ln-<id> */
	int guard;			/* guard.c handle of the mapping (-1: none) */
	struct usmc_clc_index *idx;
	struct usmc_clc_ln *next;	/* client-side cache chain */
	_Atomic uint64_t backed[(CLC_INDEX_PAGES + 63) / 64];	/* pages we fallocated */
};

/*
 * Compare-and-swap loops on an entry word: a peer moves a word through a
 * few states at most, so an honest loop ends within a handful of tries.
 * One that does not faces a process rewriting the word on purpose: it
 * gives up (index_busy, TCP) instead of spinning for as long as that
 * process likes.
 */
#define CLC_CAS_TRIES	64

/* Did someone truncate the index under us?  Then it holds zeros (guard.c)
 * and decides nothing any more: every caller answers rundir_unusable. */
static inline bool usmc_clc_ln_poisoned(const struct usmc_clc_ln *ln)
{
	return usmc_guard_poisoned(ln->guard);
}

/* Proposal contents handed between layers. */
struct usmc_clc_prop {
	uint64_t epoch;			/* client: the listener's epoch before its SYN */
	uint64_t lgr_id;
	uint32_t slot, gen, version, uid, pid;
	uint8_t devs[4];		/* as usmc_clc_entry.devs */
	struct usmc_addr client;
	bool wake;			/* +W: the client sends (sent) its proposal on TCP */
	/* The body goes on TCP (clc_inband.h): the entry carries only
	 * version USMC_CLC_INBAND and the word, always with W. */
	bool inband;
	/* Server: a proposal whose in-band body could not be had, to decline
	 * with this reason (accept.c) */
	int inband_fail;
};

/* An entry's version that says: the body comes on the TCP connection. */
#define USMC_CLC_INBAND		0x494e424eu	/* "INBN" */

/* Server: create ln-<id>, lock it (liveness: a read lock, shared with
 * later joiners), map it (one reference). */
int usmc_clc_ln_create(struct usmc_clc_ln **out);
/* Server: another process listens on the same socket and published ln-<id>
 * (listener.c): open it on a description of our own and hold a read lock
 * there too, so the index lives while any process that listens on the
 * socket does.  -ESRCH: closed meanwhile; -EAGAIN: write-locked (an owner
 * that cannot share). */
int usmc_clc_ln_join(uint64_t id, struct usmc_clc_ln **out);
/* Server: the listener closed; clients stop proposing. */
void usmc_clc_ln_unpublish(struct usmc_clc_ln *ln);
/* Server: short of resources (or not any more): clients stop (resume)
 * proposing, so that they fall back at once instead of being declined. */
void usmc_clc_ln_busy(struct usmc_clc_ln *ln, bool busy);
/* Server: its controls decline (reason: disabled, no_common_device,
 * policy) or accept again (0); clients read it before proposing. */
void usmc_clc_ln_off(struct usmc_clc_ln *ln, int reason);
/* Server: clients must (or need not) send the wake message: the listener's
 * TCP_DEFER_ACCEPT (clc.h wake_always). */
void usmc_clc_ln_wake_always(struct usmc_clc_ln *ln, bool on);
/* Server: lower the listener's link-group fit to bytes (usmc_lgr_fit, 0:
 * none), if it is less.  Client: what it is now, in bytes (0: none). */
void usmc_clc_ln_fit_lower(struct usmc_clc_ln *ln, size_t bytes);
size_t usmc_clc_ln_fit(const struct usmc_clc_ln *ln);
/* The reason our own listener declines for now, or 0. */
int usmc_clc_ln_off_reason(const struct usmc_clc_ln *ln);

/* Client: open (cached) the listener's index; checks the owner is alive.
 * Returns a reference.  fresh: for a new connection, whose index must fit
 * usmc's shares of the address space (vmbudget.h, -E2BIG) and of the
 * descriptor table (ifd.c, -EMFILE); else (a connection that exists, a
 * liveness question) it is opened whatever the shares say. */
int usmc_clc_ln_get(uint64_t id, bool fresh, struct usmc_clc_ln **out);
struct usmc_clc_ln *usmc_clc_ln_ref(struct usmc_clc_ln *ln);
/* After exec: our listener's index from the inherited (locked) fd. */
int usmc_clc_ln_adopt(uint64_t id, int fd, struct usmc_clc_ln **out);
void usmc_clc_ln_put(struct usmc_clc_ln *ln);

/* Client: announce a connect() in flight (returns a slot or -1; *epoch is
 * the listener's epoch, read before the SYN), its port once known, and its
 * end (after the proposal, or giving up). */
int usmc_clc_connect_begin(struct usmc_clc_ln *ln, uint64_t lgr_id, uint64_t *epoch);
void usmc_clc_connect_port(struct usmc_clc_ln *ln, int slot, uint16_t port);
void usmc_clc_connect_end(struct usmc_clc_ln *ln, int slot);

/* Client: post a proposal for 4-tuple key `client`.  0 or a reason; on 0,
 * *wake says the server waits undecided: send it one wake message. */
int usmc_clc_propose(struct usmc_clc_ln *ln, const struct usmc_clc_prop *p, bool *wake);
/* Client: take a proposal back; true when the server had not matched it. */
bool usmc_clc_withdraw(struct usmc_clc_ln *ln, const struct usmc_addr *client);

/* Returned by usmc_clc_match() while no decision is possible yet. */
#define USMC_CLC_PENDING	(-1)

/* How hard usmc_clc_match() tries before answering "no proposal yet". */
enum {
	CLC_PEEK,	/* look once */
	CLC_ACCEPT,	/* accept(): wait briefly for clients in flight */
	CLC_DECIDE,	/* the application acts: decide (TCP unless a proposal) */
};
#define CLC_ACCEPT_WAIT_NS	30000ULL
#define CLC_DECIDE_WAIT_NS	1000000000ULL	/* only a client stopped inside connect() */
#define CLC_INBAND_ACCEPT_WAIT_NS 2000000ULL	/* accept(): an in-band body on its way */
#define CLC_HALF_WRITTEN_NS	20000000ULL	/* an announcement left half written: dead writer */

/* Server: 0 with *p filled: the proposal stays posted until the server
 * answers it with usmc_clc_answer(); p->wake: a wake message comes on TCP;
 * USMC_CLC_PENDING when there is no proposal yet (not CLC_DECIDE; after
 * CLC_ACCEPT the entry says we wait, and a proposal brings a wake message);
 * otherwise a reason (TCP: the tuple is marked TCP(h) unless the reason is
 * index_busy, or rundir_unusable for an index truncated under us, whose
 * zero pages no client can post into any more).  An entry held by a
 * planted link group (no regular file) is cleared and the connection
 * decided at once: TCP(h), rundir_unusable. */
int usmc_clc_match(struct usmc_clc_ln *ln, const struct usmc_addr *client,
		   struct usmc_clc_prop *p, int how);
/* Server: answer a matched proposal: accept (reason 0) or decline.  false
 * when the client took it back meanwhile (it then goes to TCP itself). */
bool usmc_clc_answer(struct usmc_clc_ln *ln, const struct usmc_addr *client, int reason);
/* Client: the server's decline reason for our proposal (and clear it), or 0. */
int usmc_clc_declined(struct usmc_clc_ln *ln, const struct usmc_addr *client);
/* Client: has the server declined our proposal?  (one load; nothing cleared) */
bool usmc_clc_is_declined(struct usmc_clc_ln *ln, const struct usmc_addr *client);
/* Server: is there a complete proposal for this 4-tuple?  (one load) */
bool usmc_clc_has_proposal(struct usmc_clc_ln *ln, const struct usmc_addr *client);

/* Used by fuzzing and tests: validate proposal fields read from shm. */
int usmc_clc_prop_check(const struct usmc_clc_prop *p, const struct usmc_addr *client);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_clc_ln_after_fork(void);

#endif
