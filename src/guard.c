// SPDX-License-Identifier: MIT
/*
 * guard.c - surviving a peer that shrinks shared memory under us.
 *
 * A shared file (link group, registry, CLC index, statistics) can be
 * truncated at any time by anyone who can open it; an access to a page
 * past the new end raises SIGBUS.  Every shared mapping is registered
 * here.  Our SIGBUS handler recognises a fault inside one of them, maps
 * private zero pages over the whole mapping (the faulting instruction then
 * completes harmlessly) and marks it poisoned; the owner of the mapping
 * sees the mark and stops using it (a link group resets its connections,
 * the registry and an index fall back to TCP, the statistics count into a
 * dummy).  A SIGBUS anywhere else goes to the application's handler, or
 * kills the process as it would have without usmc.  The handler is
 * async-signal-safe: a scan of a fixed array and one mmap(2).
 */
#include "guard.h"
#include "log.h"
#include "real.h"
#include "usmc.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>

/* regions[].base while its adder fills the slot in */
#define GUARD_CLAIMED	((uintptr_t)1)

struct guard_region {
	_Atomic uintptr_t base;
	_Atomic size_t len;
};

/* Apart from the regions: the data path reads it on every call. */
_Atomic int usmc_guard_poison[GUARD_MAX];

static struct guard_region regions[GUARD_MAX];
static _Atomic int guard_installed;
static struct sigaction app_bus;	/* what the application asked for */
static _Atomic int app_bus_set;


static void bus_handler(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	int i;

	for (i = 0; i < GUARD_MAX; i++) {
		uintptr_t b = LOAD_ACQUIRE(&regions[i].base);
		size_t l = LOAD_RELAXED(&regions[i].len);

		if (b <= GUARD_CLAIMED || a < b || a - b >= l)
			continue;
		/* Ours: zero pages in place of the truncated file. */
		if (mmap((void *)b, l, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
			STORE_RELEASE(&usmc_guard_poison[i], 1);
			return;
		}
		break;
	}
	/* Not ours: exactly what would have happened without usmc. */
	if (LOAD_ACQUIRE(&app_bus_set) && app_bus.sa_handler != SIG_DFL &&
	    app_bus.sa_handler != SIG_IGN) {
		if (app_bus.sa_flags & SA_SIGINFO)
			app_bus.sa_sigaction(sig, si, uc);
		else
			app_bus.sa_handler(sig);
		return;
	}
	{
		struct sigaction dfl;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		real.sigaction(SIGBUS, &dfl, NULL);
	}
	/* A fault re-executes on return and now takes the default action; a
	 * SIGBUS sent with kill(2) is re-raised. */
	if (si->si_code <= 0)
		raise(SIGBUS);
}

static void guard_install(void)
{
	struct sigaction sa, old;
	int zero = 0;

	if (LOAD_ACQUIRE(&guard_installed) ||
	    !atomic_compare_exchange_strong(&guard_installed, &zero, 1))
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = bus_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (!real.sigaction || real.sigaction(SIGBUS, &sa, &old))
		return;
	if (!LOAD_ACQUIRE(&app_bus_set)) {
		app_bus = old;
		STORE_RELEASE(&app_bus_set, 1);
	}
}

int usmc_guard_add(void *base, size_t len)
{
	int i;

	guard_install();
	for (i = 0; i < GUARD_MAX; i++) {
		uintptr_t zero = 0;

		if (LOAD_RELAXED(&regions[i].base))
			continue;
		/* Claim the slot before writing it: a racing add must not
		 * overwrite the length or mark of a slot another one won. */
		if (!atomic_compare_exchange_strong(&regions[i].base, &zero, GUARD_CLAIMED))
			continue;
		STORE_RELAXED(&regions[i].len, len);
		STORE_RELAXED(&usmc_guard_poison[i], 0);
		/* pairs with the handler's acquire load of base */
		STORE_RELEASE(&regions[i].base, (uintptr_t)base);
		return i;
	}
	usmc_dbg(1, "guard: too many shared mappings");
	return -1;
}

void usmc_guard_del(int idx)
{
	if (idx >= 0 && idx < GUARD_MAX)
		STORE_RELEASE(&regions[idx].base, 0);
}

bool usmc_guard_sigaction(const struct sigaction *act, struct sigaction *old)
{
	if (!LOAD_ACQUIRE(&guard_installed))
		return false;
	/* Our handler stays installed; it forwards what is not ours. */
	if (old)
		*old = app_bus;
	if (act) {
		app_bus = *act;
		STORE_RELEASE(&app_bus_set, 1);
	}
	return true;
}
