// SPDX-License-Identifier: MIT
/*
 * vmbudget.c - usmc's share of RLIMIT_AS (vmbudget.h).
 *
 * An eighth (USMC_VM_SHARE): with the defaults a link group reserves
 * 512 MiB, so below 4 GiB one gets fewer slots (lgr.c) or the connection
 * stays TCP (limit_reached); half was too much (a server and client under
 * ulimit -v 1.5 GB failed their own 900 MB allocations).  A listener's
 * CLC index (16 MiB, in the server and in every client that proposes to
 * it) counts too: under a 128 MiB limit, one of them alone was more than
 * the share.
 */
#include "vmbudget.h"

#include <sys/resource.h>

static _Atomic size_t vm_mapped;

/* The share left with mapped bytes counted. */
static size_t vm_left_of(size_t mapped)
{
	struct rlimit rl;
	size_t share;

	if (getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return SIZE_MAX;
	share = (size_t)(rl.rlim_cur / USMC_VM_SHARE);
	return share > mapped ? share - mapped : 0;
}

size_t usmc_vm_left(void)
{
	return vm_left_of(LOAD_RELAXED(&vm_mapped));
}

/* Checked: one compare-and-swap, so that two threads cannot each pass the
 * check and together exceed the share. */
int usmc_vm_take(size_t n, bool check)
{
	size_t left, cur;

	if (!check) {
		atomic_fetch_add(&vm_mapped, n);
		return 0;
	}
	cur = LOAD_RELAXED(&vm_mapped);
	do {
		left = vm_left_of(cur);
		if (n > left)
			return -E2BIG;
	} while (!atomic_compare_exchange_weak(&vm_mapped, &cur, cur + n));
	return 0;
}

void usmc_vm_give(size_t n)
{
	atomic_fetch_sub(&vm_mapped, n);
}
