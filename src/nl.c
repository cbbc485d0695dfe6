// SPDX-License-Identifier: MIT
/*
 * nl.c - netlink requests with raw system calls (nl.h).
 */
#include "nl.h"
#include "sys.h"

#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>

int usmc_nl_open(int protocol)
{
	return (int)usmc_sys6(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol, 0, 0, 0);
}

void usmc_nl_close(int s)
{
	sys_close(s);
}

/* Each request its own number: an answer left unread on a socket (a
 * signal ended the recvfrom that waited for it) is never taken for the
 * answer to the next request, which asked about another socket. */
static uint32_t nl_seq;

int usmc_nl_ask(int s, struct nlmsghdr *req, char *buf, size_t size, struct nlmsghdr **out)
{
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	struct nlmsghdr *h;
	long n;

	req->nlmsg_flags = NLM_F_REQUEST;
	req->nlmsg_seq = __atomic_add_fetch(&nl_seq, 1, __ATOMIC_RELAXED);
	n = usmc_sys6(SYS_sendto, s, (long)req, req->nlmsg_len, 0, (long)&k, sizeof(k));
	if (n < 0)
		return (int)n;
	for (;;) {
		/* The analyzer cannot see a raw recvfrom fill it. */
		memset(buf, 0, size);
		n = usmc_sys6(SYS_recvfrom, s, (long)buf, (long)size, 0, 0, 0);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned long)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != req->nlmsg_seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				return e->error ? e->error : -ENOENT;
			}
			*out = h;
			return 0;
		}
	}
}

const struct rtattr *usmc_nl_attr(const struct rtattr *a, long len, unsigned short type)
{
	for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == type)
			return a;
	return NULL;
}
