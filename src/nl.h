/* SPDX-License-Identifier: MIT */
/*
 * nl.h - netlink requests over raw system calls (route.c, clc_bind.c,
 * reuseport.c, scm_peer.c): the library's wrappers must not see these
 * sockets.  One request with one answer, or a dump.
 */
#ifndef USMC_NL_H
#define USMC_NL_H

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stddef.h>

#define USMC_NL_BUF	8192

/* A netlink socket of this protocol: its descriptor, or -errno. */
int usmc_nl_open(int protocol);
void usmc_nl_close(int s);
/*
 * Send req (a whole message, its nlmsg_len set), receive its answer into
 * buf: 0 with *out the answer's header, or -errno (the kernel's error for
 * the request; an acknowledgement without a message is -ENOENT).
 */
int usmc_nl_ask(int s, struct nlmsghdr *req, char *buf, size_t size, struct nlmsghdr **out);
/*
 * Send req as a dump request and call fn for each message of its answer:
 * 0 once the kernel said done, or -errno (its error, or a failed call).
 */
int usmc_nl_dump(int s, struct nlmsghdr *req, void (*fn)(const struct nlmsghdr *h, void *arg),
		 void *arg);
/* The first attribute of this type among those at a (len bytes), or NULL. */
const struct rtattr *usmc_nl_attr(const struct rtattr *a, long len, unsigned short type);

#endif
