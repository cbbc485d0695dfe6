// SPDX-License-Identifier: MIT
/*
 * dev_loopback.c - the loopback device: SMC-D between processes of one host.
 *
 * Link group memory is a file in the runtime directory (tmpfs), so every
 * process that can see the directory (other network namespaces, other
 * containers that share it) can attach it by name; doorbells are FIFOs
 * beside it.  The owner holds an OFD write lock on byte 0 of the memory
 * file, attached peers a read lock on byte 1: the kernel drops them when
 * a process dies, which is how either side learns the other is gone.
 */
#include "dev.h"
#include "dev_loopback.h"
#include "guard.h"
#include "lgr.h"
#include "log.h"
#include "options.h"
#include "rundir.h"
#include "stats.h"
#include "sys.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>

static void lgr_dir(char *buf, size_t len, uint64_t id, bool tmp)
{
	snprintf(buf, len, "%slg-%016llx", tmp ? "t-" : "", (unsigned long long)id);
}

bool usmc_lo_probe(void)
{
	return usmc_rundir_init() == 0;
}

/* DMB placement: page aligned, or huge-page aligned for dmb_type=huge (a
 * tmpfs mounted with huge= then backs each ring with 2 MB pages). */
#define DMB_SHIFT_REGULAR	12
#define DMB_SHIFT_HUGE		21

static size_t lgr_geometry(struct usmc_lgr_hdr *h, uint32_t nslots, uint32_t ring,
			   uint32_t shift)
{
	uint64_t align = 1ULL << shift;

	h->nslots = nslots;
	h->ring_size = ring;
	h->dmb_shift = shift;
	h->ctrl_off = 4096;
	h->dmb_off = (h->ctrl_off + (uint64_t)nslots * sizeof(struct usmc_cdc_ctrl) + align - 1) &
		     ~(align - 1);
	h->size = h->dmb_off + (uint64_t)nslots * 2 * ring;
	return h->size;
}

static void lgr_map_setup(struct usmc_lgr *l, const struct usmc_lgr_hdr *h)
{
	l->guard = usmc_guard_add(l->base, h->size);
	l->nslots = h->nslots;
	l->ring_size = h->ring_size;
	l->size = h->size;
	l->ctrl = (struct usmc_cdc_ctrl *)(l->base + h->ctrl_off);
	l->dmb = l->base + h->dmb_off;
	if (h->dmb_shift == DMB_SHIFT_HUGE)
		madvise(l->base + h->dmb_off, h->size - h->dmb_off, MADV_HUGEPAGE);
}

int usmc_lo_lgr_create(struct usmc_lgr *l)
{
	struct usmc_lgr_hdr h = { 0 }, *hp;
	char tmp[64], final[64], path[96];
	int fd, rc;

	if (usmc_fault(USMC_FAULT_LGR))
		return -ENOMEM;
	lgr_dir(tmp, sizeof(tmp), l->id, true);
	lgr_dir(final, sizeof(final), l->id, false);
	rc = usmc_rundir_mkdir(tmp);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s/mem", tmp);
	fd = usmc_rundir_open_kept(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0) {
		rc = fd;
		goto err_dir;
	}
	lgr_geometry(&h, l->nslots, l->ring_size,
		     strcmp(usmc_opt.dmb_type, "huge") ? DMB_SHIFT_REGULAR : DMB_SHIFT_HUGE);
	/* Header and control blocks are backed now; rings grow on demand
	 * (dmb_reserve), so a full tmpfs never faults an access. */
	if (ftruncate(fd, (off_t)h.size) || fallocate(fd, 0, 0, (off_t)h.dmb_off)) {
		rc = -errno;
		goto err_file;
	}
	l->base = usmc_map_shared(fd, h.size);
	if (!l->base) {
		rc = -ENOMEM;
		goto err_file;
	}
	rc = usmc_lock_take(fd, 0);
	if (rc)
		goto err_map;
	/* The doorbells, one per side for all slots (wait.c). */
	snprintf(path, sizeof(path), "%s/c", tmp);
	rc = usmc_rundir_mkfifo(path);
	if (!rc) {
		snprintf(path, sizeof(path), "%s/s", tmp);
		rc = usmc_rundir_mkfifo(path);
	}
	snprintf(path, sizeof(path), "%s/mem", tmp);
	if (rc)
		goto err_map;
	hp = (struct usmc_lgr_hdr *)l->base;
	h.version = USMC_PROTO_VERSION;
	h.id = l->id;
	h.owner_pid = (uint32_t)usmc_getpid();
	h.owner_uid = (uint32_t)geteuid();
	h.dev = l->dev->id;
	*hp = h;
	STORE_RELEASE((_Atomic uint64_t *)&hp->magic, USMC_LGR_MAGIC);
	/* Locked before it is visible under its real name: see rundir.h. */
	rc = usmc_rundir_rename(tmp, final);
	if (rc)
		goto err_map;
	l->mem_fd = fd;
	lgr_map_setup(l, &h);
	STAT_INC(lgr_created);
	return 0;

err_map:
	munmap(l->base, h.size);
	l->base = NULL;
err_file:
	usmc_ifd_close(fd);
	usmc_rundir_unlink(path, false);
	snprintf(path, sizeof(path), "%s/c", tmp);
	usmc_rundir_unlink(path, false);
	snprintf(path, sizeof(path), "%s/s", tmp);
	usmc_rundir_unlink(path, false);
err_dir:
	usmc_rundir_unlink(tmp, true);
	return rc;
}

int usmc_lo_lgr_attach(struct usmc_lgr *l)
{
	return usmc_lo_lgr_attach_tail(l, 0);
}

/* A device built on this memory may keep per_slot bytes for each slot
 * after the end of the file (dev_copy.c); the size check allows them. */
int usmc_lo_lgr_attach_tail(struct usmc_lgr *l, size_t per_slot)
{
	struct usmc_lgr_hdr h, expect = { 0 };
	char path[96];
	struct stat st;
	int fd, rc;

	/* By name, or through a copy of the file already open (l->mem_fd,
	 * received: lgr.c), checked the same way; taken over either way. */
	fd = l->mem_fd;
	l->mem_fd = -1;
	if (usmc_fault(USMC_FAULT_ATTACH)) {
		if (fd >= 0)
			usmc_ifd_close(fd);
		return -ENOMEM;
	}
	if (fd < 0) {
		snprintf(path, sizeof(path), "lg-%016llx/mem", (unsigned long long)l->id);
		fd = l->fd_high ? usmc_rundir_open_kept(path, O_RDWR, 0) :
				  usmc_rundir_open(path, O_RDWR, 0);
		if (fd < 0)
			return fd;
	}
	if (fstat(fd, &st) || st.st_size < 4096) {
		rc = -EBADMSG;
		goto err;
	}
	if (pread(fd, &h, sizeof(h), 0) != sizeof(h)) {
		rc = -EBADMSG;
		goto err;
	}
	/* The header is the peer's word: check every field against the file. */
	if (h.magic != USMC_LGR_MAGIC || h.version != USMC_PROTO_VERSION || h.id != l->id ||
	    h.dev != l->dev->id || !h.nslots || h.nslots > USMC_LGR_MAX_SLOTS ||
	    h.ring_size < 4096 || h.ring_size > (64u << 20) || (h.ring_size & (h.ring_size - 1)) ||
	    (h.dmb_shift != DMB_SHIFT_REGULAR && h.dmb_shift != DMB_SHIFT_HUGE)) {
		rc = -EBADMSG;
		goto err;
	}
	lgr_geometry(&expect, h.nslots, h.ring_size, h.dmb_shift);
	if (h.ctrl_off != expect.ctrl_off || h.dmb_off != expect.dmb_off ||
	    h.size != expect.size || (uint64_t)st.st_size != h.size + h.nslots * per_slot) {
		rc = -EBADMSG;
		goto err;
	}
	if (!usmc_rundir_owner_ok(&st)) {
		rc = -EPERM;
		goto err;
	}
	if ((uint64_t)st.st_size > l->map_max) {
		rc = -E2BIG;
		goto err;
	}
	/* An owner that truncates the file later turns our accesses into
	 * SIGBUS; guard.c maps zero pages over the hole and poisons the link
	 * group (docs/reliability.md). */
	l->base = usmc_map_shared(fd, h.size);
	if (!l->base) {
		rc = -ENOMEM;
		goto err;
	}
	/* Our read lock on byte 1 tells the owner we still hold its slots
	 * (an owner re-attaching after exec keeps its inherited lock on 0). */
	if (!l->owner) {
		struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1 };

		sys_fcntl(fd, F_OFD_SETLK, (long)&fl);
	}
	l->mem_fd = fd;
	lgr_map_setup(l, &h);
	STAT_INC(lgr_attached);
	return 0;
err:
	usmc_ifd_close(fd);
	return rc;
}

void usmc_lo_lgr_unpublish(struct usmc_lgr *l)
{
	char dir[64], path[96];

	lgr_dir(dir, sizeof(dir), l->id, false);
	snprintf(path, sizeof(path), "%s/c", dir);
	usmc_rundir_unlink(path, false);
	snprintf(path, sizeof(path), "%s/s", dir);
	usmc_rundir_unlink(path, false);
	snprintf(path, sizeof(path), "%s/mem", dir);
	usmc_rundir_unlink(path, false);
	usmc_rundir_unlink(dir, true);
}

void usmc_lo_lgr_release(struct usmc_lgr *l)
{
	usmc_guard_del(l->guard);
	if (l->base)
		munmap(l->base, l->size);
	l->base = NULL;
	if (l->owner && l->pid == usmc_getpid())
		usmc_lo_lgr_unpublish(l);
	usmc_ifd_close(l->mem_fd);
	l->mem_fd = -1;
}

int usmc_lo_lgr_handle_fd(const struct usmc_lgr *l)
{
	return l->mem_fd;
}

bool usmc_lo_lgr_peer_alive(struct usmc_lgr *l)
{
	/* Owner asks about attached peers (byte 1), peers about the owner (0). */
	return usmc_lock_held(l->mem_fd, l->owner ? 1 : 0);
}

/* A slot's DMBs live in the link group's file (backed by dmb_reserve):
 * nothing to create; the fault point stands for a device that has to. */
int usmc_lo_register_dmb(struct usmc_lgr *l, uint32_t slot)
{
	(void)l;
	(void)slot;
	return usmc_fault(USMC_FAULT_DMB) ? -ENOSPC : 0;
}

static int open_bell(uint64_t id, char side)
{
	char path[96];
	int fd;

	if (usmc_fault(USMC_FAULT_BELL))
		return -EMFILE;
	snprintf(path, sizeof(path), "lg-%016llx/%c", (unsigned long long)id, side);
	/* O_RDWR: never blocks, never EOF, a write never raises SIGPIPE, and
	 * the ringing side can empty a full FIFO (usmc_lo_signal). */
	fd = usmc_rundir_open_fifo(path, O_RDWR | O_NONBLOCK);
	return fd < 0 ? fd : usmc_ifd_move_high(fd, true);
}

/*
 * The doorbells of a link group whose owner is gone, unpublished with its
 * names (a server end received from another process after the client
 * exited: its bytes are still in the ring, lgr.c usmc_lgr_attach_fd).
 * Nobody rings or watches the other side any more: private FIFOs stand
 * in, so the connection reads what is left and its end as any other.
 */
static int orphan_bell(void)
{
	static _Atomic uint32_t n;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "t-bell-%d-%u", (int)usmc_getpid(), atomic_fetch_add(&n, 1));
	fd = usmc_rundir_mkfifo(path);
	if (!fd)
		fd = usmc_rundir_open_fifo(path, O_RDWR | O_NONBLOCK);
	usmc_rundir_unlink(path, false);
	return fd < 0 ? fd : usmc_ifd_move_high(fd, true);
}

/*
 * A name that is gone while its owner still holds the link group: the
 * owner is exiting (it unpublishes first, then dies) or a neighbour removed
 * it.  Give the exit up to ORPHAN_WAIT_MS; an owner alive after that keeps
 * its real doorbells, which nobody here could ring: not attached.
 */
#define ORPHAN_WAIT_MS	200

static int attach_bell(struct usmc_lgr *l, char side)
{
	int fd = open_bell(l->id, side), ms;

	if (fd != -ENOENT || l->owner)
		return fd;
	for (ms = 0; usmc_lo_lgr_peer_alive(l); ms++) {
		if (ms == ORPHAN_WAIT_MS)
			return fd;
		usleep(1000);
	}
	return orphan_bell();
}

int usmc_lo_attach_bells(struct usmc_lgr *l, bool owner_side, int *own, int *peer)
{
	int a, b;

	a = attach_bell(l, owner_side ? 'c' : 's');
	if (a < 0)
		return a;
	b = attach_bell(l, owner_side ? 's' : 'c');
	if (b < 0) {
		usmc_ifd_close(a);
		return b;
	}
	*own = a;
	*peer = b;
	return 0;
}

/* Where a slot's ring dir starts in the link group's file. */
static off_t lo_ring_base(struct usmc_lgr *l, uint32_t slot, int dir)
{
	return (off_t)((uint8_t *)usmc_lgr_ring(l, slot, dir) - l->base);
}

int usmc_lo_dmb_reserve(struct usmc_lgr *l, uint32_t slot, int dir, uint32_t off, uint32_t len)
{
	off_t base = lo_ring_base(l, slot, dir);
	uint32_t *backed = l->bells ? &l->bells[slot].backed[dir & 1] : NULL;

	if (usmc_fault(USMC_FAULT_RESERVE))
		return -ENOSPC;
	/* Below USMC_DMB_FLOOR nobody of ours gives memory back
	 * (usmc_lo_dmb_release): what this process backed there once stays
	 * backed while the link group lives (a connection's first page, on a
	 * slot reused by one short connection after another).  Above it,
	 * always asked of the kernel: another process of ours (a fork, an
	 * adopter) may have given it back since; pages still there cost a
	 * lookup each. */
	if (backed && off + len <= USMC_DMB_FLOOR && *backed >= off + len)
		return 0;
	if (fallocate(l->mem_fd, 0, base + off, len))
		return -errno;
	if (backed && off <= *backed && off + len > *backed)
		*backed = off + len;
	return 0;
}

/* Give len bytes at offset off of a slot's ring dir back to the tmpfs; a
 * later access finds zeroes (the file keeps its size: no SIGBUS).  Never
 * below USMC_DMB_FLOOR.  The bells[].backed mark stays: reserve trusts it
 * only below the floor, and lgr.c only asks whether it is set. */
int usmc_lo_dmb_release(struct usmc_lgr *l, uint32_t slot, int dir, uint32_t off,
			  uint32_t len)
{
	if (off < USMC_DMB_FLOOR)
		return -EINVAL;
	if (fallocate(l->mem_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      lo_ring_base(l, slot, dir) + off, len))
		return -errno;
	return 0;
}

static void lo_drain(int bell)
{
	char buf[4096];

	while (sys_read(bell, buf, sizeof(buf)) == (ssize_t)sizeof(buf))
		;
}

/*
 * Every waiter watches a doorbell edge-triggered (its own epoll instance,
 * wait.c, or the program's, epoll.c), and the kernel wakes each of them
 * on every write: the bytes themselves mean nothing and nobody reads them.
 * A full FIFO would refuse the write, and with it the edge: empty it (we
 * hold it read-write) and write again.
 */
void usmc_lo_signal(struct usmc_lgr *l, int bell)
{
	static const char one = 1;

	if (sys_write(bell, &one, 1) == -EAGAIN) {
		lo_drain(bell);
		(void)sys_write(bell, &one, 1);
	}
}

const struct usmc_dev_ops usmc_dev_loopback = {
	.name = "loopback",
	.id = USMC_DEV_LOOPBACK,
	.caps = USMC_DEV_F_MAPPED | USMC_DEV_F_FORK | USMC_DEV_F_EXEC | USMC_DEV_F_CLC_INDEX,
	.probe = usmc_lo_probe,
	.lgr_create = usmc_lo_lgr_create,
	.lgr_attach = usmc_lo_lgr_attach,
	.lgr_release = usmc_lo_lgr_release,
	.lgr_unpublish = usmc_lo_lgr_unpublish,
	.lgr_peer_alive = usmc_lo_lgr_peer_alive,
	.lgr_handle_fd = usmc_lo_lgr_handle_fd,
	.register_dmb = usmc_lo_register_dmb,
	.attach_bells = usmc_lo_attach_bells,
	.dmb_reserve = usmc_lo_dmb_reserve,
	.dmb_release = usmc_lo_dmb_release,
	.signal = usmc_lo_signal,
};
