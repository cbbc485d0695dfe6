/* SPDX-License-Identifier: MIT */
/*
 * vmbudget.h - usmc's share of the process's address space (RLIMIT_AS).
 *
 * Every mapping counts against RLIMIT_AS.  A program under a finite limit
 * budgeted its memory with it, so everything usmc maps for itself that
 * grows with connections or listeners (link groups, CLC indexes) stays
 * within an eighth of it (vmbudget.c): what the program allocates up to
 * its limit must not fail where TCP would have left it room.
 */
#ifndef USMC_VMBUDGET_H
#define USMC_VMBUDGET_H

#include "usmc.h"

#define USMC_VM_SHARE	8

/* What usmc may still map: SIZE_MAX without a limit, else its share of
 * RLIMIT_AS less what it mapped (the limit is asked on every call). */
size_t usmc_vm_left(void);
/* n bytes mapped (or about to be): 0, or -E2BIG if check and they do not
 * fit (nothing counted then).  Unchecked: always counted (a connection or
 * listener that exists already, received or inherited). */
int usmc_vm_take(size_t n, bool check);
void usmc_vm_give(size_t n);

#endif
