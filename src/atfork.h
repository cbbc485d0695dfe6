/* SPDX-License-Identifier: MIT */
/*
 * atfork.h - fork()'s handlers (atfork.c).
 */
#ifndef USMC_ATFORK_H
#define USMC_ATFORK_H

void usmc_atfork_prepare(void);
/* The child's state: every module's locks afresh, the parent's threads'
 * doings undone. */
void usmc_atfork_child(void);

#endif
