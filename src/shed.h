/* SPDX-License-Identifier: MIT */
/*
 * shed.h - giving usmc's own descriptors and mappings back under pressure (shed.c).
 */
#ifndef USMC_SHED_H
#define USMC_SHED_H

#include <stdbool.h>

struct usmc_sock;

/* Out of descriptors: give some of usmc's back; true if any went. */
bool usmc_shed(void);
/* RLIMIT_AS was lowered: give back the link groups no connection
 * of ours reads any more. */
void usmc_shed_address_space(void);

#endif
