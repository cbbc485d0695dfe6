/* SPDX-License-Identifier: MIT */
/*
 * export.h - EXPORT marks the libc entry points libusmc interposes (the
 * library is built with -fvisibility=hidden; libusmc.map lists them).
 */
#ifndef USMC_EXPORT_H
#define USMC_EXPORT_H

#define EXPORT __attribute__((visibility("default")))

#endif
