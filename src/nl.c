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

static long nl_send(int s, struct nlmsghdr *req, uint16_t flags)
{
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };

	req->nlmsg_flags = flags;
	req->nlmsg_seq = __atomic_add_fetch(&nl_seq, 1, __ATOMIC_RELAXED);
	return usmc_sys6(SYS_sendto, s, (long)req, req->nlmsg_len, 0, (long)&k, sizeof(k));
}

/*
 * The answer to req, into buf: with fn, a dump's messages one by one until
 * NLMSG_DONE (0); without, its first message (*out).  Messages of other
 * requests are skipped.  -errno: the kernel's error for the request (an
 * acknowledgement without a message: -ENOENT), or a failed call.
 */
static int nl_recv(int s, const struct nlmsghdr *req, void *buf, size_t size,
		   void (*fn)(const struct nlmsghdr *h, void *arg), void *arg,
		   struct nlmsghdr **out)
{
	struct nlmsghdr *h;
	long n;

	for (;;) {
		/* The analyzer cannot see a raw recvfrom fill it. */
		memset(buf, 0, size);
		n = usmc_sys6(SYS_recvfrom, s, (long)buf, (long)size, 0, 0, 0);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;
		for (h = buf; NLMSG_OK(h, (unsigned long)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != req->nlmsg_seq)
				continue;
			if (fn && h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				return e->error ? e->error : fn ? -EIO : -ENOENT;
			}
			if (!fn) {
				*out = h;
				return 0;
			}
			fn(h, arg);
		}
	}
}

int usmc_nl_ask(int s, struct nlmsghdr *req, char *buf, size_t size, struct nlmsghdr **out)
{
	long n = nl_send(s, req, NLM_F_REQUEST);

	return n < 0 ? (int)n : nl_recv(s, req, buf, size, NULL, NULL, out);
}

int usmc_nl_dump(int s, struct nlmsghdr *req, void (*fn)(const struct nlmsghdr *h, void *arg),
		 void *arg)
{
	long buf[USMC_NL_BUF / sizeof(long)];
	long n = nl_send(s, req, NLM_F_REQUEST | NLM_F_DUMP);

	return n < 0 ? (int)n : nl_recv(s, req, buf, sizeof(buf), fn, arg, NULL);
}

const struct rtattr *usmc_nl_attr(const struct rtattr *a, long len, unsigned short type)
{
	for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == type)
			return a;
	return NULL;
}
