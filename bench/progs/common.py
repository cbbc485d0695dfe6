# SPDX-License-Identifier: MIT
"""Constants, metric definitions and number formatting shared by bench/programs.py
and the modules of bench/progs/."""
import math
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"
HOST = "127.0.0.1"
TRANSPORTS = ("tcp", "usmc")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# --------------------------------------------------------------------------
# Metrics: key -> (label, unit, better, is_cpu, format)
# --------------------------------------------------------------------------

METRICS = {
    "lat_mean_us": ("one-way latency mean", "us", "lower", False),
    "lat_p50_us": ("one-way latency p50", "us", "lower", False),
    "lat_p99_us": ("one-way latency p99", "us", "lower", False),
    "lat_p999_us": ("one-way latency p99.9", "us", "lower", False),
    "rtt_per_s": ("round trips/s", "1/s", "higher", False),
    "cpu_us_per_rtt": ("CPU per round trip", "us", "lower", True),
    "recv_gb_per_s": ("received (server side)", "GB/s", "higher", False),
    "send_gb_per_s": ("sent (sockperf's own figure)", "GB/s", "higher", False),
    "cpu_s_per_gb": ("CPU per GB received", "s", "lower", True),
    "recv_msg_per_s": ("messages received/s (server side)", "1/s", "higher", False),
    "send_msg_per_s": ("messages sent/s (sockperf's own figure)", "1/s", "higher", False),
    "cpu_us_per_msg": ("CPU per message", "us", "lower", True),
    "set_per_s": ("SET requests/s", "1/s", "higher", False),
    "cpu_us_per_set": ("CPU per SET", "us", "lower", True),
    "get_per_s": ("GET requests/s", "1/s", "higher", False),
    "cpu_us_per_get": ("CPU per GET", "us", "lower", True),
    "req_per_s": ("requests/s", "1/s", "higher", False),
    "cpu_us_per_req": ("CPU per request", "us", "lower", True),
}


def fmt_num(v, unit=""):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    a = abs(v)
    if unit == "1/s" or a >= 1e4:
        for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if a >= div:
                return "%.3g%s" % (v / div, suf)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3g" % v


def fmt_ratio(r):
    if r is None:
        return "-"
    if r >= 10:
        return "%.1fx" % r
    if r >= 0.095:
        return "%.2fx" % r
    return "%.2gx" % r


def stats_of(samples):
    s = [x for x in samples if x is not None and math.isfinite(x)]
    if not s:
        return {"median": None, "min": None, "max": None, "samples": []}
    return {"median": statistics.median(s), "min": min(s), "max": max(s), "samples": s}


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
