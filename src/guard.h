/* SPDX-License-Identifier: MIT */
/*
 * guard.h - SIGBUS protection for shared mappings (guard.c).
 */
#ifndef USMC_GUARD_H
#define USMC_GUARD_H

#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>

#define GUARD_MAX	4096
extern _Atomic int usmc_guard_poison[GUARD_MAX];

/* Register a shared mapping; returns a handle (or -1: unguarded). */
int usmc_guard_add(void *base, size_t len);
void usmc_guard_del(int idx);
/* Did a truncation replace this mapping with zero pages? */
static inline bool usmc_guard_poisoned(int idx)
{
	return (unsigned int)idx < GUARD_MAX &&
	       atomic_load_explicit(&usmc_guard_poison[idx], memory_order_acquire);
}
/* sigaction(SIGBUS) from the application once our handler is in place:
 * record it, keep ours; false when the guard is not installed. */
bool usmc_guard_sigaction(const struct sigaction *act, struct sigaction *old);

#endif
