// SPDX-License-Identifier: MIT
/*
 * registry.c - listener and namespace records shared by all usmc processes.
 */
#include "registry.h"
#include "reuseport.h"
#include "clc.h"
#include "guard.h"
#include "log.h"
#include "options.h"
#include "rundir.h"
#include "shm.h"
#include "sys.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netpacket/packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

/* Published with release once mapped and checked; read with acquire. */
static _Atomic(struct usmc_registry *) reg_ptr;
static _Atomic int reg_guard = -1;	/* guard.c handle of the mapping */

/*
 * The registry, or NULL.  A registry truncated under us holds zero pages
 * now (guard.c): it is dropped (left mapped, as other threads may still
 * read it) and the next attach opens the file afresh, which refuses a
 * truncated one (rundir_unusable).
 */
static inline struct usmc_registry *reg_get(void)
{
	struct usmc_registry *r = LOAD_ACQUIRE(&reg_ptr);

	if (unlikely(r && usmc_guard_poisoned(LOAD_RELAXED(&reg_guard)))) {
		if (atomic_compare_exchange_strong(&reg_ptr, &r, NULL)) {
			usmc_guard_del(LOAD_RELAXED(&reg_guard));
			usmc_dbg(1, "registry truncated under us: unusable");
		}
		return NULL;
	}
	return r;
}
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t netns_cached;

/* Seqlock record layout must be a whole number of words. */
BUILD_BUG_ON(sizeof(struct usmc_reg_listener) % 8);
BUILD_BUG_ON(sizeof(struct usmc_reg_netns) % 8);

uint64_t usmc_netns_self(void)
{
	uint64_t v = LOAD_RELAXED(&netns_cached);
	struct stat st;

	if (v)
		return v;
	if (stat("/proc/self/ns/net", &st))
		return 0;
	v = usmc_mix64(((uint64_t)st.st_dev << 32) ^ (uint64_t)st.st_ino) | 1;
	STORE_RELAXED(&netns_cached, v);
	return v;
}

void usmc_netns_reset(void)
{
	STORE_RELAXED(&netns_cached, 0);
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int registry_open(void)
{
	size_t len = sizeof(struct usmc_registry);
	struct usmc_registry *r;
	char tmp[64];
	struct stat st;
	int fd, rc;

	rc = usmc_rundir_init();
	if (rc)
		return rc;
	fd = usmc_rundir_open(USMC_REGISTRY_FILE, O_RDWR, 0);
	if (fd == -ENOENT) {
		snprintf(tmp, sizeof(tmp), "t-registry-%016llx",
			 (unsigned long long)usmc_random64());
		fd = usmc_rundir_open(tmp, O_RDWR | O_CREAT, 0600);
		if (fd < 0)
			return fd;
		/* Fully backed: a full tmpfs must never turn an access into SIGBUS. */
		if (fallocate(fd, 0, 0, (off_t)len) || !(r = usmc_map_shared(fd, len))) {
			rc = -errno;
			usmc_ifd_close(fd);
			usmc_rundir_unlink(tmp, false);
			return rc;
		}
		STORE_RELAXED(&reg_guard, usmc_guard_add(r, len));
		r->version = USMC_PROTO_VERSION;
		r->nlisteners = USMC_REG_LISTENERS;
		r->nnetns = USMC_REG_NETNS;
		STORE_RELEASE((_Atomic uint64_t *)&r->magic, USMC_REG_MAGIC);
		usmc_ifd_close(fd);
		if (!renameat2(usmc_rundir_fd(), tmp, usmc_rundir_fd(), USMC_REGISTRY_FILE,
			       RENAME_NOREPLACE)) {
			STORE_RELEASE(&reg_ptr, r);
			return 0;
		}
		usmc_guard_del(LOAD_RELAXED(&reg_guard));
		munmap(r, len);
		usmc_rundir_unlink(tmp, false);
		fd = usmc_rundir_open(USMC_REGISTRY_FILE, O_RDWR, 0);
	}
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) || (size_t)st.st_size != len || !(r = usmc_map_shared(fd, len))) {
		usmc_ifd_close(fd);
		return -EBADMSG;
	}
	usmc_ifd_close(fd);
	/* Guarded before the first load: the file may shrink any time. */
	STORE_RELAXED(&reg_guard, usmc_guard_add(r, len));
	if (LOAD_ACQUIRE((_Atomic uint64_t *)&r->magic) != USMC_REG_MAGIC ||
	    r->version != USMC_PROTO_VERSION || r->nlisteners != USMC_REG_LISTENERS ||
	    r->nnetns != USMC_REG_NETNS || usmc_guard_poisoned(LOAD_RELAXED(&reg_guard))) {
		usmc_guard_del(LOAD_RELAXED(&reg_guard));
		munmap(r, len);
		return -EBADMSG;
	}
	STORE_RELEASE(&reg_ptr, r);
	return 0;
}

int usmc_registry_attach(void)
{
	static struct usmc_retry retry;
	int rc;

	if (reg_get())
		return 0;
	rc = usmc_retry_check(&retry);
	if (rc)
		return rc;
	pthread_mutex_lock(&reg_lock);
	if (!reg_get())
		rc = usmc_retry_note(&retry, registry_open());
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

struct usmc_registry *usmc_registry_get(void)
{
	return reg_get();
}

bool usmc_registry_listener_read(const struct usmc_reg_listener *src,
				 struct usmc_reg_listener *dst)
{
	int tries;

	for (tries = 0; tries < 8; tries++) {
		uint64_t s1 = LOAD_ACQUIRE(&src->seq), s2;

		if (!s1 || (s1 & 1))
			return false;
		shm_load_words(dst, src, sizeof(*dst));
		FENCE(memory_order_acquire);
		s2 = LOAD_RELAXED(&src->seq);
		if (s1 == s2)
			return true;
	}
	return false;
}

bool usmc_registry_netns_read(const struct usmc_reg_netns *src, struct usmc_reg_netns *dst)
{
	int tries;

	for (tries = 0; tries < 8; tries++) {
		uint64_t s1 = LOAD_ACQUIRE(&src->seq), s2;

		if (!s1 || (s1 & 1))
			return false;
		shm_load_words(dst, src, sizeof(*dst));
		FENCE(memory_order_acquire);
		s2 = LOAD_RELAXED(&src->seq);
		if (s1 == s2 && dst->naddrs <= USMC_REG_ADDRS && dst->nmacs <= USMC_REG_MACS)
			return true;
	}
	return false;
}

/*
 * Is record l's listener gone?  Its index is missing, is no regular file
 * (planted), or nobody holds its lock: the owner died without removing its
 * record (SIGKILL).  Whoever finds such a record removes it, and the dead
 * index with it.  Never blocks (usmc_rundir_open: O_NONBLOCK, typed).
 */
static bool listener_dead(const struct usmc_reg_listener *l)
{
	char name[32];
	enum usmc_owner o;

	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)l->id);
	o = usmc_rundir_owner_alive(name);
	if (o == USMC_OWNER_DEAD)
		usmc_rundir_unlink(name, false);
	return o == USMC_OWNER_DEAD || o == USMC_OWNER_PLANTED;
}

/* Drop dead records (all, or those of one port); returns how many. */
static int registry_gc_port(bool all, uint16_t port)
{
	struct usmc_registry *r = reg_get();
	int i, n = 0;

	if (!r || (!all && !LOAD_RELAXED(&r->portcnt[port])))
		return 0;
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		struct usmc_reg_listener copy;

		/* A cheap look first; the seqlock copy decides. */
		if (!all && r->l[i].addr.port != port)
			continue;
		if (!usmc_registry_listener_read(&r->l[i], &copy) ||
		    (!all && copy.addr.port != port) || !listener_dead(&copy))
			continue;
		usmc_registry_del(i, copy.id);
		n++;
	}
	return n;
}

int usmc_registry_add(const struct usmc_reg_listener *rec)
{
	struct usmc_reg_listener tmp = *rec;
	int i;

	if (usmc_registry_attach())
		return -ENOENT;
	/* A listener that died on this port (SIGKILL) leaves its record:
	 * remove it now, or clients would find two and stay on TCP. */
	registry_gc_port(false, rec->addr.port);
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		struct usmc_reg_listener *l = &reg_get()->l[i];
		uint64_t zero = 0;

		if (LOAD_RELAXED(&l->seq))
			continue;
		if (!atomic_compare_exchange_strong(&l->seq, &zero, 1))
			continue;
		tmp.seq = 1;
		shm_store_words(l, &tmp, sizeof(tmp));
		/* pairs with the acquire load in usmc_registry_listener_read() */
		STORE_RELEASE(&l->seq, 2);
		atomic_fetch_add(&reg_get()->portcnt[rec->addr.port], 1);
		return i;
	}
	return -ENOSPC;
}

int usmc_registry_find_socket(uint64_t netns, const struct usmc_addr *addr, uint64_t ino,
			      struct usmc_reg_listener *out)
{
	struct usmc_registry *r = reg_get();
	int i;

	if (!r || !ino || !LOAD_RELAXED(&r->portcnt[addr->port]))
		return -ENOENT;
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		/* A cheap look first; the seqlock copy decides. */
		if (r->l[i].addr.port != addr->port || r->l[i].ino != ino)
			continue;
		if (!usmc_registry_listener_read(&r->l[i], out) || out->ino != ino ||
		    out->netns != netns || out->uid != (uint32_t)geteuid() ||
		    out->version != USMC_PROTO_VERSION || memcmp(&out->addr, addr, sizeof(*addr)) ||
		    listener_dead(out))
			continue;
		return i;
	}
	return -ENOENT;
}

bool usmc_registry_names(int idx, uint64_t id, uint64_t ino)
{
	struct usmc_reg_listener copy;
	struct usmc_registry *r = reg_get();

	return r && idx >= 0 && idx < USMC_REG_LISTENERS &&
	       usmc_registry_listener_read(&r->l[idx], &copy) && copy.id == id && copy.ino == ino;
}

void usmc_registry_del(int idx, uint64_t id)
{
	struct usmc_reg_listener *l;
	uint64_t s;
	uint16_t port;

	if (!reg_get() || idx < 0 || idx >= USMC_REG_LISTENERS)
		return;
	l = &reg_get()->l[idx];
	s = LOAD_ACQUIRE(&l->seq);
	if (!s || (s & 1) || LOAD_RELAXED((_Atomic uint64_t *)&l->id) != id)
		return;
	port = l->addr.port;
	/* Only the winner of this CAS frees the record and the port count. */
	if (atomic_compare_exchange_strong(&l->seq, &s, 0))
		atomic_fetch_sub(&reg_get()->portcnt[port], 1);
}

/* Find or claim the namespace record for ns (caller serialises per process). */
static struct usmc_reg_netns *netns_slot(uint64_t ns, bool create)
{
	struct usmc_reg_netns *free_slot = NULL;
	int i;

	for (i = 0; i < USMC_REG_NETNS; i++) {
		struct usmc_reg_netns *n = &reg_get()->ns[i];
		uint64_t s = LOAD_ACQUIRE(&n->seq);

		if (!s) {
			if (!free_slot)
				free_slot = n;
			continue;
		}
		if (LOAD_RELAXED((_Atomic uint64_t *)&n->netns) == ns)
			return n;
	}
	if (!create || !free_slot)
		return NULL;
	{
		uint64_t zero = 0;

		if (!atomic_compare_exchange_strong(&free_slot->seq, &zero, 1))
			return NULL;
		STORE_RELAXED((_Atomic uint64_t *)&free_slot->netns, ns);
		STORE_RELAXED((_Atomic uint64_t *)&free_slot->updated_ns, 0);
		STORE_RELEASE(&free_slot->seq, 2);
	}
	return free_slot;
}

int usmc_registry_publish_addrs(bool force)
{
	struct usmc_reg_netns tmp, *n;
	uint64_t ns = usmc_netns_self(), s;
	struct ifaddrs *ifa, *p;

	if (!ns || usmc_registry_attach())
		return -ENOENT;
	n = netns_slot(ns, true);
	if (!n)
		return -ENOSPC;
	if (!force && realtime_ns() - LOAD_RELAXED((_Atomic uint64_t *)&n->updated_ns) <
		      5000000000ull)
		return 0;
	if (getifaddrs(&ifa))
		return -errno;
	memset(&tmp, 0, sizeof(tmp));
	for (p = ifa; p && tmp.naddrs < USMC_REG_ADDRS; p = p->ifa_next) {
		struct usmc_addr a;

		if (!p->ifa_addr || !(p->ifa_flags & IFF_UP))
			continue;
		if (p->ifa_addr->sa_family == AF_PACKET) {
			const struct sockaddr_ll *ll = (const struct sockaddr_ll *)p->ifa_addr;

			if (ll->sll_halen == 6 && !(p->ifa_flags & IFF_LOOPBACK) &&
			    tmp.nmacs < USMC_REG_MACS)
				memcpy(tmp.macs[tmp.nmacs++], ll->sll_addr, 6);
			continue;
		}
		if (usmc_addr_from_sa(&a, p->ifa_addr, p->ifa_addr->sa_family == AF_INET ?
				      sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)))
			continue;
		a.port = 0;
		tmp.addrs[tmp.naddrs++] = a;
	}
	freeifaddrs(ifa);
	tmp.netns = ns;
	tmp.updated_ns = realtime_ns();
	/* Writers of one namespace record race only with each other: take
	 * the seqlock by making seq odd, write, make it even again. */
	s = LOAD_ACQUIRE(&n->seq);
	if ((s & 1) || !atomic_compare_exchange_strong(&n->seq, &s, s + 1))
		return -EBUSY;
	tmp.seq = s + 1;
	shm_store_words(n, &tmp, sizeof(tmp));
	STORE_RELEASE(&n->seq, s + 2);
	return 0;
}

static bool netns_has_addr(uint64_t ns, const struct usmc_addr *a)
{
	struct usmc_reg_netns *n = netns_slot(ns, false), copy = { 0 };
	uint32_t i;

	if (!n || !usmc_registry_netns_read(n, &copy))
		return false;
	for (i = 0; i < copy.naddrs; i++)
		if (usmc_addr_ip_eq(&copy.addrs[i], a))
			return true;
	return false;
}

bool usmc_registry_netns_has_mac(uint64_t ns, const uint8_t mac[6])
{
	struct usmc_reg_netns *n = netns_slot(ns, false), copy = { 0 };
	uint32_t i;

	if (!n || !usmc_registry_netns_read(n, &copy))
		return false;
	for (i = 0; i < copy.nmacs; i++)
		if (!memcmp(copy.macs[i], mac, 6))
			return true;
	return false;
}

static bool uid_policy_ok(const struct usmc_reg_listener *l)
{
	return l->uid == (uint32_t)geteuid() || l->allow_all;
}

static int registry_match(const struct usmc_addr *dst, struct usmc_reg_listener *out,
			  bool *several);

/*
 * More than one candidate is usually a listener that died without removing
 * its record and one that took its port since: the dead ones are removed
 * by the first client that finds them, and it looks again.
 */
int usmc_registry_match(const struct usmc_addr *dst, struct usmc_reg_listener *out)
{
	bool several = false;
	int reason = registry_match(dst, out, &several);

	if (several && registry_gc_port(false, dst->port))
		reason = registry_match(dst, out, &several);
	return reason;
}

static int registry_match(const struct usmc_addr *dst, struct usmc_reg_listener *out,
			  bool *several)
{
	struct usmc_reg_listener copy = { 0 }, same = { 0 }, cross = { 0 };
	int nsame = 0, ncross = 0, reason = USMC_R_PEER_NOT_USMC, i;
	uint64_t self = usmc_netns_self();
	bool loop = usmc_addr_is_loopback(dst), local_checked = false, local = false, rp = false;
	struct usmc_registry *r = reg_get();

	if (!r || !LOAD_RELAXED(&r->portcnt[dst->port]))
		return USMC_R_PEER_NOT_USMC;
	if (!self)
		return USMC_R_UNCERTAIN;
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		const struct usmc_reg_listener *l = &r->l[i];

		if (l->addr.port != dst->port || !usmc_registry_listener_read(l, &copy))
			continue;
		if (copy.addr.port != dst->port)
			continue;
		if (!usmc_addr_is_any(&copy.addr) && !usmc_addr_ip_eq(&copy.addr, dst))
			continue;
		if ((copy.flags & USMC_REG_F_V6ONLY) && usmc_addr_is_v4(dst))
			continue;
		if (usmc_addr_is_any(&copy.addr) &&
		    usmc_addr_is_v4(&copy.addr) != usmc_addr_is_v4(dst) &&
		    usmc_addr_is_v4(&copy.addr))
			continue;	/* 0.0.0.0 listener does not take IPv6 */
		if (copy.netns == self) {
			if (!loop && !local_checked) {
				usmc_registry_publish_addrs(false);
				local = netns_has_addr(self, dst);
				local_checked = true;
			}
			if (!loop && !local)
				continue;
			/* An exact bind wins over a wildcard one on the same port. */
			if (nsame && !usmc_addr_is_any(&same.addr) &&
			    usmc_addr_is_any(&copy.addr))
				continue;
			if (nsame && usmc_addr_is_any(&same.addr) &&
			    !usmc_addr_is_any(&copy.addr))
				nsame = 0;
			same = copy;
			nsame++;
			rp |= copy.flags & USMC_REG_F_REUSEPORT;
		} else {
			if (loop || !netns_has_addr(copy.netns, dst))
				continue;
			cross = copy;
			ncross++;
			rp |= copy.flags & USMC_REG_F_REUSEPORT;
		}
	}
	/* More than one candidate: the kernel picks, we cannot know which
	 * (a SO_REUSEPORT group of several usmc sockets, say so). */
	*several = nsame > 1 || (!nsame && ncross > 1);
	if (*several)
		return rp ? USMC_R_REUSEPORT : USMC_R_UNCERTAIN;
	if (nsame == 1) {
		*out = same;
	} else if (ncross == 1) {
		/* Another namespace, and not an address of ours: reached by route. */
		if (!local_checked) {
			usmc_registry_publish_addrs(false);
			local = netns_has_addr(self, dst);
		}
		if (local)
			return USMC_R_UNCERTAIN;
		*out = cross;
	} else {
		return reason;
	}
	/* SO_REUSEPORT: only a socket alone in its group, in our namespace
	 * (the kernel's list is per namespace), certainly takes us. */
	if ((out->flags & USMC_REG_F_REUSEPORT) &&
	    (out->netns != self || !usmc_reuseport_sole(dst, out->ino)))
		return USMC_R_REUSEPORT;
	if (out->version != USMC_PROTO_VERSION)
		return USMC_R_VERSION;
	if (!uid_policy_ok(out))
		return USMC_R_PERMISSION;
	return 0;
}

int usmc_registry_repair(void)
{
	struct stat st;
	bool bad;
	int fd;

	if (reg_get() || usmc_rundir_init())
		return 0;
	fd = usmc_rundir_open(USMC_REGISTRY_FILE, O_RDONLY, 0);
	if (fd < 0)
		return 0;
	bad = !fstat(fd, &st) && (size_t)st.st_size != sizeof(struct usmc_registry);
	usmc_ifd_close(fd);
	if (!bad)
		return 0;
	usmc_dbg(1, "%s truncated: removed, the next process starts a fresh one",
		 USMC_REGISTRY_FILE);
	return usmc_rundir_unlink(USMC_REGISTRY_FILE, false) == 0;
}

int usmc_registry_gc(void)
{
	if (usmc_registry_attach())
		return 0;
	return registry_gc_port(true, 0);
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held reg_lock at the fork. */
void usmc_registry_after_fork(void)
{
	pthread_mutex_init(&reg_lock, NULL);
}
