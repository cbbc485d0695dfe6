// SPDX-License-Identifier: MIT
/*
 * route.c - where the kernel sends a connection to dst: the link address
 * of the next hop (route truth for listeners in other namespaces).
 *
 * The registry says which namespaces hold an address; it cannot say that
 * no other namespace holds it: one without usmc processes publishes
 * nothing.  Two namespaces with the same address (containers on separate
 * networks) made a client propose to the usmc listener of one while the
 * kernel connected it to the other: a plain server there waited for a
 * request that sat in the ring (hang), or the usmc listener answered a
 * connection it never had.
 *
 * So a client connected to a listener in another namespace B (af_usmc.c)
 * asks the kernel, once connected (the neighbour is resolved then), for
 * the link address its packets to dst are sent to: the next hop on the
 * route's interface.  Only if that is one of B's own interfaces (B
 * publishes them, registry.c) do the packets enter B, and dst being B's
 * address they are delivered there; across a bridge as across a veth.
 * A router in between, a link without addresses, an unresolved neighbour:
 * not certain, and the connection stays TCP (uncertain_route).
 *
 * Two netlink requests on cross-namespace connects only; raw system calls
 * (the library's wrappers must not see this socket).
 */
#include "nl.h"
#include "route.h"

#include <linux/neighbour.h>
#include <string.h>
#include <sys/socket.h>

struct nl_req {
	struct nlmsghdr h;
	union {
		struct rtmsg rt;
		struct ndmsg nd;
	};
	char attrs[64];
};

static void nl_attr(struct nl_req *r, unsigned short type, const void *data, size_t len)
{
	struct rtattr *a = (struct rtattr *)((char *)r + NLMSG_ALIGN(r->h.nlmsg_len));

	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	memcpy(RTA_DATA(a), data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
}

/* The route to dst: its interface (returned) and next hop (hop, 16
 * bytes, *hoplen 4 or 16: the gateway, or dst itself on link); -errno. */
static int route_nexthop(int s, struct nl_req *r, char *buf, const struct usmc_addr *dst,
			 uint8_t hop[16], size_t *hoplen)
{
	const struct rtattr *a, *gw;
	struct nlmsghdr *h;
	struct rtmsg *rt;
	bool v4 = usmc_addr_is_v4(dst);
	int rc;

	memset(r, 0, sizeof(*r));
	r->h.nlmsg_type = RTM_GETROUTE;
	r->h.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
	r->rt.rtm_family = v4 ? AF_INET : AF_INET6;
	r->rt.rtm_dst_len = v4 ? 32 : 128;
	*hoplen = v4 ? 4 : 16;
	memcpy(hop, v4 ? dst->a + 12 : dst->a, *hoplen);
	nl_attr(r, RTA_DST, hop, *hoplen);
	rc = usmc_nl_ask(s, &r->h, buf, USMC_NL_BUF, &h);
	if (rc)
		return rc;
	if (h->nlmsg_type != RTM_NEWROUTE)
		return -EPROTO;
	rt = NLMSG_DATA(h);
	if (rt->rtm_type != RTN_UNICAST)
		return -ENETUNREACH;
	a = usmc_nl_attr(RTM_RTA(rt), (long)RTM_PAYLOAD(h), RTA_OIF);
	gw = usmc_nl_attr(RTM_RTA(rt), (long)RTM_PAYLOAD(h), RTA_GATEWAY);
	if (!a || RTA_PAYLOAD(a) < sizeof(uint32_t))
		return -ENOENT;
	if (gw) {
		if (RTA_PAYLOAD(gw) != *hoplen)
			return -ENOENT;	/* a gateway of another family (RTA_VIA) */
		memcpy(hop, RTA_DATA(gw), *hoplen);
	}
	return (int)*(const uint32_t *)RTA_DATA(a);
}

/* The link address the neighbour hop on ifindex resolved to; -errno. */
static int neigh_lladdr(int s, struct nl_req *r, char *buf, int ifindex, const uint8_t *hop,
			size_t hoplen, uint8_t mac[6])
{
	const struct rtattr *a;
	struct nlmsghdr *h;
	struct ndmsg *nd;
	int rc;

	memset(r, 0, sizeof(*r));
	r->h.nlmsg_type = RTM_GETNEIGH;
	r->h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ndmsg));
	r->nd.ndm_family = hoplen == 4 ? AF_INET : AF_INET6;
	r->nd.ndm_ifindex = ifindex;
	nl_attr(r, NDA_DST, hop, hoplen);
	rc = usmc_nl_ask(s, &r->h, buf, USMC_NL_BUF, &h);
	if (rc)
		return rc;
	if (h->nlmsg_type != RTM_NEWNEIGH)
		return -EPROTO;
	nd = NLMSG_DATA(h);
	if (!(nd->ndm_state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT)))
		return -EAGAIN;		/* not resolved: no answer yet */
	a = usmc_nl_attr((const struct rtattr *)((char *)nd + NLMSG_ALIGN(sizeof(*nd))),
		      (long)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*nd))), NDA_LLADDR);
	if (!a || RTA_PAYLOAD(a) != 6)
		return -ENOENT;
	memcpy(mac, RTA_DATA(a), 6);
	return 0;
}

int usmc_route_nexthop_mac(const struct usmc_addr *dst, uint8_t mac[6])
{
	char buf[USMC_NL_BUF] __attribute__((aligned(8)));
	struct nl_req r;
	uint8_t hop[16];
	size_t hoplen;
	int s, oif, rc;

	s = usmc_nl_open(NETLINK_ROUTE);
	if (s < 0)
		return s;
	oif = route_nexthop(s, &r, buf, dst, hop, &hoplen);
	rc = oif > 0 ? neigh_lladdr(s, &r, buf, oif, hop, hoplen, mac) : oif < 0 ? oif : -ENOENT;
	usmc_nl_close(s);
	return rc;
}
