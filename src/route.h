/* SPDX-License-Identifier: MIT */
/*
 * route.h - route truth for a listener in another namespace (route.c).
 */
#ifndef USMC_ROUTE_H
#define USMC_ROUTE_H

#include "usmc.h"

#include <stdint.h>

/*
 * The link address of the next hop of our route to dst, as the kernel
 * resolved it: 0, or -errno (no route, no neighbour entry, not resolved,
 * a link without 6-byte addresses).
 */
int usmc_route_nexthop_mac(const struct usmc_addr *dst, uint8_t mac[6]);

#endif
