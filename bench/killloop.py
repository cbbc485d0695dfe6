#!/usr/bin/python3
"""SIGKILL at random moments, many times over (the kill-test issue).

Each iteration starts a usmc client (kpeer.py, tests/integration/relkit.py)
against a usmc server - a fresh one (threaded or forking, one connection)
or the long-lived forking server of the whole loop - and kills one of
them with SIGKILL: the client, the server (a forking one with its
workers), or one forked worker, at a random moment: during the handshake
(the client's connect(), the server's accept() and first reads), in the
middle of the transfer (both directions at once, sizes 0..6 MB, rings of
64 KB or 4 MB), or during close (shutdown/final read/close).  The victim
kills itself from a second thread, so the signal lands wherever its other
threads are inside the library.  Then for every survivor:

  * it gets what TCP gives - EOF or ECONNRESET when it receives, EPIPE or
    ECONNRESET when it sends (ENOTCONN from shutdown) - or finishes its
    stream if the kill came too late to matter;
  * the time from the kill to its last blocked call's return is measured
    (the issue's bound is 1 s; max and p99 are reported, >1 s is a failure);
  * what it received is an exact prefix of what was sent (every chunk is
    compared as it arrives).

Every --check iterations and at the end: the long-lived server's
descriptors and usmc mappings (memfd, lg-, ln-) against its baseline,
the runtime directory after `usmc stat` collected the dead (only the live
listener may remain), and /dev/shm for stray objects; at the end a normal
run must be accelerated (counters).  All processes run in one runtime
directory (the realistic case), under a private copy of the build.

    bench/killloop.py [--iterations 1000] [--seed S] [--json OUT] [--build plain|asan]

Exit status 0 when every iteration and every check passed.
"""
import argparse
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from integration import helpers as h  # noqa: E402
from integration import relkit as rk  # noqa: E402

HANG_S = 10.0          # a survivor silent this long after the kill hangs
BOUND_S = 1.0          # the detection bound
VICTIMS = ("client", "server", "worker")
MOMENTS = ("handshake", "transfer", "close")
MB = 1 << 20


# --------------------------------------------------------------------------
# Build snapshot and process handling
# --------------------------------------------------------------------------

class Build:
    """A private copy of the library and CLI (a concurrent `make` cannot
    change them under a run).  asan: libasan.so is preloaded first."""

    def __init__(self, kind="plain", src=None):
        self.kind = kind
        src = Path(src) if src else (REPO / "build" / ("asan" if kind == "asan" else ""))
        self.dir = Path(tempfile.mkdtemp(prefix="usmc-kl-build-"))
        for f in ("usmc", "libusmc.so"):
            shutil.copy2(src / f, self.dir / f)
        self.usmc = self.dir / "usmc"
        self.lib = self.dir / "libusmc.so"
        self.preload = str(self.lib)
        if kind == "asan":
            rt = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                text=True).stdout.strip()
            self.preload = rt + ":" + str(self.lib)

    def env(self, rundir, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("USMC_") and k != "LD_PRELOAD"}
        env["USMC_RUNDIR"] = str(rundir)
        if self.kind == "asan":
            env["ASAN_OPTIONS"] = "detect_leaks=0:symbolize=0"
            env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:symbolize=0"
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def argv(self, argv):
        """usmc run -- argv (asan: LD_PRELOAD set here, which usmc run keeps)."""
        return [str(self.usmc), "run", "--", *map(str, argv)]

    def run_env(self, env):
        if self.kind == "asan":
            env = dict(env, LD_PRELOAD=self.preload)
        return env

    def cli(self, rundir, *args, timeout=30):
        return subprocess.run([str(self.usmc), *args], env=self.env(rundir),
                              capture_output=True, timeout=timeout)

    def stat(self, rundir):
        r = self.cli(rundir, "stat", "--json")
        return json.loads(r.stdout)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Peer:
    """A process in its own process group; stdout lines collected by a
    thread with their arrival time, stderr into a file."""

    def __init__(self, name, argv, env, logdir):
        self.name = name
        self.err_path = Path(logdir) / ("%s.err" % name)
        with open(self.err_path, "wb") as fe:
            self.popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=fe,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.popen.pid
        self.lines = []
        self.cond = threading.Condition()
        self.eof = False
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        buf = b""
        fd = self.popen.stdout.fileno()
        while True:
            try:
                d = os.read(fd, 65536)
            except OSError:
                d = b""
            if not d:
                break
            buf += d
            *full, buf = buf.split(b"\n")
            with self.cond:
                self.lines.extend(l.decode("utf-8", "replace") for l in full)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, pred, timeout):
        """Wait until pred(lines) is true; returns its value (or None)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred(self.lines)
                if v or self.eof:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def alive(self):
        return self.popen.poll() is None

    def wait(self, timeout):
        """The exit status, once the process ended and its last lines were
        read (a reader thread behind a loaded machine left a finished
        client's FINAL line unread: counted as a failure); None if it is
        still running after timeout seconds."""
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.t.join(timeout=5)  # a forked child still holding stdout: give up
        return rc

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.wait(5)

    def stderr(self):
        return h.tail(self.err_path, 2000)

    def close(self):
        self.t.join(timeout=5)
        try:
            self.popen.stdout.close()
        except OSError:
            pass


def records(lines, tag, it):
    """JSON records of lines 'TAG {...}' of iteration it."""
    out = []
    for l in lines:
        if l.startswith(tag + " "):
            try:
                r = json.loads(l[len(tag) + 1:])
            except ValueError:
                continue
            if r.get("iter") == it:
                out.append(r)
    return out


def words(lines, tag, it):
    """Lines 'TAG it ...' split into words."""
    return [l.split() for l in lines if l.startswith(tag + " ") and l.split()[1] == str(it)]


def pid_alive(pid):
    try:
        st = Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return st.rsplit(")", 1)[1].split()[0] != "Z"


def usmc_maps(pid):
    try:
        lines = Path("/proc/%d/maps" % pid).read_text().splitlines()
    except OSError:
        return []
    return [l.split(None, 5)[-1] for l in lines if "memfd:" in l or "/lg-" in l or "/ln-" in l]


def shm_stray(before):
    """New /dev/shm entries that are usmc files (not other sessions' directories)."""
    return h.stray_shm(before, h.shm_snapshot(), "")


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------

class Loop:
    def __init__(self, build, workdir, seed, log=print, check_every=50, bound_s=BOUND_S,
                 rundir=None):
        self.build = build
        self.work = Path(workdir)
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.rundir = Path(rundir or tempfile.mkdtemp(prefix="usmc-kl-", dir="/dev/shm"))
        self.scripts = rk.write_scripts(self.work / "scripts")
        self.planfile = self.work / "plan.json"
        self.rng = random.Random(seed)
        self.seed = seed
        self.log = log
        self.check_every = check_every
        self.bound_s = bound_s       # None: measure the detection time, judge nothing by it
        self.peers = []              # every process started, killed in close()
        self.persist = {}            # kind (fork/thread) -> (Peer, port): long-lived servers
        self.baseline = {}
        self.shm_before = h.shm_snapshot()
        self.results = []
        self.checks = []
        self.n = 0

    # processes -----------------------------------------------------------
    def spawn(self, name, argv, env):
        self.n += 1
        p = Peer("%05d-%s" % (self.n, name), self.build.argv(argv), self.build.run_env(env),
                 self.logs)
        self.peers.append(p)
        return p

    def start_server(self, fork, once, env):
        for _ in range(5):
            port = h.free_port()
            argv = [h.PY, self.scripts["kpeer"], "server", "127.0.0.1", port, self.planfile]
            argv += (["--fork"] if fork else []) + (["--once"] if once else [])
            p = self.spawn("server", argv, env)
            if p.wait_for(lambda ls: any(l.startswith("listening") for l in ls), 20):
                return p, port
            p.kill()
            p.close()
            if b"Address already in use" not in p.err_path.read_bytes():
                raise RuntimeError("server did not start: %s" % p.stderr())
        raise RuntimeError("cannot start a server")

    def ensure_persist(self, kind):
        """The long-lived server of this kind (fork: a forking server whose
        workers are victims; thread: serves in its own process)."""
        cur = self.persist.get(kind)
        if cur is None or not cur[0].alive():
            if cur is not None:
                self.checks.append({"what": "long-lived %s server died" % kind, "ok": False,
                                    "problems": ["died"]})
            self.persist[kind] = self.start_server(kind == "fork", False,
                                                   self.build.env(self.rundir))
            self.baseline.pop(kind, None)
        return self.persist[kind]

    def persist_peers(self):
        return [p for p, _ in self.persist.values()]

    def write_plan(self, plan):
        tmp = self.planfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(plan))
        os.replace(tmp, self.planfile)

    def reap(self):
        keep = []
        lived = self.persist_peers()
        for p in self.peers:
            if p in lived:
                keep.append(p)
                continue
            p.kill()
            p.close()
        self.peers = keep

    def cleanup(self, keep_logs=False):
        """Kill everything, remove the runtime directory (and the logs)."""
        self.close()
        shutil.rmtree(self.rundir, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(self.work, ignore_errors=True)

    def close(self):
        for p in self.peers:
            p.kill()
            p.close()
        self.peers = []
        self.persist = {}

    def stop_persist(self):
        for p in self.persist_peers():
            p.kill()
            p.close()
            self.peers.remove(p)
        self.persist = {}

    # one iteration ------------------------------------------------------------
    def pick(self, i, victim=None, moment=None):
        r = self.rng
        victim = victim or r.choice(VICTIMS)
        moment = moment or r.choice(MOMENTS)
        if victim == "server":
            server = r.choice(["thread", "fork"])
        elif victim == "worker":
            server = r.choice(["persist-fork", "persist-fork", "persist-fork", "fork"])
        else:
            server = r.choice(["persist-fork", "persist-thread", "thread", "fork"])

        def size():
            return r.choice([r.randint(0, 100), r.randint(0, 256 << 10), r.randint(0, 6 * MB)])
        c2s, s2c = size(), size()
        if moment == "transfer" and c2s + s2c < 2:
            c2s, s2c = 1, r.randint(1, 100)
        delay = {"handshake": r.choice([0, r.randint(0, 300), r.randint(0, 3000)]),
                 "transfer": r.choice([0, r.randint(0, 200), r.randint(0, 2000)]),
                 "close": r.choice([0, r.randint(0, 100), r.randint(0, 1000)])}[moment]
        return {"iter": i, "victim": victim, "moment": moment, "server": server,
                "c2s": c2s, "s2c": s2c, "seed": r.randrange(1 << 40),
                "delay_us": delay, "at": r.randint(1, max(1, c2s + s2c - 1)),
                "ring": r.choice(["64k", "4m"])}

    def iteration(self, i, victim=None, moment=None):
        plan = self.pick(i, victim, moment)
        res = {"iter": i, "victim": plan["victim"], "moment": plan["moment"],
               "server": plan["server"], "c2s": plan["c2s"], "s2c": plan["s2c"],
               "ring": plan["ring"], "delay_us": plan["delay_us"], "failures": []}
        try:
            self._iteration(plan, res)
            kind = res["server"][8:]
            if res["server"].startswith("persist-") and kind not in self.baseline:
                p, _ = self.persist.get(kind, (None, 0))
                if p and p.alive():      # the long-lived server after its first client
                    self.baseline[kind] = (rk.fd_count(p.pid),
                                           sum(1 for m in usmc_maps(p.pid) if "/lg-" in m))
        except Exception as e:     # a harness problem is a failure too
            res["failures"].append("harness: %r" % e)
        finally:
            for p in self.peers:       # sanitizer reports (asan), library warnings
                err = p.err_path.read_bytes() if p.err_path.exists() else b""
                if b"Sanitizer" in err or b"runtime error:" in err:
                    res["failures"].append("%s stderr: %s" % (p.name, p.stderr()[-1500:]))
            self.reap()
        res["ok"] = not res["failures"]
        self.results.append(res)
        return res

    def _iteration(self, plan, res):
        i = plan["iter"]
        fail = res["failures"]
        env = self.build.env(self.rundir, USMC_RING_SIZE=plan["ring"])
        if plan["server"].startswith("persist-"):
            srv, port = self.ensure_persist(plan["server"][8:])
            self.write_plan(plan)
            fresh = False
        else:
            self.write_plan(plan)
            srv, port = self.start_server(plan["server"] == "fork", True, env)
            fresh = True
        nsrv0 = len(srv.lines)
        cl = self.spawn("client", [h.PY, self.scripts["kpeer"], "client", "127.0.0.1", port,
                                   json.dumps(plan)], env)
        t_start = time.monotonic()

        def kill_line(_):
            k = records(cl.lines, "KILL", i) + records(srv.lines[nsrv0:], "KILL", i)
            return k[0] if k else None

        # The client always ends: killed, or after its connection.
        rc = cl.wait(HANG_S + 20)
        if rc is None:
            fail.append("client did not exit (hang) after %.1f s: %s" % (
                time.monotonic() - t_start, cl.lines[-5:]))
            cl.kill()
        cl.close()
        connected = bool(words(cl.lines, "CONNECTED", i))

        # The server side: every connection it accepted for this iteration
        # must end (END, KILL or STALE); a connection may still arrive from
        # a client killed inside connect().
        def server_done(_):
            ls = srv.lines[nsrv0:]
            acc = len(words(ls, "ACCEPTED", i))
            kills = len(records(ls, "KILL", i))
            ends = len(records(ls, "END", i)) + len(words(ls, "STALE", i)) + kills
            # a server-side victim reaches its trigger once it serves: wait
            # for its KILL line too (it may come after its END)
            return acc > 0 and ends >= acc and (kills or plan["victim"] == "client")
        if fresh:
            if connected or srv.wait_for(lambda ls: words(ls[nsrv0:], "ACCEPTED", i), 0.3):
                if srv.wait(HANG_S + 20) is None:
                    fail.append("server did not exit (hang): %s" % srv.lines[-5:])
                else:
                    srv.t.join(timeout=5)      # its last lines (KILL, END) read
            else:
                res["note"] = "no connection reached the server"
        else:
            if connected or srv.wait_for(lambda ls: words(ls[nsrv0:], "ACCEPTED", i), 0.3):
                if not srv.wait_for(server_done, HANG_S + 20):
                    fail.append("server side did not end (hang): %s" % srv.lines[nsrv0:][-5:])
            else:
                res["note"] = "no connection reached the server"
            # the worker (victim or not) must be gone
            for w in words(srv.lines[nsrv0:], "WORKER", i):
                pid = int(w[2])
                deadline = time.monotonic() + 5
                while pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.005)
                if pid_alive(pid):
                    fail.append("worker %d still alive" % pid)
                    os.kill(pid, signal.SIGKILL)
        self.judge(plan, res, cl, srv, nsrv0, kill_line(None), rc, fresh, connected)

    def judge(self, plan, res, cl, srv, nsrv0, kill, rc, fresh, connected):
        i, fail = plan["iter"], res["failures"]
        victim = plan["victim"]
        cends = records(cl.lines, "END", i)
        sends = records(srv.lines[nsrv0:], "END", i)
        res["killed"] = bool(kill)
        res["phase"] = kill["phase"] if kill else None
        res["connected"] = connected
        if words(srv.lines[nsrv0:], "STALE", i):
            res["stale"] = len(words(srv.lines[nsrv0:], "STALE", i))
        # the victim died of SIGKILL (when its trigger was reached)
        if kill:
            if victim == "client" and rc != -signal.SIGKILL:
                fail.append("client victim exit status %s" % rc)
            if victim == "server" and fresh and srv.popen.returncode != -signal.SIGKILL:
                fail.append("server victim exit status %s" % srv.popen.returncode)
        else:
            res["note"] = res.get("note") or "kill trigger not reached"
        if victim != "client" and rc not in (0, -signal.SIGKILL):
            fail.append("client exit status %s: %s" % (rc, cl.stderr()[-600:]))
        if victim == "client" and fresh and srv.popen.returncode not in (0, None):
            fail.append("server exit status %s: %s" % (srv.popen.returncode, srv.stderr()[-600:]))
        # A server-side connection from another iteration's client (one
        # killed inside connect() whose connection was accepted late) read
        # this iteration's plan: tell it by the client's port.
        lport = [int(w[2]) for w in words(cl.lines, "LPORT", i)]
        stale = [e for e in sends if e.get("peer") is not None and lport and
                 e["peer"] not in lport]
        if stale:
            res["stale"] = res.get("stale", 0) + len(stale)
            sends = [e for e in sends if e not in stale]
        survivors = sends if victim == "client" else cends
        if not kill:
            survivors = cends + sends
        if victim == "client" and not lport:
            # killed before connect() returned: it sent nothing on this
            # connection, so a server side that received bytes has another
            # iteration's connection
            stale = [e for e in survivors if e["role"] == "server" and e["rx"][2] > 0]
            if stale:
                res["stale"] = res.get("stale", 0) + len(stale)
                res["stale_unmatched"] = [e["peer"] for e in stale]
                survivors = [e for e in survivors if e not in stale]
        outcomes, lats = [], []
        for e in survivors:
            rx, tx = e["rx"], e["tx"]
            complete = rx[0] == "EOF" and rx[2] == e["want_rx"] and tx[0] == "DONE"
            what = "%s %s" % (e["role"], "complete" if complete else
                              "rx=%s tx=%s" % (rx[0], tx[0] if tx[0] != "DONE" else "done"))
            outcomes.append(what)
            if e["bad"]:
                fail.append("%s received wrong bytes: %s (peer port %s, client port %s)" % (
                    e["role"], e["bad"], e.get("peer"), lport))
            if rx[0] not in rk.RX_OK:
                fail.append("%s receive ended with %s" % (e["role"], rx[0]))
            if tx[0] not in rk.TX_OK and not (tx[3] == "shutdown" and tx[0] in rk.SHUTDOWN_OK):
                fail.append("%s send ended with %s (%s)" % (e["role"], tx[0], tx[3]))
            if rx[2] > e["want_rx"]:
                fail.append("%s received %d > %d bytes" % (e["role"], rx[2], e["want_rx"]))
            if not kill and not complete:
                fail.append("%s incomplete without a kill: %s" % (e["role"], what))
            if kill:
                t_last = max(rx[1], tx[1])
                if not (complete and t_last < kill["t"]):
                    lat = t_last - kill["t"]
                    lats.append(lat)
                    if e.get("t_accept"):
                        res["accept_after_kill_s"] = round(e["t_accept"] - kill["t"], 6)
                    if self.bound_s is not None and lat > self.bound_s:
                        fail.append("%s noticed the kill after %.3f s (bound %.1f s)" % (
                            e["role"], lat, self.bound_s))
        if kill and connected and not survivors:
            fail.append("no survivor reported the end of its connection")
        res["outcomes"] = outcomes
        res["latency_s"] = max(lats) if lats else None
        # descriptors and usmc mappings a survivor still had after closing
        # its connection (a fresh process: a leak shows as an outlier)
        res["survivor_fds"] = {"%s/%s" % (e["role"], plan["server"] if e["role"] == "server"
                                          else "client"): [e.get("fds"), e.get("maps")]
                               for e in survivors}

    # checks --------------------------------------------------------------------
    def leak_check(self, final=False, wait_young=False):
        """Runtime directory after gc, /dev/shm, the long-lived servers.
        Owners build lg-/ln- objects under a t- name; gc takes a t- object
        only once it is 60 s old (rundir.c GC_GRACE_SEC), so a younger one
        (from a process killed while creating a link group) is noted, not
        counted; wait_young waits until they are old enough and gcs again."""
        c = {"after_iter": len(self.results), "final": final, "problems": [], "notes": [],
             "server_leaks": []}
        for attempt in range(2):
            self.build.cli(self.rundir, "stat")          # collects the dead
            ents = sorted(p.name for p in self.rundir.iterdir())
            young = [e for e in ents if e.startswith("t-") and
                     time.time() - (self.rundir / e).lstat().st_ctime < 60]
            if not (young and wait_young and attempt == 0):
                break
            newest = max((self.rundir / e).lstat().st_ctime for e in young)
            time.sleep(max(0.0, newest + 61 - time.time()))
        extra = [e for e in ents if e not in h.RUNDIR_IDLE_FILES and e not in young]
        c["rundir_entries"] = ents
        if young:
            c["notes"].append("t- objects younger than 60 s (not yet collectable): %s" % young)
        live_ln = sum(1 for p in self.persist_peers() if p.alive())
        ln = [e for e in extra if e.startswith("ln-")]
        other = [e for e in extra if not e.startswith("ln-")]
        if other or len(ln) > live_ln:
            c["problems"].append("runtime directory leftovers: %s" % extra)
        stray = shm_stray(self.shm_before)
        stray = [x for x in stray if x.startswith(("lg-", "ln-", "t-"))]
        if stray:
            c["problems"].append("stray /dev/shm objects: %s" % stray)
        for kind, (p, _) in sorted(self.persist.items()):
            if not p.alive():
                continue
            fds, maps = rk.fd_count(p.pid), usmc_maps(p.pid)
            lg = [m for m in maps if "/lg-" in m]
            base = self.baseline.setdefault(kind, (fds, len(lg)))
            c["server_" + kind] = {"fds": fds, "lg_maps": len(lg), "usmc_maps": len(maps),
                                   "rss_kb": rss_kb(p.pid), "vm_kb": vm_kb(p.pid),
                                   "baseline_fds": base[0], "baseline_lg_maps": base[1]}
            # Link groups of clients that are all gone must not stay attached.
            if fds > base[0] + 8:
                c["server_leaks"].append("long-lived %s server: %d fds, %d after its first "
                                         "client" % (kind, fds, base[0]))
            if len(lg) > base[1] + 2:
                c["server_leaks"].append("long-lived %s server: %d link group mappings, %d "
                                         "after its first client, e.g. %s" % (
                                             kind, len(lg), base[1], lg[:2]))
        c["ok"] = not c["problems"] and not c["server_leaks"]
        self.checks.append(c)
        return c

    def next_run_works(self):
        """A normal run in the same runtime directory is accelerated."""
        self.build.cli(self.rundir, "stat", "--reset")
        plan = {"iter": 10 ** 6, "victim": "none", "moment": "none", "c2s": 3 * MB,
                "s2c": 3 * MB, "seed": 7, "delay_us": 0, "at": 0}
        self.write_plan(plan)
        env = self.build.env(self.rundir)
        srv, port = self.start_server(False, True, env)
        cl = self.spawn("client", [h.PY, self.scripts["kpeer"], "client", "127.0.0.1", port,
                                   json.dumps(plan)], env)
        out = {"ok": False}
        try:
            rc, src = cl.wait(60), srv.wait(60)
            ends = records(cl.lines, "END", plan["iter"]) + records(srv.lines, "END", plan["iter"])
            complete = [e for e in ends if e["rx"][0] == "EOF" and e["rx"][2] == e["want_rx"]
                        and e["tx"][0] == "DONE" and not e["bad"]]
            st = self.build.stat(self.rundir)
            out = {"client_rc": rc, "server_rc": src, "complete_ends": len(complete),
                   "smc_client": st.get("smc_client"), "smc_server": st.get("smc_server"),
                   "tcp_fallback": st.get("tcp_fallback")}
            out["ok"] = rc == 0 and src == 0 and len(complete) == 2 and \
                st.get("smc_client", 0) >= 1 and st.get("smc_server", 0) >= 1
        finally:
            self.reap()
        return out


def status_kb(pid, field):
    """A kB field of /proc/PID/status (VmRSS, VmSize, RssAnon, RssShmem...), -1 if gone."""
    try:
        for l in Path("/proc/%d/status" % pid).read_text().splitlines():
            if l.startswith(field + ":"):
                return int(l.split()[1])
    except OSError:
        pass
    return -1


def rss_kb(pid):
    return status_kb(pid, "VmRSS")


def vm_kb(pid):
    return status_kb(pid, "VmSize")


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(loop, args, elapsed, counters, final):
    res = loop.results
    by = {}
    for r in res:
        k = "%s/%s" % (r["victim"], r["moment"])
        d = by.setdefault(k, {"n": 0, "failed": 0, "killed": 0})
        d["n"] += 1
        d["failed"] += 0 if r["ok"] else 1
        d["killed"] += 1 if r.get("killed") else 0
    outcomes, phases, servers = {}, {}, {}
    for r in res:
        for o in r.get("outcomes", []) or ["(no survivor connection)"]:
            outcomes[o] = outcomes.get(o, 0) + 1
        if r.get("phase"):
            ph = "%s:%s" % (r["victim"], r["phase"])
            phases[ph] = phases.get(ph, 0) + 1
        servers[r["server"]] = servers.get(r["server"], 0) + 1
    lats = [r["latency_s"] for r in res if r.get("latency_s") is not None]
    after_close = {}
    for r in res:
        for k, (fds, maps) in (r.get("survivor_fds") or {}).items():
            d = after_close.setdefault(k, {"fds": {}, "usmc_maps": {}})
            d["fds"][str(fds)] = d["fds"].get(str(fds), 0) + 1
            d["usmc_maps"][str(maps)] = d["usmc_maps"].get(str(maps), 0) + 1
    fails = [{"iter": r["iter"], "victim": r["victim"], "moment": r["moment"],
              "server": r["server"], "failures": r["failures"],
              "rerun": "bench/killloop.py --seed %d --iterations %d" % (args.seed, r["iter"] + 1)}
             for r in res if not r["ok"]]
    check_fails = [c for c in loop.checks if not c.get("ok", True)]
    return {
        "iterations": len(res), "seed": args.seed, "build": args.build,
        "elapsed_s": round(elapsed, 1),
        "ok": not fails and not check_fails and final.get("ok", False),
        "failed_iterations": len(fails),
        "per_victim_moment": by,
        "server_kinds": servers,
        "kill_landed_in": phases,
        "survivor_outcomes": outcomes,
        "no_connection_iterations": sum(1 for r in res if r.get("note") ==
                                        "no connection reached the server"),
        "kill_not_reached": sum(1 for r in res if not r.get("killed")),
        "stale_connections": sum(r.get("stale", 0) for r in res),
        "detection_latency_s": {"n": len(lats), "max": max(lats) if lats else None,
                                "p99": pct(lats, 0.99), "p50": pct(lats, 0.5),
                                "over_1s": sum(1 for x in lats if x > BOUND_S)},
        "survivor_after_close": after_close,
        "counters_before_final_run": counters,
        "leak_checks": loop.checks,
        "final_run": final,
        "failures": fails,
        "rerun": "bench/killloop.py --seed %d --iterations %d" % (args.seed, len(res)),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--build", choices=["plain", "asan"], default="plain")
    ap.add_argument("--build-dir", help="take usmc and libusmc.so from here")
    ap.add_argument("--check-every", type=int, default=50)
    ap.add_argument("--keep", action="store_true", help="keep logs and the runtime directory")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    build = Build(args.build, args.build_dir)
    work = Path(tempfile.mkdtemp(prefix="usmc-killloop-"))
    loop = Loop(build, work, args.seed)
    print("killloop: seed %d, %d iterations, build %s, rundir %s, logs %s" % (
        args.seed, args.iterations, args.build, loop.rundir, work), flush=True)
    t0 = time.monotonic()
    final, counters = {"ok": False}, {}
    try:
        for i in range(args.iterations):
            r = loop.iteration(i)
            if args.verbose or not r["ok"]:
                print("iter %d %s/%s server=%s c2s=%d s2c=%d -> %s %s %s" % (
                    i, r["victim"], r["moment"], r["server"], r["c2s"], r["s2c"],
                    "ok" if r["ok"] else "FAIL", r.get("outcomes"), r["failures"]), flush=True)
            if (i + 1) % args.check_every == 0:
                c = loop.leak_check()
                print("  [%d] %.0f s, %d failed; rundir %d entries; fork server %s; "
                      "thread server %s %s" % (
                          i + 1, time.monotonic() - t0, sum(1 for x in loop.results
                                                             if not x["ok"]),
                          len(c["rundir_entries"]), brief(c.get("server_fork")),
                          brief(c.get("server_thread")),
                          "" if c["ok"] else c["problems"] + c["server_leaks"]), flush=True)
        loop.leak_check()
        counters = build.stat(loop.rundir)
        counters.pop("connections", None)
        loop.stop_persist()
        loop.leak_check(final=True)
        final = loop.next_run_works()
        c = loop.leak_check(final=True, wait_young=True)
        final["rundir_after"] = c["rundir_entries"]
    finally:
        loop.close()
        summary = summarize(loop, args, time.monotonic() - t0, counters, final)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
        if not args.keep:
            shutil.rmtree(loop.rundir, ignore_errors=True)
            if summary["ok"]:
                shutil.rmtree(work, ignore_errors=True)
        build.cleanup()
    lat = summary["detection_latency_s"]
    print("killloop: %d iterations in %.0f s, %d failed; detection latency max %s p99 %s "
          "(n=%d, >1s: %d); final run %s; %s" % (
              summary["iterations"], summary["elapsed_s"], summary["failed_iterations"],
              fmt_s(lat["max"]), fmt_s(lat["p99"]), lat["n"], lat["over_1s"],
              "accelerated" if final.get("ok") else "FAILED %s" % final,
              "OK" if summary["ok"] else "NOT OK (logs kept in %s)" % work))
    for k, v in sorted(summary["per_victim_moment"].items()):
        print("  %-18s n=%-4d killed=%-4d failed=%d" % (k, v["n"], v["killed"], v["failed"]))
    return 0 if summary["ok"] else 1


def brief(d):
    if not d:
        return "-"
    return "fds %d lg %d rss %d kB vm %d MB" % (d["fds"], d["lg_maps"], d["rss_kb"],
                                               d["vm_kb"] >> 10)


def fmt_s(x):
    return "-" if x is None else "%.3f s" % x


if __name__ == "__main__":
    sys.exit(main())
