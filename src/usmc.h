/* SPDX-License-Identifier: MIT */
/*
 * usmc.h - definitions shared by every layer of libusmc and the usmc CLI.
 *
 * Nothing here knows about sockets; it holds the compiler helpers, the
 * fallback/decline reason table and the address type used by discovery.
 */
#ifndef USMC_H
#define USMC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/types.h>
#include <time.h>

#define USMC_VERSION_STR	"0.1.0"
#define USMC_PROTO_VERSION	15	/* shared-memory format generation */

/*
 * The runtime directory's shared files carry the format in their names, so
 * usmc builds of different formats sharing a directory (programs started
 * before an upgrade, files an older build left) never open each other's:
 * each generation sees only its own registry and counters.
 */
#define USMC_XSTR(x)		USMC_STR(x)
#define USMC_STR(x)		#x
#define USMC_REGISTRY_FILE	"registry-v" USMC_XSTR(USMC_PROTO_VERSION)
#define USMC_STATS_FILE		"stats-v" USMC_XSTR(USMC_PROTO_VERSION)

#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#define USMC_CACHELINE	64
#define __cacheline	__attribute__((aligned(USMC_CACHELINE)))
#define __unused	__attribute__((unused))
#define MIN(a, b)	((a) < (b) ? (a) : (b))
#define MAX(a, b)	((a) > (b) ? (a) : (b))

#define BUILD_BUG_ON(cond)	_Static_assert(!(cond), #cond)

/* Relaxed single-copy accesses to shared memory written by someone else. */
#define LOAD_RELAXED(p)		atomic_load_explicit((p), memory_order_relaxed)
#define STORE_RELAXED(p, v)	atomic_store_explicit((p), (v), memory_order_relaxed)
#define LOAD_ACQUIRE(p)		atomic_load_explicit((p), memory_order_acquire)
#define STORE_RELEASE(p, v)	atomic_store_explicit((p), (v), memory_order_release)

/*
 * A standalone fence.  ThreadSanitizer does not model fences (gcc refuses
 * them under -fsanitize=thread); there an RMW on a process-local word with
 * the same order stands in.  It orders nothing across processes, which
 * TSan cannot observe anyway.
 */
#if defined(__SANITIZE_THREAD__)
#define FENCE(order)							\
	do {								\
		static _Atomic int fence_word__;			\
		atomic_fetch_add_explicit(&fence_word__, 0, (order));	\
	} while (0)
#else
#define FENCE(order)	atomic_thread_fence(order)
#endif

/*
 * Read-modify-writes on process-private words (reference counts, our own
 * counters) while the process has one thread (glibc's
 * __libc_single_threaded): the only other party is a signal handler of
 * that thread, and one instruction without the lock prefix is atomic
 * against it.  A locked one also waits for the store buffer, which right
 * after a copy into the peer's ring holds lines the other core owns: each
 * cost as much as the rest of a 100 B send.  Elsewhere (other CPUs, TSan)
 * the locked form.
 */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define USMC_LOCAL_RMW	1
#endif

static inline void local_add_u64(_Atomic uint64_t *p, uint64_t v)
{
#ifdef USMC_LOCAL_RMW
	if (likely(__libc_single_threaded)) {
		__asm__ __volatile__("addq %1, %0" : "+m"(*(uint64_t *)p) : "er"(v) : "cc");
		return;
	}
#endif
	atomic_fetch_add_explicit(p, v, memory_order_relaxed);
}

/* Returns the old value. */
static inline int local_fetch_add_int(_Atomic int *p, int v)
{
#ifdef USMC_LOCAL_RMW
	if (likely(__libc_single_threaded)) {
		__asm__ __volatile__("xaddl %0, %1" : "+r"(v), "+m"(*(int *)p) : : "cc", "memory");
		return v;
	}
#endif
	return atomic_fetch_add_explicit(p, v, memory_order_acq_rel);
}

static inline bool local_cas_int(_Atomic int *p, int *expected, int desired)
{
#ifdef USMC_LOCAL_RMW
	if (likely(__libc_single_threaded)) {
		int old = *expected;
		bool ok;

		__asm__ __volatile__("cmpxchgl %3, %1\n\tsete %0"
				     : "=q"(ok), "+m"(*(int *)p), "+a"(old)
				     : "r"(desired) : "cc", "memory");
		*expected = old;
		return ok;
	}
#endif
	return atomic_compare_exchange_strong_explicit(p, expected, desired, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* This thread's id without a system call after the first (util.c). */
pid_t usmc_gettid(void);

/*
 * Lock m unless that takes long: for descriptor shedding (shed.c), which
 * may run in a signal handler that interrupted this very thread inside m,
 * where a plain lock never returns.  That case is mostly seen at once
 * (glibc records the owner's thread id in a mutex it holds; not in the
 * instants around lock and unlock); otherwise a few hundred spins (some
 * microseconds) wait out another thread's short hold, and a longer one
 * makes the shed give nothing back.
 */
static inline bool usmc_lock_bounded(pthread_mutex_t *m)
{
	int i;

	for (i = 0; i < 256; i++) {
		if (!pthread_mutex_trylock(m))
			return true;
		if (__atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) == usmc_gettid())
			return false;
		cpu_relax();
	}
	return false;
}

/*
 * Why a connection is not (or no longer) on shared memory.  Modelled on the
 * kernel's SMC_CLC_DECL_* codes: a positive reason means "fall back to TCP",
 * never an error the application sees.  The names are a stable contract:
 * `usmc stat --json` prints them and tests match on them.
 */
enum usmc_reason {
	USMC_R_NONE = 0,	/* accelerated, or not decided yet */
	USMC_R_PEER_NOT_USMC,	/* the peer is not a usmc process (no listener registered / no proposal) */
	USMC_R_DISABLED,	/* acceleration disabled by configuration (USMC_DISABLE, port filter) */
	USMC_R_NO_DEVICE,	/* no device both ends can use */
	USMC_R_MEM,		/* shared memory, ring or descriptor allocation failed */
	USMC_R_VERSION,		/* the peer speaks another shared-memory format version */
	USMC_R_PERMISSION,	/* the peer's user is not allowed by the acceleration policy */
	USMC_R_LIMIT,		/* link group, connection or file descriptor limit reached */
	USMC_R_LATE,		/* the server accepted before the client's proposal was posted */
	USMC_R_INDEX_BUSY,	/* the CLC index entry for this 4-tuple is held by another connection */
	USMC_R_UNCERTAIN,	/* the route to the listener is not certain (ambiguous netns) */
	USMC_R_RUNDIR,		/* the runtime directory is missing or unsafe */
	USMC_R_PEER_GONE,	/* the listener or link group owner died during the handshake */
	USMC_R_SERVER_TCP,	/* the server committed to TCP first (it wrote before the proposal) */
	USMC_R_WITHDRAWN,	/* the client saw TCP bytes on a proposed connection and withdrew */
	USMC_R_SOCKOPT,		/* a socket option or mode SMC cannot honour */
	USMC_R_EXEC_PLAIN,	/* handed across exec() to a program without libusmc */
	USMC_R_PEER_MIGRATED,	/* the peer moved the connection to TCP */
	USMC_R_INTERNAL,	/* internal error (bug): details with USMC_DEBUG=1 */
	USMC_R_SPAWN,		/* handed to a child started by posix_spawn() (spawn.c) */
	USMC_R_OOB,		/* urgent data (send MSG_OOB): moved to TCP first (tx.c) */
	USMC_R_ASYNC_IO,	/* O_ASYNC (SIGIO): moved to TCP first (interpose.c) */
	USMC_R_SANDBOXED,	/* the process entered a seccomp filter (sandbox.c) */
	USMC_R_REUSEPORT,	/* the listener's SO_REUSEPORT group has other sockets (reuseport.c) */
	USMC_R_HANDOVER,	/* passed to another process with SCM_RIGHTS (handover.c) */
	USMC_R_POLICY,		/* a port, program or namespace rule excludes it (options.c) */
	USMC_R_STDIO,		/* on descriptors 0-2, which stdio writes past usmc (stdstream.c) */
	USMC_R_UNBOUND,		/* the CLC step did not come from the holder of the connection's other end (clc_bind.c) */
	USMC_R_DEV_UNSHARED,	/* shared with another process (fork, exec, SCM_RIGHTS) on a device that cannot (dev.h) */
	USMC_R_BACKLOG,		/* not established on the server's side: its accept queue was full (clc_proof.c) */
	USMC_R_MAX
};

/* Reasons a live shared-memory connection was aborted (ECONNRESET). */
enum usmc_abort {
	USMC_A_NONE = 0,
	USMC_A_PEER_RESET,	/* the peer reset or closed with unread data */
	USMC_A_PEER_DIED,	/* the peer's TCP socket closed without a usmc close */
	USMC_A_PROTOCOL,	/* the peer wrote an invalid cursor, flag or length */
	USMC_A_LOCAL,		/* we closed with unread data or SO_LINGER 0 (we sent the RST) */
	USMC_A_MAX
};

const char *usmc_reason_name(int reason);
const char *usmc_reason_desc(int reason);
/* What to do about a fallback, in words (`usmc stat`, `usmc chk`). */
const char *usmc_reason_hint(int reason);
const char *usmc_abort_name(int abort_reason);

/*
 * A transport address as both ends see it.  IPv4 is stored v4-mapped so one
 * comparison works for AF_INET, AF_INET6 and dual-stack listeners.
 */
struct usmc_addr {
	uint8_t a[16];		/* network byte order, IPv4 as ::ffff:a.b.c.d */
	uint16_t port;		/* host byte order */
	uint16_t __pad;
};

struct sockaddr;
int usmc_addr_from_sa(struct usmc_addr *out, const struct sockaddr *sa,
		      unsigned int salen);
bool usmc_addr_is_v4(const struct usmc_addr *a);
bool usmc_addr_is_loopback(const struct usmc_addr *a);
bool usmc_addr_is_any(const struct usmc_addr *a);
static inline bool usmc_addr_ip_eq(const struct usmc_addr *x,
				   const struct usmc_addr *y)
{
	return memcmp(x->a, y->a, 16) == 0;
}
/* Format "1.2.3.4:80" or "[::1]:80" into buf (at least 64 bytes). */
char *usmc_addr_str(const struct usmc_addr *a, char *buf, size_t len);

/* 64-bit mix (splitmix64 finaliser) used for every hash in shared memory. */
static inline uint64_t usmc_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t usmc_now_ns(void);	/* CLOCK_MONOTONIC */
/* CLOCK_MONOTONIC_COARSE: the kernel's last tick (4 ms here), one load
 * through the vDSO (5 ns here, against 23 ns for usmc_now_ns). */
static inline uint64_t usmc_coarse_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
/* Whole milliseconds left until deadline (usmc_now_ns), rounded up; 0 past it. */
int64_t usmc_ms_left(uint64_t deadline);
/* getpid() without a system call per connection: cached, forgotten in a
 * fork child (interpose.c atfork_child).  A child made by a raw clone(2)
 * that calls into usmc before exec would see its parent's pid; its
 * descriptor table is then wrong already (fdtab.c). */
pid_t usmc_getpid(void);
void usmc_getpid_forget(void);

/*
 * A shared file that could not be attached (runtime directory unsafe or
 * full, something not ours at its name) is tried again at most every
 * USMC_RETRY_NS; until then callers get the same error for a clock read.
 * Connections that fall back because of it then cost a cheap local lookup,
 * not an open, a map and an unmap each.
 */
#define USMC_RETRY_NS		(250 * 1000000ull)

struct usmc_retry {
	_Atomic uint64_t until_ns;	/* 0: no failure remembered */
	_Atomic int rc;			/* the remembered -errno */
};

int usmc_retry_check(struct usmc_retry *r);	/* 0 or the remembered -errno */
int usmc_retry_note(struct usmc_retry *r, int rc);	/* returns rc */
uint64_t usmc_random64(void);	/* getrandom(), never blocks after boot */

#endif /* USMC_H */
