#!/usr/bin/python3
"""Run real projects' own network test suites plain and under usmc, and
compare the outcomes test by test (see suites.py).

    tests/conformance/run.py [--quick] [--suite NAME ...] [--hog N] [--json FILE] [--doc FILE]

`make conformance` runs every suite whole and rewrites docs/conformance.md
and docs/conformance.json.  The exit status is 1 if any suite shows a
repeatable difference or fewer than 80 % of its TCP endpoints went through
shared memory, 0 otherwise.  --hog N keeps N busy-looping processes
running through both runs (a loaded machine: timing-dependent waits in
usmc or in the suites show up there first).
"""
import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suites  # noqa: E402

MIN_SHARE = 0.80


def _rev():
    # A copy of a build (USMC_TEST_BUILD) may say which commit it is.
    rev = suites.BUILD / "REV"
    if rev.exists():
        return rev.read_text().strip()
    try:
        return subprocess.run(["git", "-C", str(suites.REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def verdict(res):
    return (not res["differences"] and not res.get("timed_out")
            and res["accelerated_share"] >= MIN_SHARE)


def hogs_start(n):
    """n processes that spin until killed, in their own process group."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             start_new_session=True, stdin=subprocess.DEVNULL)
            for _ in range(n)]


def hogs_stop(hogs):
    for p in hogs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def doc(results, path, hog=0):
    lines = [
        "# Differential conformance: real projects' own test suites",
        "",
        "Each suite runs twice on the same machine, one run after the other: plain, then",
        "under `usmc run` (default settings, a fresh runtime directory).  Every test's",
        "outcome is compared; a test whose outcome differs is re-run alone both ways",
        "(twice): one that differs every time is a **difference**, one that does not",
        "repeat is listed as flaky.  *Shared memory* is the share of the usmc run's TCP",
        "endpoints that went through shared memory (`usmc stat --json`: smc_conns",
        "against tcp_conns).  Regenerate with `make conformance`",
        "(`tests/conformance/run.py --doc docs/conformance.md`); the quick subsets run",
        "in `tests/run` (`tests/integration/test_conformance.py`).",
        "",
        "Last run: %s at %s on %s (%s)." % (
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            _rev(), platform.node() or "?", platform.platform()),
        "",
        ("Both runs of every suite ran beside %d busy-looping processes on %d CPUs." % (
            hog, os.cpu_count() or 0)) if hog else "The machine was otherwise idle.",
        "",
        "| suite | tests | plain: ok/fail/error/skip | usmc: ok/fail/error/skip | "
        "differences | flaky | shared memory | TCP (reasons) | time plain / usmc |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def c(run):
        k = run["counts"]
        return "%d/%d/%d/%d" % (k.get("ok", 0), k.get("fail", 0), k.get("error", 0),
                                k.get("skip", 0))
    for r in results:
        reasons = ", ".join("%s %d" % kv for kv in sorted(r["tcp_fallback"].items())) or "-"
        lines.append("| %s | %d | %s | %s | %d | %d | %d of %d (%.1f %%) | %d (%s) | %.0f s / %.0f s |"
                     % (r["suite"], r["tests"], c(r["plain"]), c(r["usmc"]),
                        len(r["differences"]), len(r["flaky"]), r["smc_endpoints"],
                        r["smc_endpoints"] + r["tcp_endpoints"], 100 * r["accelerated_share"],
                        r["tcp_endpoints"], reasons, r["plain"]["seconds"],
                        r["usmc"]["seconds"]))
    lines.append("")
    for r in results:
        lines.append("## %s" % r["suite"])
        lines.append("")
        lines.append("%s.  Targets: %s." % (r["project"], ", ".join("`%s`" % t for t in r["targets"])))
        lines.append("")
        for m in r.get("timed_out", []):
            lines.append("The %s run timed out: the comparison is incomplete." % m)
            lines.append("")
        if r["differences"]:
            lines.append("Differences (plain → usmc):")
            lines.append("")
            for t, (p, u) in sorted(r["differences"].items()):
                lines.append("* `%s`: %s → %s" % (t, p, u))
            lines.append("")
        else:
            lines.append("No difference.")
            lines.append("")
        if r["flaky"]:
            lines.append("Flaky (differed once, not when re-run alone):")
            lines.append("")
            for t, (p, u) in sorted(r["flaky"].items()):
                lines.append("* `%s`: %s → %s" % (t, p, u))
            lines.append("")
    Path(path).write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick subsets only")
    ap.add_argument("--suite", action="append", choices=sorted(suites.SUITES),
                    help="run only this suite (repeatable)")
    ap.add_argument("--hog", type=int, default=0, metavar="N",
                    help="N CPU-bound processes running throughout")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--doc", help="write the markdown report here")
    args = ap.parse_args()
    names = args.suite or sorted(suites.SUITES)
    results = []
    work = tempfile.mkdtemp(prefix="usmc-conformance-")
    print("logs in %s" % work)
    hogs = hogs_start(args.hog)
    try:
        run_all(names, args, work, results)
    finally:
        hogs_stop(hogs)
    if args.json:
        Path(args.json).write_text(json.dumps({"hog": args.hog, "results": results}, indent=1,
                                              sort_keys=True))
    if args.doc:
        doc(results, args.doc, args.hog)
    return 0 if results and all(verdict(r) for r in results) else 1


def run_all(names, args, work, results):
    for n in names:
        s = suites.SUITES[n]
        if not suites.available(s):
            print("%s: not installed, skipped" % n)
            continue
        r = suites.differential(s, quick=args.quick, workdir=work)
        results.append(r)
        print("%-8s %5d tests, %d differences, %d flaky, shared memory %.1f %% (%d/%d), "
              "TCP reasons %s -> %s" % (
                  n, r["tests"], len(r["differences"]), len(r["flaky"]),
                  100 * r["accelerated_share"], r["smc_endpoints"],
                  r["smc_endpoints"] + r["tcp_endpoints"], r["tcp_fallback"] or "{}",
                  "PASS" if verdict(r) else "FAIL"))
        for m in r.get("timed_out", []):
            print("    the %s run timed out: incomplete, compared as far as it got" % m)
        for t, (p, u) in sorted(r["differences"].items()):
            print("    differs: %s: plain %s, usmc %s" % (t, p, u))


if __name__ == "__main__":
    sys.exit(main())
