// SPDX-License-Identifier: MIT
/*
 * epoll_tag.c - which kernel epoll events are usmc's and which the
 * program's.
 *
 * usmc's kernel entries carry tags as their data: the address of a record
 * in one arena mapping (epoll_int.h).  The program's own entries carry the
 * program's data, any 64-bit value, and nothing stops one from falling in
 * the arena's range: CPython sets only data.fd, so the upper half is stack
 * garbage (often the upper half of a mapping's address).  Such an event
 * would be taken for a dead record of ours and dropped: a level-triggered
 * listener spun its waiter forever and never accepted.
 *
 * So the program's data never reaches the kernel when it lies in the
 * arena's range: the entry carries an alias instead (a slot in the same
 * mapping, after the records), and the alias gives the program's data
 * back when its event comes (ep_alias_event).  Every value in the range
 * is then ours without doubt.  The arena is placed at a random address
 * far from where the program's pointers live, so that aliases are rare.
 *
 * The mapping is made by the first epoll_ctl(), before any program data
 * has been passed to the kernel, and lives as long as the process.
 * Everything here runs under ep_lock.
 */
#include "epoll_int.h"
#include "real.h"

#include <sys/mman.h>

#define EP_ALIASES	(1u << 14)
#define EPALIAS_LIVE	0x5341494c41504555ULL	/* "UEPALIAS" */

/* The program's own entry for fd in ep, its data replaced by our tag. */
struct ep_alias {
	uint64_t magic;
	uint16_t gen;			/* bumped on reuse, as a record's */
	struct usmc_ep *ep;
	int fd;
	uint32_t events;
	uint64_t data;			/* the program's */
	struct ep_alias *next;		/* ep->aliases, or the free list */
};

struct usmc_epreg *ep_arena;
static struct ep_alias *alias_base, *alias_free;
static size_t arena_used, alias_used;
static struct usmc_epreg *reg_free;
static uint64_t map_len;

/* A hint away from the program's heap, libraries and stacks (0x55.., 0x7f..)
 * and, under ASan, from its shadow (below 0x10007fff8000).  TSan allows
 * application mappings only where it expects them: no hint there. */
static void *arena_hint(void)
{
#if defined(__SANITIZE_THREAD__)
	return NULL;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
	return NULL;
#endif
#endif
	return (void *)((0x200000000000ULL + (usmc_random64() % 0x300000000000ULL)) & ~0x3fffffffULL);
}

int ep_tags_init(void)
{
	uint64_t len = (uint64_t)EP_ARENA_REGS * sizeof(struct usmc_epreg) +
		       (uint64_t)EP_ALIASES * sizeof(struct ep_alias);
	void *p = MAP_FAILED;
	int i;

	if (ep_arena)
		return 0;
	for (i = 0; i < 4 && p == MAP_FAILED; i++) {
		void *hint = arena_hint();

		if (!hint)
			break;
		p = mmap(hint, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p != MAP_FAILED && p != hint) {
			/* A kernel without MAP_FIXED_NOREPLACE took it as a hint. */
			if ((uintptr_t)p + len <= EP_ADDR_MASK)
				break;
			munmap(p, len);
			p = MAP_FAILED;
		}
	}
	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	/* Tags keep the generation above the address. */
	if ((uintptr_t)p + len > EP_ADDR_MASK) {
		munmap(p, len);
		return -ENOMEM;
	}
	map_len = len;
	alias_base = (struct ep_alias *)((char *)p + (uint64_t)EP_ARENA_REGS *
					 sizeof(struct usmc_epreg));
	ep_arena = p;
	return 0;
}

struct usmc_epreg *ep_reg_alloc(void)
{
	struct usmc_epreg *r;
	uint16_t gen;

	if (ep_tags_init())
		return NULL;
	if (reg_free) {
		r = reg_free;
		reg_free = r->free_next;
	} else {
		if (arena_used == EP_ARENA_REGS)
			return NULL;
		r = &ep_arena[arena_used++];
	}
	gen = r->gen;
	memset(r, 0, sizeof(*r));
	r->gen = (uint16_t)(gen + 1);
	r->magic = EPREG_LIVE;
	return r;
}

void ep_reg_release(struct usmc_epreg *r)
{
	r->magic = EPREG_DEAD;
	r->free_next = reg_free;
	reg_free = r;
}

/* Does a kernel event's data lie in the arena (one of our tags, for any
 * record or alias, live or dead, or the instance's own eventfds)? */
bool ep_data_ours(uint64_t data)
{
	uint64_t base = (uint64_t)(uintptr_t)ep_arena, p = data & EP_ADDR_MASK;

	return ep_arena && p >= base && p - base < map_len;
}

/* The live record of instance ep that a kernel event's data names, or NULL
 * (not ours, an eventfd, an alias, or a record freed or reused since the
 * event was queued). */
struct usmc_epreg *ep_reg_from_data(uint64_t data, struct usmc_ep *ep, unsigned int *tag)
{
	uint64_t base = (uint64_t)(uintptr_t)ep_arena, p = data & EP_ADDR_MASK & ~3ULL, off;
	struct usmc_epreg *r;

	if (!ep_arena || p < base)
		return NULL;
	off = p - base;
	if (off >= arena_used * sizeof(*ep_arena) || off % sizeof(*ep_arena))
		return NULL;
	r = (struct usmc_epreg *)(uintptr_t)p;
	*tag = (unsigned int)(data & 3);
	if (*tag == EP_TAG_SELF)
		return NULL;
	if (r->magic != EPREG_LIVE || r->ep != ep || r->gen != (uint16_t)(data >> EP_GEN_SHIFT))
		return NULL;
	return r;
}

/* ---- aliases ------------------------------------------------------------ */

bool ep_tag_is_alias(uint64_t data)
{
	uint64_t p = data & EP_ADDR_MASK, a = (uint64_t)(uintptr_t)alias_base;

	return alias_base && p >= a && p - a < (uint64_t)EP_ALIASES * sizeof(struct ep_alias);
}

static uint64_t alias_tag(const struct ep_alias *a)
{
	return (uint64_t)(uintptr_t)a | ((uint64_t)a->gen << EP_GEN_SHIFT);
}

/* An alias event: true with the program's data in *prog if its alias is
 * live and ep's (false: deleted or replaced since it was queued; drop it). */
bool ep_alias_event(struct usmc_ep *ep, uint64_t data, uint64_t *prog)
{
	uint64_t p = data & EP_ADDR_MASK, off = p - (uint64_t)(uintptr_t)alias_base;
	struct ep_alias *a;

	if (off % sizeof(*a) || off >= alias_used * sizeof(*a))
		return false;
	a = (struct ep_alias *)(uintptr_t)p;
	if (a->magic != EPALIAS_LIVE || a->ep != ep || a->gen != (uint16_t)(data >> EP_GEN_SHIFT))
		return false;
	*prog = a->data;
	return true;
}

static struct ep_alias *alias_alloc(struct usmc_ep *ep, int fd, const struct epoll_event *ev)
{
	struct ep_alias *a;
	uint16_t gen;

	if (alias_free) {
		a = alias_free;
		alias_free = a->next;
	} else {
		if (alias_used == EP_ALIASES)
			return NULL;
		a = &alias_base[alias_used++];
	}
	gen = a->gen;
	memset(a, 0, sizeof(*a));
	a->gen = (uint16_t)(gen + 1);
	a->magic = EPALIAS_LIVE;
	a->ep = ep;
	a->fd = fd;
	a->events = ev->events;
	a->data = ev->data.u64;
	return a;
}

static void alias_release(struct ep_alias *a)
{
	a->magic = 0;
	a->next = alias_free;
	alias_free = a;
}

static struct ep_alias **alias_find(struct usmc_ep *ep, int fd)
{
	struct ep_alias **pp;

	for (pp = &ep->aliases; *pp; pp = &(*pp)->next)
		if ((*pp)->fd == fd)
			return pp;
	return NULL;
}

static void alias_unlink(struct ep_alias **pp)
{
	struct ep_alias *a = *pp;

	*pp = a->next;
	alias_release(a);
}

bool ep_alias_has(struct usmc_ep *ep, int fd)
{
	return ep && alias_find(ep, fd);
}

/* fd's kernel entry in ep no longer carries the program's data (it is
 * gone, or carries a record's tag). */
void ep_alias_drop(struct usmc_ep *ep, int fd)
{
	struct ep_alias **pp = alias_find(ep, fd);

	if (pp)
		alias_unlink(pp);
}

void ep_alias_free_all(struct usmc_ep *ep)
{
	while (ep->aliases)
		alias_unlink(&ep->aliases);
}

/*
 * The program's own kernel entry for fd in ep (ADD, MOD or DEL as the
 * program asked, its events and data), with an alias for data in the
 * arena's range.  Returns 0 or -errno (the kernel's answer).
 */
int ep_prog_ctl(struct usmc_ep *ep, int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct ep_alias **old = alias_find(ep, fd), *a = NULL;
	struct epoll_event kev;

	if (op == EPOLL_CTL_DEL || !ev) {
		struct epoll_event none = { 0 };

		if (ev)
			none = *ev;
		if (real.epoll_ctl(epfd, op, fd, &none))
			return -errno;
		if (old)
			alias_unlink(old);
		return 0;
	}
	kev = *ev;
	if (ep_data_ours(ev->data.u64)) {
		if (op == EPOLL_CTL_MOD && old) {
			a = *old;
		} else {
			a = alias_alloc(ep, fd, ev);
			if (!a)
				return -ENOMEM;
		}
		kev.data.u64 = alias_tag(a);
	}
	if (real.epoll_ctl(epfd, op, fd, &kev)) {
		int rc = -errno;

		if (a && a != (old ? *old : NULL))
			alias_release(a);
		/* MOD of an entry the kernel no longer has: the alias was stale. */
		if (op == EPOLL_CTL_MOD && rc == -ENOENT && old)
			alias_unlink(old);
		return rc;
	}
	if (a && old && a == *old) {
		a->events = ev->events;
		a->data = ev->data.u64;
		return 0;
	}
	/* A new entry (ADD: the number's old entry went with its file), or the
	 * program's data direct again (MOD): the old alias is done. */
	if (old)
		alias_unlink(old);
	if (a) {
		a->next = ep->aliases;
		ep->aliases = a;
	}
	return 0;
}

/* Every aliased entry of ep back to the program's own data (usmc steps out
 * of the way: sandbox.c), aliases freed. */
void ep_alias_restore(struct usmc_ep *ep, int epfd)
{
	while (ep->aliases) {
		struct ep_alias *a = ep->aliases;
		struct epoll_event ev = { .events = a->events, .data.u64 = a->data };

		real.epoll_ctl(epfd, EPOLL_CTL_MOD, a->fd, &ev);
		alias_unlink(&ep->aliases);
	}
}
