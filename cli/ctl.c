// SPDX-License-Identifier: MIT
/*
 * ctl.c - `usmc ctl`: the runtime controls (controls.c), and `usmc env`:
 * the option table printed for people (a table) and for the docs (usmc(7)
 * is generated from it: `usmc env --man`, tested to match).
 *
 *   usmc ctl                    every setting: value, where it came from, meaning
 *   usmc ctl KEY=VALUE ...      set for the runtime directory (new connections
 *                               of running programs; USMC_* in a program's
 *                               environment still wins there)
 *   usmc ctl KEY= | --unset KEY back to the default
 *   usmc ctl --reset            every control back to its default
 *
 * The file is replaced atomically: written under a private name (O_EXCL,
 * mode 0600), then renamed over the old one, so a program never reads a
 * half-written file.
 */
#include "options.h"
#include "rundir.h"
#include "show.h"
#include "sys.h"
#include "usmc.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *src_name(int src)
{
	return src == USMC_SRC_ENV ? "environment" : src == USMC_SRC_CTL ? "usmc ctl" : "default";
}

static int ctl_list(bool json)
{
	static const char *const hdr[] = { "KEY", "VALUE", "SOURCE", "MEANING" };
	unsigned int i;
	struct tbl t;
	char buf[300], key[40];

	if (json) {
		printf("{\"rundir\": ");
		json_str(usmc_rundir_path());
		printf(", \"settings\": [");
	} else {
		tbl_init(&t, ARRAY_SIZE(hdr), hdr);
	}
	for (i = 0; i < usmc_opt_count; i++) {
		const struct usmc_opt_desc *d = &usmc_opt_table[i];
		const char *v = usmc_opt_value(d, buf, sizeof(buf));
		bool ctl = d->flags & OPTF_CTL;

		usmc_opt_key(d, key, sizeof(key));
		if (json) {
			printf("%s\n  {\"key\": \"%s\", \"env\": \"%s\", \"value\": ", i ? "," : "", key,
			       d->env);
			json_str(v);
			printf(", \"default\": ");
			json_str(d->def);
			printf(", \"source\": \"%s\", \"runtime\": %s, \"meaning\": ",
			       src_name(usmc_opt_src[i]), ctl ? "true" : "false");
			json_str(d->doc);
			printf("}");
			continue;
		}
		tbl_row(&t, key, v[0] ? v : "\"\"",
			ctl ? src_name(usmc_opt_src[i]) :
			usmc_opt_src[i] == USMC_SRC_ENV ? "environment" : "default (env only)",
			d->doc);
	}
	if (json) {
		printf("\n]}\n");
		return 0;
	}
	tbl_print(&t);
	tbl_free(&t);
	printf("\ncontrols file %s/%s; set with usmc ctl KEY=VALUE (new connections of running "
	       "programs);\n\"env only\" settings are read from each program's environment "
	       "(USMC_*), which also overrides a control.\n", usmc_rundir_path(), USMC_CTL_FILE);
	return 0;
}

/* Write text as the new controls file: private name, then rename. */
static int ctl_write(const char *text)
{
	char tmp[64];
	size_t len = strlen(text), off = 0;
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "t-ctl-%016llx", (unsigned long long)usmc_random64());
	fd = usmc_rundir_open(tmp, O_WRONLY | O_CREAT, 0600);
	if (fd < 0)
		return fd;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)n;
	}
	if (!rc && fsync(fd))
		rc = -errno;
	usmc_ifd_close(fd);
	if (!rc)
		rc = usmc_rundir_rename(tmp, USMC_CTL_FILE);
	if (rc)
		usmc_rundir_unlink(tmp, false);
	return rc;
}

/* Set (val non-NULL) or unset each KEY[=VALUE] argument over what the
 * file holds now; a bad argument changes nothing. */
static int ctl_set(int argc, char **argv, bool unset)
{
	const char *vals[USMC_OPT_MAX] = { 0 };
	static char cur[USMC_CTL_MAX + 1], out[USMC_CTL_MAX + 1];
	char key[40], *line, *next;
	unsigned int i;
	size_t o = 0;
	int k, n;

	n = usmc_ctl_read(cur, sizeof(cur));
	if (n == -ENOENT) {
		cur[0] = '\0';
	} else if (n < 0) {
		fprintf(stderr, "usmc ctl: %s/%s: %s; remove it (usmc ctl --reset) and set again\n",
			usmc_rundir_path(), USMC_CTL_FILE,
			n == -EFBIG ? "too large" : n == -EPERM ? "not ours (owner or mode)" :
			n == -EINVAL ? "not a regular file of text" : strerror(-n));
		return 1;
	}
	/* What the file holds now, checked as the library checks it. */
	for (line = cur; line && *line; line = next) {
		const struct usmc_opt_desc *d;
		const char *why;
		char *eq;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		eq = strchr(line, '=');
		if (line[0] == '#' || !eq)
			continue;
		*eq = '\0';
		d = usmc_opt_find(line);
		if (d && (d->flags & OPTF_CTL) && !usmc_opt_check(d, eq + 1, &why))
			vals[d - usmc_opt_table] = eq + 1;
	}
	for (k = 0; k < argc; k++) {
		const struct usmc_opt_desc *d;
		char *eq = strchr(argv[k], '=');
		const char *why, *env;

		if (eq)
			*eq = '\0';
		d = usmc_opt_find(argv[k]);
		if (!d) {
			fprintf(stderr, "usmc ctl: unknown setting '%s'; usmc ctl lists them\n",
				argv[k]);
			return 2;
		}
		if (!(d->flags & OPTF_CTL)) {
			fprintf(stderr, "usmc ctl: %s is read from each program's environment only "
				"(%s=... or usmc run options), not a runtime control\n",
				usmc_opt_key(d, key, sizeof(key)), d->env);
			return 2;
		}
		if (!unset && !eq) {
			fprintf(stderr, "usmc ctl: expected KEY=VALUE, got '%s' (KEY= resets it)\n",
				argv[k]);
			return 2;
		}
		if (unset || !eq || !eq[1]) {
			vals[d - usmc_opt_table] = NULL;
			continue;
		}
		if (usmc_opt_check(d, eq + 1, &why)) {
			fprintf(stderr, "usmc ctl: %s=%s: %s%s%s%s\n", usmc_opt_key(d, key, sizeof(key)),
				eq + 1, why, d->choices ? " (" : "", d->choices ? d->choices : "",
				d->choices ? ")" : "");
			return 2;
		}
		vals[d - usmc_opt_table] = eq + 1;
		env = getenv(d->env);
		if (env && *env)
			fprintf(stderr, "usmc ctl: note: %s is set in this environment; it overrides "
				"the control for programs started from here\n", d->env);
	}
	o += (size_t)snprintf(out, sizeof(out), "# usmc controls (usmc ctl; usmc(1)): applied to "
			      "new connections of running programs\n");
	for (i = 0; i < usmc_opt_count && o < sizeof(out); i++)
		if (vals[i])
			o += (size_t)snprintf(out + o, sizeof(out) - o, "%s=%s\n",
					      usmc_opt_key(&usmc_opt_table[i], key, sizeof(key)),
					      vals[i]);
	if (o >= sizeof(out)) {
		fprintf(stderr, "usmc ctl: the controls would exceed %d bytes\n", USMC_CTL_MAX);
		return 1;
	}
	n = ctl_write(out);
	if (n) {
		fprintf(stderr, "usmc ctl: cannot write %s/%s: %s\n", usmc_rundir_path(),
			USMC_CTL_FILE, strerror(-n));
		return 1;
	}
	usmc_options_apply_ctl(out);
	for (k = 0; k < argc; k++) {
		const struct usmc_opt_desc *d = usmc_opt_find(argv[k]);
		char buf[300];

		printf("%s=%s (%s)\n", usmc_opt_key(d, key, sizeof(key)),
		       usmc_opt_value(d, buf, sizeof(buf)), src_name(usmc_opt_src[d - usmc_opt_table]));
	}
	return 0;
}

int cmd_ctl(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "unset", no_argument, NULL, 'u' },
		{ "reset", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false, unset = false, reset = false;
	int c, rc;

	while ((c = getopt_long(argc, argv, "jurh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'u':
			unset = true;
			break;
		case 'r':
			reset = true;
			break;
		case 'h':
			printf("usage: usmc ctl [--json]              every setting, its value, source, "
			       "meaning\n"
			       "       usmc ctl KEY=VALUE...          set for new connections of every "
			       "program\n"
			       "       usmc ctl KEY=... | --unset KEY back to the default\n"
			       "       usmc ctl --reset               every control back to its "
			       "default\n");
			return 0;
		default:
			return 2;
		}
	}
	rc = usmc_rundir_init();
	if (rc) {
		fprintf(stderr, "usmc ctl: runtime directory %s: %s; use one of your own: "
			"USMC_RUNDIR=DIR\n", usmc_rundir_path(),
			usmc_rundir_problem()[0] ? usmc_rundir_problem() : strerror(-rc));
		return 1;
	}
	if (reset) {
		rc = usmc_rundir_unlink(USMC_CTL_FILE, false);
		if (rc && rc != -ENOENT) {
			fprintf(stderr, "usmc ctl: cannot remove %s/%s: %s\n", usmc_rundir_path(),
				USMC_CTL_FILE, strerror(-rc));
			return 1;
		}
		printf("controls reset: every setting at its default (or environment) value\n");
		return 0;
	}
	if (optind < argc)
		return ctl_set(argc - optind, argv + optind, unset);
	usmc_options_refresh();
	return ctl_list(json);
}

/* Text as roff: backslashes and hyphens escaped. */
static void roff(const char *p)
{
	for (; *p; p++) {
		if (*p == '\\')
			fputs("\\e", stdout);
		else if (*p == '-')
			fputs("\\-", stdout);
		else
			putchar(*p);
	}
}

/* roff for usmc(7): one .TP per option, from the table. */
static void env_man(void)
{
	unsigned int i;
	char key[40];

	for (i = 0; i < usmc_opt_count; i++) {
		const struct usmc_opt_desc *d = &usmc_opt_table[i];

		printf(".TP\n.B %s\n", d->env);
		roff(d->doc);
		printf(".\nDefault: \\fB%s\\fR.", d->def[0] ? d->def : "\\(dq\\(dq");
		if (d->flags & OPTF_CTL)
			printf("  Runtime control: \\fBusmc ctl %s=\\fR\\fIVALUE\\fR.",
			       usmc_opt_key(d, key, sizeof(key)));
		else
			printf("  Environment only.");
		putchar('\n');
	}
}

static void reasons_man(void)
{
	int i;

	for (i = 1; i < USMC_R_MAX; i++) {
		printf(".TP\n.B %s\n", usmc_reason_name(i));
		roff(usmc_reason_desc(i));
		printf(".\nWhat to do: ");
		roff(usmc_reason_hint(i));
		printf(".\n");
	}
}

int cmd_env(int argc, char **argv)
{
	unsigned int i;

	if (argc > 1 && !strcmp(argv[1], "--man")) {
		env_man();
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "--man-reasons")) {
		reasons_man();
		return 0;
	}
	for (i = 0; i < usmc_opt_count; i++)
		printf("%-22s default %-8s  %s\n", usmc_opt_table[i].env,
		       usmc_opt_table[i].def[0] ? usmc_opt_table[i].def : "\"\"",
		       usmc_opt_table[i].doc);
	return 0;
}
