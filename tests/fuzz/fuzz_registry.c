// SPDX-License-Identifier: MIT
/*
 * fuzz_registry.c - discovery (registry.c) over records anyone may write.
 *
 * The real registry file of a private runtime directory, attached as the
 * library attaches it.  Each input fills listener and namespace records
 * with anything (free, in flux, published; any namespace, address, port,
 * flags, version, uid; address lists of any length) and the per-port
 * counters, then asks usmc_registry_match() where a connection to some
 * destination goes, reads records one by one
 * (usmc_registry_listener_read / usmc_registry_netns_read) and runs the
 * garbage collector.
 *
 * Properties:
 *   - a record read is a published one (seq even, not 0), copied whole;
 *     a namespace record never names more than USMC_REG_ADDRS addresses
 *     (nor USMC_REG_MACS link addresses);
 *   - match proposes (returns 0) only to a published record that certainly
 *     takes the connection: same port, bound to the destination or to the
 *     wildcard of its family, not SO_REUSEPORT, our version, a user the
 *     policy allows; in our namespace only for loopback or one of our
 *     addresses, in another one only for an address of that namespace and
 *     not of ours;
 *   - and only when it is the one candidate: the oracle below recomputes
 *     the candidates from the records independently (an exact bind wins
 *     over a wildcard in our namespace; two of a kind, or two other
 *     namespaces, are uncertain);
 *   - the garbage collector frees exactly the published records whose
 *     index ln-<id> is missing (none exists here) and nothing else.
 */
#include "fuzz.h"

#include "registry.h"

#include <time.h>

#define NPORTS		3
#define NADDRS		8

static struct usmc_registry *reg;
static uint64_t self_ns;
static const uint16_t ports[NPORTS] = { 80, 443, 6379 };
static struct usmc_addr addrs[NADDRS];

static void addr4(struct usmc_addr *a, uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3)
{
	memset(a, 0, sizeof(*a));
	a->a[10] = a->a[11] = 0xff;
	a->a[12] = b0;
	a->a[13] = b1;
	a->a[14] = b2;
	a->a[15] = b3;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_setup(NULL);
	if (usmc_registry_attach())
		abort();
	reg = usmc_registry_get();
	self_ns = usmc_netns_self();
	if (!reg || !self_ns)
		abort();
	addr4(&addrs[0], 127, 0, 0, 1);
	addr4(&addrs[1], 127, 0, 0, 2);
	addr4(&addrs[2], 0, 0, 0, 0);		/* 0.0.0.0 */
	memset(&addrs[3], 0, sizeof(addrs[3]));	/* :: */
	memset(&addrs[4], 0, sizeof(addrs[4]));
	addrs[4].a[15] = 1;			/* ::1 */
	addr4(&addrs[5], 10, 0, 0, 1);
	addr4(&addrs[6], 192, 168, 1, 5);
	memset(&addrs[7], 0, sizeof(addrs[7]));
	addrs[7].a[0] = 0xfd;
	addrs[7].a[15] = 7;			/* fd00::7 */
	return 0;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One of a few namespaces: ours, two others, or anything. */
static uint64_t pick_ns(struct fz *f)
{
	uint8_t sel = fz_u8(f) % 5;

	return sel < 2 ? self_ns : sel == 2 ? 0x1111 : sel == 3 ? 0x2223 : fz_u64(f);
}

static void pick_addr(struct fz *f, struct usmc_addr *a)
{
	uint8_t sel = fz_u8(f);

	if (sel < 240)
		*a = addrs[sel % NADDRS];
	else
		fz_bytes(f, a->a, 16);
	a->port = 0;
	a->__pad = 0;
}

static uint64_t pick_seq(struct fz *f)
{
	uint8_t sel = fz_u8(f) % 8;

	return sel < 5 ? 2 : sel == 5 ? 0 : sel == 6 ? 1 : fz_u64(f);
}

static void fill_listener(struct usmc_reg_listener *l, struct fz *f)
{
	uint8_t sel = fz_u8(f);

	memset(l, 0, sizeof(*l));
	l->id = 0x100 + fz_u8(f);
	l->netns = pick_ns(f);
	pick_addr(f, &l->addr);
	l->addr.port = sel & 0x80 ? fz_u16(f) : ports[sel % NPORTS];
	l->uid = sel & 0x08 ? fz_u32(f) : (uint32_t)geteuid();
	l->pid = 1;
	l->flags = sel & 0x10 ? fz_u8(f) % 4 : 0;
	l->version = sel & 0x20 ? fz_u32(f) : USMC_PROTO_VERSION;
	l->devs[0] = 1;
	l->allow_all = sel & 0x40 ? fz_u8(f) % 2 : 0;
	l->seq = pick_seq(f);
}

static void fill_netns(struct usmc_reg_netns *n, struct fz *f)
{
	uint8_t sel = fz_u8(f);
	uint32_t i;

	memset(n, 0, sizeof(*n));
	n->netns = pick_ns(f);
	/* Fresh unless asked: a stale record of ours is refreshed by match. */
	n->updated_ns = sel & 1 ? fz_u64(f) : realtime_ns();
	n->naddrs = sel & 2 ? fz_u32(f) : fz_u8(f) % 6;
	for (i = 0; i < MIN(n->naddrs, (uint32_t)6); i++)
		pick_addr(f, &n->addrs[i]);
	n->nmacs = sel & 4 ? fz_u32(f) : fz_u8(f) % 4;
	for (i = 0; i < MIN(n->nmacs, (uint32_t)4); i++)
		fz_bytes(f, n->macs[i], 6);
	n->seq = pick_seq(f);
}

/* ---- the oracle: which record a connection to dst certainly reaches --- */

static bool v4(const struct usmc_addr *a)
{
	static const uint8_t m[12] = { [10] = 0xff, [11] = 0xff };

	return !memcmp(a->a, m, 12);
}

static bool any(const struct usmc_addr *a)
{
	static const uint8_t z[16];

	return v4(a) ? !a->a[12] && !a->a[13] && !a->a[14] && !a->a[15] : !memcmp(a->a, z, 16);
}

static bool loopback(const struct usmc_addr *a)
{
	static const uint8_t lo6[16] = { [15] = 1 };

	return v4(a) ? a->a[12] == 127 : !memcmp(a->a, lo6, 16);
}

/* Does namespace ns list address a?  The first record of ns decides. */
static bool ns_has(uint64_t ns, const struct usmc_addr *a)
{
	uint32_t i, k;

	for (i = 0; i < USMC_REG_NETNS; i++) {
		const struct usmc_reg_netns *n = &reg->ns[i];
		uint64_t s = LOAD_RELAXED(&n->seq);

		if (!s || n->netns != ns)
			continue;
		if ((s & 1) || n->naddrs > USMC_REG_ADDRS || n->nmacs > USMC_REG_MACS)
			return false;
		for (k = 0; k < n->naddrs; k++)
			if (!memcmp(n->addrs[k].a, a->a, 16))
				return true;
		return false;
	}
	return false;
}

/* Published, on dst's port, bound to dst or a wildcard that takes it. */
static bool takes(const struct usmc_reg_listener *l, const struct usmc_addr *dst)
{
	uint64_t s = LOAD_RELAXED(&l->seq);

	if (!s || (s & 1) || l->addr.port != dst->port)
		return false;
	if (!any(&l->addr) && memcmp(l->addr.a, dst->a, 16))
		return false;
	if ((l->flags & USMC_REG_F_V6ONLY) && v4(dst))
		return false;
	if (any(&l->addr) && v4(&l->addr) && !v4(dst))
		return false;
	return true;
}

static void check_match(const struct usmc_addr *dst, int rc, const struct usmc_reg_listener *out)
{
	int same_exact = 0, same_any = 0, cross = 0, i;
	bool lo = loopback(dst), local = ns_has(self_ns, dst);

	FZ_CHECK(rc >= 0 && rc < USMC_R_MAX, "match rc %d", rc);
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		const struct usmc_reg_listener *l = &reg->l[i];

		if (!takes(l, dst))
			continue;
		if (l->netns == self_ns) {
			if ((lo || local) && any(&l->addr))
				same_any++;
			else if (lo || local)
				same_exact++;
		} else if (!lo && ns_has(l->netns, dst)) {
			cross++;
		}
	}
	if (rc)
		return;
	FZ_CHECK(LOAD_RELAXED(&reg->portcnt[dst->port]), "match with no listener counted");
	FZ_CHECK(out->addr.port == dst->port && out->version == USMC_PROTO_VERSION &&
		 !(out->flags & USMC_REG_F_REUSEPORT) &&
		 (out->uid == (uint32_t)geteuid() || out->allow_all), "match: record not acceptable");
	for (i = 0; i < USMC_REG_LISTENERS; i++)
		if (!memcmp(&reg->l[i], out, sizeof(*out)))
			break;
	FZ_CHECK(i < USMC_REG_LISTENERS && takes(&reg->l[i], dst), "match: not a published record");
	if (out->netns == self_ns) {
		FZ_CHECK(lo || local, "match: our namespace, but not an address of ours");
		FZ_CHECK(any(&out->addr) ? !same_exact && same_any == 1 : same_exact == 1,
			 "match: %d exact and %d wildcard candidates in our namespace", same_exact,
			 same_any);
	} else {
		FZ_CHECK(!lo && !local && ns_has(out->netns, dst),
			 "match: another namespace, loopback %d local %d", lo, local);
		FZ_CHECK(!same_exact && !same_any && cross == 1, "match: %d candidates elsewhere",
			 cross);
	}
}

static void check_reads(struct fz *f)
{
	struct usmc_reg_listener lc;
	struct usmc_reg_netns nc;
	uint32_t i = fz_u16(f);
	uint64_t s;

	s = LOAD_RELAXED(&reg->l[i % USMC_REG_LISTENERS].seq);
	if (usmc_registry_listener_read(&reg->l[i % USMC_REG_LISTENERS], &lc))
		FZ_CHECK(s && !(s & 1) && !memcmp(&lc, &reg->l[i % USMC_REG_LISTENERS], sizeof(lc)),
			 "listener_read: seq %#llx", (unsigned long long)s);
	else
		FZ_CHECK(!s || (s & 1), "listener_read refused a published record");
	s = LOAD_RELAXED(&reg->ns[i % USMC_REG_NETNS].seq);
	if (usmc_registry_netns_read(&reg->ns[i % USMC_REG_NETNS], &nc))
		FZ_CHECK(s && !(s & 1) && nc.naddrs <= USMC_REG_ADDRS && nc.nmacs <= USMC_REG_MACS,
			 "netns_read: seq %#llx naddrs %u nmacs %u", (unsigned long long)s, nc.naddrs,
			 nc.nmacs);
	else
		FZ_CHECK(!s || (s & 1) || reg->ns[i % USMC_REG_NETNS].naddrs > USMC_REG_ADDRS ||
			 reg->ns[i % USMC_REG_NETNS].nmacs > USMC_REG_MACS,
			 "netns_read refused a published record");
	/* Route truth's lookup over whatever the records hold (ASan/UBSan). */
	{
		const struct usmc_reg_netns *n = &reg->ns[i % USMC_REG_NETNS];
		uint8_t mac[6];

		if (fz_u8(f) & 1 && n->nmacs && n->nmacs <= USMC_REG_MACS)
			memcpy(mac, n->macs[fz_u8(f) % n->nmacs], 6);
		else
			fz_bytes(f, mac, 6);
		(void)usmc_registry_netns_has_mac(n->netns, mac);
	}
}

static void check_gc(void)
{
	static struct usmc_reg_listener before[USMC_REG_LISTENERS];
	int i, n, freed = 0;

	memcpy(before, reg->l, sizeof(before));
	n = usmc_registry_gc();
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		uint64_t s = before[i].seq, s1 = LOAD_RELAXED(&reg->l[i].seq);
		bool published = s && !(s & 1);

		/* No ln-<id> exists here: every published record is stale. */
		FZ_CHECK(published ? !s1 : s1 == s, "gc: record %d seq %#llx -> %#llx", i,
			 (unsigned long long)s, (unsigned long long)s1);
		freed += published;
	}
	FZ_CHECK(n == freed, "gc said %d, freed %d", n, freed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	struct usmc_reg_listener out;
	struct usmc_addr dst;
	int n, i, rc;

	memset(reg->l, 0, sizeof(reg->l));
	memset(reg->ns, 0, sizeof(reg->ns));
	memset((void *)reg->portcnt, 0, sizeof(reg->portcnt));
	n = fz_u8(&f) % 12;
	for (i = 0; i < n; i++) {
		uint8_t sel = fz_u8(&f);

		if (sel & 1) {
			struct usmc_reg_listener *l = &reg->l[sel % 8 ? sel % 16 : fz_u16(&f) %
							      USMC_REG_LISTENERS];

			fill_listener(l, &f);
			/* Usually counted, as registry_add does; sometimes not. */
			if (!(sel & 2))
				atomic_fetch_add(&reg->portcnt[l->addr.port], 1);
		} else {
			fill_netns(&reg->ns[(sel >> 1) % 6], &f);
		}
	}
	while (fz_more(&f)) {
		uint8_t op = fz_u8(&f);

		if (op % 8 == 7) {
			check_gc();
			continue;
		}
		if (op % 8 == 6) {
			check_reads(&f);
			continue;
		}
		pick_addr(&f, &dst);
		dst.port = op & 0x80 ? fz_u16(&f) : ports[op % NPORTS];
		memset(&out, 0xa5, sizeof(out));
		rc = usmc_registry_match(&dst, &out);
		check_match(&dst, rc, &out);
	}
	return 0;
}
