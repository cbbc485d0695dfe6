// SPDX-License-Identifier: MIT
/*
 * reuseport.c - may a client propose to a SO_REUSEPORT listener?
 *
 * Sockets with SO_REUSEPORT on one address and port form a group, and the
 * kernel hands each new connection to one of them by a hash a user-space
 * library cannot see.  Any process of the same user may join the group,
 * usmc or not.  A client may therefore propose to a registered listener
 * only when every socket that could take its connection is that listener:
 * the kernel's own list of listening sockets in the client's namespace
 * (sock_diag) holds no other socket on the port that accepts the
 * destination.  A single server with SO_REUSEPORT set (haproxy's default)
 * is accelerated; a group of several sockets is not (USMC_R_REUSEPORT).
 *
 * Layer: discovery helper, called by registry.c; talks to the kernel
 * directly (nl.c), so it serves the library and the CLI alike.
 * Cost: one netlink socket and two dumps of the namespace's listeners, per
 * connect() to such a listener.
 */
#include "nl.h"
#include "reuseport.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

struct tally {
	unsigned int others;	/* listeners on the port that are not ino */
	bool seen;		/* ino itself listens */
};

/* Can a listener bound to m's address take a connection to dst? */
static bool takes(const struct inet_diag_msg *m, const struct usmc_addr *dst)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	const uint8_t *a = (const uint8_t *)m->id.idiag_src;
	static const uint8_t zero[16];

	if (m->idiag_family == AF_INET) {
		if (!usmc_addr_is_v4(dst))
			return false;
		return !memcmp(a, zero, 4) || !memcmp(a, dst->a + 12, 4);
	}
	/* AF_INET6: the wildcard may take IPv4 too (unless IPV6_V6ONLY, which
	 * we do not ask: counting it errs towards TCP). */
	if (!memcmp(a, zero, 16))
		return true;
	if (!memcmp(a, v4mapped, 12) && !usmc_addr_is_v4(dst))
		return false;
	return !memcmp(a, dst->a, 16);
}

struct tally_arg {
	const struct usmc_addr *dst;
	uint64_t ino;
	struct tally *t;
};

static void tally_one(const struct nlmsghdr *h, void *arg)
{
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	struct tally_arg *a = arg;

	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return;
	if (ntohs(m->id.idiag_sport) != a->dst->port || !takes(m, a->dst))
		return;
	if (m->idiag_inode == a->ino)
		a->t->seen = true;
	else
		a->t->others++;
}

static int dump(int nl, int family, const struct usmc_addr *dst, uint64_t ino,
		struct tally *t)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req = {
		.nlh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY },
		.r = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
		       .idiag_states = 1u << TCP_LISTEN },
	};
	struct tally_arg a = { dst, ino, t };

	return usmc_nl_dump(nl, &req.nlh, tally_one, &a);
}

bool usmc_reuseport_sole(const struct usmc_addr *dst, uint64_t ino)
{
	struct tally t = { 0 };
	bool ok = false;
	int nl;

	if (!ino)
		return false;
	nl = usmc_nl_open(NETLINK_SOCK_DIAG);
	if (nl < 0)
		return false;
	if (!dump(nl, AF_INET, dst, ino, &t) && !dump(nl, AF_INET6, dst, ino, &t))
		ok = t.seen && !t.others;
	usmc_nl_close(nl);
	return ok;
}
