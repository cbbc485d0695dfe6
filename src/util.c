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

static const struct {
	const char *name;
	const char *desc;
} reasons[USMC_R_MAX] = {
	[USMC_R_NONE]		= { "none", "accelerated" },
	[USMC_R_PEER_NOT_USMC]	= { "peer_not_usmc", "the peer is not a usmc process" },
	[USMC_R_DISABLED]	= { "disabled", "acceleration disabled by configuration" },
	[USMC_R_NO_DEVICE]	= { "no_common_device", "no device both ends can use" },
	[USMC_R_MEM]		= { "out_of_memory", "shared memory or ring allocation failed" },
	[USMC_R_VERSION]	= { "version_mismatch", "the peer uses another shared-memory format" },
	[USMC_R_PERMISSION]	= { "permission", "the peer's user is not allowed" },
	[USMC_R_LIMIT]		= { "limit_reached", "link group, connection or descriptor limit" },
	[USMC_R_LATE]		= { "server_accepted_first", "the server accepted before the proposal was posted" },
	[USMC_R_INDEX_BUSY]	= { "clc_index_busy", "the handshake slot for this 4-tuple is in use" },
	[USMC_R_UNCERTAIN]	= { "uncertain_route", "the route to the listener is not certain" },
	[USMC_R_RUNDIR]		= { "rundir_unusable", "the runtime directory is missing or unsafe" },
	[USMC_R_PEER_GONE]	= { "peer_gone", "the peer died during the handshake" },
	[USMC_R_SERVER_TCP]	= { "server_chose_tcp", "the server wrote first and committed to TCP" },
	[USMC_R_WITHDRAWN]	= { "proposal_withdrawn", "TCP bytes arrived on a proposed connection" },
	[USMC_R_SOCKOPT]	= { "unsupported_option", "the socket uses an option SMC cannot honour" },
	[USMC_R_EXEC_PLAIN]	= { "exec_without_usmc", "handed to a program without libusmc" },
	[USMC_R_PEER_MIGRATED]	= { "peer_moved_to_tcp", "the peer moved the connection to TCP" },
	[USMC_R_INTERNAL]	= { "internal_error", "internal error" },
	[USMC_R_SPAWN]		= { "spawned_child", "handed to a child started by posix_spawn" },
	[USMC_R_OOB]		= { "oob", "urgent data (MSG_OOB) sent: moved to TCP" },
	[USMC_R_ASYNC_IO]	= { "async_io", "O_ASYNC (SIGIO) set: moved to TCP" },
	[USMC_R_SANDBOXED]	= { "sandboxed", "the process entered a seccomp filter" },
	[USMC_R_REUSEPORT]	= { "reuseport", "the listener shares its port (SO_REUSEPORT) with other "
				    "sockets: the kernel picks one, usmc cannot know which" },
	[USMC_R_HANDOVER]	= { "handed_over", "passed to another process (SCM_RIGHTS)" },
};

const char *usmc_reason_name(int r)
{
	return r >= 0 && r < USMC_R_MAX ? reasons[r].name : "unknown";
}

const char *usmc_reason_desc(int r)
{
	return r >= 0 && r < USMC_R_MAX ? reasons[r].desc : "unknown";
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
