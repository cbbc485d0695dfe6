/* SPDX-License-Identifier: MIT */
/*
 * reuseport.h - SO_REUSEPORT groups (reuseport.c).
 */
#ifndef USMC_REUSEPORT_H
#define USMC_REUSEPORT_H

#include "usmc.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * Is the listening socket with inode ino the only socket in this network
 * namespace that can take a TCP connection to dst (its SO_REUSEPORT group
 * has no other member, usmc or not)?  false when unsure.
 */
bool usmc_reuseport_sole(const struct usmc_addr *dst, uint64_t ino);

#endif
