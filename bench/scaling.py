#!/usr/bin/python3
"""Independent client/server pairs at once: does usmc scale with cores?

    bench/scaling.py [--pairs 1,2,4,8] [--workloads rr1,msg100,stream64k]
                     [--reps 3] [--duration 1] [--usmc build/usmc] [--json OUT]
                     [--md OUT]

For each pair count P and each transport (TCP, then usmc), P copies of
`usmc bench` run at the same time, each one a client and a server pinned
to their own two CPUs (pair i: CPUs 2i and 2i+1, wrapping around when
there are fewer), and the per-pair results are added up.  Each usmc pair
has its own fresh runtime directory (`usmc bench` makes one per run) and
checks its own counters (usmc_check).  Reported per workload and P: the
aggregate (sum over pairs) median [min..max] over the repetitions for TCP
and usmc, their ratio, and the scaling efficiency (aggregate at P over P
times the aggregate at 1).

On a machine with fewer than 2P CPUs the pairs share CPUs: the figure then
says what contention costs, not how far usmc scales.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The headline metric of each workload in `usmc bench --json`.
METRIC = {"rr1": "txn_per_s", "rr16": "txn_per_s", "msg100": "msg_per_s",
          "stream64k": "gb_per_s", "stream1m": "gb_per_s", "conn": "conn_per_s"}


def run_pairs(usmc, pairs, transport, workloads, duration, ncpu):
    """P concurrent `usmc bench` runs of one transport; per-workload sums."""
    procs = []
    for i in range(pairs):
        c, s = (2 * i) % ncpu, (2 * i + 1) % ncpu
        cmd = [str(usmc), "bench", "--workloads", ",".join(workloads), "--transports", transport,
               "--reps", "1", "--duration", str(duration), "--cpus", "%d,%d" % (c, s), "--json"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL))
    sums = {w: 0.0 for w in workloads}
    ok = True
    for p in procs:
        out, err = p.communicate(timeout=600)
        try:
            d = json.loads(out)
        except ValueError:
            raise SystemExit("usmc bench failed (rc %d): %s" % (p.returncode, err.decode()[-2000:]))
        ok = ok and d.get("ok", False)
        for w in workloads:
            m = d["workloads"][w]["metrics"]
            key = METRIC.get(w) or next(k for k, v in m.items() if not v.get("cpu"))
            sums[w] += m[key][transport]["median"]
    return sums, ok


def fmt(v):
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if v >= div:
            return "%.3g%s" % (v / div, unit)
    return "%.3g" % v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="1,2")
    ap.add_argument("--workloads", default="rr1,msg100,stream64k")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--usmc", default=str(REPO / "build" / "usmc"))
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    pairs = [int(x) for x in args.pairs.split(",")]
    workloads = args.workloads.split(",")
    ncpu = os.cpu_count() or 1
    res = {}
    all_ok = True
    for p in pairs:
        res[p] = {w: {"tcp": [], "usmc": []} for w in workloads}
        for _ in range(args.reps):
            for t in ("tcp", "usmc"):
                sums, ok = run_pairs(args.usmc, p, t, workloads, args.duration, ncpu)
                all_ok = all_ok and ok
                for w in workloads:
                    res[p][w][t].append(sums[w])
        print("pairs %d done" % p, file=sys.stderr, flush=True)
    lines = ["| workload | pairs | TCP aggregate | usmc aggregate | usmc/TCP | usmc scaling |",
             "|---|---|---|---|---|---|"]
    for w in workloads:
        base = statistics.median(res[pairs[0]][w]["usmc"]) / pairs[0]
        for p in pairs:
            t, u = res[p][w]["tcp"], res[p][w]["usmc"]
            tm, um = statistics.median(t), statistics.median(u)
            lines.append("| %s | %d | %s [%s..%s] | %s [%s..%s] | %.2fx | %.0f %% |" % (
                w, p, fmt(tm), fmt(min(t)), fmt(max(t)), fmt(um), fmt(min(u)), fmt(max(u)),
                um / tm if tm else 0, 100 * um / (p * base) if base else 0))
    text = "\n".join(lines)
    print("%d CPUs; %s; usmc checks %s" % (ncpu, ", ".join("%s=%s" % (w, METRIC.get(w, "?"))
                                                         for w in workloads),
                                         "ok" if all_ok else "FAILED"))
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": ncpu, "ok": all_ok, "reps": args.reps,
                                               "duration": args.duration, "results": res},
                                              indent=1))
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
