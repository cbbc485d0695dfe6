# SPDX-License-Identifier: MIT
"""Workloads of bench/programs.py: the per-run context (Ctx: transport,
placement, scratch directory), the sockperf / redis / nginx runners and
parsers, the WORKLOADS table and the perf stat helpers of profile runs."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .common import HOST
from .procs import (PROCS, cpu_delta, free_port, group_cpu, group_pids, listening,
                    maps_has_usmc, plain_env, preload_of, proc_output, read_text, shq)

# --------------------------------------------------------------------------
# The context of one run
# --------------------------------------------------------------------------

class Ctx:
    """One run: a transport, a placement, a scratch directory."""

    def __init__(self, cfg, transport, cpus, workdir, tag, perf_events=None):
        self.cfg, self.transport, self.cpus = cfg, transport, cpus
        self.dir = Path(tempfile.mkdtemp(prefix=tag + "-", dir=workdir))
        self.rundir = None
        self.port = None
        self.n = 0
        self.commands = []
        self.perf_events = perf_events     # profile run: count these on both sides
        self.perf_files = {}
        if transport == "usmc":
            self.rundir = Path(tempfile.mkdtemp(prefix="usmc-prog-", dir="/dev/shm"))

    def env(self, extra_usmc=None):
        env = plain_env()
        if self.transport == "usmc":
            env["USMC_RUNDIR"] = str(self.rundir)
            for kv in self.cfg.env:
                k, v = kv.split("=", 1)
                env[k] = v
            if extra_usmc:
                env.update(extra_usmc)
        return env

    def wrap(self, argv, cpu):
        cmd = ["taskset", "-c", str(cpu)]
        if self.transport == "usmc":
            cmd += [str(self.cfg.build / "usmc"), "run", "--"]
        return cmd + [str(a) for a in argv]

    def shown(self, argv, role, extra_usmc=None):
        """The command as a person would type it (for the document)."""
        cpu = self.cpus[1] if role == "server" else self.cpus[0]
        pre = ""
        if self.transport == "usmc":
            env = dict(extra_usmc or {})
            for kv in self.cfg.env:
                k, v = kv.split("=", 1)
                env[k] = v
            pre = "".join("%s=%s " % kv for kv in sorted(env.items()))
            pre += "USMC_RUNDIR=$RUNDIR "
        s = pre + " ".join(shq(a) for a in self.wrap(argv, cpu))
        s = s.replace(str(self.cfg.build / "usmc"), "build/usmc")
        s = s.replace(str(self.dir), "$TMP")
        if self.port:
            s = re.sub(r"\b%d\b" % self.port, "$PORT", s)
        return s

    def start_server(self, argv_for_port, min_procs=1, extra_usmc=None, settle=0.1):
        last = ""
        for _ in range(4):
            port = free_port()
            self.port = port
            argv = argv_for_port(port)
            self.n += 1
            p = PROCS.popen(self.wrap(argv, self.cpus[1]), self.env(extra_usmc),
                            self.dir / ("%02d-server" % self.n), cwd=str(self.dir))
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and PROCS.alive(p):
                ok = listening(p.pid, port) and len(group_pids(p.pid)) >= min_procs
                if ok and self.rundir is not None:
                    ok = any(n.startswith("ln-") for n in os.listdir(self.rundir))
                if ok:
                    # The listener registers right after creating its index;
                    # nginx workers come up after the master listens.
                    time.sleep(settle)
                    self.commands.append(("server", self.shown(argv, "server", extra_usmc)))
                    p.port = port
                    p.cpu0 = group_cpu(p.pid)
                    p.preload = maps_has_usmc(p.pid)
                    if self.perf_events:
                        self.attach_perf(p)
                    return p
                time.sleep(0.02)
            last = proc_output(p)[-2000:]
            PROCS.stop(p, grace=0.5)
        raise RuntimeError("server %s did not start:\n%s" % (argv_for_port(0)[0], last))

    def attach_perf(self, server):
        pids = ",".join(str(x) for x in group_pids(server.pid))
        out = self.dir / "perf-server.csv"
        self.n += 1
        server.perf = PROCS.popen(["perf", "stat", "-x,", "-e", ",".join(self.perf_events),
                                   "-p", pids, "-o", out], plain_env(),
                                  self.dir / ("%02d-perf" % self.n))
        self.perf_files["server"] = out
        time.sleep(0.3)

    def run_client(self, argv, timeout, extra_usmc=None):
        """Run a client to completion; returns (text, client CPU s)."""
        self.n += 1
        self.commands.append(("client", self.shown(argv, "client", extra_usmc)))
        cmd = self.wrap(argv, self.cpus[0])
        if self.perf_events:
            out = self.dir / ("perf-client-%d.csv" % self.n)
            cmd = ["perf", "stat", "-x,", "-e", ",".join(self.perf_events), "-o", out, "--"] + cmd
            self.perf_files.setdefault("clients", []).append(out)
        p = PROCS.popen(cmd, self.env(extra_usmc), self.dir / ("%02d-client" % self.n),
                        cwd=str(self.dir))
        pre = preload_of(p, os.path.basename(str(argv[0]))) if not self.perf_events else None
        rc, cpu = PROCS.wait_rusage(p, timeout)
        text = proc_output(p)
        if rc != 0:
            raise RuntimeError("client %s exited with %d:\n%s" % (argv[0], rc, text[-3000:]))
        self.client_preload = pre
        return text, cpu

    def server_cpu(self, server):
        return cpu_delta(server.cpu0, group_cpu(server.pid))

    def stop_server(self, server, sig=signal.SIGTERM):
        perf = getattr(server, "perf", None)
        if perf is not None:
            PROCS.stop(perf, signal.SIGINT, 5)
        PROCS.stop(server, sig, 3)
        return proc_output(server)

    def check_preload(self, server):
        want = self.transport == "usmc"
        got = [server.preload, getattr(self, "client_preload", None)]
        self.preload_seen = {"server": got[0], "client": got[1]}
        for who, g in zip(("server", "client"), got):
            if g is not None and g != want:
                raise RuntimeError("%s: libusmc.so %s mapped in the %s run" % (
                    who, "is" if g else "is not", self.transport))

    def usmc_stat(self):
        if self.rundir is None:
            return None
        r = subprocess.run([str(self.cfg.build / "usmc"), "stat", "--json"],
                           env=self.env(), capture_output=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("usmc stat failed: " + r.stderr.decode(errors="replace"))
        st = json.loads(r.stdout)
        st.pop("connections", None)
        return st

    def cleanup(self, keep):
        if self.rundir is not None:
            shutil.rmtree(self.rundir, ignore_errors=True)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def verify_usmc(st):
    """Reasons why a usmc run was not entirely on shared memory ([] = fine)."""
    bad = []
    if st is None:
        return ["no usmc stat"]
    if st.get("smc_conns", 0) <= 0:
        bad.append("smc_conns == 0")
    if st.get("tcp_conns", 0) != 0:
        bad.append("tcp_conns = %s" % st.get("tcp_conns"))
    if st.get("tcp_fallback"):
        bad.append("tcp_fallback %s" % json.dumps(st["tcp_fallback"]))
    if st.get("handshake_errors", 0):
        bad.append("handshake_errors = %s" % st["handshake_errors"])
    return bad


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------

def parse_sockperf_pp(text):
    m = re.search(r"\[Total Run\] RunTime=([\d.]+) sec; Warm up time=(\d+) msec; "
                  r"SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    v = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=(\d+); "
                  r"ReceivedMessages=(\d+)", text)
    d = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                  r"# out-of-order messages = (\d+)", text)
    lat = re.search(r"Summary: Latency is ([\d.]+) usec", text)
    if not (m and v and d and lat):
        raise RuntimeError("cannot parse sockperf pp output:\n" + text[-3000:])
    if d.groups() != ("0", "0", "0"):
        raise RuntimeError("sockperf: dropped/duplicated/out-of-order messages: %s" % (d.groups(),))
    pct = {}
    for p, val in re.findall(r"percentile\s+([\d.]+)\s*=\s*([\d.]+)", text):
        pct[float(p)] = float(val)
    if 50.0 not in pct or 99.0 not in pct:
        raise RuntimeError("sockperf pp: no percentiles:\n" + text[-3000:])
    return {
        "lat_mean_us": float(lat.group(1)),
        "lat_p50_us": pct[50.0],
        "lat_p99_us": pct[99.0],
        "lat_p999_us": pct.get(99.9),
        "rtt_per_s": int(v.group(3)) / float(v.group(1)),
    }, int(m.group(4))


def run_pp(ctx, wl, cfg):
    extra = {"USMC_BUSY_POLL": str(cfg.busy_poll)} if wl.get("busy") else None
    srv = ctx.start_server(lambda p: ["sockperf", "sr", "--tcp", "-i", HOST, "-p", p],
                           extra_usmc=extra)
    try:
        text, ccpu = ctx.run_client(
            ["sockperf", "pp", "--tcp", "-i", HOST, "-p", srv.port, "-m", "14",
             "--mps", "10000000", "-t", fmt_dur(cfg.duration)],
            timeout=cfg.duration + 60, extra_usmc=extra)
        scpu = ctx.server_cpu(srv)
        ctx.check_preload(srv)
        st = ctx.usmc_stat()
    finally:
        ctx.stop_server(srv)
    metrics, ops = parse_sockperf_pp(text)
    metrics["cpu_us_per_rtt"] = (ccpu + scpu) / ops * 1e6
    return metrics, {"ops": ops, "client_cpu_s": ccpu, "server_cpu_s": scpu}, st


ACT = re.compile(r"^\s*(\d+) \[usec\]\s+(\d+) \[msg/s\]\s+(\d+) \[msg\]", re.M)


def run_tp(ctx, wl, cfg):
    size = wl["size"]
    every = wl["every"]
    srv = ctx.start_server(lambda p: ["sockperf", "sr", "--tcp", "-i", HOST, "-p", p,
                                      "-m", max(size, 65507), "-A", every])
    try:
        text, ccpu = ctx.run_client(
            ["sockperf", "tp", "--tcp", "-i", HOST, "-p", srv.port, "-m", size,
             "-t", fmt_dur(cfg.duration)], timeout=cfg.duration + 60)
        scpu = ctx.server_cpu(srv)
        ctx.check_preload(srv)
        st = ctx.usmc_stat()
        # sockperf sr prints its totals (and flushes its -A lines) on SIGINT.
        stext = ctx.stop_server(srv, signal.SIGINT)
    finally:
        ctx.stop_server(srv)
    m = re.search(r"Total of (\d+) messages sent in ([\d.]+) sec", text)
    r = re.search(r"Total (\d+) messages received", stext)
    if not (m and r):
        raise RuntimeError("cannot parse sockperf tp / sr output:\n%s\n%s" % (
            text[-2000:], stext[-2000:]))
    sent, secs, recv = int(m.group(1)), float(m.group(2)), int(r.group(1))
    # -A EVERY: one line per EVERY messages received, with the interval's
    # length.  The first interval also covers the client's start and warm-up.
    iv = [(int(u), int(n)) for u, _, n in ACT.findall(stext)][1:]
    if len(iv) < 2:
        raise RuntimeError("sockperf sr: too few -A intervals (%d) to time the receiver:\n%s"
                           % (len(iv), stext[-2000:]))
    usec = sum(u for u, _ in iv)
    msgs = every * len(iv)
    metrics = {}
    if wl["unit"] == "bytes":
        metrics["recv_gb_per_s"] = msgs * size / (usec * 1e-6) / 1e9
        metrics["send_gb_per_s"] = sent * size / secs / 1e9
        metrics["cpu_s_per_gb"] = ccpu / (sent * size / 1e9) + scpu / (recv * size / 1e9)
    else:
        metrics["recv_msg_per_s"] = msgs / (usec * 1e-6)
        metrics["send_msg_per_s"] = sent / secs
        metrics["cpu_us_per_msg"] = (ccpu / sent + scpu / recv) * 1e6
    return metrics, {"ops": recv, "sent": sent, "client_cpu_s": ccpu, "server_cpu_s": scpu,
                     "intervals": len(iv)}, st


def redis_rps(text, test):
    for line in re.split(r"[\r\n]", text):
        m = re.match(r'^"%s","([\d.]+)"' % test, line.strip())
        if m:
            return float(m.group(1))
    raise RuntimeError("no %s result in redis-benchmark output:\n%s" % (test, text[-2000:]))


def redis_requests(cfg, wl):
    """-n for a redis run: the configured count (x10 pipelined); large
    values move as many bytes as 4 KB ones would (at least 20,000)."""
    n = cfg.redis_requests * (10 if wl.get("pipeline") else 1)
    size = wl.get("size", 1024)
    if size > 4096:
        n = max(min(n, 20000), n * 4096 // size)
    return n


# redis-benchmark --threads stops its threads from a 250 ms timer, so its
# rates are quantised to 250 ms of run time: a run of a test shorter than
# this is repeated (fresh server) with more requests.
REDIS_THREADED_MIN_S = 2.5


def run_redis(ctx, wl, cfg):
    """One fresh redis-server, one `redis-benchmark -t set,get` run against
    it, as a user types it: the SET half meets a cold server (and, under
    usmc, fresh link groups and rings), the GET half the same connections
    warm.  CPU is the whole run's, per request of either kind."""
    n = redis_requests(cfg, wl)
    for attempt in range(3):
        metrics, info, st = redis_once(ctx, wl, n)
        secs = min(n / metrics["set_per_s"], n / metrics["get_per_s"])
        if not wl.get("threads") or secs >= REDIS_THREADED_MIN_S or attempt == 2:
            break
        n = int(n * (REDIS_THREADED_MIN_S * 1.3) / max(secs, 0.05))
        if ctx.rundir is not None:      # a fresh runtime directory, as for any run
            shutil.rmtree(ctx.rundir, ignore_errors=True)
            ctx.rundir.mkdir()
    return metrics, info, st


def redis_once(ctx, wl, n):
    srv = ctx.start_server(lambda p: ["redis-server", "--save", "", "--appendonly", "no",
                                      "--port", p, "--bind", HOST, "--protected-mode", "no"])
    try:
        c0 = group_cpu(srv.pid)
        argv = ["redis-benchmark", "-h", HOST, "-p", srv.port, "-t", "set,get",
                "-d", wl.get("size", 1024), "-c", wl["conns"], "-n", n, "--csv"]
        if wl.get("pipeline"):
            argv += ["-P", wl["pipeline"]]
        if wl.get("threads"):
            argv += ["--threads", wl["threads"]]
        text, ccpu = ctx.run_client(argv, timeout=max(60, 0.002 * n))
        if "error" in text.lower():
            raise RuntimeError("redis-benchmark reported an error:\n" + text[-2000:])
        scpu = cpu_delta(c0, group_cpu(srv.pid))
        metrics = {"set_per_s": redis_rps(text, "SET"), "get_per_s": redis_rps(text, "GET"),
                   "cpu_us_per_req": (ccpu + scpu) / (2 * n) * 1e6}
        info = {"ops": 2 * n, "client_cpu_s": ccpu, "server_cpu_s": scpu}
        ctx.check_preload(srv)
        st = ctx.usmc_stat()
    finally:
        ctx.stop_server(srv)
    return metrics, info, st


NGINX_CONF = """\
daemon off;
master_process on;
user root;
worker_processes {workers};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ use epoll; worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 60;
    keepalive_requests 1000000000;
    server {{
        listen {host}:{port} backlog=4096;
        root {root};
    }}
}}
"""


def parse_wrk(text):
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m),", text)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not (m and rps):
        raise RuntimeError("cannot parse wrk output:\n" + text[-2000:])
    if "Non-2xx" in text:
        raise RuntimeError("wrk saw non-2xx responses:\n" + text[-2000:])
    if "Socket errors" in text:
        raise RuntimeError("wrk saw socket errors:\n" + text[-2000:])
    return int(m.group(1)), float(rps.group(1))


def run_nginx(ctx, wl, cfg):
    www = ctx.dir / "www"
    www.mkdir()
    (www / "index.html").write_bytes((b"usmc " * (cfg.nginx_file // 5 + 1))[:cfg.nginx_file])

    def argv(port):
        conf = ctx.dir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=ctx.dir, workers=cfg.nginx_workers, port=port,
                                          host=HOST, root=www))
        return ["nginx", "-c", conf, "-p", ctx.dir, "-e", ctx.dir / "error.log"]

    srv = ctx.start_server(argv, min_procs=1 + cfg.nginx_workers, settle=0.3)
    try:
        args = ["wrk", "-t", cfg.wrk_threads, "-c", cfg.wrk_conns, "-d", fmt_dur(cfg.duration)]
        if wl.get("close"):
            args += ["-H", "Connection: close"]
        text, ccpu = ctx.run_client(args + ["http://%s:%d/index.html" % (HOST, srv.port)],
                                    timeout=cfg.duration + 60)
        scpu = ctx.server_cpu(srv)
        ctx.check_preload(srv)
        st = ctx.usmc_stat()
    finally:
        ctx.stop_server(srv)
    n, rps = parse_wrk(text)
    return ({"req_per_s": rps, "cpu_us_per_req": (ccpu + scpu) / n * 1e6},
            {"ops": n, "client_cpu_s": ccpu, "server_cpu_s": scpu}, st)


def fmt_dur(s):
    return ("%d" % s) if float(s).is_integer() else ("%g" % s)


# name -> definition.  "primary": the metrics drawn in the plot.
WORKLOADS = {
    "pp14": dict(run=run_pp, programs=("sockperf",),
                 title="sockperf ping-pong, 14 B",
                 desc="sockperf pp -m 14 (one connection, one message in flight, "
                      "latency = RTT/2 as sockperf reports it)",
                 metrics=["lat_mean_us", "lat_p50_us", "lat_p99_us", "cpu_us_per_rtt"],
                 primary=["lat_p50_us", "lat_p99_us"]),
    "pp14-busy": dict(run=run_pp, programs=("sockperf",), busy=True,
                      title="sockperf ping-pong, 14 B, usmc busy-poll",
                      desc="as pp14; the usmc side with USMC_BUSY_POLL (TCP side unchanged)",
                      metrics=["lat_mean_us", "lat_p50_us", "lat_p99_us", "cpu_us_per_rtt"],
                      primary=["lat_p50_us"]),
    "tp64k": dict(run=run_tp, programs=("sockperf",), size=65536, every=1000, unit="bytes",
                  title="sockperf throughput, 64 KB",
                  desc="sockperf tp -m 65536; rate taken on the server (sockperf sr -A)",
                  metrics=["recv_gb_per_s", "send_gb_per_s", "cpu_s_per_gb"],
                  primary=["recv_gb_per_s"]),
    "tp100": dict(run=run_tp, programs=("sockperf",), size=100, every=100000, unit="msgs",
                  title="sockperf throughput, 100 B messages",
                  desc="sockperf tp -m 100 (Nagle on, sockperf's tp default); "
                       "rate taken on the server (sockperf sr -A)",
                  metrics=["recv_msg_per_s", "send_msg_per_s", "cpu_us_per_msg"],
                  primary=["recv_msg_per_s"]),
    "redis-c50": dict(run=run_redis, programs=("redis-server", "redis-benchmark"), conns=50,
                      title="redis SET/GET, 1 KB values, 50 clients",
                      desc="redis-benchmark -t set,get -d 1024 -c 50",
                      metrics=["set_per_s", "get_per_s", "cpu_us_per_req"],
                      primary=["set_per_s", "get_per_s"]),
    "redis-c200": dict(run=run_redis, programs=("redis-server", "redis-benchmark"), conns=200,
                       title="redis SET/GET, 1 KB values, 200 clients",
                       desc="redis-benchmark -t set,get -d 1024 -c 200",
                       metrics=["set_per_s", "get_per_s", "cpu_us_per_req"],
                       primary=["set_per_s", "get_per_s"]),
    "redis-c50-P16": dict(run=run_redis, programs=("redis-server", "redis-benchmark"), conns=50,
                          pipeline=16,
                          title="redis SET/GET, 1 KB values, 50 clients, pipeline 16",
                          desc="redis-benchmark -t set,get -d 1024 -c 50 -P 16",
                          metrics=["set_per_s", "get_per_s", "cpu_us_per_req"],
                          primary=["set_per_s", "get_per_s"]),
    "nginx-ka": dict(run=run_nginx, programs=("nginx", "wrk"),
                     title="nginx + wrk, keep-alive",
                     desc="nginx (master + epoll workers, static file, sendfile on, "
                          "no access log) and wrk with keep-alive connections",
                     metrics=["req_per_s", "cpu_us_per_req"], primary=["req_per_s"]),
    "nginx-close": dict(run=run_nginx, programs=("nginx", "wrk"), close=True,
                        title="nginx + wrk, Connection: close",
                        desc="as nginx-ka, wrk -H 'Connection: close': one connection "
                             "per request",
                        metrics=["req_per_s", "cpu_us_per_req"], primary=["req_per_s"]),
}
DEFAULT_WORKLOADS = list(WORKLOADS)

# Seed 004's sweep (bench/redis_sweep.py): redis-benchmark --threads T,
# value size D, C clients; not among the defaults.
SWEEP_THREADS = (1, 2, 4, 8)
SWEEP_SIZES = (64, 1024, 16384, 65536)
SWEEP_CONNS = (50, 200)
SWEEP_WORKLOADS = []
for _c in SWEEP_CONNS:
    for _t in SWEEP_THREADS:
        for _d in SWEEP_SIZES:
            _name = "redis-t%d-d%d-c%d" % (_t, _d, _c)
            WORKLOADS[_name] = dict(
                run=run_redis, programs=("redis-server", "redis-benchmark"), conns=_c,
                threads=_t, size=_d, sweep=True,
                title="redis SET/GET, %d B values, %d clients, %d client threads" % (_d, _c, _t),
                desc="redis-benchmark -t set,get -d %d -c %d --threads %d" % (_d, _c, _t),
                metrics=["set_per_s", "get_per_s", "cpu_us_per_req"],
                primary=["set_per_s", "get_per_s"])
            SWEEP_WORKLOADS.append(_name)
QUICK_WORKLOADS = ["pp14", "tp64k", "redis-c50", "nginx-ka"]

# Counted in profile runs (perf stat, software events and syscall tracepoints).
PROFILE_SYSCALLS = ["pread64", "newfstatat", "fstat", "lseek", "mknodat", "fallocate",
                    "unlinkat", "getsockname", "getpeername", "splice", "tgkill", "madvise",
                    "read", "write", "recvfrom", "sendto", "readv", "writev", "recvmsg",
                    "sendmsg", "sendfile64", "epoll_wait", "epoll_pwait", "epoll_ctl", "poll",
                    "ppoll", "select", "pselect6", "futex", "fcntl", "accept4", "accept",
                    "connect", "socket", "close", "shutdown", "setsockopt", "getsockopt",
                    "sched_yield", "clock_nanosleep", "nanosleep", "openat", "mmap", "munmap",
                    "ioctl"]
PROFILE_BASE = ["task-clock", "context-switches", "cpu-migrations", "page-faults",
                "raw_syscalls:sys_enter"]


def perf_events_available():
    if not shutil.which("perf"):
        return None
    events = list(PROFILE_BASE)
    try:
        fmts = Path("/sys/kernel/tracing/events/syscalls")
        if not fmts.is_dir():
            fmts = Path("/sys/kernel/debug/tracing/events/syscalls")
        for s in PROFILE_SYSCALLS:
            if (fmts / ("sys_enter_" + s)).is_dir():
                events.append("syscalls:sys_enter_" + s)
    except OSError:
        pass
    r = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(events), "--", "true"],
                       capture_output=True, env=plain_env(), timeout=30)
    if r.returncode != 0:
        events = ["task-clock", "context-switches", "cpu-migrations"]
        r = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(events), "--", "true"],
                           capture_output=True, env=plain_env(), timeout=30)
        if r.returncode != 0:
            return None
    return events


def parse_perf_csv(path):
    out = {}
    for line in read_text(path).splitlines():
        f = line.split(",")
        if len(f) < 3 or line.startswith("#"):
            continue
        try:
            val = float(f[0])
        except ValueError:
            continue
        name = f[2]
        if name == "task-clock":
            # perf prints it in msec; keep CPU time in microseconds
            name, val = "cpu_us", val * (1000.0 if f[1] == "msec" else 1e-3)
        elif name.startswith("syscalls:sys_enter_"):
            name = "sys_" + name[len("syscalls:sys_enter_"):]
        elif name == "raw_syscalls:sys_enter":
            name = "syscalls"
        out[name] = out.get(name, 0.0) + val
    return out
