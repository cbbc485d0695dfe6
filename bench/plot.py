#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""plot.py - draw `usmc bench --json` results: python3 plot.py RESULTS.json OUT.png

One group of bars per metric, one bar per transport (TCP, UNIX, usmc), each
normalised to TCP's median (TCP = 1.0) with the ratio printed on the bar.
Rates (higher is better) and latencies/CPU costs (lower is better) are in
separate panels so "taller is better" holds within a panel for the rates and
"shorter is better" for the costs.  The y axis is logarithmic: usmc and TCP
differ by orders of magnitude in latency.  `usmc bench --plot FILE.png` runs
this script with /usr/bin/python3 on the JSON it has just produced.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TRANSPORTS = [("tcp", "TCP", "#7f7f7f"), ("unix", "UNIX", "#1f77b4"), ("usmc", "usmc", "#d62728")]

SHORT = {
    "lat_mean_us": "mean", "lat_p50_us": "p50", "lat_p99_us": "p99", "lat_p999_us": "p99.9",
    "cpu_us_per_rtt": "CPU/rtt", "txn_per_s": "txn/s", "cpu_us_per_txn": "CPU/txn",
    "gb_per_s": "GB/s", "cpu_s_per_gb": "CPU/GB", "msg_per_s": "msg/s",
    "cpu_us_per_msg": "CPU/msg", "conn_per_s": "conn/s", "cpu_us_per_conn": "CPU/conn",
}


def groups(res):
    """[(label, better, {transport: ratio})] for every metric that has a TCP median."""
    out = []
    for wname, wl in res.get("workloads", {}).items():
        for key, m in wl.get("metrics", {}).items():
            if "tcp" not in m or m["tcp"]["median"] in (None, 0):
                continue
            tcp = m["tcp"]["median"]
            ratios = {}
            for t, _, _ in TRANSPORTS:
                med = m.get(t, {}).get("median")
                if med is not None:
                    ratios[t] = med / tcp
            out.append(("%s\n%s" % (wname, SHORT.get(key, key)), m["better"], ratios))
    return out


def panel(ax, items, title):
    width = 0.8 / len(TRANSPORTS)
    for i, (t, label, color) in enumerate(TRANSPORTS):
        xs, ys = [], []
        for g, (_, _, ratios) in enumerate(items):
            if t in ratios and ratios[t] > 0:
                xs.append(g + (i - (len(TRANSPORTS) - 1) / 2) * width)
                ys.append(ratios[t])
        if not xs:
            continue
        bars = ax.bar(xs, ys, width, label=label, color=color)
        for b, y in zip(bars, ys):
            txt = "%.2g" % y if y < 10 else "%.0f" % y
            ax.annotate(txt, (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom",
                        fontsize=7, rotation=90, xytext=(0, 2), textcoords="offset points")
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([lbl for lbl, _, _ in items], fontsize=7)
    ax.set_ylabel("ratio to TCP (log)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", which="major", alpha=0.3)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo / 2, hi * 4)    # room for the labels below and above


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: plot.py RESULTS.json OUT.png\n")
        return 2
    with open(sys.argv[1]) as f:
        res = json.load(f)
    items = groups(res)
    higher = [g for g in items if g[1] == "higher"]
    lower = [g for g in items if g[1] == "lower"]
    panels = [(higher, "rates: higher is better"),
              (lower, "latency and CPU per operation: lower is better")]
    panels = [p for p in panels if p[0]]
    if not panels:
        sys.stderr.write("plot.py: no metric with a TCP result to normalise to\n")
        return 1
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(max(8, 0.75 * max(len(p[0]) for p in panels) + 2),
                                      4.2 * len(panels)))
    for ax, (its, title) in zip(axes[:, 0], panels):
        panel(ax, its, title)
    mach = res.get("machine", {})
    cfg = res.get("config", {})
    vs = res.get("vs_floor", {})
    floor = []
    if vs.get("pp14_p50_vs_floor") is not None:
        floor.append("usmc pp14 p50 = %.1fx the cache-line floor" % vs["pp14_p50_vs_floor"])
    for k in ("stream64k", "stream1m"):
        v = vs.get(k + "_fraction_of_ceiling")
        if v is not None:
            floor.append("%s = %.0f%% of the copy-pipe ceiling" % (k, 100 * v))
    fig.suptitle("usmc bench: TCP loopback vs UNIX socket vs usmc, normalised to TCP (median of "
                 "%s reps x %s s)\n%s, %s CPUs, client CPU %s / server CPU %s%s%s"
                 % (cfg.get("reps", "?"), cfg.get("duration_s", "?"),
                    mach.get("cpu_model", "?"), mach.get("cpus", "?"),
                    mach.get("cpu_client", "?"), mach.get("cpu_server", "?"),
                    "" if res.get("ok", True) else "  (some runs FAILED, see JSON)",
                    "\n" + "; ".join(floor) if floor else ""),
                 fontsize=10)
    # The legend below the panels, the title's lines above them: neither
    # overlaps the other nor the bars (each reserves its own strip).
    handles, labels = axes[0, 0].get_legend_handles_labels()
    height = fig.get_figheight()
    title_lines = 3 if floor else 2
    legend = fig.legend(handles, labels, loc="lower center", fontsize=9, ncol=len(labels),
                        frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1 - (0.22 * title_lines + 0.15) / height))
    fig.savefig(sys.argv[2], dpi=110)
    if os.environ.get("USMC_PLOT_CHECK"):
        # tests/test_bench.py: the boxes of title, legend and panels, in pixels.
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        boxes = {"title": fig._suptitle.get_window_extent(r), "legend": legend.get_window_extent(r)}
        for i, ax in enumerate(axes[:, 0]):
            boxes["panel%d" % i] = ax.get_tightbbox(r)
        print(json.dumps({k: [b.x0, b.y0, b.x1, b.y1] for k, b in boxes.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
