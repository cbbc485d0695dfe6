// SPDX-License-Identifier: MIT
/*
 * show.c - output helpers shared by the subcommands (show.h).
 */
#include "show.h"
#include "guard.h"
#include "real.h"
#include "registry.h"
#include "rundir.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void tbl_init(struct tbl *t, unsigned int ncols, const char *const *hdr)
{
	unsigned int i;

	memset(t, 0, sizeof(*t));
	t->ncols = ncols < TBL_COLS ? ncols : TBL_COLS;
	for (i = 0; i < t->ncols; i++)
		t->hdr[i] = hdr[i];
}

void tbl_row(struct tbl *t, ...)
{
	unsigned int i;
	va_list ap;

	if (t->nrows == t->cap) {
		unsigned int cap = t->cap ? t->cap * 2 : 16;
		char **c = realloc(t->cells, (size_t)cap * t->ncols * sizeof(*c));

		if (!c)
			return;
		t->cells = c;
		t->cap = cap;
	}
	va_start(ap, t);
	for (i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);

		t->cells[t->nrows * t->ncols + i] = strdup(s ? s : "");
	}
	va_end(ap);
	t->nrows++;
}

/* Display width of UTF-8 text: code points, not bytes. */
static size_t width(const char *s)
{
	size_t n = 0;

	for (; s && *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

void tbl_print(struct tbl *t)
{
	size_t w[TBL_COLS] = { 0 };
	unsigned int r, i;

	for (i = 0; i < t->ncols; i++)
		w[i] = width(t->hdr[i] + (t->hdr[i][0] == '>'));
	for (r = 0; r < t->nrows; r++)
		for (i = 0; i < t->ncols; i++)
			w[i] = MAX(w[i], width(t->cells[r * t->ncols + i]));
	for (r = 0; r <= t->nrows; r++) {
		for (i = 0; i < t->ncols; i++) {
			bool right = t->hdr[i][0] == '>';
			const char *s = r ? t->cells[(r - 1) * t->ncols + i] : t->hdr[i] + right;
			size_t pad = w[i] - width(s);
			bool last = i + 1 == t->ncols;

			if (!r)
				fputs(col_bold(), stdout);
			if (right)
				printf("%*s%s", (int)pad, "", s);
			else
				printf("%s%*s", s, last ? 0 : (int)pad, "");
			if (!r)
				fputs(col_off(), stdout);
			fputs(last ? "\n" : "  ", stdout);
		}
	}
}

void tbl_free(struct tbl *t)
{
	unsigned int i;

	for (i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)n;
	unsigned int u = 0;

	if (n < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)n);
		return buf;
	}
	while (v >= 1024 && u + 1 < ARRAY_SIZE(unit)) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, v < 10 ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return buf;
}

const char *fmt_count(uint64_t n, char *buf, size_t len)
{
	char tmp[32];
	size_t k, o = 0, d;

	snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)n);
	d = strlen(tmp);
	for (k = 0; k < d && o + 2 < len; k++) {
		if (k && (d - k) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[k];
	}
	buf[o] = '\0';
	return buf;
}

static bool colour(void)
{
	static int on = -1;

	if (on < 0) {
		const char *term = getenv("TERM");

		on = isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && term && strcmp(term, "dumb");
	}
	return on;
}

const char *col_bold(void)
{
	return colour() ? "\033[1m" : "";
}

const char *col_green(void)
{
	return colour() ? "\033[32m" : "";
}

const char *col_yellow(void)
{
	return colour() ? "\033[33m" : "";
}

const char *col_red(void)
{
	return colour() ? "\033[31m" : "";
}

const char *col_off(void)
{
	return colour() ? "\033[0m" : "";
}

void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

struct usmc_stats_file *cli_stats_open(const char *cmd)
{
	struct usmc_stats_file *f;

	/* The files we map may be truncated under us: guard.c's handler. */
	real.sigaction = sigaction;
	f = usmc_stats_map();
	if (!f && usmc_rundir_problem()[0]) {
		/* Every connection of this user falls back (rundir_unusable)
		 * and no counter can be kept: say why and what to do. */
		fprintf(stderr, "usmc %s: runtime directory %s %s\n"
			"usmc %s: acceleration is off (rundir_unusable); remove it, or use a "
			"directory of your own: usmc run -R DIR, or USMC_RUNDIR=DIR\n",
			cmd, usmc_rundir_path(), usmc_rundir_problem(), cmd);
		return NULL;
	}
	if (!f) {
		fprintf(stderr, "usmc %s: cannot open the statistics in %s: %s\n", cmd,
			usmc_rundir_path()[0] ? usmc_rundir_path() : "the runtime directory",
			strerror(errno));
		return NULL;
	}
	/* Fold processes that died, drop their link groups and listeners. */
	usmc_stats_gc(f, usmc_stats_fd());
	usmc_registry_repair();
	usmc_registry_gc();
	usmc_rundir_gc();
	return f;
}
