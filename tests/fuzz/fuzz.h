/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.c).
 *
 * A target reads its input as a little program: fz_*() take bytes from the
 * front and return zeros once the input is used up, so every input, however
 * short, is a complete run.  FZ_CHECK() states a property the library must
 * keep whatever the peer wrote; a violation prints the property and aborts,
 * which libFuzzer reports as a crash with the input saved.
 *
 * Each process gets its own runtime directory (USMC_RUNDIR) under
 * $USMC_FUZZ_TMP (default /dev/shm), removed at exit.
 */
#ifndef USMC_FUZZ_H
#define USMC_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "options.h"
#include "real.h"
#include "rundir.h"
#include "usmc.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FZ_CHECK(cond, ...)							\
	do {									\
		if (!(cond)) {							\
			fprintf(stderr, "%s:%d: property violated: %s: ", __FILE__,	\
				__LINE__, #cond);					\
			fprintf(stderr, __VA_ARGS__);				\
			fputc('\n', stderr);					\
			abort();						\
		}								\
	} while (0)

struct fz {
	const uint8_t *p;
	size_t n;
};

static inline bool fz_more(const struct fz *f)
{
	return f->n > 0;
}

static inline uint8_t fz_u8(struct fz *f)
{
	uint8_t v = 0;

	if (f->n) {
		v = *f->p++;
		f->n--;
	}
	return v;
}

static inline uint16_t fz_u16(struct fz *f)
{
	return (uint16_t)(fz_u8(f) | (uint16_t)fz_u8(f) << 8);
}

static inline uint32_t fz_u32(struct fz *f)
{
	return (uint32_t)fz_u16(f) | (uint32_t)fz_u16(f) << 16;
}

static inline uint64_t fz_u64(struct fz *f)
{
	return (uint64_t)fz_u32(f) | (uint64_t)fz_u32(f) << 32;
}

/* len bytes from the input into dst, zero-filled past its end. */
static inline void fz_bytes(struct fz *f, void *dst, size_t len)
{
	size_t k = MIN(len, f->n);

	memcpy(dst, f->p, k);
	memset((uint8_t *)dst + k, 0, len - k);
	f->p += k;
	f->n -= k;
}

static char fz_rundir[256];

static int fz_rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static void fz_cleanup(void)
{
	if (fz_rundir[0])
		nftw(fz_rundir, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * A private runtime directory, the library's options, the "real" table.
 * extra: more NAME=VALUE settings (NULL-terminated), applied before the
 * options are read.
 */
static inline void fz_setup(const char *const *extra)
{
	const char *base = getenv("USMC_FUZZ_TMP");
	int i;

	snprintf(fz_rundir, sizeof(fz_rundir), "%s/usmc-fuzz-XXXXXX", base && *base ? base : "/dev/shm");
	if (!mkdtemp(fz_rundir)) {
		perror("mkdtemp");
		abort();
	}
	atexit(fz_cleanup);
	setenv("USMC_RUNDIR", fz_rundir, 1);
	unsetenv("USMC_DEBUG");
	unsetenv("USMC_DISABLE");
	unsetenv("USMC_FAULT");
	for (i = 0; extra && extra[i]; i++)
		putenv((char *)extra[i]);
	usmc_options_load();
	usmc_real_init();
	if (usmc_rundir_init()) {
		fprintf(stderr, "fuzz: runtime directory %s unusable\n", fz_rundir);
		abort();
	}
}

/* Write len bytes at off of rundir file name (created, truncated to size). */
static inline int fz_write_file(const char *name, uint64_t size, const void *buf, size_t len)
{
	int fd = openat(usmc_rundir_fd(), name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) || (len && pwrite(fd, buf, len, 0) != (ssize_t)len)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

#endif
