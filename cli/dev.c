// SPDX-License-Identifier: MIT
/*
 * dev.c - `usmc dev`: the devices behind link groups and their statistics
 * (like `smcd device` and loopback-ism's sysfs counters in seed 003).
 */
#include "dev.h"
#include "guard.h"
#include "rundir.h"
#include "stats.h"
#include "sys.h"
#include "usmc.h"

#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>

/* Link groups in the runtime directory whose owner is alive; *refused:
 * lg-* entries whose memory is no object of ours (wrong type, owner or
 * mode: planted), which are never opened beyond a non-blocking fstat. */
static unsigned int live_lgrs(unsigned int *refused)
{
	struct dirent *de;
	unsigned int n = 0;
	DIR *d;
	int fd;

	*refused = 0;
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
		char path[300];

		if (strncmp(de->d_name, "lg-", 3))
			continue;
		snprintf(path, sizeof(path), "%s/mem", de->d_name);
		fd = usmc_rundir_open(path, O_RDONLY, 0);
		if (fd == -EINVAL || fd == -EPERM)
			(*refused)++;
		if (fd < 0)
			continue;
		if (usmc_lock_held(fd, 0))
			n++;
		usmc_ifd_close(fd);
	}
	closedir(d);
	return n;
}

int cmd_dev(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct usmc_counters_snapshot s;
	struct usmc_stats_file *f;
	unsigned int lgrs, conns = 0, refused, i;
	bool json = false, usable;
	int c;

	while ((c = getopt_long(argc, argv, "j", opts, NULL)) != -1)
		if (c == 'j')
			json = true;
	/* The files we map may be truncated under us: guard.c's handler. */
	usmc_real_sigaction = sigaction;
	usable = usmc_dev_loopback.probe();
	f = usmc_stats_map();
	if (f) {
		usmc_stats_gc(f, usmc_stats_fd());
		usmc_stats_sum(f, &s);
		for (i = 0; i < USMC_STATS_CONNS; i++)
			if (LOAD_ACQUIRE(&f->conns[i].state) == 1 &&
			    LOAD_RELAXED(&f->conns[i].mode) == USMC_MODE_SMCD)
				conns++;
	} else {
		memset(&s, 0, sizeof(s));
	}
	lgrs = live_lgrs(&refused);
#define CTR(field) ((unsigned long long)s.v[offsetof(struct usmc_counters, field) / 8])
	if (json) {
		printf("{\"devices\": [\n");
		printf("  {\"name\": \"loopback\", \"type\": \"SMC-D\", \"id\": %d, \"usable\": %s, "
		       "\"rundir\": ", USMC_DEV_LOOPBACK, usable ? "true" : "false");
		json_str(usmc_rundir_path());
		printf(", \"link_groups\": %u, \"connections\": %u, \"lgr_created\": %llu, "
		       "\"lgr_attached\": %llu, \"dmbs_registered\": %llu, \"dmbs_reused\": %llu, "
		       "\"xfer_bytes\": %llu, \"doorbells\": %llu, \"refused_objects\": %u},\n",
		       lgrs, conns, CTR(lgr_created), CTR(lgr_attached), CTR(dmbs_registered),
		       CTR(dmbs_reused), CTR(tx_bytes), CTR(doorbells), refused);
		printf("  {\"name\": \"ivshmem\", \"type\": \"SMC-D\", \"id\": %d, \"usable\": false},\n",
		       USMC_DEV_IVSHMEM);
		printf("  {\"name\": \"rdma\", \"type\": \"SMC-R\", \"id\": %d, \"usable\": false}\n",
		       USMC_DEV_RDMA);
		printf("]}\n");
		return 0;
	}
	printf("%-9s %-6s %-4s %-8s %5s %6s %10s %9s %16s %10s\n", "NAME", "TYPE", "ID", "STATUS",
	       "#LGs", "#CONN", "DMBs", "REUSED", "XFER_BYTES", "DOORBELLS");
	printf("%-9s %-6s %-4d %-8s %5u %6u %10llu %9llu %16llu %10llu\n", "loopback", "SMC-D",
	       USMC_DEV_LOOPBACK, usable ? "usable" : "down", lgrs, conns, CTR(dmbs_registered),
	       CTR(dmbs_reused), CTR(tx_bytes), CTR(doorbells));
	printf("%-9s %-6s %-4d %-8s\n", "ivshmem", "SMC-D", USMC_DEV_IVSHMEM, "absent");
	printf("%-9s %-6s %-4d %-8s\n", "rdma", "SMC-R", USMC_DEV_RDMA, "absent");
	printf("\nrundir %s\n", usmc_rundir_path());
	if (refused)
		printf("%u link group(s) refused: memory of the wrong type, owner or mode "
		       "(planted by someone else; never used)\n", refused);
#undef CTR
	return 0;
}
