/* SPDX-License-Identifier: MIT */
/*
 * stdstream.h - connections a stdio stream may use move to TCP
 * (stdstream.c: why, and which).
 */
#ifndef USMC_STDSTREAM_H
#define USMC_STDSTREAM_H

/* The connection at fd, if any, leaves shared memory (reason stdio); a
 * non-blocking connect is settled first.  Blocks as migrate.c does. */
void usmc_stdio_leave(int fd);

#endif
