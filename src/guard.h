/* SPDX-License-Identifier: MIT */
/*
 * guard.h - SIGBUS protection for shared mappings (guard.c).
 */
#ifndef USMC_GUARD_H
#define USMC_GUARD_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

extern int (*usmc_real_sigaction)(int, const struct sigaction *, struct sigaction *);

/* Register a shared mapping; returns a handle (or -1: unguarded). */
int usmc_guard_add(void *base, size_t len);
void usmc_guard_del(int idx);
/* Did a truncation replace this mapping with zero pages? */
bool usmc_guard_poisoned(int idx);
/* sigaction(SIGBUS) from the application once our handler is in place:
 * record it, keep ours; false when the guard is not installed. */
bool usmc_guard_sigaction(const struct sigaction *act, struct sigaction *old);

#endif
