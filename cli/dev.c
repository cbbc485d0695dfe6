// SPDX-License-Identifier: MIT
/*
 * dev.c - `usmc dev`: the devices behind link groups and their statistics
 * (like `smcd device` and loopback-ism's sysfs counters in seed 003).
 */
#include "counters.h"
#include "dev.h"
#include "options.h"
#include "rundir.h"
#include "show.h"
#include "usmc.h"

#include <getopt.h>
#include <stdio.h>

int cmd_dev(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const hdr[] = { "NAME", "TYPE", ">ID", "STATUS", "IN_USE", ">#LGs",
					   ">#CONN", ">DMBs", ">REUSED", ">XFER", ">COMMITTED",
					   ">FULL", "CONTROLS" };
	struct usmc_counters_snapshot s;
	struct usmc_stats_file *f;
	unsigned int lgrs, conns = 0, refused, i;
	bool json = false, usable;
	char ring[16], xfer[16], com[16], n1[16], n2[16], n3[16], n4[16], n5[16], n6[32], ctl[96];
	uint64_t committed;
	struct tbl t;
	int c;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		if (c == 'j') {
			json = true;
		} else if (c == 'h') {
			printf("usage: usmc dev [--json]\n"
			       "  devices: id, type, status, in use, link groups, connections, DMBs,\n"
			       "  bytes moved, memory committed, rings found full, controls "
			       "(usmc ctl loopback=0|1, dmb_type, dmb_copy, ring_size)\n");
			return 0;
		} else {
			return 2;
		}
	}
	f = cli_stats_open("dev");
	if (!f)
		return 1;
	usmc_options_refresh();
	usable = usmc_dev_loopback.probe() && usmc_opt.loopback;
	usmc_stats_sum(f, &s);
	for (i = 0; i < USMC_STATS_CONNS; i++)
		if (stat_conn_live(f, &f->conns[i]) &&
		    LOAD_RELAXED(&f->conns[i].mode) == USMC_MODE_SMCD)
			conns++;
	lgrs = cli_lg_count(&refused, &committed);
#define CTR(field) ((unsigned long long)s.v[STAT_IDX(field)])
	if (json) {
		printf("{\"devices\": [\n");
		printf("  {\"name\": \"loopback\", \"type\": \"SMC-D\", \"id\": %d, \"usable\": %s, "
		       "\"active\": %s, \"in_use\": %s, \"rundir\": ", USMC_DEV_LOOPBACK,
		       usable ? "true" : "false", usmc_opt.loopback ? "true" : "false",
		       lgrs ? "true" : "false");
		json_str(usmc_rundir_path());
		printf(", \"link_groups\": %u, \"connections\": %u, \"lgr_created\": %llu, "
		       "\"lgr_attached\": %llu, \"dmbs_registered\": %llu, \"dmbs_reused\": %llu, "
		       "\"xfer_bytes\": %llu, \"doorbells\": %llu, \"tx_full\": %llu, "
		       "\"committed_bytes\": %llu, \"refused_objects\": %u, \"controls\": "
		       "{\"active\": %s, \"dmb_type\": \"%s\", \"dmb_copy\": %s, \"ring_size\": %ld}},\n",
		       lgrs, conns, CTR(lgr_created), CTR(lgr_attached), CTR(dmbs_registered),
		       CTR(dmbs_reused), CTR(tx_bytes), CTR(doorbells), CTR(tx_full),
		       (unsigned long long)committed, refused, usmc_opt.loopback ? "true" : "false",
		       usmc_opt.dmb_type, usmc_opt.dmb_copy ? "true" : "false", usmc_opt.ring_size);
		printf("  {\"name\": \"ivshmem\", \"type\": \"SMC-D\", \"id\": %d, \"usable\": false},\n",
		       USMC_DEV_IVSHMEM);
		printf("  {\"name\": \"rdma\", \"type\": \"SMC-R\", \"id\": %d, \"usable\": false}\n",
		       USMC_DEV_RDMA);
		printf("]}\n");
		return 0;
	}
	tbl_init(&t, ARRAY_SIZE(hdr), hdr);
	snprintf(n1, sizeof(n1), "%d", USMC_DEV_LOOPBACK);
	snprintf(n2, sizeof(n2), "%u", lgrs);
	snprintf(n3, sizeof(n3), "%u", conns);
	snprintf(ctl, sizeof(ctl), "dmb_type=%s dmb_copy=%d ring_size=%s", usmc_opt.dmb_type,
		 usmc_opt.dmb_copy, fmt_bytes((uint64_t)usmc_opt.ring_size, ring, sizeof(ring)));
	tbl_row(&t, "loopback", "SMC-D", n1,
		usable ? "usable" : usmc_opt.loopback ? "down" : "off", lgrs ? "yes" : "no", n2, n3,
		fmt_count(CTR(dmbs_registered), n4, sizeof(n4)),
		fmt_count(CTR(dmbs_reused), n5, sizeof(n5)), fmt_bytes(CTR(tx_bytes), xfer, sizeof(xfer)),
		fmt_bytes(committed, com, sizeof(com)), fmt_count(CTR(tx_full), n6, sizeof(n6)), ctl);
	snprintf(n4, sizeof(n4), "%d", USMC_DEV_IVSHMEM);
	tbl_row(&t, "ivshmem", "SMC-D", n4, "absent", "no", "-", "-", "-", "-", "-", "-", "-", "-");
	snprintf(n5, sizeof(n5), "%d", USMC_DEV_RDMA);
	tbl_row(&t, "rdma", "SMC-R", n5, "absent", "no", "-", "-", "-", "-", "-", "-", "-", "-");
	tbl_print(&t);
	tbl_free(&t);
	printf("\nrundir %s\n", usmc_rundir_path());
	if (!usmc_opt.loopback)
		printf("the loopback device is off (usmc ctl loopback=1 turns it on)\n");
	if (refused)
		printf("%u link group(s) refused: memory of the wrong type, owner or mode "
		       "(planted by someone else; never used)\n", refused);
#undef CTR
	return 0;
}
