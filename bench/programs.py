#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""programs.py - real programs over TCP loopback and over usmc, side by side.

    bench/programs.py                          all workloads, client CPU 0, server CPU 1
    bench/programs.py --same-cpu               ... and again with both on the client's CPU
    bench/programs.py --workloads pp14,redis-c200 --reps 5 --json out.json --plot out.png
    bench/programs.py --doc                    measure everything, run `usmc bench`, write
                                               docs/performance.md + docs/perf/*
    bench/programs.py --doc --load docs/perf/programs.json --bench-json docs/perf/usmc-bench.json
                                               regenerate the document without measuring

Every workload is an unmodified Debian program pair (sockperf, redis-server +
redis-benchmark, nginx + wrk).  Per repetition each workload runs twice, TCP
first, then usmc, each time with a fresh server:

  TCP    the programs themselves, LD_PRELOAD and every USMC_* variable removed
         (checked: libusmc.so must not be mapped in the server or client)
  usmc   the same command lines under `usmc run --` with a fresh, private
         USMC_RUNDIR; afterwards `usmc stat --json` on that directory must show
         smc_conns > 0, tcp_conns == 0, no tcp_fallback, no handshake error

The client is pinned to CPU C and the server (all its processes) to CPU S
with taskset (--cpus C,S); --same-cpu adds a second placement with both on C.
CPU time next to every rate: the client's user+system time from wait4() and
the server's from /proc/PID/stat (utime+stime, all processes of its process
group) sampled right before the client starts and right after it exits,
divided by the operations the client did in its whole life (warm-up
included, like the CPU window).

Every process runs in its own process group; servers are stopped (SIGTERM,
then SIGKILL of the group) whatever happens, clients run under a deadline.
Only loopback addresses are used.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# The modules live in bench/progs/; found even where the script's directory
# is not on sys.path (python3 -I / -P, PYTHONSAFEPATH).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from progs.common import ANSI, PY, REPO, log  # noqa: E402
from progs.doc import run_usmc_bench, write_doc  # noqa: E402
from progs.measure import measure, plot, profile, table  # noqa: E402
from progs.procs import PROCS, _on_signal, plain_env, shq  # noqa: E402
from progs.workloads import (DEFAULT_WORKLOADS, QUICK_WORKLOADS, WORKLOADS,  # noqa: E402
                             perf_events_available)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def program_versions(names):
    cmds = {"sockperf": ["sockperf", "--version"], "redis-server": ["redis-server", "--version"],
            "redis-benchmark": ["redis-benchmark", "--version"], "nginx": ["nginx", "-v"],
            "wrk": ["wrk", "--version"]}
    out = {}
    for n in names:
        try:
            r = subprocess.run(cmds[n], capture_output=True, timeout=10, env=plain_env())
            text = ANSI.sub("", (r.stdout + r.stderr).decode(errors="replace")).strip()
            out[n] = text.splitlines()[0][:120] if text else "?"
        except (OSError, subprocess.TimeoutExpired):
            out[n] = None
    return out


def describe_build(build):
    """Which library is measured: path, sha256, the repository's commit and
    whether the library sources differ from it."""
    import hashlib
    info = {"dir": str(build)}
    try:
        info["lib_sha256"] = hashlib.sha256((build / "libusmc.so").read_bytes()).hexdigest()
        info["lib_mtime"] = datetime.datetime.fromtimestamp(
            (build / "libusmc.so").stat().st_mtime).astimezone().isoformat(timespec="seconds")
    except OSError:
        pass
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                           capture_output=True, timeout=10)
        info["git_head"] = r.stdout.decode().strip() or None
        r = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src", "cli",
                            "Makefile"], capture_output=True, timeout=10)
        info["sources_modified"] = sorted(line[3:] for line in r.stdout.decode().splitlines())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


BUILD_FILES = ("usmc", "libusmc.so")


def build_missing(build):
    """The files of BUILD_FILES that build lacks."""
    return [f for f in BUILD_FILES if not (build / f).exists()]


def snapshot_build(build, prefix):
    """A private copy of usmc and libusmc.so: one consistent library for a
    whole run, whatever `make` others run in the meantime."""
    snap = Path(tempfile.mkdtemp(prefix=prefix))
    for f in BUILD_FILES:
        shutil.copy2(str(build / f), str(snap / f))
    return snap


def machine_info(cpus):
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model,
            "kernel": "%s %s %s" % (platform.system(), platform.release(), platform.machine()),
            "loadavg_before": " ".join(Path("/proc/loadavg").read_text().split()[0:3])}


def cpu_list(spec):
    """The CPUs of a taskset list ("3", "0-7", "0,2-3")."""
    out = []
    for part in str(spec).split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def parse_cpus(arg, ap):
    """--cpus C,S (one CPU each) or C/S (taskset lists, e.g. 0-7/8-15)."""
    parts = arg.split("/") if "/" in arg else arg.split(",")
    try:
        if len(parts) != 2 or not all(cpu_list(p) for p in parts):
            raise ValueError
    except ValueError:
        ap.error("--cpus wants C,S or CLIENT_LIST/SERVER_LIST (taskset -c lists)")
    return tuple(int(p) if p.isdigit() else p for p in parts)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Real programs (sockperf, redis, nginx+wrk) over TCP loopback vs usmc, "
                    "side by side.", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="workloads: " + ", ".join(WORKLOADS) + "\n  (quick set: " +
               ",".join(QUICK_WORKLOADS) + ")")
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="directory with usmc and libusmc.so (default: build/)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--duration", type=int, default=2,
                    help="whole seconds per sockperf/wrk run (default 2; sockperf adds "
                         "about 2.5 s of its own warm-up and start)")
    ap.add_argument("--cpus", default="0,1", help="client CPU,server CPU (default 0,1), or CPU lists: 0-7/8-15")
    ap.add_argument("--same-cpu", action="store_true",
                    help="also run with client and server on the client's CPU")
    ap.add_argument("--only-same-cpu", action="store_true",
                    help="only the same-CPU placement")
    ap.add_argument("--workloads", default=None,
                    help="comma-separated names, 'all' or 'quick' (default all)")
    ap.add_argument("--quick", action="store_true",
                    help="the quick set, 1 rep, 1 s, 20000 redis requests")
    ap.add_argument("--busy-poll", type=int, default=50,
                    help="USMC_BUSY_POLL for pp14-busy and the busy-poll usmc bench (default 50)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="extra environment for the usmc runs (repeatable)")
    ap.add_argument("--redis-requests", type=int, default=100000,
                    help="redis-benchmark -n (default 100000; x10 with -P 16)")
    ap.add_argument("--wrk-conns", type=int, default=50, help="wrk -c (default 50)")
    ap.add_argument("--wrk-threads", type=int, default=1, help="wrk -t (default 1)")
    ap.add_argument("--nginx-workers", type=int, default=2, help="nginx workers (default 2)")
    ap.add_argument("--nginx-file", type=int, default=1024,
                    help="size of the static file in bytes (default 1024)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--plot", metavar="FILE.png", help="draw TCP vs usmc per workload")
    ap.add_argument("--profile", action="store_true",
                    help="one extra run per workload/transport under perf stat "
                         "(syscalls, context switches per operation)")
    ap.add_argument("--no-profile", action="store_true", help="with --doc: skip the profile")
    ap.add_argument("--doc", action="store_true",
                    help="write docs/performance.md and docs/perf/* (measures both "
                         "placements, profiles, runs usmc bench)")
    ap.add_argument("--doc-dir", default=str(REPO / "docs"), help="where --doc writes")
    ap.add_argument("--final", action="store_true",
                    help="with --doc: a quiet-machine run (no 'preliminary' banner)")
    ap.add_argument("--bench-json", metavar="FILE",
                    help="with --doc: use this `usmc bench --json` output (or a file "
                         "written by --doc) instead of running usmc bench")
    ap.add_argument("--bench-args", default="",
                    help="extra arguments for the usmc bench runs of --doc, e.g. "
                         "'--duration 1'")
    ap.add_argument("--load", metavar="FILE",
                    help="do not measure: use results from a previous --json/--doc run")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="use --build in place instead of a private copy of usmc and "
                         "libusmc.so (a concurrent `make` could then change them mid-run)")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep every run's scratch directory (failed runs are always kept)")
    args = ap.parse_args(argv)
    args.build = Path(args.build).resolve()
    args.cpus = parse_cpus(args.cpus, ap)
    if args.quick:
        if args.workloads is None:
            args.workloads = "quick"
        args.reps = 1 if "--reps" not in " ".join(argv) else args.reps
        args.duration = 1 if "--duration" not in " ".join(argv) else args.duration
        if "--redis-requests" not in " ".join(argv):
            args.redis_requests = 20000
    wl = args.workloads or "all"
    if wl == "all":
        args.workloads = list(DEFAULT_WORKLOADS)
    elif wl == "quick":
        args.workloads = list(QUICK_WORKLOADS)
    else:
        args.workloads = [w.strip() for w in wl.split(",") if w.strip()]
        bad = [w for w in args.workloads if w not in WORKLOADS]
        if bad:
            ap.error("unknown workload(s): %s (known: %s)" % (", ".join(bad),
                                                              ", ".join(WORKLOADS)))
    if args.doc:
        args.same_cpu = True
        if not args.no_profile:
            args.profile = True
    args.placements = []
    c, s = args.cpus
    if not args.only_same_cpu:
        args.placements.append(("apart", (c, s)))
    if args.same_cpu or args.only_same_cpu:
        args.placements.append(("same", (c, c)))
    for kv in args.env:
        if "=" not in kv:
            ap.error("--env wants K=V")
    args.bench_args = args.bench_args.split()
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.duration < 1:
        ap.error("--duration must be >= 1 (sockperf -t and wrk -d take whole seconds)")
    return args


def missing_programs(names):
    need = {"taskset"}
    for n in names:
        need.update(WORKLOADS[n]["programs"])
    return sorted(p for p in need if not shutil.which(p))


def main(argv):
    cfg = parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    res = None
    snap = None
    try:
        if cfg.load:
            res = json.loads(Path(cfg.load).read_text())
        else:
            for f in build_missing(cfg.build):
                log("programs.py: no %s in %s (make first, or --build DIR)" % (f, cfg.build))
                return 2
            miss = missing_programs(cfg.workloads)
            if miss:
                log("programs.py: missing program(s): %s" % ", ".join(miss))
                return 2
            ncpu = os.cpu_count() or 1
            if max(max(cpu_list(c)) for c in cfg.cpus) >= ncpu:
                log("programs.py: --cpus %s,%s but only %d CPUs" % (cfg.cpus + (ncpu,)))
                return 2
            workdir = tempfile.mkdtemp(prefix="usmc-programs-")
            build_info = describe_build(cfg.build)
            if not cfg.no_snapshot:
                # usmc bench included
                snap = snapshot_build(cfg.build, "usmc-programs-build-")
                build_info["snapshot"] = True
                cfg.build = snap
            started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            res = {"tool": "bench/programs.py", "version": 1, "started": started,
                   "machine": machine_info(cfg.cpus),
                   "config": {"reps": cfg.reps, "duration_s": cfg.duration,
                              "cpus": list(cfg.cpus),
                              "placements": {n: list(c) for n, c in cfg.placements},
                              "workloads": cfg.workloads, "busy_poll_us": cfg.busy_poll,
                              "env": cfg.env, "build": build_info,
                              "redis_requests": cfg.redis_requests,
                              "wrk_conns": cfg.wrk_conns, "wrk_threads": cfg.wrk_threads,
                              "nginx_workers": cfg.nginx_workers,
                              "nginx_file": cfg.nginx_file,
                              "command_line": "/usr/bin/python3 bench/programs.py " +
                                              " ".join(shq(a) for a in argv)},
                   "programs": program_versions(sorted({p for n in cfg.workloads
                                                        for p in WORKLOADS[n]["programs"]}))}
            try:
                res["placements"], res["failures"] = measure(cfg, workdir)
                if cfg.profile:
                    events = perf_events_available()
                    if events:
                        res["profile"] = profile(cfg, workdir, events)
                        res["profile_events"] = events
                    else:
                        res.setdefault("notes", []).append("no perf: profile skipped")
                        log("programs.py: perf not usable, profile skipped")
            finally:
                if not cfg.keep_logs and not os.listdir(workdir):
                    shutil.rmtree(workdir, ignore_errors=True)
                elif os.path.isdir(workdir):
                    log("programs.py: logs kept in %s" % workdir)
            res["machine"]["loadavg_after"] = " ".join(Path("/proc/loadavg").read_text().split()[0:3])
            res["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            res["ok"] = not res["failures"] and all(
                w["usmc_check"]["ok"] for p in res["placements"].values()
                for w in p["workloads"].values())
        print(table(res))
        if cfg.json:
            Path(cfg.json).write_text(json.dumps(res, indent=1) + "\n")
        if cfg.plot:
            try:
                plot(res, cfg.plot)
            except ImportError as e:
                log("programs.py: cannot plot without matplotlib (%s)" % e)
        if cfg.doc:
            docdir = Path(cfg.doc_dir)
            perf = docdir / "perf"
            perf.mkdir(parents=True, exist_ok=True)
            if not (cfg.load and Path(cfg.load).resolve() == (perf / "programs.json").resolve()):
                # Saved first: a failure below must not lose the measurements.
                (perf / "programs.json").write_text(json.dumps(res, indent=1) + "\n")
            if cfg.bench_json:
                bench = json.loads(Path(cfg.bench_json).read_text())
                if "tool" in bench:          # one plain `usmc bench --json` output
                    bench = {"apart": bench}
            else:
                try:
                    bench = run_usmc_bench(cfg)
                except RuntimeError as e:
                    log("programs.py: usmc bench failed, document without it: %s" % e)
                    bench = {}
            files = {"programs_json": "programs.json", "bench_json": "usmc-bench.json",
                     "programs_png": "programs.png", "bench_png": None}
            if not (cfg.bench_json and
                    Path(cfg.bench_json).resolve() == (perf / "usmc-bench.json").resolve()):
                (perf / "usmc-bench.json").write_text(json.dumps(bench, indent=1) + "\n")
            try:
                plot(res, perf / "programs.png")
            except ImportError as e:
                files["programs_png"] = None
                log("programs.py: no plot (%s)" % e)
            if "apart" in bench:
                tmpj = perf / ".usmc-bench-apart.json"
                tmpj.write_text(json.dumps(bench["apart"]))
                try:
                    r = subprocess.run([PY, str(REPO / "bench" / "plot.py"), str(tmpj),
                                        str(perf / "usmc-bench.png")], capture_output=True,
                                       timeout=120)
                    if r.returncode == 0:
                        files["bench_png"] = "usmc-bench.png"
                    else:
                        log("plot.py failed: " + r.stderr.decode(errors="replace"))
                finally:
                    tmpj.unlink()
            write_doc(res, bench, docdir, files, cfg.final)
            log("wrote %s/performance.md and %s/*" % (docdir, perf))
        return 0 if res.get("ok", False) else 1
    except KeyboardInterrupt:
        log("programs.py: interrupted")
        return 130
    finally:
        PROCS.kill_all()
        if snap is not None:
            shutil.rmtree(str(snap), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
