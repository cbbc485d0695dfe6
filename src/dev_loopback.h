/* SPDX-License-Identifier: MIT */
/*
 * dev_loopback.h - the loopback device's operations, for devices built on
 * its memory (dev_copy.c).  The core reaches them through usmc_dev_loopback.
 */
#ifndef USMC_DEV_LOOPBACK_H
#define USMC_DEV_LOOPBACK_H

#include "dev.h"

#include <sys/types.h>

bool usmc_lo_probe(void);
int usmc_lo_lgr_create(struct usmc_lgr *l);
int usmc_lo_lgr_attach(struct usmc_lgr *l);
int usmc_lo_lgr_attach_tail(struct usmc_lgr *l, size_t per_slot);
void usmc_lo_lgr_unpublish(struct usmc_lgr *l);
void usmc_lo_lgr_release(struct usmc_lgr *l);
bool usmc_lo_lgr_peer_alive(struct usmc_lgr *l);
int usmc_lo_lgr_handle_fd(const struct usmc_lgr *l);
int usmc_lo_register_dmb(struct usmc_lgr *l, uint32_t slot);
int usmc_lo_attach_bells(struct usmc_lgr *l, bool owner_side, int *own, int *peer);
int usmc_lo_dmb_reserve(struct usmc_lgr *l, uint32_t slot, int dir, uint32_t off, uint32_t len);
int usmc_lo_dmb_release(struct usmc_lgr *l, uint32_t slot, int dir, uint32_t off, uint32_t len);
void usmc_lo_signal(struct usmc_lgr *l, int bell);

#endif
