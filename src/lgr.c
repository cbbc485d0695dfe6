// SPDX-License-Identifier: MIT
/*
 * lgr.c - link group lifetime, slot allocation and reuse, doorbell caching.
 *
 * Locking: lgr_list_lock protects the process's list of link groups and
 * their refs; each link group's lock protects its bell cache.  Slot state
 * (struct usmc_cdc_client.state) is changed with compare-and-swap only, so
 * forked children that still hold an inherited connection can release
 * their slot without any lock.
 */
#include "clc.h"
#include "clc_bind.h"
#include "lgr.h"
#include "log.h"
#include "options.h"
#include "stats.h"
#include "sys.h"
#include "vmbudget.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

BUILD_BUG_ON(sizeof(struct usmc_cdc_ctrl) != 512);
BUILD_BUG_ON(sizeof(struct usmc_cdc_client) != 64);

#define LGR_IDLE_KEEP	16	/* idle link groups kept attached per process */

static pthread_mutex_t lgr_list_lock = PTHREAD_MUTEX_INITIALIZER;
/* Doorbell openings in this process: never repeats, so a link group freed
 * and attached again never looks like the one a cache remembers. */
static _Atomic uint32_t bell_gens;
static struct usmc_lgr *lgr_list;

/* A link group reserves nslots x 2 rings of address space (512 MiB by
 * default) whether or not its slots are used: within usmc's share of
 * RLIMIT_AS (vmbudget.c), asked only when a link group is mapped. */
static size_t lgr_rings_bytes(uint32_t nslots, uint32_t ring_size)
{
	return (size_t)nslots * 2 * ring_size;
}

/*
 * Under a finite limit, one link group's rings take at most a quarter of
 * the share (LGR_FIT_SPLIT): that many peers' link groups fit at once,
 * each with fewer slots (lgr_geometry_fit).  A limited server publishes
 * it in its listener's index, where its clients read it (clc_ln.c): under
 * Dovecot's default vsz_limit (256 MiB) that is 8 MiB, one slot, where a
 * default link group (512 MiB) sent every connection to TCP.  Read at
 * most once a second.
 */
#define LGR_FIT_SPLIT	4
#define LGR_FIT_TTL_NS	1000000000ull
static _Atomic size_t fit_cur;		/* SIZE_MAX: no limit; 0: not read yet */
static _Atomic uint64_t fit_at;

void usmc_lgr_fit_forget(void)
{
	STORE_RELAXED(&fit_cur, 0);
}

size_t usmc_lgr_fit(void)
{
	size_t v = LOAD_RELAXED(&fit_cur);
	uint64_t now = usmc_now_ns();
	struct rlimit rl;

	if (likely(v) && now - LOAD_RELAXED(&fit_at) < LGR_FIT_TTL_NS)
		return v == SIZE_MAX ? 0 : v;
	v = getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY ? SIZE_MAX :
	    MAX((size_t)(rl.rlim_cur / USMC_VM_SHARE / LGR_FIT_SPLIT), (size_t)1);
	STORE_RELAXED(&fit_cur, v);
	STORE_RELAXED(&fit_at, now);
	return v == SIZE_MAX ? 0 : v;
}

/*
 * The slots of a new link group whose rings may reserve at most max bytes
 * (0: no bound): the configured number, halved until they fit; 0 if not
 * even one does.  Never smaller rings: a ring's window is what a writer
 * can queue with nobody reading, which TCP makes 4 MiB here, and a
 * program that counts on it would hang on less.
 */
static uint32_t lgr_geometry_fit(size_t max, uint32_t ring)
{
	uint32_t nslots = (uint32_t)usmc_opt.lgr_slots;

	while (max && nslots && lgr_rings_bytes(nslots, ring) > max)
		nslots /= 2;
	return nslots;
}

/* The link group is mapped: count it, or -E2BIG if it does not fit (an
 * adopted one always does: its connection exists already). */
static int lgr_as_take(struct usmc_lgr *l, bool check)
{
	size_t n = l->size + l->sndbuf_size + l->dev_as;
	int rc = usmc_vm_take(n, check);

	if (!rc)
		l->as_bytes = n;
	return rc;
}

static struct usmc_lgr *lgr_alloc(uint64_t id, bool owner, const struct usmc_dev_ops *dev)
{
	struct usmc_lgr *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->id = id;
	l->owner = owner;
	l->pid = usmc_getpid();
	l->mem_fd = -1;
	l->guard = -1;
	l->map_max = SIZE_MAX;
	l->bell_own = l->bell_peer = -1;
	l->dev = dev;
	if (dev->progress)
		STORE_RELAXED(&usmc_dev_progressing, true);
	pthread_mutex_init(&l->lock, NULL);
	return l;
}

/*
 * What a link group needs of this process once its memory is there: the
 * per-slot bell records and, for a device that cannot map the peer's DMBs
 * (dev.h), the sndbufs our side writes into before move_data: one ring's
 * size per slot, private, backed only where written (the kernel's zero
 * page until then).  Reused with the slot, as DMBs are.
 */
static int lgr_private_alloc(struct usmc_lgr *l)
{
	l->bells = calloc(l->nslots, sizeof(*l->bells));
	l->bell_own = l->bell_peer = -1;
	l->bell_users = 0;
	if (!l->bells)
		return -ENOMEM;
	if (usmc_dev_can(l->dev, USMC_DEV_F_MAPPED))
		return 0;
	l->sndbuf_size = (size_t)l->nslots * l->ring_size;
	l->sndbuf = mmap(NULL, l->sndbuf_size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (l->sndbuf == MAP_FAILED) {
		l->sndbuf = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void lgr_free(struct usmc_lgr *l)
{
	usmc_vm_give(l->as_bytes);
	if (l->bells) {
		usmc_ifd_close(l->bell_own);
		usmc_ifd_close(l->bell_peer);
		free(l->bells);
	}
	if (l->sndbuf)
		munmap(l->sndbuf, l->sndbuf_size);
	l->dev->lgr_release(l);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

/*
 * A slot whose server end accepted, and whose server process never let go
 * of it (released_gen), while other connections keep the link group alive
 * on its side: a forked child that held the connection was killed, or a
 * process with threads exited holding it (exit.c leaves that to the FIN).
 * Nobody of theirs will ever release it, and it stayed busy for as long as
 * our process lived (a fork-per-connection server whose children were
 * killed: a link group per 64 kills).  The kernel knows: once no process
 * holds the server end's socket (usmc keeps it open until its last call
 * on it returned, sock.c held_fd, and closes it after the close protocol),
 * no process of theirs can store into the slot again.  Only an orphan
 * between its FIN and TIME_WAIT proves it (clc_bind.h usmc_bind_conn_held);
 * a socket reset is unhashed at once while its holder may still write,
 * and one in another namespace is not found either.  (Not proven: a
 * holder whose close could not keep the file for a call still in
 * progress, its duplicate refused for lack of descriptors, sock.c.)  Its
 * 4-tuple is the one we wrote in our line (a peer that scribbles on it can
 * only make us reuse a slot of a connection with itself).  Asked at our
 * close of a connection whose peer sent its FIN without a usmc close
 * (usmc_lgr_slot_ask), while our own socket still pins the 4-tuple (a
 * later ask could find another connection's server end under it).
 */
static bool slot_server_gone(struct usmc_lgr *l, uint32_t i)
{
	struct usmc_cdc_client *c = &l->ctrl[i].c;
	struct usmc_addr cli = c->client, srv = c->server;

	return usmc_bind_conn_held(&srv, &cli) == 0;
}

/*
 * Can the owner hand out slot k again?  Only once the server side let go of
 * the previous generation, or nobody on the server side is alive any more.
 * *alive caches that last answer for one scan of the slots (-1: not asked
 * yet): it is the link group's, one system call, not one per slot (a
 * client of a forking server found a dozen slots whose server children
 * were still exiting, and asked for each).
 */
static bool slot_reusable(struct usmc_lgr *l, uint32_t i, uint32_t gen, int *alive)
{
	struct usmc_cdc_ctrl *c = &l->ctrl[i];
	uint64_t ans = LOAD_ACQUIRE(&c->s.answer);
	struct usmc_clc_ln *ln;

	if (LOAD_ACQUIRE(&c->s.released_gen) == gen || l->bells[i].gone_gen == gen)
		return true;
	if (CDC_ANS_GEN(ans) == gen) {
		if (CDC_ANS_KIND(ans) == CDC_ANS_DECLINE)
			return true;
		if (*alive < 0)
			*alive = l->dev->lgr_peer_alive(l);
		return !*alive;
	}
	/* Not answered: the server may still match the proposal and read
	 * what we queued (a closed client's last bytes), so the slot waits
	 * for the answer, unless the listener is gone. */
	if (usmc_clc_ln_get(l->ln_id, false, &ln))
		return true;
	usmc_clc_ln_put(ln);
	return false;
}

/* Claim a slot in l; returns the slot or -1.  Caller holds lgr_list_lock. */
static int lgr_claim(struct usmc_lgr *l, uint32_t *gen)
{
	int alive = -1;
	uint32_t i;

	for (i = 0; i < l->nslots; i++) {
		struct usmc_cdc_ctrl *c = &l->ctrl[i];
		uint32_t st = LOAD_ACQUIRE(&c->c.state), g;

		if (st == SLOT_BUSY)
			continue;
		g = LOAD_RELAXED(&c->c.gen);
		if (st == SLOT_DRAIN && !slot_reusable(l, i, g, &alive))
			continue;
		if (!cdc_slot_move(&c->c, &st, SLOT_BUSY))
			continue;
		if (st == SLOT_DRAIN || g)
			STAT_INC(dmbs_reused);
		/* New generation; the peer ignores answers for older ones. */
		g++;
		if (!g)
			g = 1;
		/* The server let go of the slot: every line starts over. */
		cdc_reset_prod(&c->c2s_p);
		cdc_reset_cons(&c->c2s_c);
		cdc_reset_prod(&c->s2c_p);
		cdc_reset_cons(&c->s2c_c);
		cdc_slot_gen(&c->c, g);
		l->bells[i].gone_gen = 0;
		*gen = g;
		return (int)i;
	}
	return -1;
}

int usmc_lgr_slot_get(uint64_t ln_id, const struct usmc_dev_ops *dev, size_t peer_fit,
		      struct usmc_lgr **out, uint32_t *slot, uint32_t *gen)
{
	size_t own_fit = usmc_lgr_fit();
	uint32_t ring = (uint32_t)usmc_opt.ring_size, nslots;
	struct usmc_lgr *l;
	pid_t me = usmc_getpid();
	int s, rc;

	/* Sized for the tighter of our limit and the server's. */
	nslots = lgr_geometry_fit(!own_fit ? peer_fit : !peer_fit ? own_fit :
				  MIN(own_fit, peer_fit), ring);
	if (!nslots)
		return USMC_R_LIMIT;
	pthread_mutex_lock(&lgr_list_lock);
	for (l = lgr_list; l; l = l->next) {
		if (!l->owner || l->pid != me || l->ln_id != ln_id || l->dev != dev ||
		    l->ring_size != ring || l->nslots > nslots)
			continue;
		s = lgr_claim(l, gen);
		if (s >= 0)
			goto found;
	}
	pthread_mutex_unlock(&lgr_list_lock);

	/* No room: a new link group (the first contact, in SMC terms). */
	l = lgr_alloc(usmc_random64(), true, dev);
	if (!l)
		return USMC_R_MEM;
	l->ln_id = ln_id;
	l->nslots = nslots;
	l->ring_size = ring;
	if (lgr_rings_bytes(l->nslots, l->ring_size) > usmc_vm_left()) {
		free(l);
		return USMC_R_LIMIT;
	}
	rc = l->dev->lgr_create(l);
	if (rc) {
		usmc_dbg(1, "link group create failed: %s", strerror(-rc));
		free(l);
		return rc == -EMFILE || rc == -ENFILE ? USMC_R_LIMIT : USMC_R_MEM;
	}
	rc = lgr_private_alloc(l);
	if (rc || lgr_as_take(l, true)) {
		lgr_free(l);
		return rc ? USMC_R_MEM : USMC_R_LIMIT;
	}
	pthread_mutex_lock(&lgr_list_lock);
	l->next = lgr_list;
	lgr_list = l;
	s = lgr_claim(l, gen);
	if (s < 0) {
		pthread_mutex_unlock(&lgr_list_lock);
		return USMC_R_LIMIT;
	}
found:
	l->refs++;
	pthread_mutex_unlock(&lgr_list_lock);
	/* A slot this process backed before was registered before. */
	rc = l->bells[s].backed[0] ? 0 : l->dev->register_dmb(l, (uint32_t)s);
	if (rc) {
		usmc_lgr_slot_put(l, (uint32_t)s, *gen, false);
		return rc == -EMFILE || rc == -ENFILE ? USMC_R_LIMIT : USMC_R_MEM;
	}
	STAT_ADD(dmbs_registered, 2);
	*out = l;
	*slot = (uint32_t)s;
	return 0;
}

/* Drop idle link groups beyond LGR_IDLE_KEEP or whose peer is gone. */
static void lgr_prune_locked(void)
{
	struct usmc_lgr **pp = &lgr_list, *l;
	unsigned int idle = 0;

	while ((l = *pp)) {
		bool drop = false;

		if (!l->refs) {
			idle++;
			drop = idle > LGR_IDLE_KEEP || (!l->owner && !l->dev->lgr_peer_alive(l));
		}
		if (drop) {
			*pp = l->next;
			lgr_free(l);
			continue;
		}
		pp = &l->next;
	}
}

void usmc_lgr_slot_ask(struct usmc_lgr *l, uint32_t slot, uint32_t gen)
{
	/* Our slot, still busy with gen: nobody claims it meanwhile, and the
	 * kernel is asked without lgr_list_lock. */
	if (!l->owner || l->pid != usmc_getpid() || !l->bells || slot >= l->nslots ||
	    LOAD_RELAXED(&l->ctrl[slot].c.gen) != gen ||
	    LOAD_ACQUIRE(&l->ctrl[slot].s.released_gen) == gen || !slot_server_gone(l, slot))
		return;
	pthread_mutex_lock(&lgr_list_lock);
	l->bells[slot].gone_gen = gen;
	pthread_mutex_unlock(&lgr_list_lock);
}

void usmc_lgr_slot_release(struct usmc_lgr *l, uint32_t slot, uint32_t gen, bool server_attached)
{
	struct usmc_cdc_ctrl *c = &l->ctrl[slot];
	uint32_t busy = SLOT_BUSY;

	if (LOAD_RELAXED(&c->c.gen) == gen)
		cdc_slot_move(&c->c, &busy, server_attached ? SLOT_DRAIN : SLOT_FREE);
}

void usmc_lgr_slot_put(struct usmc_lgr *l, uint32_t slot, uint32_t gen, bool server_attached)
{
	usmc_lgr_slot_release(l, slot, gen, server_attached);
	usmc_lgr_put(l);
}


int usmc_lgr_handle_fd(const struct usmc_lgr *l)
{
	return l->dev->lgr_handle_fd ? l->dev->lgr_handle_fd(l) : -1;
}

/* budget: a new connection's, which must fit the address-space share;
 * an existing one (received, inherited) always does, as usmc_lgr_adopt's. */
static int lgr_attach(uint64_t id, uint8_t dev_id, int mem_fd, bool budget, struct usmc_lgr **out)
{
	const struct usmc_dev_ops *dev = usmc_dev_get(dev_id);
	struct usmc_lgr *l;
	int rc;

	pthread_mutex_lock(&lgr_list_lock);
	for (l = lgr_list; l; l = l->next)
		if (!l->owner && l->id == id)
			break;
	if (l && l->dev != dev) {
		pthread_mutex_unlock(&lgr_list_lock);
		rc = -EBADMSG;	/* the peer names another device now */
		goto out_fd;
	}
	if (l) {
		l->refs++;
		pthread_mutex_unlock(&lgr_list_lock);
		*out = l;
		rc = 0;
		goto out_fd;
	}
	lgr_prune_locked();
	pthread_mutex_unlock(&lgr_list_lock);

	rc = -EBADMSG;
	if (!dev)
		goto out_fd;
	rc = -ENOMEM;
	l = lgr_alloc(id, false, dev);
	if (!l)
		goto out_fd;
	/* The device refuses a bigger one before mapping it (a refused
	 * mmap would read as out_of_memory); lgr_as_take counts the rest. */
	l->map_max = budget ? usmc_vm_left() : SIZE_MAX;
	l->fd_high = budget;
	rc = l->dev->lgr_attach(l);
	if (rc == -ENOENT && mem_fd >= 0) {
		usmc_ifd_mark(mem_fd);	/* usmc's own from now on */
		l->mem_fd = mem_fd;	/* the device's attach takes it over */
		mem_fd = -1;
		rc = l->dev->lgr_attach(l);
	}
	if (rc) {
		free(l);
		goto out_fd;
	}
	rc = lgr_private_alloc(l);
	if (!rc)
		rc = lgr_as_take(l, budget);
	if (rc) {
		lgr_free(l);
		goto out_fd;
	}
	pthread_mutex_lock(&lgr_list_lock);
	l->refs = 1;
	l->next = lgr_list;
	lgr_list = l;
	pthread_mutex_unlock(&lgr_list_lock);
	*out = l;
out_fd:
	if (mem_fd >= 0)
		sys_close(mem_fd);
	return rc;
}

int usmc_lgr_attach(uint64_t id, uint8_t dev_id, struct usmc_lgr **out)
{
	return lgr_attach(id, dev_id, -1, true, out);
}

int usmc_lgr_attach_fd(uint64_t id, uint8_t dev_id, int mem_fd, struct usmc_lgr **out)
{
	return lgr_attach(id, dev_id, mem_fd, false, out);
}

/* Is fd (another process's word) the file l mapped? */
static bool same_file(int fd, int mem_fd)
{
	struct stat a, b;

	return fd >= 0 && !fstat(fd, &a) && !fstat(mem_fd, &b) && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

int usmc_lgr_adopt(uint64_t id, int owner_fd, struct usmc_lgr **out)
{
	struct usmc_lgr *l;
	int rc;

	pthread_mutex_lock(&lgr_list_lock);
	for (l = lgr_list; l; l = l->next)
		if (l->owner && l->id == id)
			break;
	if (l) {
		l->refs++;
		pthread_mutex_unlock(&lgr_list_lock);
		if (owner_fd >= 0 && owner_fd != l->mem_fd)
			sys_close(owner_fd);	/* we hold its lock already */
		*out = l;
		return 0;
	}
	pthread_mutex_unlock(&lgr_list_lock);
	/* Only a device that survives exec and SCM_RIGHTS gets here. */
	l = lgr_alloc(id, true, &usmc_dev_loopback);
	if (!l) {
		sys_close(owner_fd);
		return -ENOMEM;
	}
	rc = l->dev->lgr_attach(l);
	if (!rc && !same_file(owner_fd, l->mem_fd)) {
		rc = -EBADMSG;
		l->pid = 0;	/* not ours to unpublish */
		lgr_free(l);
	} else if (rc) {
		free(l);
	}
	if (rc) {
		sys_close(owner_fd);
		return rc;
	}
	/* Keep the inherited owner lock; never allocate from or unpublish a
	 * link group we did not create (pid 0 matches no process). */
	usmc_ifd_close(l->mem_fd);
	l->mem_fd = owner_fd;
	usmc_ifd_mark(owner_fd);
	sys_fcntl(owner_fd, F_SETFD, FD_CLOEXEC);
	l->pid = 0;
	rc = lgr_private_alloc(l);
	if (!rc)
		rc = lgr_as_take(l, false);
	if (rc) {
		lgr_free(l);
		return rc;
	}
	pthread_mutex_lock(&lgr_list_lock);
	l->refs = 1;
	l->next = lgr_list;
	lgr_list = l;
	pthread_mutex_unlock(&lgr_list_lock);
	*out = l;
	return 0;
}

void usmc_lgr_put(struct usmc_lgr *l)
{
	pthread_mutex_lock(&lgr_list_lock);
	if (--l->refs == 0)
		l->idle_since_ns = usmc_now_ns();
	pthread_mutex_unlock(&lgr_list_lock);
}

int usmc_lgr_bells(struct usmc_lgr *l, int *own, int *peer)
{
	int rc = 0;

	pthread_mutex_lock(&l->lock);
	if (l->bell_own < 0) {
		rc = l->dev->attach_bells(l, l->owner, &l->bell_own, &l->bell_peer);
		if (rc)
			l->bell_own = l->bell_peer = -1;
		else
			l->bell_gen = atomic_fetch_add(&bell_gens, 1) + 1;
	}
	*own = l->bell_own;
	*peer = l->bell_peer;
	/* Counted before the lock goes: a shed (usmc_lgr_shed) never closes
	 * numbers handed out to a socket not yet in the descriptor table. */
	if (!rc)
		l->bell_users++;
	pthread_mutex_unlock(&l->lock);
	return rc;
}

void usmc_lgr_bells_put(struct usmc_lgr *l)
{
	pthread_mutex_lock(&l->lock);
	if (l->bell_users)
		l->bell_users--;
	pthread_mutex_unlock(&l->lock);
}

int usmc_lgr_bell_own(struct usmc_lgr *l)
{
	int fd;

	pthread_mutex_lock(&l->lock);
	fd = l->bell_own;
	pthread_mutex_unlock(&l->lock);
	return fd;
}

void usmc_lgr_hold(struct usmc_lgr *l)
{
	pthread_mutex_lock(&lgr_list_lock);
	l->refs++;
	pthread_mutex_unlock(&lgr_list_lock);
}

bool usmc_lgr_bells_last(struct usmc_lgr *l)
{
	bool last;

	if (!usmc_lock_bounded(&l->lock))
		return false;
	last = l->bell_users == 1;
	pthread_mutex_unlock(&l->lock);
	return last;
}

/* Nothing of an owned link group is still wanted by the server side: a
 * slot left DRAIN (a closed client's bytes the server has yet to read, or
 * a proposal it has yet to take) needs the files the owner removes. */
static bool lgr_slots_free(struct usmc_lgr *l)
{
	uint32_t i;

	for (i = 0; i < l->nslots; i++)
		if (LOAD_ACQUIRE(&l->ctrl[i].c.state) != SLOT_FREE)
			return false;
	return true;
}

/*
 * Callers make sure no call holds a number closed here (shed.c).  Bounded
 * locks: a signal handler's open() at EMFILE may interrupt this thread
 * inside the lock it would wait for; then it gets nothing back.
 */
int usmc_lgr_shed(void)
{
	struct usmc_lgr **pp, *l;
	int n = 0;

	if (!usmc_lock_bounded(&lgr_list_lock))
		return 0;
	for (pp = &lgr_list; (l = *pp);) {
		if (!l->refs && (!l->owner || lgr_slots_free(l))) {
			*pp = l->next;
			n += 1 + (l->mem_fd >= 0);
			lgr_free(l);
			continue;
		}
		if (!usmc_lock_bounded(&l->lock)) {
			pp = &l->next;
			continue;
		}
		if (!l->bell_users && l->bell_own >= 0) {
			usmc_ifd_close(l->bell_own);
			usmc_ifd_close(l->bell_peer);
			l->bell_own = l->bell_peer = -1;
			n += 2;
		}
		pthread_mutex_unlock(&l->lock);
		pp = &l->next;
	}
	pthread_mutex_unlock(&lgr_list_lock);
	return n;
}

void usmc_lgr_after_fork(void)
{
	struct usmc_lgr *l;

	/* Single-threaded child: reset locks a parent thread may have held. */
	pthread_mutex_init(&lgr_list_lock, NULL);
	for (l = lgr_list; l; l = l->next)
		pthread_mutex_init(&l->lock, NULL);
}

/*
 * A proposal of ours the server has not answered yet: it will attach the
 * slot (its doorbells, by name) when it accepts, and read what we queued,
 * as TCP's kernel keeps a dead client's bytes for the server.  The slot is
 * DRAIN after our close, BUSY if exit found it open; the server's answer
 * carries the generation.
 */
static bool lgr_proposal_pending(struct usmc_lgr *l)
{
	uint32_t i;

	for (i = 0; i < l->nslots; i++) {
		struct usmc_cdc_ctrl *c = &l->ctrl[i];

		if (LOAD_ACQUIRE(&c->c.state) != SLOT_FREE &&
		    CDC_ANS_GEN(LOAD_ACQUIRE(&c->s.answer)) != LOAD_RELAXED(&c->c.gen))
			return true;
	}
	return false;
}

void usmc_lgr_exit(void)
{
	struct usmc_lgr *l;

	/* Only names are removed: peers keep their mappings and descriptors.
	 * A link group with a proposal still pending keeps them for the
	 * server; the garbage collection removes them once our lock is gone
	 * (rundir.c: usmc stat, as after a kill). */
	for (l = lgr_list; l; l = l->next) {
		if (!l->owner || l->pid != usmc_getpid())
			continue;
		if (lgr_proposal_pending(l)) {
			usmc_dbg(1, "exit: link group %016llx kept for a proposal not yet accepted",
				 (unsigned long long)l->id);
			continue;
		}
		l->dev->lgr_unpublish(l);
	}
}
