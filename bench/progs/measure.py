# SPDX-License-Identifier: MIT
"""The measurement loop of bench/programs.py (run_one, measure, profile,
summaries) and its output as a text table and a plot."""
import statistics
import time

from .common import METRICS, TRANSPORTS, fmt_num, fmt_ratio, log, stats_of
from .workloads import WORKLOADS, Ctx, parse_perf_csv, verify_usmc


# --------------------------------------------------------------------------
# The measurement loop
# --------------------------------------------------------------------------

def run_one(cfg, name, transport, cpus, rep, workdir, perf_events=None):
    wl = WORKLOADS[name]
    ctx = Ctx(cfg, transport, cpus, workdir, "%s-%s-%d" % (name, transport, rep), perf_events)
    run = {"rep": rep, "transport": transport, "ok": False}
    t0 = time.monotonic()
    try:
        metrics, info, st = wl["run"](ctx, wl, cfg)
        run.update(metrics=metrics, info=info, ok=True)
        if st is not None:
            run["usmc_stat"] = st
            bad = verify_usmc(st)
            run["usmc_ok"] = not bad
            if bad:
                run["ok"] = False
                run["error"] = "not accelerated: " + "; ".join(bad)
        if perf_events:
            run["profile"] = {"server": parse_perf_csv(ctx.perf_files.get("server", "")),
                              "client": {}}
            for f in ctx.perf_files.get("clients", []):
                for k, v in parse_perf_csv(f).items():
                    run["profile"]["client"][k] = run["profile"]["client"].get(k, 0) + v
    except KeyboardInterrupt:
        raise
    except Exception as e:      # noqa: BLE001 - one failed run must not stop the others
        run["error"] = str(e)[-4000:]
    finally:
        run["wall_s"] = round(time.monotonic() - t0, 2)
        run["commands"] = ctx.commands
        if getattr(ctx, "preload_seen", None):
            run["libusmc_mapped"] = ctx.preload_seen
        ctx.cleanup(cfg.keep_logs or not run["ok"])
        if not run["ok"]:
            run["logs"] = str(ctx.dir)
    return run


def summarize(name, runs):
    wl = WORKLOADS[name]
    out = {"title": wl["title"], "description": wl["desc"], "metrics": {},
           "commands": {}, "runs": runs}
    for t in TRANSPORTS:
        for r in runs:
            if r["transport"] == t and r.get("commands"):
                out["commands"][t] = [c for _, c in r["commands"]]
                break
    for key in wl["metrics"]:
        label, unit, better, is_cpu = METRICS[key]
        m = {"label": label, "unit": unit, "better": better, "cpu": is_cpu}
        per = {}
        for t in TRANSPORTS:
            per[t] = {r["rep"]: r["metrics"][key] for r in runs
                      if r["transport"] == t and r["ok"] and r["metrics"].get(key) is not None}
            m[t] = stats_of([per[t][k] for k in sorted(per[t])])
        ratio = None
        if m["tcp"]["median"] and m["usmc"]["median"] is not None:
            ratio = m["usmc"]["median"] / m["tcp"]["median"]
        paired = [per["usmc"][k] / per["tcp"][k] for k in sorted(per["usmc"])
                  if k in per["tcp"] and per["tcp"][k]]
        m["ratio"] = {"median": ratio, "min": min(paired) if paired else None,
                      "max": max(paired) if paired else None, "paired": paired}
        out["metrics"][key] = m
    checks = [r for r in runs if r["transport"] == "usmc"]
    out["usmc_check"] = {"ok": all(r.get("usmc_ok") for r in checks) and bool(checks),
                         "runs": len(checks),
                         "accelerated": sum(1 for r in checks if r.get("usmc_ok"))}
    # usmc counters per operation (median over the reps)
    per_op = {}
    for r in checks:
        st, info = r.get("usmc_stat"), r.get("info")
        ops = total_ops(info)
        if not st or not ops:
            continue
        for k in ("tx_calls", "rx_calls", "doorbells", "sleeps", "spin_hits"):
            per_op.setdefault(k, []).append(st.get(k, 0) / ops)
    out["usmc_per_op"] = {k: statistics.median(v) for k, v in per_op.items()}
    return out


def total_ops(info):
    if not info:
        return 0
    if "ops" in info:
        return info["ops"]
    return sum(v.get("ops", 0) for v in info.values() if isinstance(v, dict))


def measure(cfg, workdir):
    placements = {}
    failures = []
    t_start = time.monotonic()
    for pname, cpus in cfg.placements:
        runs = {n: [] for n in cfg.workloads}
        for rep in range(cfg.reps):
            for name in cfg.workloads:
                for t in TRANSPORTS:
                    r = run_one(cfg, name, t, cpus, rep, workdir)
                    runs[name].append(r)
                    status = "ok" if r["ok"] else "FAILED: " + r.get("error", "?").splitlines()[0]
                    main = WORKLOADS[name]["metrics"][0]
                    val = r.get("metrics", {}).get(main)
                    log("[%s %s rep %d/%d] %-13s %-4s %s %s (%.1f s, %.0f s total)" % (
                        pname, "%s/%s" % cpus, rep + 1, cfg.reps, name, t,
                        "%s=%s" % (main, fmt_num(val, METRICS[main][1])) if val else "",
                        status, r["wall_s"], time.monotonic() - t_start))
                    if not r["ok"]:
                        failures.append("%s %s %s rep %d: %s" % (
                            pname, name, t, rep, r.get("error", "?")[:2000]))
        placements[pname] = {"cpus": list(cpus),
                             "workloads": {n: summarize(n, runs[n]) for n in cfg.workloads}}
    return placements, failures


def profile(cfg, workdir, events):
    """One extra run per workload, transport and placement with perf stat
    counting on both sides (not used for the rates)."""
    out = {}
    for pname, cpus in cfg.placements:
        out[pname] = {}
        for name in cfg.workloads:
            out[pname][name] = {}
            for t in TRANSPORTS:
                r = run_one(cfg, name, t, cpus, -1, workdir, perf_events=events)
                ops = total_ops(r.get("info"))
                log("[profile %s] %-13s %-4s %s" % (pname, name, t,
                                                    "ok" if r["ok"] else "FAILED: " +
                                                    r.get("error", "?").splitlines()[0]))
                if not r["ok"] or not ops:
                    out[pname][name][t] = {"ok": False, "error": r.get("error", "")[:500]}
                    continue
                prof = r["profile"]
                entry = {"ok": True, "ops": ops, "metrics": r["metrics"],
                         "client": {k: v / ops for k, v in prof["client"].items()},
                         "server": {k: v / ops for k, v in prof["server"].items()}}
                if r.get("usmc_stat"):
                    entry["usmc"] = {k: r["usmc_stat"].get(k, 0) / ops
                                     for k in ("tx_calls", "rx_calls", "doorbells", "sleeps",
                                               "spin_hits")}
                out[pname][name][t] = entry
    return out


# --------------------------------------------------------------------------
# Output: table, plot
# --------------------------------------------------------------------------

def cell(s):
    if not s or s.get("median") is None:
        return "-"
    return "%s [%s..%s]" % (fmt_num(s["median"]), fmt_num(s["min"]), fmt_num(s["max"]))


def table(res):
    lines = []
    cfg = res["config"]
    mach = res["machine"]
    lines.append("bench/programs.py: TCP loopback vs usmc, real programs")
    lines.append("%d reps, %s s per run; %s CPUs %s; %s; load average before %s" % (
        cfg["reps"], cfg["duration_s"], mach["cpus"], mach["cpu_model"], mach["kernel"],
        mach.get("loadavg_before", "?")))
    lines.append("median [min..max]; ratio = usmc median / TCP median "
                 "[min..max of the per-rep ratios]")
    for pname, pl in res["placements"].items():
        lines.append("")
        lines.append("== placement %s: client CPU %s, server CPU %s ==" % (
            pname, pl["cpus"][0], pl["cpus"][1]))
        lines.append("  %-44s %-26s %-26s %s" % ("", "TCP", "usmc", "usmc/TCP"))
        for name, w in pl["workloads"].items():
            chk = w["usmc_check"]
            mark = "" if chk["ok"] else "  !! usmc verified on %d of %d runs" % (
                chk["accelerated"], chk["runs"])
            lines.append("%s: %s%s" % (name, w["title"], mark))
            for key, m in w["metrics"].items():
                r = m["ratio"]
                rs = fmt_ratio(r["median"])
                if r["min"] is not None:
                    rs += " [%s..%s]" % (fmt_ratio(r["min"]), fmt_ratio(r["max"]))
                lines.append("  %-44s %-26s %-26s %s" % (
                    "%s (%s)" % (m["label"], m["unit"]), cell(m["tcp"]), cell(m["usmc"]), rs))
    if res.get("failures"):
        lines.append("")
        lines.append("FAILURES:")
        for f in res["failures"]:
            lines.append("  " + f.splitlines()[0][:300])
    return "\n".join(lines)


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pls = list(res["placements"].items())
    fig, axes = plt.subplots(2, len(pls), squeeze=False,
                             figsize=(max(9, 7.5 * len(pls)), 9))
    colors = {"tcp": "#7f7f7f", "usmc": "#d62728"}
    for col, (pname, pl) in enumerate(pls):
        for row, want_cpu in enumerate((False, True)):
            ax = axes[row][col]
            groups = []
            for name, w in pl["workloads"].items():
                keys = WORKLOADS[name]["primary"] if not want_cpu else \
                    [k for k in w["metrics"] if w["metrics"][k]["cpu"]]
                for k in keys:
                    m = w["metrics"].get(k)
                    if m and m["tcp"]["median"]:
                        short = {"lat_p50_us": "p50", "lat_p99_us": "p99",
                                 "lat_mean_us": "mean", "set_per_s": "SET", "get_per_s": "GET",
                                 "cpu_us_per_set": "CPU/SET", "cpu_us_per_get": "CPU/GET",
                                 "recv_gb_per_s": "GB/s", "recv_msg_per_s": "msg/s",
                                 "req_per_s": "req/s"}.get(k, "CPU/op" if want_cpu else k)
                        groups.append(("%s\n%s" % (name, short), m))
            width = 0.38
            for i, t in enumerate(TRANSPORTS):
                xs, ys, lo, hi = [], [], [], []
                for g, (_, m) in enumerate(groups):
                    base = m["tcp"]["median"]
                    s = m[t]
                    if s["median"] is None:
                        continue
                    xs.append(g + (i - 0.5) * width)
                    ys.append(s["median"] / base)
                    lo.append((s["median"] - s["min"]) / base)
                    hi.append((s["max"] - s["median"]) / base)
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colors[t],
                       label="TCP" if t == "tcp" else "usmc", error_kw={"linewidth": 0.7})
            for g, (_, m) in enumerate(groups):
                r = m["ratio"]["median"]
                if r is None:
                    continue
                top = max(1.0, r, (m["usmc"]["max"] or 0) / m["tcp"]["median"])
                ax.annotate(fmt_ratio(r), (g, top), ha="center", va="bottom", fontsize=8,
                            fontweight="bold", xytext=(0, 4), textcoords="offset points")
            ax.set_yscale("log")
            ax.axhline(1.0, color="black", linewidth=0.6)
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels([g for g, _ in groups], fontsize=7)
            ax.set_ylabel("relative to TCP median (log)")
            lo_, hi_ = ax.get_ylim()
            ax.set_ylim(lo_ / 2, hi_ * 5)
            ax.grid(axis="y", alpha=0.3)
            ax.set_title("%s (client CPU %s, server CPU %s): %s" % (
                pname, pl["cpus"][0], pl["cpus"][1],
                "CPU time per operation, lower is better" if want_cpu else
                "rates higher / latency lower is better"), fontsize=9)
            if row == 0 and col == 0:
                ax.legend(fontsize=8, loc="upper left")
    mach, cfg = res["machine"], res["config"]
    fig.suptitle("bench/programs.py: real programs, TCP loopback vs usmc (median of %d reps, "
                 "bars min..max; ratio usmc/TCP above each group)\n%s CPUs %s, %s%s" % (
                     cfg["reps"], mach["cpus"], mach["cpu_model"], mach["kernel"],
                     "" if res.get("ok") else "  (some runs FAILED, see JSON)"), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=100)
    plt.close(fig)
