# SPDX-License-Identifier: MIT
"""`usmc bench` integration and the docs/performance.md writer of
bench/programs.py --doc."""
import json
import shutil
import tempfile
from pathlib import Path

from .common import METRICS, TRANSPORTS, fmt_num, fmt_ratio, log
from .explain import where_time_goes
from .procs import PROCS, plain_env, read_text, shq
from .workloads import NGINX_CONF


# --------------------------------------------------------------------------
# `usmc bench` and the document
# --------------------------------------------------------------------------

def run_usmc_bench(cfg):
    """The three `usmc bench` runs the document needs: apart, same CPU, busy-poll."""
    c, s = cfg.cpus
    common = ["--json", "--reps", str(cfg.reps)] + cfg.bench_args
    runs = {
        "apart": common + ["--cpus", "%d,%d" % (c, s)],
        "same": common + ["--cpus", "%d,%d" % (c, c)],
        "busy": common + ["--cpus", "%d,%d" % (c, s), "--busy-poll", str(cfg.busy_poll),
                          "--workloads", "pp14,pp1k,rr1", "--transports", "tcp,usmc"],
    }
    out = {}
    for name, args in runs.items():
        cmd = [str(cfg.build / "usmc"), "bench"] + args
        log("[usmc bench %s] %s" % (name, " ".join(cmd)))
        p = PROCS.popen(cmd, plain_env(), Path(tempfile.mkdtemp(prefix="usmc-bench-")) / "b")
        try:
            rc, _ = PROCS.wait_rusage(p, 1800)
        finally:
            PROCS.stop(p)
        text = read_text(str(p.log) + ".out")
        try:
            res = json.loads(text)
        except ValueError:
            raise RuntimeError("usmc bench %s printed no JSON (rc %d):\n%s" % (
                name, rc, read_text(str(p.log) + ".err")[-3000:]))
        res["command"] = "build/usmc bench " + " ".join(shq(a) for a in args)
        out[name] = res
        shutil.rmtree(p.log.parent, ignore_errors=True)
    return out


def bench_metric(b, wl, key, t):
    try:
        return b["workloads"][wl]["metrics"][key][t]
    except (KeyError, TypeError):
        return None


def bench_paired(b, wl, key):
    a, u = bench_metric(b, wl, key, "tcp"), bench_metric(b, wl, key, "usmc")
    if not a or not u or not a.get("samples") or not u.get("samples"):
        return []
    return [y / x for x, y in zip(a["samples"], u["samples"]) if x]


def doc_cell(s, unit=""):
    if not s or s.get("median") is None:
        return "—"
    return "%s [%s..%s]" % (fmt_num(s["median"], unit), fmt_num(s["min"], unit),
                            fmt_num(s["max"], unit))


def ratio_cell(med, paired):
    if med is None:
        return "—"
    s = fmt_ratio(med)
    if paired:
        s += " [%s..%s]" % (fmt_ratio(min(paired)), fmt_ratio(max(paired)))
    return s


# Target rows: (what, placements, target text, op, median bound, worst bound, sources).
# placements: where the row applies ("apart", "same").  A target is met
# when the ratio of the medians meets the median bound and, where there is
# a worst bound, the worst repetition's ratio meets it too (issue 16's
# targets: "each ratio's worst repetition").
# A source: ("bench", bench run, workload, metric) or ("prog", workload, metric).
TARGETS = [
    ("14 B ping-pong latency, default mode", ("apart",), "≤ 0.10× TCP", "le", 0.10, None,
     [("bench", None, "pp14", "lat_p50_us"), ("prog", "pp14", "lat_p50_us"),
      ("prog", "pp14", "lat_mean_us")]),
    ("14 B ping-pong latency, one CPU", ("same",), "≤ 0.30× TCP", "le", 0.30, None,
     [("bench", None, "pp14", "lat_p50_us"), ("prog", "pp14", "lat_p50_us"),
      ("prog", "pp14", "lat_mean_us")]),
    ("14 B ping-pong latency, busy-poll (USMC_BUSY_POLL)", ("apart",), "≤ 0.03× TCP", "le",
     0.03, None,
     [("bench", "busy", "pp14", "lat_p50_us"), ("prog", "pp14-busy", "lat_p50_us"),
      ("prog", "pp14-busy", "lat_mean_us")]),
    ("1 KB request/response, 1 connection", ("apart",), "≥ 10× TCP", "ge", 10, None,
     [("bench", None, "rr1", "txn_per_s")]),
    ("1 KB request/response, one CPU", ("same",), "≥ 4× TCP", "ge", 4, None,
     [("bench", None, "rr1", "txn_per_s")]),
    ("100 B message rate", ("apart", "same"), "≥ 10× TCP", "ge", 10, None,
     [("bench", None, "msg100", "msg_per_s"), ("prog", "tp100", "recv_msg_per_s")]),
    ("64 KB streaming", ("apart", "same"), "≥ 3× TCP", "ge", 3, None,
     [("bench", None, "stream64k", "gb_per_s"), ("prog", "tp64k", "recv_gb_per_s")]),
    ("redis -c 200 -d 1024, one `-t set,get` run, cold", ("apart", "same"),
     "≥ 3× TCP median, ≥ 2× worst", "ge", 3, 2,
     [("prog", "redis-c200", "set_per_s"), ("prog", "redis-c200", "get_per_s")]),
    ("redis -c 50 and -P 16", ("apart", "same"), "≥ 5× TCP, worst too", "ge", 5, 5,
     [("prog", "redis-c50", "set_per_s"), ("prog", "redis-c50", "get_per_s"),
      ("prog", "redis-c50-P16", "set_per_s"), ("prog", "redis-c50-P16", "get_per_s")]),
    ("nginx + wrk keep-alive", ("apart", "same"), "≥ 3× TCP, worst too", "ge", 3, 3,
     [("prog", "nginx-ka", "req_per_s")]),
    ("nginx + wrk Connection: close", ("apart",), "≥ 1.2× TCP, worst too", "ge", 1.2, 1.2,
     [("prog", "nginx-close", "req_per_s")]),
    ("nginx + wrk Connection: close, one CPU", ("same",), "≥ 1.0× TCP, worst too", "ge",
     1.0, 1.0, [("prog", "nginx-close", "req_per_s")]),
    ("connection setup rate", ("apart", "same"), "≥ 0.9× TCP", "ge", 0.9, None,
     [("bench", None, "conn", "conn_per_s")]),
]

BENCH_UNITS = {"txn_per_s": "1/s", "msg_per_s": "1/s", "conn_per_s": "1/s"}


def target_rows(prog, bench, placement):
    rows = []
    pl = (prog or {}).get("placements", {}).get(placement)
    for what, where, tgt, op, bound, worst_bound, sources in TARGETS:
        if placement not in where:
            continue
        for src in sources:
            if src[0] == "bench":
                run = src[1] or placement
                if run == "busy" and placement != "apart":
                    continue
                b = (bench or {}).get(run)
                if not b:
                    continue
                tcp = bench_metric(b, src[2], src[3], "tcp")
                usmc = bench_metric(b, src[2], src[3], "usmc")
                if not tcp:
                    continue
                try:
                    mlabel = b["workloads"][src[2]]["metrics"][src[3]]["label"]
                except KeyError:
                    mlabel = src[3]
                label = "`usmc bench` %s, %s" % (src[2], mlabel)
                if run == "busy":
                    label += " (--busy-poll %s)" % b.get("config", {}).get("busy_poll_us")
                paired = bench_paired(b, src[2], src[3])
                unit = BENCH_UNITS.get(src[3], "")
                med = (usmc["median"] / tcp["median"]
                       if usmc and usmc.get("median") is not None and tcp.get("median")
                       else None)
            else:
                if not pl or src[1] not in pl["workloads"]:
                    continue
                m = pl["workloads"][src[1]]["metrics"].get(src[2])
                if not m:
                    continue
                tcp, usmc = m["tcp"], m["usmc"]
                label = "%s, %s" % (src[1], METRICS[src[2]][0])
                paired = m["ratio"]["paired"]
                med = m["ratio"]["median"]
                unit = METRICS[src[2]][1]
            met = "—"
            if med is not None:
                ok = med <= bound if op == "le" else med >= bound
                if worst_bound is not None and paired:
                    worst = max(paired) if op == "le" else min(paired)
                    ok = ok and (worst <= worst_bound if op == "le" else worst >= worst_bound)
                met = "yes" if ok else "**no**"
            rows.append((what, tgt, label, doc_cell(tcp, unit), doc_cell(usmc, unit),
                         ratio_cell(med, paired), met))
    return rows


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def prog_rows(pl):
    rows = []
    for name, w in pl["workloads"].items():
        chk = w["usmc_check"]
        for key, m in w["metrics"].items():
            rows.append(("%s%s" % (name, "" if chk["ok"] else " (!)"),
                         "%s (%s)" % (m["label"], m["unit"]),
                         doc_cell(m["tcp"], m["unit"]), doc_cell(m["usmc"], m["unit"]),
                         ratio_cell(m["ratio"]["median"], m["ratio"]["paired"])))
    return rows


def bench_rows(b):
    rows = []
    for wname, w in b.get("workloads", {}).items():
        if wname == "floor":
            continue
        for key, m in w.get("metrics", {}).items():
            r = m.get("ratio_vs_tcp", {})
            rows.append((wname, m["label"], doc_cell(m.get("tcp")), doc_cell(m.get("unix")),
                         doc_cell(m.get("usmc")),
                         fmt_ratio(r.get("usmc")) if r.get("usmc") is not None else "—"))
    return rows


def floor_lines(b):
    out = []
    fl = b.get("workloads", {}).get("floor", {}).get("metrics", {})
    for key, m in fl.items():
        out.append("| %s | %s |" % (m["label"], doc_cell(m.get("machine"))))
    vs = b.get("vs_floor", {})
    extra = []
    if vs.get("pp14_p50_vs_floor") is not None:
        extra.append("usmc pp14 p50 = %.1f× the cache-line floor" % vs["pp14_p50_vs_floor"])
    if vs.get("pp1k_p50_vs_floor") is not None:
        extra.append("pp1k p50 = %.1f× the floor" % vs["pp1k_p50_vs_floor"])
    for k in ("stream64k", "stream1m"):
        v = vs.get(k + "_fraction_of_ceiling")
        if v is not None:
            extra.append("usmc %s = %.0f%% of the copy-pipe ceiling%s" % (
                k, 100 * v, " (target ≥ 85 %%: %s)" % ("met" if v >= 0.85 else "**not met**")
                if k == "stream64k" else ""))
    return out, extra


def write_doc(prog, bench, docdir, files, final):
    md = []
    add = md.append
    mach = (prog or {}).get("machine") or next(iter((bench or {}).values()), {}).get("machine", {})
    cfg = (prog or {}).get("config", {})
    add("# usmc performance")
    add("")
    add("<!-- Generated by bench/programs.py --doc; do not edit by hand: edit the script "
        "and regenerate. -->")
    add("")
    if not final:
        add("> **PRELIMINARY — placeholder numbers.**  Everything below was measured while "
            "other jobs were running on the same 2-vCPU machine (load average %s before, "
            "%s after).  Rates, latencies and ratios are noisy and will be replaced by a "
            "quiet-machine run:" % (mach.get("loadavg_before", "?"),
                                    mach.get("loadavg_after", "?")))
        add(">")
        add("> `/usr/bin/python3 bench/programs.py --doc --final --reps 5`")
        add("")
    add("Two sources, both comparing the same client and server over TCP loopback "
        "(no preload) and over usmc (`usmc run`, both ends):")
    add("")
    add("* **real programs** — `bench/programs.py`: sockperf, redis-server + "
        "redis-benchmark, nginx + wrk, unmodified Debian 12 binaries.")
    add("* **`usmc bench`** — the built-in micro-benchmark (cli/bench*.c), which also "
        "measures UNIX sockets and the machine's floor and ceiling; see "
        "[bench/README.md](../bench/README.md).")
    add("")
    add("Machine: %s CPUs, %s, %s.  Started %s, finished %s.  Median of %s repetitions "
        "[min..max]; TCP and usmc alternate within each repetition (TCP, usmc, TCP, usmc, "
        "...), each run with a fresh server.  Ratio = usmc median / TCP median, in brackets "
        "the range of the per-repetition ratios (repetition *i* of usmc over repetition *i* "
        "of TCP)." % (mach.get("cpus", "?"), mach.get("cpu_model", "?"),
                      mach.get("kernel", "?"), (prog or {}).get("started", "?"),
                      (prog or {}).get("finished", "?"), cfg.get("reps", "?")))
    add("")
    b = cfg.get("build")
    if isinstance(b, dict):
        mod = b.get("sources_modified") or []
        add("Library measured: `%s/libusmc.so` (sha256 %s…, built %s), repository at %s%s%s." % (
            b.get("dir", "?"), (b.get("lib_sha256") or "?")[:12], b.get("lib_mtime", "?"),
            b.get("git_head", "?"),
            " with uncommitted changes in %s" % ", ".join(mod[:8]) if mod else "",
            "; a private copy was used for the whole run" if b.get("snapshot") else ""))
        add("")
    add("Every usmc run is checked with `usmc stat --json` on its own fresh runtime "
        "directory: `smc_conns > 0`, `tcp_conns == 0`, no `tcp_fallback`, no handshake "
        "error; every TCP run is checked to have no `libusmc.so` mapped.  A workload marked "
        "(!) had a run that failed this check.")
    add("")

    for placement, title in (("apart", "client and server on different CPUs"),
                             ("same", "client and server on the same CPU")):
        pl = (prog or {}).get("placements", {}).get(placement)
        b = (bench or {}).get(placement)
        if not pl and not b:
            continue
        cpus = pl["cpus"] if pl else [b["machine"]["cpu_client"], b["machine"]["cpu_server"]]
        add("## Targets: %s (client CPU %s, server CPU %s)" % (title, cpus[0], cpus[1]))
        add("")
        if not final:
            add("*Preliminary (noisy machine); the final run replaces these numbers.*")
            add("")
        add(md_table(["target", "goal", "measured by", "TCP", "usmc", "usmc/TCP", "met"],
                     target_rows(prog, bench, placement)))
        add("")
        if placement == "same":
            add("On one CPU the two ends take turns: usmc does not spin (the library sees "
                "its peer on its own CPU) but hands the CPU over (`sched_yield`, a look "
                "after each, up to four) before it sleeps on the doorbell, so latency is "
                "bounded by the scheduler's context switch, not by the transport.  This "
                "machine's floors, one hop between two processes on one CPU "
                "(`bench/onecpu_floor.c`): TCP 7.0 µs, a futex or a FIFO watched by "
                "epoll 2.2–2.3 µs, `sched_yield` 1.8 µs.")
            add("")

    add("## Plots")
    add("")
    if files.get("programs_png"):
        add("Real programs, both placements (bars: median relative to TCP, whiskers "
            "min..max; the usmc/TCP ratio above each group):")
        add("")
        add("![real programs](perf/%s)" % files["programs_png"])
        add("")
    if files.get("bench_png"):
        add("`usmc bench`, client and server on different CPUs:")
        add("")
        add("![usmc bench](perf/%s)" % files["bench_png"])
        add("")

    for placement, title in (("apart", "different CPUs"), ("same", "same CPU")):
        pl = (prog or {}).get("placements", {}).get(placement)
        if not pl:
            continue
        add("## Real programs, %s (client CPU %s, server CPU %s)" % (
            title, pl["cpus"][0], pl["cpus"][1]))
        add("")
        if not final:
            add("*Preliminary (noisy machine).*")
            add("")
        add(md_table(["workload", "metric", "TCP", "usmc", "usmc/TCP"], prog_rows(pl)))
        add("")
        add("CPU per operation = (client user+system time over its whole run + server "
            "user+system time over the same window) / operations the client did.")
        add("")

    for placement, title in (("apart", "different CPUs"), ("same", "same CPU"),
                             ("busy", "busy-poll")):
        b = (bench or {}).get(placement)
        if not b:
            continue
        add("## `usmc bench`, %s" % title)
        add("")
        add("`%s` — client CPU %s, server CPU %s, %s reps × %s s." % (
            b.get("command", "usmc bench"), b["machine"].get("cpu_client"),
            b["machine"].get("cpu_server"), b["config"].get("reps"),
            b["config"].get("duration_s")))
        add("")
        if not final:
            add("*Preliminary (noisy machine).*")
            add("")
        add(md_table(["workload", "metric", "TCP", "UNIX", "usmc", "usmc/TCP"], bench_rows(b)))
        add("")
        fl, extra = floor_lines(b)
        if fl:
            add("Machine floor and ceiling (two threads, shared memory, no system calls):")
            add("")
            add("| limit | median [min..max] |")
            add("|---|---|")
            md.extend(fl)
            add("")
            if extra:
                add("; ".join(extra) + ".  Where the latency above the floor goes, and "
                    "what was tried: [perf/floor-gap.md](perf/floor-gap.md).")
                add("")
        if b.get("failures"):
            add("Failures: " + "; ".join(str(f) for f in b["failures"]))
            add("")

    prof = (prog or {}).get("profile")
    add("## Where the time goes")
    add("")
    if prof:
        add("Measured in one extra run per workload and transport with `perf stat` "
            "counting software events and system-call tracepoints on both sides (the "
            "client wrapped, the server's processes attached for the client's lifetime); "
            "these runs are not used for the rates above.  All figures are per operation; "
            "`syscalls` counts every system call (`raw_syscalls:sys_enter`), the most "
            "frequent ones follow in parentheses; context switches are the wake-ups.  The "
            "usmc counters come from `usmc stat`.  Client and server CPU are from the "
            "measured runs.")
    else:
        add("*No profile in this JSON (run with `--profile`; needs `perf`).*  Client and "
            "server CPU per operation are from the measured runs.")
    add("")
    for placement, title in (("apart", "Client and server on different CPUs"),
                             ("same", "Client and server on the same CPU")):
        paras = where_time_goes(prog, placement)
        if not paras:
            continue
        add("### %s" % title)
        add("")
        for p in paras:
            add(p)
            add("")

    add("## The seeds' knobs and the machine's ceiling")
    add("")
    add("No-copy vs copy through a sender-side buffer (`USMC_DMB_COPY`), regular vs "
        "huge-page DMBs (`USMC_DMB_TYPE=huge`), and `usmc bench`'s floor (bare "
        "shared-memory ping-pong) and ceiling (cross-core copy): "
        "[perf/knobs.md](perf/knobs.md), measured with `bench/knobs.sh`.")
    add("")
    add("## redis sweep (seed 004)")
    add("")
    add("redis-benchmark `--threads 1, 2, 4, 8` × values of 64 B, 1 KB, 16 KB, 64 KB × "
        "`-c 50` and `-c 200`, TCP vs usmc, each cell a fresh server and one `-t set,get` "
        "run (`bench/redis_sweep.py`): [perf/redis-sweep.md](perf/redis-sweep.md).  Seed "
        "004 reports +40–60 % for kernel SMC-R.")
    add("")
    add("## Cold start")
    add("")
    add("Where the first run against a fresh server spends its time, and why the issue's "
        "0.05× cold runs are gone: [perf/cold-start.md](perf/cold-start.md).")
    add("")
    add("## Scaling with cores")
    add("")
    add("Independent client/server pairs at once, each on its own two CPUs, TCP vs usmc "
        "aggregate (`bench/scaling.py`): [perf/scaling.md](perf/scaling.md), with the "
        "machine each table comes from.")
    add("")
    add("Real programs on 16 CPUs (`bench/manycore.sh`: nginx with 8 workers and wrk with 8 "
        "threads, redis at defaults, seed 004's `--threads` sweep): "
        "[perf/manycore.md](perf/manycore.md).  Pairs that share nothing scale linearly; "
        "threads of one process that each run an epoll loop do not yet (one process-wide "
        "`ep_lock`): nginx + wrk -t 8 Connection: close runs at 0.27× TCP there, keep-alive "
        "at 1.2×.")
    add("")
    add("## Exact commands")
    add("")
    add("The measurements in docs/perf/%s were taken with:" % files.get("programs_json",
                                                                       "programs.json"))
    add("")
    add("```sh")
    add(cfg.get("command_line", "/usr/bin/python3 bench/programs.py --doc"))
    add("```")
    add("")
    add("The final quiet-machine run (measures, runs `usmc bench`, writes this file and "
        "docs/perf/; about %s minutes with 5 repetitions):" % "20")
    add("")
    add("```sh")
    add("/usr/bin/python3 bench/programs.py --doc --final --reps 5")
    add("```")
    add("")
    add("Regenerate the document from the committed JSON without measuring:")
    add("")
    add("```sh")
    add("/usr/bin/python3 bench/programs.py --doc --load docs/perf/%s --bench-json docs/perf/%s"
        % (files.get("programs_json", "programs.json"), files.get("bench_json", "usmc-bench.json")))
    add("```")
    add("")
    pl = (prog or {}).get("placements", {}).get("apart") or \
        next(iter((prog or {}).get("placements", {}).values()), None)
    if pl:
        add("Per workload, as run by the script (`$TMP` is the run's scratch directory, "
            "`$RUNDIR` its fresh usmc runtime directory; the port is chosen per run):")
        add("")
        add("```sh")
        for name, w in pl["workloads"].items():
            add("# %s: %s" % (name, w["description"]))
            for t in TRANSPORTS:
                for c in w.get("commands", {}).get(t, []):
                    add(c)
            add("")
        add("```")
        add("")
    cmds = [b["command"] for b in (bench or {}).values() if b.get("command")]
    if cmds:
        add("`usmc bench` runs:")
        add("")
        add("```sh")
        md.extend(cmds)
        add("```")
        add("")
    if pl and any(n.startswith("nginx") for n in pl["workloads"]):
        add("nginx.conf (`{workers}` = %s, `{root}` holds `index.html`, %s bytes):" % (
            cfg.get("nginx_workers", "?"), cfg.get("nginx_file", "?")))
        add("")
        add("```nginx")
        add(NGINX_CONF.replace("{{", "{").replace("}}", "}").rstrip())
        add("```")
        add("")
    add("Raw data: [docs/perf/%s](perf/%s) (this script, every run with its usmc counters) "
        "and [docs/perf/%s](perf/%s) (`usmc bench --json`, keyed by run)." % (
            files.get("programs_json", "programs.json"), files.get("programs_json", "programs.json"),
            files.get("bench_json", "usmc-bench.json"), files.get("bench_json", "usmc-bench.json")))
    add("")
    fails = list((prog or {}).get("failures", []))
    if fails:
        add("## Failed runs")
        add("")
        for f in fails:
            add("* " + f.splitlines()[0][:400].replace("|", "\\|"))
        add("")
    (docdir / "performance.md").write_text("\n".join(md))
