/* SPDX-License-Identifier: MIT */
/*
 * show.h (cli) - what the subcommands share for their output: aligned
 * tables, units, colour (only on a terminal), JSON strings, and the
 * statistics file with the runtime directory's problems explained.
 */
#ifndef USMC_CLI_SHOW_H
#define USMC_CLI_SHOW_H

#include "stats.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TBL_COLS	16

/* A table printed with every column as wide as its widest cell; columns
 * whose header starts with '>' are right-aligned (numbers). */
struct tbl {
	unsigned int ncols, nrows, cap;
	const char *hdr[TBL_COLS];
	char **cells;			/* nrows * ncols, malloc'ed */
};

void tbl_init(struct tbl *t, unsigned int ncols, const char *const *hdr);
/* Append a row: ncols printf-style cells are given as ready strings. */
void tbl_row(struct tbl *t, ...);
void tbl_print(struct tbl *t);
void tbl_free(struct tbl *t);

/* "512 B", "4.0 KiB", "1.5 MiB" (buf >= 16 bytes). */
const char *fmt_bytes(uint64_t n, char *buf, size_t len);
/* "1234" with thousands grouping: "1,234" (buf >= 32 bytes). */
const char *fmt_count(uint64_t n, char *buf, size_t len);

/* Colour escapes, empty unless stdout is a terminal (and NO_COLOR unset). */
const char *col_bold(void);
const char *col_green(void);
const char *col_yellow(void);
const char *col_red(void);
const char *col_off(void);

void json_str(const char *s);

/*
 * Map the statistics file for the subcommand cmd and fold the processes
 * that died; NULL with the reason and what to do printed on stderr.
 */
struct usmc_stats_file *cli_stats_open(const char *cmd);

#endif
