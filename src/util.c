// SPDX-License-Identifier: MIT
/*
 * util.c - reason names, address helpers, clocks and randomness.
 */
#include "usmc.h"
#include "sandbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/*
 * Every fallback reason: its stable name (JSON, tests), what happened, and
 * what to do about it.  `usmc stat`, `usmc chk` and usmc(7) print these.
 */
static const struct {
	const char *name;
	const char *desc;
	const char *hint;
} reasons[USMC_R_MAX] = {
	[USMC_R_NONE]		= { "none", "accelerated", "nothing to do" },
	[USMC_R_PEER_NOT_USMC]	= { "peer_not_usmc", "the peer is not a usmc process",
				    "start the peer under usmc run too (and with the same runtime "
				    "directory: -R DIR / USMC_RUNDIR)" },
	[USMC_R_DISABLED]	= { "disabled", "acceleration disabled by configuration",
				    "USMC_DISABLE=1 or usmc run -t in the program's environment, or "
				    "usmc ctl disable=1: see usmc ctl; usmc ctl disable=0 turns it on" },
	[USMC_R_NO_DEVICE]	= { "no_common_device", "no device both ends can use",
				    "the loopback device is off on one end: usmc ctl loopback=1" },
	[USMC_R_MEM]		= { "out_of_memory", "shared memory or ring allocation failed",
				    "the runtime directory's tmpfs is full or memory is short: free "
				    "space there (df /dev/shm), or use smaller rings (usmc ctl "
				    "ring_size=256K)" },
	[USMC_R_VERSION]	= { "version_mismatch", "the peer uses another shared-memory format",
				    "run both ends with the same usmc build (usmc version); restart "
				    "programs started before an upgrade" },
	[USMC_R_PERMISSION]	= { "permission", "the peer is another user, or one USMC_ALLOW does not trust",
				    "run both ends as one user (nginx: add 'user <you>;'): usmc's objects are "
				    "private to their user, so two users always talk over TCP" },
	[USMC_R_LIMIT]		= { "limit_reached", "link group, connection, descriptor or address-space limit "
				    "(also: moved to TCP to give descriptors back when the program ran out)",
				    "raise the descriptor limit (ulimit -n; usmc takes three per "
				    "link group from the top sixteenth) or USMC_LGR_SLOTS; under ulimit -v "
				    "usmc maps link groups in at most an eighth of it: raise it or use "
				    "smaller rings (usmc ctl ring_size=256K)" },
	[USMC_R_LATE]		= { "server_accepted_first", "the server accepted before the proposal was posted",
				    "a timing race at connect; rare and harmless, nothing to do unless "
				    "it is frequent (then report it)" },
	[USMC_R_INDEX_BUSY]	= { "clc_index_busy", "the handshake slot for this 4-tuple is in use",
				    "many connections at once hashed together; harmless, retried on "
				    "the next connection" },
	[USMC_R_UNCERTAIN]	= { "uncertain_route", "the route to the listener is not certain",
				    "two listeners (namespaces or a SO_REUSEPORT group) could take "
				    "the connection; connect to one unambiguous address, or give "
				    "each namespace its own port" },
	[USMC_R_RUNDIR]		= { "rundir_unusable", "the runtime directory is missing or unsafe",
				    "usmc stat says what is wrong with it; remove it, or use a "
				    "directory of your own: usmc run -R DIR / USMC_RUNDIR" },
	[USMC_R_PEER_GONE]	= { "peer_gone", "the peer died during the handshake",
				    "the listener or its link group ended; nothing to do" },
	[USMC_R_SERVER_TCP]	= { "server_chose_tcp", "the server wrote first and committed to TCP",
				    "a server-speaks-first protocol: the client's proposal came after "
				    "the server's first write; nothing to do" },
	[USMC_R_WITHDRAWN]	= { "proposal_withdrawn", "TCP bytes arrived on a proposed connection",
				    "the server's side is not usmc after all (or wrote first); start "
				    "it under usmc run" },
	[USMC_R_SOCKOPT]	= { "unsupported_option", "the socket uses an option SMC cannot honour",
				    "USMC_DEBUG=1 names the option; the connection works on TCP" },
	[USMC_R_EXEC_PLAIN]	= { "exec_without_usmc", "handed to a program without libusmc",
				    "keep LD_PRELOAD for the exec'd program (usmc run passes it on "
				    "unless the program clears its environment)" },
	[USMC_R_PEER_MIGRATED]	= { "peer_moved_to_tcp", "the peer moved the connection to TCP",
				    "see the peer's own reason (usmc stat -d on its side)" },
	[USMC_R_INTERNAL]	= { "internal_error", "internal error",
				    "a bug: rerun with USMC_DEBUG=2 and report the output" },
	[USMC_R_SPAWN]		= { "spawned_child", "handed to a child started by posix_spawn",
				    "works on TCP; fork and exec keep shared memory" },
	[USMC_R_OOB]		= { "oob", "urgent data (MSG_OOB) sent: moved to TCP",
				    "shared memory has no urgent data; the connection goes on over TCP" },
	[USMC_R_ASYNC_IO]	= { "async_io", "O_ASYNC (SIGIO) set: moved to TCP",
				    "signal-driven I/O is TCP only; use poll/epoll to accelerate" },
	[USMC_R_SANDBOXED]	= { "sandboxed", "the process entered a seccomp filter",
				    "a container's filter: USMC_TRUST_SECCOMP=1 if it allows what "
				    "usmc does (docs/containers.md); a program's own filter: TCP" },
	[USMC_R_REUSEPORT]	= { "reuseport", "the listener shares its port (SO_REUSEPORT) with other "
				    "sockets: the kernel picks one, usmc cannot know which",
				    "one listening socket per port (haproxy: noreuseport; nginx: no "
				    "reuseport on listen), or accept the TCP path" },
	[USMC_R_HANDOVER]	= { "handed_over", "passed to another process (SCM_RIGHTS)",
				    "works on TCP; accept in the process that listens to accelerate" },
	[USMC_R_POLICY]		= { "policy", "a port, program or namespace rule excludes it",
				    "usmc ctl shows the rules (ports, exclude_ports, programs, "
				    "exclude_programs, off_netns) and where each was set" },
	[USMC_R_STDIO]		= { "stdio", "on descriptor 0, 1 or 2, or given to fdopen(): "
				    "glibc's stdio reads and writes it past usmc",
				    "works on TCP; a server that keeps its connections off "
				    "descriptors 0-2 (and off fdopen) is accelerated" },
	[USMC_R_UNBOUND]	= { "unbound", "the other end of the TCP connection is not held by the usmc "
				    "process that spoke for it: a record, proposal or answer in the "
				    "runtime directory came from another process",
				    "another process of the user writes into the runtime directory; "
				    "usmc run -R DIR gives a program a directory of its own" },
	[USMC_R_DEV_UNSHARED]	= { "device_unshared", "shared with another process (fork, exec or "
				    "SCM_RIGHTS) on a device that cannot share a connection",
				    "works on TCP; a server that accepts in the process that serves "
				    "the connection keeps it accelerated" },
	[USMC_R_BACKLOG]	= { "backlog_full", "the server's accept queue was full when the "
				    "client connected (only TCP bytes complete such a connection)",
				    "a larger listen() backlog, or a server that accepts sooner; the "
				    "connection works on TCP" },
};

const char *usmc_reason_name(int r)
{
	return r >= 0 && r < USMC_R_MAX ? reasons[r].name : "unknown";
}

const char *usmc_reason_desc(int r)
{
	return r >= 0 && r < USMC_R_MAX ? reasons[r].desc : "unknown";
}

const char *usmc_reason_hint(int r)
{
	return r >= 0 && r < USMC_R_MAX ? reasons[r].hint : "unknown reason: a newer usmc build?";
}

const char *usmc_abort_name(int a)
{
	static const char *const names[USMC_A_MAX] = {
		"none", "peer_reset", "peer_died", "protocol_violation", "local_reset",
	};

	return a >= 0 && a < USMC_A_MAX ? names[a] : "unknown";
}

static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

int usmc_addr_from_sa(struct usmc_addr *out, const struct sockaddr *sa,
		      unsigned int salen)
{
	memset(out, 0, sizeof(*out));
	if (!sa)
		return -EINVAL;
	if (sa->sa_family == AF_INET && salen >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;

		memcpy(out->a, v4mapped, 12);
		memcpy(out->a + 12, &in->sin_addr, 4);
		out->port = ntohs(in->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && salen >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		memcpy(out->a, &in6->sin6_addr, 16);
		out->port = ntohs(in6->sin6_port);
		return 0;
	}
	return -EAFNOSUPPORT;
}

bool usmc_addr_is_v4(const struct usmc_addr *a)
{
	return memcmp(a->a, v4mapped, 12) == 0;
}

bool usmc_addr_is_loopback(const struct usmc_addr *a)
{
	static const uint8_t v6lo[16] = { [15] = 1 };

	if (usmc_addr_is_v4(a))
		return a->a[12] == 127;
	return memcmp(a->a, v6lo, 16) == 0;
}

bool usmc_addr_is_any(const struct usmc_addr *a)
{
	static const uint8_t zero[16];

	if (usmc_addr_is_v4(a))
		return !a->a[12] && !a->a[13] && !a->a[14] && !a->a[15];
	return memcmp(a->a, zero, 16) == 0;
}

char *usmc_addr_str(const struct usmc_addr *a, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	if (usmc_addr_is_v4(a)) {
		inet_ntop(AF_INET, a->a + 12, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, a->port);
	} else {
		inet_ntop(AF_INET6, a->a, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, a->port);
	}
	return buf;
}

uint64_t usmc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t usmc_ms_left(uint64_t deadline)
{
	uint64_t now = usmc_now_ns();

	if (now >= deadline)
		return 0;
	return (int64_t)((deadline - now + 999999) / 1000000);
}

/* sandbox.h: set by libusmc's sandbox.c, here so that the layers the CLI
 * shares (stats.c) can test it. */
_Atomic bool usmc_sandbox_on;

static _Atomic pid_t self_pid;

pid_t usmc_getpid(void)
{
	pid_t p = LOAD_RELAXED(&self_pid);

	if (unlikely(!p)) {
		p = getpid();
		STORE_RELAXED(&self_pid, p);
	}
	return p;
}

void usmc_getpid_forget(void)
{
	STORE_RELAXED(&self_pid, 0);
}

/* This thread's id, asked once per thread and process: a fork child's
 * thread finds another pid beside its copy and asks again. */
pid_t usmc_gettid(void)
{
	static __thread uint64_t self_tid __attribute__((tls_model("initial-exec")));
	uint64_t pid = (uint32_t)usmc_getpid();

	if (unlikely(self_tid >> 32 != pid))
		self_tid = pid << 32 | (uint32_t)gettid();
	return (pid_t)(uint32_t)self_tid;
}

int usmc_retry_check(struct usmc_retry *r)
{
	uint64_t until = LOAD_RELAXED(&r->until_ns);

	if (likely(!until) || usmc_now_ns() >= until)
		return 0;
	return LOAD_RELAXED(&r->rc);
}

int usmc_retry_note(struct usmc_retry *r, int rc)
{
	if (rc) {
		STORE_RELAXED(&r->rc, rc);
		STORE_RELAXED(&r->until_ns, usmc_now_ns() + USMC_RETRY_NS);
	} else {
		STORE_RELAXED(&r->until_ns, 0);
	}
	return rc;
}

uint64_t usmc_random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = usmc_mix64(usmc_now_ns() ^ ((uint64_t)getpid() << 32) ^
			       (uint64_t)(uintptr_t)&v);
	return v;
}
