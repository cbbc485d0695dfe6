/* SPDX-License-Identifier: MIT */
/*
 * stats.h - cumulative counters and the live connection table.
 *
 * One file in the runtime directory (like smc_stats + smcss in one):
 *   header    magic, totals folded in from processes that ended
 *   procs[]   one slot per live process; only its owner writes its counters
 *             (no cache line is shared between processes on the hot path)
 *   conns[]   one entry per live connection, for `usmc stat`
 * A process owns its slot while it holds an OFD lock on byte
 * USMC_STATS_LOCK_BASE + slot; a slot whose lock is free belongs to a dead
 * process and is folded into the totals by whoever notices first.
 */
#ifndef USMC_STATS_H
#define USMC_STATS_H

#include "usmc.h"

#define USMC_STATS_MAGIC	0x5441545343534d55ULL	/* "UMSCSTAT" */
#define USMC_STATS_PROCS	1024
#define USMC_STATS_CONNS	16384
#define USMC_STATS_LOCK_BASE	(1L << 30)
/* Ring size histogram: bucket i counts rings of 16 KiB << i (16 KiB .. 64 MiB). */
#define USMC_RING_HIST		13
#define USMC_RING_HIST_MIN	16384
/* Call size histogram: bucket 0 counts calls that moved <= 64 bytes, bucket
 * i <= 64 << 2i bytes (256 B, 1 KiB, ... 256 KiB), the last one more. */
#define USMC_SIZE_HIST		8

/* All counters are cumulative; units in the names. */
struct usmc_counters {
	_Atomic uint64_t smc_conns;		/* endpoints that moved data through shared memory */
	_Atomic uint64_t smc_client;		/* ... of which client side */
	_Atomic uint64_t smc_server;		/* ... of which server side */
	_Atomic uint64_t tcp_conns;		/* endpoints that stayed on (or fell back to) TCP */
	_Atomic uint64_t handshake_errors;	/* CLC steps that failed unexpectedly */
	_Atomic uint64_t tx_bytes;		/* bytes written into shared rings */
	_Atomic uint64_t rx_bytes;		/* bytes read from shared rings */
	_Atomic uint64_t tcp_tx_bytes;		/* bytes sent on TCP-mode connections */
	_Atomic uint64_t tcp_rx_bytes;		/* bytes received on TCP-mode connections */
	_Atomic uint64_t tx_calls;		/* send-side calls served from shared memory */
	_Atomic uint64_t rx_calls;		/* receive-side calls served from shared memory */
	_Atomic uint64_t tx_fast;		/* ... of the send-side calls, on the fast path (sock.h) */
	_Atomic uint64_t rx_fast;		/* ... of the receive-side calls, on the fast path */
	_Atomic uint64_t doorbells;		/* wake-ups sent to a sleeping peer */
	_Atomic uint64_t sleeps;		/* waits that went to sleep in the kernel */
	_Atomic uint64_t spin_hits;		/* waits satisfied while spinning */
	_Atomic uint64_t lgr_created;		/* link groups created (owner side) */
	_Atomic uint64_t lgr_attached;		/* link groups attached (peer side) */
	_Atomic uint64_t dmbs_registered;	/* DMBs handed out (2 per connection) */
	_Atomic uint64_t dmbs_reused;		/* ... of which recycled from a link group */
	_Atomic uint64_t late_declines;		/* declines after data was queued (moved to TCP) */
	_Atomic uint64_t wake_bytes;		/* CLC proposals sent on TCP to wake a
						 * server waiting undecided (the name of
						 * their one-byte days) */
	_Atomic uint64_t aborts[USMC_A_MAX];	/* shared-memory connections reset, by reason */
	_Atomic uint64_t fallback[USMC_R_MAX];	/* TCP fallbacks, by reason */
	_Atomic uint64_t tx_full;		/* sends that found the peer's ring full */
	_Atomic uint64_t fallback_server[USMC_R_MAX];	/* ... of the fallbacks, server side */
	_Atomic uint64_t ring_hist[USMC_RING_HIST];	/* endpoints on shared memory, by ring size */
	_Atomic uint64_t tx_size_hist[USMC_SIZE_HIST];	/* tx_calls by bytes sent */
	_Atomic uint64_t rx_size_hist[USMC_SIZE_HIST];	/* rx_calls by bytes received */
	_Atomic uint64_t ring_given_back;	/* ring bytes idle connections gave back (tx_backing.c) */
	_Atomic uint64_t doorbells_spared;	/* arms answered without a ring: the peer was awake */
	_Atomic uint64_t doorbells_unarmed;	/* of the doorbells, rings a device dropped: the
						 * peer had not re-armed it (dev.h progress) */
	/* CLC messages on TCP (clc_inband.h), every type, sent and taken */
	_Atomic uint64_t clc_msgs_tx, clc_msgs_rx;
	/* proposals whose body went on TCP (client) / came on it (server):
	 * a device without USMC_DEV_F_CLC_INDEX */
	_Atomic uint64_t clc_inband_tx, clc_inband_rx;
	/* New counters go here, last, and into NCOUNTERS (stats.c). */
} __cacheline;

/* The bucket of a ring of size bytes (a power of two). */
static inline unsigned int usmc_ring_bucket(uint32_t size)
{
	unsigned int b = 0;

	while (b + 1 < USMC_RING_HIST && (uint64_t)USMC_RING_HIST_MIN << (b + 1) <= size)
		b++;
	return b;
}

/* The bucket of a call that moved n > 0 bytes. */
static inline unsigned int usmc_size_bucket(uint64_t n)
{
	unsigned int bits = n > 64 ? 64 - (unsigned int)__builtin_clzll(n - 1) : 6;

	return MIN((bits - 5) / 2, USMC_SIZE_HIST - 1);
}

enum usmc_conn_mode {
	USMC_MODE_NONE = 0,
	USMC_MODE_SMCD,		/* shared memory (SMC-D loopback) */
	USMC_MODE_TCP,		/* plain TCP, reason says why */
	USMC_MODE_PROPOSED,	/* client: proposal posted, server has not answered */
	USMC_MODE_MIGRATING,	/* client: declined late, queued bytes moving to TCP */
	USMC_MODE_UNDECIDED,	/* server: accepted, no proposal yet, nothing forced a choice */
};

struct usmc_stats_conn {
	_Atomic uint32_t state;		/* 0 free, 1 live */
	_Atomic uint16_t proc;		/* owning process slot */
	uint8_t role;			/* 'C' client, 'S' server */
	_Atomic uint8_t mode;		/* enum usmc_conn_mode */
	_Atomic uint8_t reason;		/* enum usmc_reason when mode is TCP */
	_Atomic uint8_t abort;		/* enum usmc_abort once reset */
	_Atomic uint8_t closing;	/* shutdown/close seen */
	uint8_t __pad;
	int32_t fd;
	uint32_t pid;
	uint32_t slot;			/* link group slot */
	uint32_t ring_size;		/* bytes per direction */
	uint64_t lgr_id;
	_Atomic uint64_t start_ns;	/* CLOCK_REALTIME; with proc, read by a
					 * free that may race the slot's next alloc */
	struct usmc_addr local, peer;
	_Atomic uint64_t tx_bytes, rx_bytes;
} __cacheline;

/* UNIX sockets that processes read descriptors from with libusmc
 * (scm_peer.c): per process, the last USMC_UX_READ socket inodes it
 * announced; per file, the last USMC_UX_TAINT inodes that a program
 * without libusmc may read too. */
#define USMC_UX_READ	64
#define USMC_UX_TAINT	256

struct usmc_stats_proc {
	_Atomic uint32_t state;		/* 0 free, 1 live, 2 being folded */
	uint32_t pid;
	char comm[16];
	uint64_t start_ns;
	struct usmc_counters c;
	struct usmc_counters base;	/* c at the last `usmc stat --reset`: the slot counts c - base */
	_Atomic uint64_t ux_read[USMC_UX_READ];	/* socket inodes, 0 none; written by the owner */
	_Atomic uint32_t ux_next;		/* next ux_read entry to overwrite */
	_Atomic uint32_t nconns;		/* conns[] entries it holds: folding a slot
						 * that held none skips the scan (a forked
						 * child's exit scanned 2 MiB); anyone's word,
						 * only ever a reason to scan or not */
} __cacheline;

struct usmc_stats_file {
	uint64_t magic;
	uint32_t version;
	uint32_t nprocs, nconns;
	uint64_t created_ns;		/* CLOCK_REALTIME */
	_Atomic uint64_t resets;	/* `usmc stat --reset` count */
	struct usmc_counters totals;	/* folded from ended processes */
	_Atomic uint64_t ux_taint[USMC_UX_TAINT];	/* socket inodes, 0 none; anyone writes */
	_Atomic uint32_t ux_taint_next;
	struct usmc_stats_proc procs[USMC_STATS_PROCS];
	struct usmc_stats_conn conns[USMC_STATS_CONNS];
};

/* This process's counters: never NULL, a private dummy until stats open. */
extern _Atomic(struct usmc_counters *) usmc_ctr;
/*
 * A counter of ours (process slot or connection entry): nobody else writes
 * it (a reset moves the slot's base instead), so while the process has one
 * thread an add needs no locked RMW (local_add_u64(), usmc.h).
 */
static inline void usmc_stat_add(_Atomic uint64_t *c, uint64_t n)
{
	local_add_u64(c, n);
}

#define STAT_ADD(field, n)	usmc_stat_add(&LOAD_ACQUIRE(&usmc_ctr)->field, (uint64_t)(n))
#define STAT_INC(field) STAT_ADD(field, 1)
/* A call of direction dir (tx, rx) served from shared memory, n bytes. */
#define STAT_CALL(dir, n)							\
	do {									\
		STAT_INC(dir##_calls);						\
		STAT_INC(dir##_size_hist[usmc_size_bucket((uint64_t)(n))]);	\
	} while (0)

/* Library: open the file and claim a process slot (idempotent). */
int usmc_stats_attach(void);
/* After fork in the child: claim a new slot with a new file description. */
void usmc_stats_after_fork(void);
/* Process exit: fold our counters into the totals and free the slot. */
void usmc_stats_detach(void);

struct usmc_stats_conn *usmc_stats_conn_alloc(void);
/* Unlisted, if c is still the entry made at start (an entry freed and
 * made again for another connection is left alone). */
void usmc_stats_conn_free(struct usmc_stats_conn *c, uint64_t start);
/* An entry's place in conns[], and the entry at a place (NULL: none). */
uint32_t usmc_stats_conn_index(const struct usmc_stats_conn *c);
struct usmc_stats_conn *usmc_stats_conn_at(uint32_t idx);

/* CLI: map the file read-write without claiming a slot. */
struct usmc_stats_file *usmc_stats_map(void);
/* Fold slots of dead processes; returns how many were folded. */
int usmc_stats_gc(struct usmc_stats_file *f, int fd);
int usmc_stats_fd(void);
/* The file and this process's slot in it (NULL: none), for scm_peer.c. */
struct usmc_stats_file *usmc_stats_self(int *slot);
/* Sum totals and live slots into out (plain integers). */
struct usmc_counters_snapshot {
	uint64_t v[sizeof(struct usmc_counters) / sizeof(uint64_t)];
};
void usmc_stats_sum(struct usmc_stats_file *f, struct usmc_counters_snapshot *out);
void usmc_stats_reset(struct usmc_stats_file *f);

#endif
