#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""How far could any transport take three workloads whose targets usmc misses?

For each workload the same client and server run over TCP and over usmc, side
by side, and the usmc run is profiled (perf record on the CPU whose work
decides the rate).  The part of that CPU's time that is the application's own
work (and would stay with a transport that cost nothing) bounds the rate:

  ceiling = usmc rate / application share of the bottleneck CPU

and the ceiling over the TCP rate is the best ratio any transport could show.

  redis-P16    redis-benchmark -t set,get -d 1024 -c 50 -P 16: the server's CPU;
               application = redis-server, jemalloc, libc, vdso (libc's memmove
               counted once as application, once as transport: both printed)
  nginx-ka     nginx (2 workers, sendfile, 1 KB file) + wrk keep-alive: the
               server's CPU; application = nginx, libc, and the kernel under
               openat, close, pread64 and newfstatat (nginx opens, reads and closes the
               file per request)
  nginx-close  the same with Connection: close: the client's CPU (wrk), which
               also runs the loopback TCP handshake of both ends; floor = the
               client's kernel time per request in the usmc run (the TCP
               connection usmc keeps), i.e. a library that cost nothing at all

Usage: bench/ceilings.py [--reps N] [--json FILE]   (needs perf, redis, nginx, wrk)
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build"
CLIENT_CPU, SERVER_CPU = "0", "1"

NGINX_CONF = """daemon off; master_process on; user root; worker_processes 2;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ use epoll; worker_connections 4096; }}
http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
 fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
 default_type application/octet-stream; sendfile on; keepalive_timeout 60;
 keepalive_requests 1000000000;
 server {{ listen 127.0.0.1:{port} backlog=4096; root {d}/www; }} }}
"""
FILE_SYSCALLS = ("__x64_sys_openat", "__x64_sys_close", "__x64_sys_pread64",
                 "__do_sys_newfstatat")
APP_DSOS = ("redis-server", "redis-check-rdb", "libjemalloc.so.2", "libc.so.6", "[vdso]",
            "nginx")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    """Until something listens on port (read from /proc: a connection of
    ours would count as a client that is not usmc)."""
    end = time.time() + timeout
    while time.time() < end:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                return
        time.sleep(0.05)
    raise RuntimeError("server did not listen on %d" % port)


class Run:
    """One transport's server + client in a fresh directory (and runtime dir)."""

    def __init__(self, transport):
        self.transport = transport
        self.dir = Path(tempfile.mkdtemp(prefix="ceil-", dir="/dev/shm"))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("USMC_") and k != "LD_PRELOAD"}
        self.env["USMC_RUNDIR"] = str(self.dir / "rundir")
        (self.dir / "rundir").mkdir()
        self.srv = None

    def wrap(self, argv, cpu):
        pre = [str(BUILD / "usmc"), "run", "--"] if self.transport == "usmc" else []
        return ["taskset", "-c", cpu] + pre + [str(a) for a in argv]

    def start(self, argv, port):
        self.srv = subprocess.Popen(self.wrap(argv, SERVER_CPU), env=self.env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        wait_port(port)
        time.sleep(0.3)

    def client(self, argv, perf_cpu=None):
        """Run the client; returns (stdout, its user+sys seconds, perf data or None)."""
        perf = None
        data = self.dir / "perf.data"
        if perf_cpu is not None:
            perf = subprocess.Popen(["perf", "record", "-q", "-g", "-C", perf_cpu, "-o",
                                     str(data)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(0.3)
        t0 = os.times()
        out = subprocess.run(self.wrap(argv, CLIENT_CPU), env=self.env, text=True,
                             capture_output=True, timeout=300).stdout
        t1 = os.times()
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
        cpu = (t1.children_user - t0.children_user, t1.children_system - t0.children_system)
        return out, cpu, (data if perf else None)

    def stat(self):
        if self.transport != "usmc":
            return None
        out = subprocess.run([str(BUILD / "usmc"), "stat", "--json"], env=self.env,
                             text=True, capture_output=True, timeout=30).stdout
        return json.loads(out)

    def close(self):
        if self.srv:
            try:
                os.killpg(self.srv.pid, signal.SIGTERM)
                self.srv.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.srv.pid, signal.SIGKILL)
                self.srv.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def perf_shares(data, cpu, key):
    """{name: percent} of samples on cpu, by dso (key 'dso', self time) or
    by kernel syscall entry (key 'sys', children time)."""
    if key == "dso":
        args = ["--no-children", "--sort", "dso"]
    else:
        args = ["--children", "--sort", "sym"]
    out = subprocess.run(["perf", "report", "-i", str(data), "--cpu", cpu, "-q", "-g", "none",
                          "--stdio"] + args, text=True, capture_output=True,
                         timeout=300).stdout
    shares = {}
    for line in out.splitlines():
        f = line.split()
        if not f or not f[0].endswith("%"):
            continue
        if key == "dso":
            shares[f[-1]] = float(f[0].rstrip("%"))
        elif f[-1] in FILE_SYSCALLS:
            shares[f[-1]] = float(f[0].rstrip("%"))
    if key == "dso":
        memmove = subprocess.run(["perf", "report", "-i", str(data), "--cpu", cpu, "-q", "-g",
                                  "none", "--stdio", "--no-children", "--sort", "sym"],
                                 text=True, capture_output=True, timeout=300).stdout
        shares["memmove"] = sum(float(ln.split()[0].rstrip("%")) for ln in memmove.splitlines()
                                if "memmove" in ln or "memcpy" in ln)
    return shares


def redis_p16(t, n):
    r = Run(t)
    try:
        port = free_port()
        r.start(["redis-server", "--save", "", "--appendonly", "no", "--port", port,
                 "--bind", "127.0.0.1", "--protected-mode", "no"], port)
        out, _, data = r.client(["redis-benchmark", "-h", "127.0.0.1", "-p", port, "-t",
                                 "set,get", "-d", 1024, "-c", 50, "-P", 16, "-n", n, "--csv"],
                                SERVER_CPU if t == "usmc" else None)
        rates = [float(m) for m in re.findall(r'^"(?:SET|GET)","([0-9.]+)"', out, re.M)]
        if len(rates) != 2:
            raise RuntimeError("redis-benchmark: " + out[-500:])
        res = {"rate": statistics.mean(rates), "stat": r.stat()}
        if data:
            s = perf_shares(data, SERVER_CPU, "dso")
            app = sum(v for k, v in s.items() if k in APP_DSOS)
            res.update(shares=s, app=app, app_no_copy=app - s["memmove"])
        return res
    finally:
        r.close()


def nginx(t, close, secs):
    r = Run(t)
    try:
        port = free_port()
        www = r.dir / "www"
        www.mkdir()
        (www / "index.html").write_bytes(b"u" * 1024)
        conf = r.dir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(d=r.dir, port=port))
        r.start(["nginx", "-c", conf, "-p", r.dir, "-e", r.dir / "error.log"], port)
        argv = ["wrk", "-t", 1, "-c", 50, "-d", secs]
        if close:
            argv += ["-H", "Connection: close"]
        perf_cpu = SERVER_CPU if (t == "usmc" and not close) else None
        out, cpu, data = r.client(argv + ["http://127.0.0.1:%d/index.html" % port], perf_cpu)
        m = re.search(r"(\d+) requests in", out)
        rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
        if not m or not rate:
            raise RuntimeError("wrk: " + out[-500:])
        n = int(m.group(1))
        res = {"rate": float(rate.group(1)), "client_user_us": cpu[0] / n * 1e6,
               "client_sys_us": cpu[1] / n * 1e6, "stat": r.stat()}
        if data:
            s = perf_shares(data, SERVER_CPU, "dso")
            files = perf_shares(data, SERVER_CPU, "sys")
            res.update(shares=s, file_syscalls=files,
                       app=sum(v for k, v in s.items() if k in APP_DSOS) + sum(files.values()))
        return res
    finally:
        r.close()


def accelerated(st):
    return st is not None and st.get("smc_conns", 0) > 0 and st.get("tcp_conns", 1) == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--redis-requests", type=int, default=1000000)
    ap.add_argument("--seconds", type=int, default=3)
    args = ap.parse_args()
    if not (BUILD / "libusmc.so").exists():
        sys.exit("build first (make)")
    work = {"redis-P16": lambda t: redis_p16(t, args.redis_requests),
            "nginx-ka": lambda t: nginx(t, False, args.seconds),
            "nginx-close": lambda t: nginx(t, True, args.seconds)}
    raw = {name: {"tcp": [], "usmc": []} for name in work}
    for rep in range(args.reps):
        for name, fn in work.items():
            for t in ("tcp", "usmc"):
                res = fn(t)
                if t == "usmc" and not accelerated(res["stat"]):
                    sys.exit("%s: the usmc run was not accelerated: %s" % (name, res["stat"]))
                res.pop("stat")
                raw[name][t].append(res)
                print("rep %d %s %s: %.0f/s" % (rep + 1, name, t, res["rate"]), file=sys.stderr)
    print("| workload | TCP /s | usmc /s | usmc/TCP | bottleneck CPU: application share "
          "(usmc run) | zero-cost-transport ceiling / TCP |")
    print("|---|---|---|---|---|---|")
    for name in work:
        tcp = statistics.median(r["rate"] for r in raw[name]["tcp"])
        us = raw[name]["usmc"]
        usm = statistics.median(r["rate"] for r in us)
        if name == "nginx-close":
            tcp_cpu = statistics.median(r["client_user_us"] + r["client_sys_us"]
                                        for r in raw[name]["tcp"])
            floor = statistics.median(r["client_sys_us"] for r in us)
            us_cpu = statistics.median(r["client_user_us"] + r["client_sys_us"] for r in us)
            share = "client CPU/request: TCP %.1f µs, usmc %.1f µs, of which kernel %.1f µs" % (
                tcp_cpu, us_cpu, floor)
            ceil = "%.2f× (TCP's client CPU over usmc's kernel time alone)" % (tcp_cpu / floor)
        elif name == "redis-P16":
            app = statistics.median(r["app"] for r in us)
            app_nc = statistics.median(r["app_no_copy"] for r in us)
            share = "%.0f %% (%.0f %% without memmove/memcpy)" % (app, app_nc)
            ceil = "%.2f× (%.2f× if every copy were the transport's)" % (
                usm / (app / 100) / tcp, usm / (app_nc / 100) / tcp)
        else:
            app = statistics.median(r["app"] for r in us)
            share = "%.0f %%" % app
            ceil = "%.2f×" % (usm / (app / 100) / tcp)
        print("| %s | %.0f | %.0f | %.2f× | %s | %s |" % (name, tcp, usm, usm / tcp, share, ceil))
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
