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
import math
import os
import platform
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


# --------------------------------------------------------------------------
# Processes: one process group each, all of them killed whatever happens
# --------------------------------------------------------------------------

class Procs:
    """Every process this script starts (own session = own process group).

    A process group is signalled only while its leader is not yet reaped
    (alive, or a zombie we have not collected): the leader's pid then stays
    allocated and cannot be reused, so a signal can never reach someone
    else's processes (pid_max is often 32768).  Exits are detected with
    waitid(WNOWAIT), the group is SIGKILLed while the leader is a zombie,
    and only then is the leader reaped."""

    def __init__(self):
        self.live = {}      # pid -> Popen, not reaped yet

    def popen(self, argv, env, log, cwd=None):
        argv = [str(a) for a in argv]
        with open(str(log) + ".out", "wb") as fo, open(str(log) + ".err", "wb") as fe:
            p = subprocess.Popen(argv, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 start_new_session=True, cwd=cwd)
        p.log = Path(log)
        p.argv = argv
        p.reaped = False
        self.live[p.pid] = p
        return p

    @staticmethod
    def exited(p):
        """True once p has exited (without reaping it)."""
        if p.reaped:
            return True
        try:
            return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def alive(self, p):
        return not self.exited(p)

    def _killpg(self, p, sig):
        if p.reaped:
            return
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _wait_exit(self, p, timeout):
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not self.exited(p):
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        return True

    def _reap(self, p, rusage=False):
        cpu = None
        if not p.reaped:
            try:
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                cpu = ru.ru_utime + ru.ru_stime
            except ChildProcessError:
                pass
            p.reaped = True
        self.live.pop(p.pid, None)
        return cpu

    def stop(self, p, sig=signal.SIGTERM, grace=3.0):
        """Signal the group, give the leader grace seconds, SIGKILL the
        group (children such as nginx workers may outlive the leader), reap."""
        if p.reaped:
            return
        if not self.exited(p):
            self._killpg(p, sig)
            self._wait_exit(p, grace)
        self._killpg(p, signal.SIGKILL)
        self._wait_exit(p, 10)
        self._reap(p)

    def wait_rusage(self, p, timeout):
        """Wait for p with a deadline (SIGKILL of its group after it);
        returns (exit code, user+system CPU seconds of p and its children)."""
        if not self._wait_exit(p, timeout):
            self.stop(p, signal.SIGKILL, 0)
            raise RuntimeError("%s did not finish within %.0f s" % (p.argv[0], timeout))
        self._killpg(p, signal.SIGKILL)      # leftovers of the group
        cpu = self._reap(p)
        return p.returncode, cpu

    def kill_all(self):
        for p in list(self.live.values()):
            self._killpg(p, signal.SIGKILL)
        for p in list(self.live.values()):
            self._wait_exit(p, 10)
            self._reap(p)


PROCS = Procs()


def _on_signal(sig, frame):
    raise KeyboardInterrupt("signal %d" % sig)


def read_text(path, limit=None):
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    if limit:
        data = data[-limit:]
    return ANSI.sub("", data.decode("utf-8", "replace"))


def proc_output(p):
    return read_text(str(p.log) + ".out") + read_text(str(p.log) + ".err")


def group_pids(pgid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = Path("/proc/%s/stat" % d).read_text()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        if int(f[2]) == pgid:
            out.append(int(d))
    return out


TICK = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid):
    """{pid: utime+stime seconds} of every live process of the group."""
    out = {}
    for pid in group_pids(pgid):
        try:
            st = Path("/proc/%d/stat" % pid).read_text()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        out[pid] = (int(f[11]) + int(f[12])) / TICK
    return out


def cpu_delta(before, after):
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def maps_has_usmc(pid):
    try:
        return "libusmc" in Path("/proc/%d/maps" % pid).read_text()
    except OSError:
        return None


def preload_of(p, program, timeout=3.0):
    """Whether libusmc.so is mapped in p once it runs `program` (after the
    taskset / usmc run execs) and the dynamic loader has mapped libc; None
    if p exits before that can be seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and PROCS.alive(p):
        try:
            exe = os.path.basename(os.readlink("/proc/%d/exe" % p.pid))
            maps = Path("/proc/%d/maps" % p.pid).read_text()
        except OSError:
            return None
        if exe == program and "libc.so" in maps:
            return "libusmc" in maps
        time.sleep(0.002)
    return None


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def listening(pgid, port):
    """True if a process of the group owns a socket listening on port."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path("/proc/net/%s" % name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    if not inodes:
        return False
    for pid in group_pids(pgid):
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return True
        except OSError:
            pass
    return False


# --------------------------------------------------------------------------
# Environments and commands
# --------------------------------------------------------------------------

def plain_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("USMC_") and k != "LD_PRELOAD"}
    env["LC_ALL"] = "C"
    if extra:
        env.update(extra)
    return env


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


def shq(a):
    a = str(a)
    if re.match(r"^[A-Za-z0-9_./:=,@%+-]+$", a):
        return a
    return "'" + a.replace("'", "'\\''") + "'"


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


def run_redis(ctx, wl, cfg):
    n = cfg.redis_requests * (10 if wl.get("pipeline") else 1)
    srv = ctx.start_server(lambda p: ["redis-server", "--save", "", "--appendonly", "no",
                                      "--port", p, "--bind", HOST, "--protected-mode", "no"])
    metrics, info = {}, {}
    try:
        for test in ("set", "get"):
            c0 = group_cpu(srv.pid)
            argv = ["redis-benchmark", "-h", HOST, "-p", srv.port, "-t", test, "-d", "1024",
                    "-c", wl["conns"], "-n", n, "--csv"]
            if wl.get("pipeline"):
                argv += ["-P", wl["pipeline"]]
            text, ccpu = ctx.run_client(argv, timeout=max(60, 0.001 * n))
            if "error" in text.lower():
                raise RuntimeError("redis-benchmark reported an error:\n" + text[-2000:])
            scpu = cpu_delta(c0, group_cpu(srv.pid))
            metrics["%s_per_s" % test] = redis_rps(text, test.upper())
            metrics["cpu_us_per_%s" % test] = (ccpu + scpu) / n * 1e6
            info[test] = {"ops": n, "client_cpu_s": ccpu, "server_cpu_s": scpu}
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
                      desc="redis-benchmark -t set then -t get, -d 1024 -c 50",
                      metrics=["set_per_s", "cpu_us_per_set", "get_per_s", "cpu_us_per_get"],
                      primary=["set_per_s", "get_per_s"]),
    "redis-c200": dict(run=run_redis, programs=("redis-server", "redis-benchmark"), conns=200,
                       title="redis SET/GET, 1 KB values, 200 clients",
                       desc="redis-benchmark -t set then -t get, -d 1024 -c 200",
                       metrics=["set_per_s", "cpu_us_per_set", "get_per_s", "cpu_us_per_get"],
                       primary=["set_per_s", "get_per_s"]),
    "redis-c50-P16": dict(run=run_redis, programs=("redis-server", "redis-benchmark"), conns=50,
                          pipeline=16,
                          title="redis SET/GET, 1 KB values, 50 clients, pipeline 16",
                          desc="redis-benchmark -t set then -t get, -d 1024 -c 50 -P 16",
                          metrics=["set_per_s", "cpu_us_per_set", "get_per_s",
                                   "cpu_us_per_get"],
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
                        pname, "%d,%d" % cpus, rep + 1, cfg.reps, name, t,
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


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


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
        lines.append("== placement %s: client CPU %d, server CPU %d ==" % (
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
            ax.set_title("%s (client CPU %d, server CPU %d): %s" % (
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


# Target rows: (what, target text, op, bound, sources)
# A source: ("bench", bench run, workload, metric) or ("prog", workload, metric).
TARGETS = [
    ("14 B ping-pong latency, default mode", "≤ 0.10× TCP", "le", 0.10,
     [("bench", None, "pp14", "lat_p50_us"), ("prog", "pp14", "lat_p50_us"),
      ("prog", "pp14", "lat_mean_us")]),
    ("14 B ping-pong latency, busy-poll (USMC_BUSY_POLL)", "≤ 0.03× TCP", "le", 0.03,
     [("bench", "busy", "pp14", "lat_p50_us"), ("prog", "pp14-busy", "lat_p50_us"),
      ("prog", "pp14-busy", "lat_mean_us")]),
    ("1 KB request/response, 1 connection", "≥ 10× TCP", "ge", 10,
     [("bench", None, "rr1", "txn_per_s")]),
    ("100 B message rate", "≥ 10× TCP", "ge", 10,
     [("bench", None, "msg100", "msg_per_s"), ("prog", "tp100", "recv_msg_per_s")]),
    ("64 KB streaming", "≥ 3× TCP", "ge", 3,
     [("bench", None, "stream64k", "gb_per_s"), ("prog", "tp64k", "recv_gb_per_s")]),
    ("redis SET/GET -c 200 -d 1024", "≥ 2× TCP", "ge", 2,
     [("prog", "redis-c200", "set_per_s"), ("prog", "redis-c200", "get_per_s")]),
    ("nginx + wrk keep-alive", "≥ 2× TCP", "ge", 2,
     [("prog", "nginx-ka", "req_per_s")]),
    ("connection setup rate", "≥ 0.9× TCP", "ge", 0.9,
     [("bench", None, "conn", "conn_per_s"), ("prog", "nginx-close", "req_per_s")]),
]

BENCH_UNITS = {"txn_per_s": "1/s", "msg_per_s": "1/s", "conn_per_s": "1/s"}


def target_rows(prog, bench, placement):
    rows = []
    pl = (prog or {}).get("placements", {}).get(placement)
    for what, tgt, op, bound, sources in TARGETS:
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
            extra.append("usmc %s = %.0f%% of the copy-pipe ceiling" % (k, 100 * v))
    return out, extra


def pget(prof, placement, wl, t, side, key):
    try:
        return prof[placement][wl][t][side].get(key)
    except (KeyError, TypeError, AttributeError):
        return None


def fnum(v, nd=2):
    if v is None:
        return "?"
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return ("%." + str(nd) + "f") % v


def top_syscalls(prof, placement, wl, t, side, n=4):
    try:
        d = prof[placement][wl][t][side]
    except (KeyError, TypeError):
        return "?"
    items = sorted(((k[4:], v) for k, v in d.items() if k.startswith("sys_") and v >= 0.05),
                   key=lambda kv: -kv[1])[:n]
    if not items:
        return "none that matter"
    return ", ".join("%s %s" % (fnum(v), k) for k, v in items)


def side_summary(prof, placement, wl, t):
    parts = []
    for side in ("client", "server"):
        sc = pget(prof, placement, wl, t, side, "syscalls")
        cs = pget(prof, placement, wl, t, side, "context-switches")
        if sc is None and cs is None:
            continue
        parts.append("%s %s syscalls (%s), %s context switches" % (
            side, fnum(sc), top_syscalls(prof, placement, wl, t, side), fnum(cs)))
    return "; ".join(parts) if parts else "(no profile)"


def usmc_counters(prof, placement, wl):
    try:
        u = prof[placement][wl]["usmc"]["usmc"]
    except (KeyError, TypeError):
        return ""
    return ("usmc counters per operation: %s tx calls, %s rx calls, %s doorbells rung, "
            "%s sleeps, %s spin hits" % (fnum(u.get("tx_calls")), fnum(u.get("rx_calls")),
                                         fnum(u.get("doorbells")), fnum(u.get("sleeps")),
                                         fnum(u.get("spin_hits"))))


def cpu_split(prog, placement, wl, t):
    """Median client and server CPU per operation (us) from the measured runs."""
    try:
        runs = prog["placements"][placement]["workloads"][wl]["runs"]
    except (KeyError, TypeError):
        return None, None
    cs, ss = [], []
    for r in runs:
        if r["transport"] != t or not r["ok"]:
            continue
        info = r["info"]
        items = [info] if "ops" in info else [v for v in info.values() if isinstance(v, dict)]
        ops = sum(i["ops"] for i in items)
        cs.append(sum(i["client_cpu_s"] for i in items) / ops * 1e6)
        ss.append(sum(i["server_cpu_s"] for i in items) / ops * 1e6)
    if not cs:
        return None, None
    return statistics.median(cs), statistics.median(ss)


def where_time_goes(prog, placement):
    """One paragraph per workload: measured costs per operation, both sides,
    what they mean, and the library overheads the counts show."""
    prof = (prog or {}).get("profile") or {}
    pl = (prog or {}).get("placements", {}).get(placement)
    if not pl:
        return []
    out = []
    for name, w in pl["workloads"].items():
        unit = "round trip" if name.startswith("pp") else \
            "message" if name.startswith("tp") else "request"
        if name == "tp64k":
            unit = "64 KB message"
        lines = ["**%s** (%s)." % (name, w["title"])]
        for t in TRANSPORTS:
            c, s = cpu_split(prog, placement, name, t)
            lines.append("%s: CPU per %s client %s µs + server %s µs; per %s: %s." % (
                "TCP" if t == "tcp" else "usmc", unit, fnum(c), fnum(s), unit,
                side_summary(prof, placement, name, t)))
        uc = usmc_counters(prof, placement, name)
        if uc:
            lines.append(uc + ".")
        note = WHY.get(name)
        if note:
            lines.append(note)
        findings = overheads(prog, prof, placement, name, unit)
        if findings:
            lines.append("*Library overheads in these counts:* " + " ".join(findings))
        out.append(" ".join(lines))
    return out


def overheads(prog, prof, placement, name, unit):
    """Sentences about what the usmc side does beyond the application's own
    system calls, each only when the profile shows it (so a regenerated
    document never describes an overhead that a newer library removed)."""
    out = []

    def g(t, side, key):
        return pget(prof, placement, name, t, side, key) or 0.0

    for side in ("client", "server"):
        extra = {k: g("usmc", side, "sys_" + k) - g("tcp", side, "sys_" + k)
                 for k in ("getsockopt", "fcntl", "epoll_ctl", "futex", "sched_yield",
                           "mknodat", "fallocate", "recvfrom", "poll")}
        if extra["getsockopt"] >= 0.2:
            out.append("The %s makes %s `getsockopt` per %s that the program does not: "
                       "the library's own (e.g. `usmc_sock_timeout` reads SO_RCVTIMEO/SO_SNDTIMEO "
                       "whenever a blocking call has to wait, before it spins)." % (
                           side, fnum(extra["getsockopt"]), unit))
        if extra["fcntl"] >= 0.5:
            out.append("%s %s extra `fcntl` per %s (the library's own, e.g. the `F_GETFD` "
                       "check on every `EPOLL_CTL_MOD` of a shared-memory socket)." % (
                           side.capitalize(), fnum(extra["fcntl"]), unit))
        if extra["epoll_ctl"] >= 0.5:
            out.append("%s %s more kernel `epoll_ctl` per %s than with TCP (%s vs %s): an "
                       "`EPOLL_CTL_ADD`/`DEL` of a shared-memory socket becomes two kernel "
                       "calls, one for the TCP socket and one for the doorbell FIFO." % (
                           side.capitalize(), fnum(extra["epoll_ctl"]), unit,
                           fnum(g("usmc", side, "sys_epoll_ctl")),
                           fnum(g("tcp", side, "sys_epoll_ctl"))))
        if extra["futex"] >= 0.2:
            out.append("%s %s `futex` per %s: after each sleep on the doorbell the library "
                       "wakes possible follower threads (`FUTEX_WAKE`), even in a "
                       "single-threaded program." % (side.capitalize(), fnum(extra["futex"]),
                                                     unit))
        if extra["sched_yield"] >= 0.1:
            out.append("%s %s `sched_yield` per %s: a server that accepted before the "
                       "client's proposal waits for clients in flight (`wait_connecting`: "
                       "20 µs of spinning, then yields)." % (
                           side.capitalize(), fnum(extra["sched_yield"]), unit))
        if extra["mknodat"] >= 0.5 or extra["fallocate"] >= 0.5:
            out.append("%s %s `mknodat` and %s `fallocate` per %s: doorbell FIFOs are "
                       "created (EEXIST when the slot is reused) and ring memory backed "
                       "again for every connection." % (
                           side.capitalize(), fnum(g("usmc", side, "sys_mknodat")),
                           fnum(g("usmc", side, "sys_fallocate")), unit))
    # Doorbells rung for waiters that did not sleep.
    try:
        u = prof[placement][name]["usmc"]["usmc"]
    except (KeyError, TypeError):
        u = {}
    bells = u.get("doorbells") or 0
    cs = g("usmc", "client", "context-switches") + g("usmc", "server", "context-switches")
    if bells >= 0.3 and cs < 0.25 * bells:
        out.append("Doorbells are rung %s times per %s but both sides together switch "
                   "context only %s times: most rings (a `write(2)` each) find a peer that "
                   "armed its doorbell and then did not sleep." % (fnum(bells), unit,
                                                                 fnum(cs)))
    sleeps = u.get("sleeps") or 0
    if name.startswith("pp") and sleeps > 2.2:
        out.append("%s sleeps per round trip (two would do: one per message)." % fnum(sleeps))
    # Busy-poll on one CPU.
    if name == "pp14-busy":
        try:
            wl = prog["placements"][placement]["workloads"]
            busy = wl["pp14-busy"]["metrics"]["lat_p50_us"]["usmc"]["median"]
            plain = wl["pp14"]["metrics"]["lat_p50_us"]["usmc"]["median"]
            cpus = prog["placements"][placement]["cpus"]
        except (KeyError, TypeError):
            busy = plain = None
        if busy and plain and busy > 2 * plain and cpus[0] == cpus[1]:
            out.append("With both ends on one CPU busy-poll makes usmc %.1f× slower than "
                       "its default mode (p50 %s vs %s µs): the busy-poll budget is spent "
                       "even when the peer, which must run on this CPU to answer, is "
                       "waiting for it (the same-CPU rule applies to the adaptive spin "
                       "only)." % (busy / plain, fnum(busy), fnum(plain)))
    return out


# Fixed explanations per workload (what the numbers above mean); the numbers
# themselves always come from the JSON.
WHY = {
    "pp14": "With TCP every message is a `sendto` plus a blocking `recvfrom`: each "
            "round trip crosses the loopback stack twice and wakes a sleeping reader "
            "twice.  With usmc a message is a copy into the peer's ring and a cursor "
            "store; the waiting side first spins (adaptive, up to USMC_SPIN_US) on the "
            "producer cursor, so with the peer on another CPU it sees the message as a "
            "cache-line transfer, without entering the kernel for the data.  With both "
            "on one CPU spinning is pointless (the peer needs the CPU): every message "
            "then rings the doorbell (a FIFO `write`) and the reader sleeps in `poll`, "
            "so usmc pays a context switch per message like TCP, plus the doorbell's "
            "own system calls.",
    "pp14-busy": "Busy-poll (USMC_BUSY_POLL) spins for a fixed time before sleeping "
                 "instead of the adaptive budget.  With the peer on another CPU the "
                 "adaptive spin already catches every message, so both modes should "
                 "give the same latency.",
    "tp64k": "TCP copies each 64 KB write into socket buffers and the receiver copies it "
             "out, with wake-ups whenever the receive queue runs empty or the send buffer "
             "full.  usmc copies straight into the peer's 4 MB ring and the receiver "
             "copies out; a side waits (and, after its spin, sleeps) only when the ring is "
             "empty or full.  sockperf's own figure is the sender's rate; the rate above "
             "is the receiver's (`sockperf sr -A`).",
    "tp100": "sockperf tp with 100 B messages, Nagle on.  With TCP the sender makes one "
             "`sendto` per message and the kernel coalesces them, so the receiver gets "
             "many messages per `recvfrom`.  With usmc a `send` is a copy into the ring "
             "and a cursor store without a system call; the receiver takes whatever the "
             "ring holds per `recv` (rx calls per message below one).",
    "redis-c50": "redis-benchmark and redis-server are single-threaded `epoll` loops; "
                 "the client (one CPU) is the bottleneck in both transports, so its CPU "
                 "per request decides the rate.  redis-benchmark itself adds and removes "
                 "its write interest around every request (`epoll_ctl` several times per "
                 "request).  usmc removes the reads and writes from the kernel but not "
                 "the `epoll_ctl` calls, and rings the server's doorbell when redis "
                 "sleeps in `epoll_wait`.",
    "redis-c200": "As redis-c50 with 200 connections: more ready connections per "
                  "`epoll_wait` on the server, the same per-request work on the client.",
    "redis-c50-P16": "16 requests per write: the event-loop costs are shared by 16 "
                     "requests; what remains per request is mostly redis itself and "
                     "copying 1 KB values.",
    "nginx-ka": "wrk (one thread, `epoll`) against nginx workers (`epoll`, `sendfile`); "
                "nginx opens and closes the file per request (no open_file_cache).  With "
                "usmc the request and response bytes move through the rings and "
                "`sendfile` becomes a read from the file into the ring; "
                "`epoll_wait`/`epoll_ctl` and the doorbells remain in the kernel.",
    "nginx-close": "One connection per request: socket, connect, accept4, close and the "
                   "TCP handshake dominate, and usmc keeps all of them (the TCP connection "
                   "stays open beside the rings); on top of that come the CLC proposal "
                   "and answer in shared memory, the wake byte, link-group slot reuse and "
                   "the epoll translation of a new socket.",
}


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
        add("## Targets: %s (client CPU %d, server CPU %d)" % (title, cpus[0], cpus[1]))
        add("")
        if not final:
            add("*Preliminary (noisy machine); the final run replaces these numbers.*")
            add("")
        add(md_table(["target", "goal", "measured by", "TCP", "usmc", "usmc/TCP", "met"],
                     target_rows(prog, bench, placement)))
        add("")
        if placement == "same":
            add("On one CPU the two ends take turns: usmc does not spin (the library sees "
                "its peer on its own CPU) and every wait is a sleep on the doorbell, so "
                "latency ratios are bounded by the scheduler's context switch, not by the "
                "transport.")
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
        add("## Real programs, %s (client CPU %d, server CPU %d)" % (
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
                add("; ".join(extra) + ".")
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
    ap.add_argument("--cpus", default="0,1", help="client CPU,server CPU (default 0,1)")
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
    try:
        c, s = (int(x) for x in args.cpus.split(","))
    except ValueError:
        ap.error("--cpus wants C,S")
    args.cpus = (c, s)
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
            for f in ("usmc", "libusmc.so"):
                if not (cfg.build / f).exists():
                    log("programs.py: no %s in %s (make first, or --build DIR)" % (f, cfg.build))
                    return 2
            miss = missing_programs(cfg.workloads)
            if miss:
                log("programs.py: missing program(s): %s" % ", ".join(miss))
                return 2
            ncpu = os.cpu_count() or 1
            if max(cfg.cpus) >= ncpu:
                log("programs.py: --cpus %d,%d but only %d CPUs" % (cfg.cpus + (ncpu,)))
                return 2
            workdir = tempfile.mkdtemp(prefix="usmc-programs-")
            build_info = describe_build(cfg.build)
            if not cfg.no_snapshot:
                # One consistent library for the whole run (usmc bench
                # included), whatever `make` others run in the meantime.
                snap = Path(tempfile.mkdtemp(prefix="usmc-programs-build-"))
                for f in ("usmc", "libusmc.so"):
                    shutil.copy2(str(cfg.build / f), str(snap / f))
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
