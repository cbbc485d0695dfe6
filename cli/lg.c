// SPDX-License-Identifier: MIT
/*
 * lg.c - `usmc lg` (like `smcd linkgroup`): the link groups in the runtime
 * directory with their owner, peers, connections and memory; and the
 * reads of a link group's header and control blocks that `usmc stat -d`
 * uses for cursors.
 *
 * A link group's memory is read with pread on a checked descriptor, never
 * mapped: its owner may truncate it, and what it holds is only shown.
 */
#include "cdc.h"
#include "lgr.h"
#include "rundir.h"
#include "show.h"
#include "sys.h"
#include "usmc.h"

#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Open lg-<id>/mem (checked: ours, regular, nobody else may write) and
 * read its header; the descriptor, or -errno (-EBADMSG: not a link group). */
static int lg_open(const char *dir, struct usmc_lgr_hdr *h, struct stat *st)
{
	char path[300];
	int fd;

	snprintf(path, sizeof(path), "%s/mem", dir);
	fd = usmc_rundir_open(path, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, st) || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
	    h->magic != USMC_LGR_MAGIC || h->version != USMC_PROTO_VERSION ||
	    !h->nslots || h->nslots > USMC_LGR_MAX_SLOTS || h->ctrl_off < sizeof(*h) ||
	    h->ctrl_off + (uint64_t)h->nslots * sizeof(struct usmc_cdc_ctrl) > (uint64_t)st->st_size) {
		usmc_ifd_close(fd);
		return -EBADMSG;
	}
	return fd;
}

int cli_lg_ctrl(uint64_t id, uint32_t slot, struct usmc_lgr_hdr *h, struct usmc_cdc_ctrl *c)
{
	char dir[64];
	struct stat st;
	int fd, rc = 0;

	snprintf(dir, sizeof(dir), "lg-%016llx", (unsigned long long)id);
	fd = lg_open(dir, h, &st);
	if (fd < 0)
		return fd;
	if (slot >= h->nslots ||
	    pread(fd, c, sizeof(*c), (off_t)(h->ctrl_off + (uint64_t)slot * sizeof(*c))) !=
		    (ssize_t)sizeof(*c))
		rc = -EBADMSG;
	usmc_ifd_close(fd);
	return rc;
}

#define MAX_PEERS	8

struct lg_info {
	struct usmc_lgr_hdr h;
	bool alive;
	unsigned int busy, conns, npeers;
	uint32_t peers[MAX_PEERS];
	uint64_t committed;		/* bytes of memory behind the file */
};

/* Slots in use and the distinct server pids answering on them. */
static void lg_slots(int fd, struct lg_info *g)
{
	struct usmc_cdc_ctrl *c = calloc(g->h.nslots, sizeof(*c));
	unsigned int i, k;

	if (!c)
		return;
	if (pread(fd, c, g->h.nslots * sizeof(*c), (off_t)g->h.ctrl_off) !=
	    (ssize_t)(g->h.nslots * sizeof(*c))) {
		free(c);
		return;
	}
	for (i = 0; i < g->h.nslots; i++) {
		uint32_t pid = c[i].s.pid;

		if (LOAD_RELAXED(&c[i].c.state) == SLOT_FREE)
			continue;
		g->busy++;
		if (!pid || CDC_ANS_GEN(LOAD_RELAXED(&c[i].s.answer)) != LOAD_RELAXED(&c[i].c.gen))
			continue;
		for (k = 0; k < g->npeers && g->peers[k] != pid; k++)
			;
		if (k == g->npeers && k < MAX_PEERS)
			g->peers[g->npeers++] = pid;
	}
	free(c);
}

/* Every link group whose owner is alive (all: also dead ones not yet
 * removed); *refused counts lg- entries that are no object of ours. */
static unsigned int lg_scan(struct lg_info **out, bool all, unsigned int *refused)
{
	struct lg_info *v = NULL;
	unsigned int n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int fd;

	*refused = 0;
	*out = NULL;
	if (usmc_rundir_init())
		return 0;
	/* The directory we checked, not whatever its path names now. */
	fd = openat(usmc_rundir_fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	while ((de = readdir(d))) {
		struct lg_info g = { 0 };
		struct stat st;

		if (strncmp(de->d_name, "lg-", 3))
			continue;
		fd = lg_open(de->d_name, &g.h, &st);
		if (fd == -EINVAL || fd == -EPERM || fd == -EBADMSG)
			(*refused)++;
		if (fd < 0)
			continue;
		g.alive = usmc_lock_held(fd, 0);
		g.committed = (uint64_t)st.st_blocks * 512;
		if (g.alive || all)
			lg_slots(fd, &g);
		usmc_ifd_close(fd);
		if (!g.alive && !all)
			continue;
		if (n == cap) {
			struct lg_info *nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));

			if (!nv)
				break;
			v = nv;
		}
		v[n++] = g;
	}
	closedir(d);
	*out = v;
	return n;
}

unsigned int cli_lg_count(unsigned int *refused, uint64_t *committed)
{
	struct lg_info *v;
	unsigned int n = lg_scan(&v, false, refused), i;

	*committed = 0;
	for (i = 0; i < n; i++)
		*committed += v[i].committed;
	free(v);
	return n;
}

static const char *dev_name(uint32_t id)
{
	const struct usmc_dev_ops *d = id <= 0xff ? usmc_dev_get((uint8_t)id) : NULL;

	return d ? d->name : id == USMC_DEV_IVSHMEM ? "ivshmem" : id == USMC_DEV_RDMA ? "rdma" : "?";
}

int cmd_lg(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const hdr[] = { "ID", "DEVICE", ">OWNER", ">PEERS", ">UID", ">SLOTS",
					   ">CONNS", ">RING", ">MAPPED", ">COMMITTED", "STATE" };
	struct usmc_stats_file *f;
	bool json = false, all = false;
	unsigned int n, i, k, refused;
	struct lg_info *v;
	struct tbl t;
	int c;

	while ((c = getopt_long(argc, argv, "jah", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'a':
			all = true;
			break;
		case 'h':
			printf("usage: usmc lg [-a|--all] [--json]\n"
			       "  link groups: owner (client) pid, peer (server) pids, connections, "
			       "memory\n");
			return 0;
		default:
			return 2;
		}
	}
	f = cli_stats_open("lg");
	if (!f)
		return 1;
	n = lg_scan(&v, all, &refused);
	/* Connections per link group: the client entries of the live table. */
	for (i = 0; i < USMC_STATS_CONNS; i++) {
		const struct usmc_stats_conn *e = &f->conns[i];

		int mode = LOAD_RELAXED(&e->mode);

		if (LOAD_ACQUIRE(&e->state) != 1 || e->role != 'C' ||
		    (mode != USMC_MODE_SMCD && mode != USMC_MODE_PROPOSED))
			continue;
		for (k = 0; k < n; k++)
			if (v[k].h.id == e->lgr_id)
				v[k].conns++;
	}
	if (json) {
		printf("{\"rundir\": ");
		json_str(usmc_rundir_path());
		printf(", \"refused_objects\": %u, \"link_groups\": [", refused);
		for (i = 0; i < n; i++) {
			printf("%s\n  {\"id\": \"%016llx\", \"device\": \"%s\", \"owner_pid\": %u, "
			       "\"owner_uid\": %u, \"alive\": %s, \"peer_pids\": [",
			       i ? "," : "", (unsigned long long)v[i].h.id, dev_name(v[i].h.dev),
			       v[i].h.owner_pid, v[i].h.owner_uid, v[i].alive ? "true" : "false");
			for (k = 0; k < v[i].npeers; k++)
				printf("%s%u", k ? ", " : "", v[i].peers[k]);
			printf("], \"slots\": %u, \"slots_busy\": %u, \"connections\": %u, "
			       "\"ring_size\": %u, \"size\": %llu, \"committed\": %llu}",
			       v[i].h.nslots, v[i].busy, v[i].conns, v[i].h.ring_size,
			       (unsigned long long)v[i].h.size, (unsigned long long)v[i].committed);
		}
		printf("%s]}\n", n ? "\n" : "");
		free(v);
		return 0;
	}
	tbl_init(&t, ARRAY_SIZE(hdr), hdr);
	for (i = 0; i < n; i++) {
		char id[20], own[12], peers[96] = "-", uid[12], slots[24], conns[12], ring[16],
		     mapped[16], com[16];
		size_t o = 0;

		snprintf(id, sizeof(id), "%016llx", (unsigned long long)v[i].h.id);
		snprintf(own, sizeof(own), "%u", v[i].h.owner_pid);
		for (k = 0; k < v[i].npeers && o < sizeof(peers) - 12; k++)
			o += (size_t)snprintf(peers + o, sizeof(peers) - o, "%s%u", k ? "," : "",
					      v[i].peers[k]);
		snprintf(uid, sizeof(uid), "%u", v[i].h.owner_uid);
		snprintf(slots, sizeof(slots), "%u/%u", v[i].busy, v[i].h.nslots);
		snprintf(conns, sizeof(conns), "%u", v[i].conns);
		tbl_row(&t, id, dev_name(v[i].h.dev), own, peers, uid, slots, conns,
			fmt_bytes(v[i].h.ring_size, ring, sizeof(ring)),
			fmt_bytes(v[i].h.size, mapped, sizeof(mapped)),
			fmt_bytes(v[i].committed, com, sizeof(com)), v[i].alive ? "live" : "dead");
	}
	tbl_print(&t);
	tbl_free(&t);
	if (!n)
		printf("(no link groups: no connection is on shared memory)\n");
	printf("\nrundir %s\n", usmc_rundir_path());
	if (refused)
		printf("%u link group(s) refused: memory of the wrong type, owner or mode "
		       "(planted by someone else; never used)\n", refused);
	free(v);
	return 0;
}
