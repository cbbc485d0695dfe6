/* SPDX-License-Identifier: MIT */
/*
 * shm.h - copying records in and out of memory that other processes write.
 *
 * Seqlock-style records are copied word by word with relaxed atomics so a
 * concurrent writer is a defined race (the reader discards the copy when
 * the sequence moved) rather than undefined behaviour.
 */
#ifndef USMC_SHM_H
#define USMC_SHM_H

#include "usmc.h"

static inline void shm_load_words(void *dst, const void *src, size_t len)
{
	const _Atomic uint64_t *s = src;
	uint64_t *d = dst;
	size_t i;

	for (i = 0; i < len / 8; i++)
		d[i] = LOAD_RELAXED(&s[i]);
}

static inline void shm_store_words(void *dst, const void *src, size_t len)
{
	_Atomic uint64_t *d = dst;
	const uint64_t *s = src;
	size_t i;

	for (i = 0; i < len / 8; i++)
		STORE_RELAXED(&d[i], s[i]);
}

#endif
