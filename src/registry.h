/* SPDX-License-Identifier: MIT */
/*
 * registry.h - discovery: which addresses have a usmc listener, where.
 *
 * Kernel SMC learns that the peer speaks SMC from a TCP SYN option; a user
 * space library cannot set one.  Instead every usmc listener publishes a
 * record here (network namespace, bound address, port, CLC index id) and
 * every namespace its local addresses.  A client only proposes when its
 * destination certainly reaches a registered listener; otherwise it stays
 * on TCP and the peer never sees a byte it would not have seen.
 *
 * Records are seqlock-protected: writers make seq odd while writing, even
 * when valid, 0 when free.  Readers copy and re-check seq.
 */
#ifndef USMC_REGISTRY_H
#define USMC_REGISTRY_H

#include "usmc.h"

#define USMC_REG_MAGIC		0x474552434d535555ULL	/* "UUSMCREG" */
#define USMC_REG_LISTENERS	512
#define USMC_REG_NETNS		128
#define USMC_REG_ADDRS		32
#define USMC_REG_MACS		16

#define USMC_REG_F_REUSEPORT	0x1	/* SO_REUSEPORT: others may share the port */
#define USMC_REG_F_V6ONLY	0x2	/* IPV6_V6ONLY listener: no v4-mapped peers */

struct usmc_reg_listener {
	_Atomic uint64_t seq;
	uint64_t id;			/* CLC index file: ln-<id> */
	uint64_t netns;			/* namespace identity, see usmc_netns_self() */
	struct usmc_addr addr;		/* bound address; any = all local addresses */
	uint32_t uid;			/* owner's effective uid */
	uint32_t pid;			/* registering process (diagnostics) */
	uint32_t flags;			/* USMC_REG_F_* */
	uint32_t version;		/* USMC_PROTO_VERSION of the owner */
	uint8_t devs[4];		/* device ids offered, by priority (0 = end) */
	uint32_t allow_all;		/* 1: owner accepts any user */
	uint64_t ino;			/* the listening socket's inode: SO_REUSEPORT
					 * groups, and other holders of the socket
					 * that listen too (listener.c) */
} __cacheline;

struct usmc_reg_netns {
	_Atomic uint64_t seq;
	uint64_t netns;
	uint64_t updated_ns;		/* CLOCK_REALTIME of the last refresh */
	uint32_t naddrs;
	uint32_t nmacs;
	struct usmc_addr addrs[USMC_REG_ADDRS];	/* ports unused */
	uint8_t macs[USMC_REG_MACS][8];	/* its interfaces' link addresses (6 bytes
					 * each): route truth (route.c) */
} __cacheline;

struct usmc_registry {
	uint64_t magic;
	uint32_t version;
	uint32_t nlisteners, nnetns;
	_Atomic uint16_t portcnt[65536];	/* listeners per port: cheap negative lookups */
	struct usmc_reg_listener l[USMC_REG_LISTENERS];
	struct usmc_reg_netns ns[USMC_REG_NETNS];
};

/* The calling process's network namespace identity (0 when unknown). */
uint64_t usmc_netns_self(void);
void usmc_netns_reset(void);	/* after setns/unshare/fork */

int usmc_registry_attach(void);
struct usmc_registry *usmc_registry_get(void);

/* Publish a listener; returns the record index or -errno. */
int usmc_registry_add(const struct usmc_reg_listener *rec);
void usmc_registry_del(int idx, uint64_t id);
/*
 * The live record published for the listening socket whose inode is ino
 * (bound to addr in namespace netns, ours): another process that holds the
 * same socket listened first (listener.c).  Returns its index and fills
 * *out, or -ENOENT.
 */
int usmc_registry_find_socket(uint64_t netns, const struct usmc_addr *addr, uint64_t ino,
			      struct usmc_reg_listener *out);
/* Does record idx still publish index id for socket ino? */
bool usmc_registry_names(int idx, uint64_t id, uint64_t ino);
/* Refresh this namespace's address list (at most every few seconds). */
int usmc_registry_publish_addrs(bool force);

/*
 * Client side: which listener does a connection to dst certainly reach?
 * Returns 0 and fills *out, or a positive enum usmc_reason.
 */
int usmc_registry_match(const struct usmc_addr *dst, struct usmc_reg_listener *out);

/*
 * Copy a record that other processes write (seqlock): true with *dst a
 * consistent copy of a published record; false when the record is free or
 * was in flux for every try, or (namespace) names more than USMC_REG_ADDRS
 * addresses.  Exposed for the fuzz targets (tests/fuzz/fuzz_registry.c).
 */
bool usmc_registry_listener_read(const struct usmc_reg_listener *src,
				 struct usmc_reg_listener *dst);
bool usmc_registry_netns_read(const struct usmc_reg_netns *src, struct usmc_reg_netns *dst);
/* Does namespace ns (usmc_netns_self()'s identity) publish this link
 * address as one of its interfaces'? */
bool usmc_registry_netns_has_mac(uint64_t ns, const uint8_t mac[6]);

/* CLI: a registry of the wrong size was truncated by someone (ours are
 * published full size) and every lookup in it fails (rundir_unusable):
 * remove it, so that the next process starts a fresh one.  Its listeners
 * were unreachable already; they register again when they listen again.
 * Returns 1 when removed. */
int usmc_registry_repair(void);
/* Drop records whose listener index is gone or unlocked; returns count. */
int usmc_registry_gc(void);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_registry_after_fork(void);

#endif
