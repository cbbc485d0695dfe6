#!/usr/bin/python3
"""Soak: a long mixed workload with kills, then a leak report (not part of CI).

All in one runtime directory, under a private copy of the build:

  stable pairs   a forking server and a threaded server, each with a
                 client running PAR connections at a time for the whole
                 run (random sizes 0..4 MB each way, both directions at
                 once); nothing of theirs is ever killed, so every one of
                 their connections must complete with both streams'
                 sha256 right - the kills around them must not disturb
                 them.  These four processes are the long-lived ones whose
                 descriptors, usmc mappings, RSS (anonymous and shared
                 apart) and VM size are sampled.
  chaos pairs    forking servers and clients of the same kind that are
                 SIGKILLed and restarted every few seconds (the whole
                 server, one forked worker, or a client); their
                 connections may end early, but only the way TCP ends
                 (EOF, ECONNRESET, EPIPE, ECONNREFUSED while a server is
                 down) and only with an exact prefix of the stream.
  kill loop      bench/killloop.py iterations back to back (fresh and
                 long-lived servers, every victim and moment), each judged
                 as in killloop (error kind, prefix, detection within 1 s).

At the end: every process is stopped, `usmc stat` collects the dead, the
runtime directory must be back to its idle files, nothing stray in
/dev/shm, a normal run is accelerated, and the report lists the sampled
growth of the long-lived processes.  Flagged as a leak: more than 8
descriptors, more than 2 link group mappings, or anonymous RSS grown by
more than max(32 MB, half its first sample) beyond what its plain twin
(the same script under USMC_DISABLE=1, same load: the threaded server's
for the threaded server, the client's for both stable clients) grew.
Shared RSS is reported, not flagged: it is ring pages of the mapped link
groups, bounded by them.

    bench/soak.py [--minutes 30] [--seed S] [--json OUT] [--build plain|asan]
"""
import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import killloop as kl  # noqa: E402
from killloop import h, rk  # noqa: E402

# Soak peers: HOST PORT ... ; stats on stdout every 2 s and at the end:
#   STAT {"ok": n, "early": n, "refused": n, "bytes": n}   FAIL <what>
SOAK_COMMON = r'''
import errno, hashlib, json, os, random, signal, socket, struct, sys, threading, time
HDR = struct.Struct("!IQQQ")
TCPISH = ("ECONNRESET", "EPIPE", "ENOTCONN", "EOF")

def stream(seed, d, n):
    return random.Random(seed * 2 + d).randbytes(n)

def out(*a):
    os.write(1, (" ".join(str(x) for x in a) + "\n").encode())

def ename(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.d = {"ok": 0, "early": 0, "refused": 0, "bytes": 0, "fail": 0}
    def add(self, k, n=1):
        with self.lock:
            self.d[k] += n
    def dump(self, tag="STAT"):
        with self.lock:
            out(tag, json.dumps(self.d))
    def loop(self):
        while True:
            time.sleep(2)
            self.dump()

def exchange(s, seed, mine, theirs, nmine, ntheirs, stats, strict, what, pre=b""):
    """Send stream (seed, mine), receive (seed, theirs): sha256 of both must
    match; an early end must be TCP-like and an exact prefix."""
    tx = stream(seed, mine, nmine)
    want = stream(seed, theirs, ntheirs)
    err = [None]
    def writer():
        try:
            s.sendall(tx)
            s.shutdown(socket.SHUT_WR)
        except OSError as e:
            err[0] = ename(e)
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    h, got, rx_err = hashlib.sha256(), bytearray(), None
    try:
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            got += d
            if len(got) > ntheirs:
                break
    except OSError as e:
        rx_err = ename(e)
    w.join()
    h.update(got)
    stats.add("bytes", len(got))
    if len(got) == ntheirs and h.digest() == hashlib.sha256(want).digest() and not rx_err \
            and not err[0]:
        stats.add("ok")
        return True
    prefix = len(got) <= ntheirs and bytes(got) == want[:len(got)]
    kinds = (rx_err or "EOF", err[0] or "DONE")
    if strict or not prefix or kinds[0] not in TCPISH or kinds[1] not in TCPISH + ("DONE",):
        stats.add("fail")
        out("FAIL", what, "got %d of %d bytes, prefix %s, rx %s tx %s" % (
            len(got), ntheirs, "exact" if prefix else "WRONG", kinds[0], kinds[1]))
        return False
    stats.add("early")
    return False

def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            break
        buf += d
    return buf
'''

SOAK_SERVER = SOAK_COMMON + r'''
host, port = sys.argv[1], int(sys.argv[2])
fork, strict = "--fork" in sys.argv, "--strict" in sys.argv
stats = Stats()

def serve(c):
    try:
        hdr = recv_exact(c, HDR.size)
        if len(hdr) < HDR.size:
            if strict:
                stats.add("fail")
                out("FAIL", "short header %d" % len(hdr))
            else:
                stats.add("early")
            return
        cid, c2s, s2c, seed = HDR.unpack(hdr)
        exchange(c, seed, 1, 0, s2c, c2s, stats, strict, "server conn %d" % cid)
    except OSError as e:
        stats.add("fail" if strict else "early")
        if strict:
            out("FAIL", "server %s" % ename(e))
    finally:
        c.close()

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(256)
if fork:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
else:
    threading.Thread(target=stats.loop, daemon=True).start()
out("listening", os.getpid())
while True:
    c, _ = ls.accept()
    if fork:
        if os.fork() == 0:
            ls.close()
            serve(c)
            if stats.d["fail"]:
                stats.dump("WSTAT")
            os._exit(0)
        c.close()
    else:
        threading.Thread(target=serve, args=(c,), daemon=True).start()
'''

SOAK_CLIENT = SOAK_COMMON + r'''
host, port, seed, par, maxsize, seconds = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:7])
strict = "--strict" in sys.argv
stats = Stats()
threading.Thread(target=stats.loop, daemon=True).start()
end = time.monotonic() + seconds

def worker(k):
    rnd = random.Random(seed * 1000 + k)
    n = 0
    while time.monotonic() < end:
        n += 1
        cid = k * 10000000 + n
        size = lambda: rnd.choice([rnd.randint(0, 100), rnd.randint(0, 65536),
                                   rnd.randint(0, 1 << 20), rnd.randint(0, maxsize)])
        c2s, s2c, cseed = size(), size(), rnd.randrange(1 << 40)
        s = socket.socket()
        try:
            s.connect((host, port))
        except OSError as e:
            s.close()
            if strict or ename(e) not in ("ECONNREFUSED", "ECONNRESET"):
                stats.add("fail")
                out("FAIL", "connect %s" % ename(e))
            else:
                stats.add("refused")
            time.sleep(0.05)
            continue
        try:
            s.sendall(HDR.pack(cid % (1 << 32), c2s, s2c, cseed))
            exchange(s, cseed, 0, 1, c2s, s2c, stats, strict, "client conn %d" % cid)
        except OSError as e:
            if strict or ename(e) not in TCPISH:
                stats.add("fail")
                out("FAIL", "header %s" % ename(e))
            else:
                stats.add("early")
        finally:
            s.close()

ts = [threading.Thread(target=worker, args=(k,)) for k in range(par)]
for t in ts:
    t.start()
for t in ts:
    t.join()
stats.dump("FINAL")
'''


def last_stat(peer, tags=("FINAL", "STAT")):
    for l in reversed(peer.lines):
        tag = l.split(" ", 1)[0]
        if tag in tags:
            return json.loads(l.split(" ", 1)[1])
    return None


def children(pid):
    try:
        return [int(x) for x in Path("/proc/%d/task/%d/children" % (pid, pid)).read_text().split()]
    except OSError:
        return []


def sample(pid):
    maps = kl.usmc_maps(pid)
    # RSS apart: anonymous memory (heap, stacks) is what a leak grows;
    # shared memory is ring pages of mapped link groups, once touched
    # committed while the link group lives, bounded by the mappings (whose
    # count is flagged on its own).
    return {"fds": rk.fd_count(pid), "rss_kb": kl.rss_kb(pid), "vm_kb": kl.vm_kb(pid),
            "rss_anon_kb": kl.status_kb(pid, "RssAnon"),
            "rss_shmem_kb": kl.status_kb(pid, "RssShmem"),
            "lg_maps": sum(1 for m in maps if "/lg-" in m), "usmc_maps": len(maps)}


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.build = kl.Build(args.build, args.build_dir)
        self.work = Path(tempfile.mkdtemp(prefix="usmc-soak-"))
        self.loop = kl.Loop(self.build, self.work / "killloop", args.seed)
        self.rundir = self.loop.rundir
        d = self.work / "scripts"
        d.mkdir()
        self.scripts = {}
        for name, text in (("soak_server", SOAK_SERVER), ("soak_client", SOAK_CLIENT)):
            (d / (name + ".py")).write_text(text)
            self.scripts[name] = d / (name + ".py")
        (self.work / "logs").mkdir()
        self.peers, self.n = [], 0
        self.stop = threading.Event()
        self.lock = threading.RLock()
        self.events = {"server_kills": 0, "worker_kills": 0, "client_kills": 0, "restarts": 0}
        self.retired = []        # final stats of killed chaos processes
        self.samples = []
        self.failures = []
        self.churned = {"clients": 0, "conns_ok": 0}

    def spawn(self, name, argv, env=None):
        """Own list: the kill loop's reap() stops only its own processes."""
        with self.lock:
            self.n += 1
            p = kl.Peer("soak-%04d-%s" % (self.n, name), self.build.argv(argv),
                        self.build.run_env(env or self.build.env(self.rundir)),
                        self.work / "logs")
            self.peers.append(p)
        return p

    def close(self):
        for p in self.peers:
            p.kill()
            p.close()
        self.peers = []
        self.loop.close()

    def plain_env(self):
        """The same library, disabled: the baseline's processes."""
        return dict(self.build.env(self.rundir), USMC_DISABLE="1")

    def server(self, name, fork, strict, port=None, env=None):
        for _ in range(5):
            p_ = port or h.free_port()
            argv = [h.PY, self.scripts["soak_server"], "127.0.0.1", p_]
            argv += (["--fork"] if fork else []) + (["--strict"] if strict else [])
            p = self.spawn(name, argv, env)
            if p.wait_for(lambda ls: any(l.startswith("listening") for l in ls), 20):
                return p, p_
            p.kill()
        raise RuntimeError("cannot start %s: %s" % (name, p.stderr()))

    def client(self, name, port, par, seconds, strict, env=None):
        argv = [h.PY, self.scripts["soak_client"], "127.0.0.1", port,
                self.rng.randrange(1 << 30), par, 4 << 20, int(seconds)]
        return self.spawn(name, argv + (["--strict"] if strict else []), env)

    def chaos(self, deadline):
        """Every 2-8 s: kill a chaos server (restart it on its port), one of
        its workers, or a chaos client (start a new one)."""
        r = self.rng
        while not self.stop.wait(r.uniform(2, 8)) and time.monotonic() < deadline - 15:
            k = r.randrange(len(self.cpairs))
            srv, port, cl = self.cpairs[k]
            what = r.choice(["server", "worker", "worker", "client"])
            with self.lock:
                if what == "worker":
                    ws = children(srv.pid)
                    if ws:
                        try:
                            os.kill(r.choice(ws), signal.SIGKILL)
                            self.events["worker_kills"] += 1
                        except ProcessLookupError:
                            pass
                    continue
                victim = srv if what == "server" else cl
                victim.kill()
                self.events[what + "_kills"] += 1
                st = last_stat(victim)
                if st:
                    self.retired.append(dict(st, who="chaos " + what))
                if what == "server":
                    srv, port = self.server("chaos-server", True, False, port=port)
                else:
                    cl = self.client("chaos-client", port, 4,
                                     max(1, deadline - time.monotonic() - 10), False)
                self.events["restarts"] += 1
                self.cpairs[k] = (srv, port, cl)

    def churn(self, deadline, ports):
        """Short-lived strict clients against the stable servers (a new
        process every second or so, like CLI clients of a daemon): every
        connection must complete; each new client process is a new link
        group for the long-lived server."""
        r = self.rng
        while not self.stop.wait(r.uniform(0.5, 1.5)) and time.monotonic() < deadline - 25:
            cl = self.client("churn-client", r.choice(ports), 2, 1, True)
            if cl.wait(60) is None:
                self.failures.append("churn client %s did not finish" % cl.name)
            st = last_stat(cl, ("FINAL",))
            self.churned["clients"] += 1
            if not st or st["fail"] or cl.popen.returncode != 0:
                self.failures.append("churn client %s: exit %s, %s %s" % (
                    cl.name, cl.popen.returncode, st,
                    [l for l in cl.lines if l.startswith("FAIL")][:3]))
            else:
                self.churned["conns_ok"] += st["ok"]
            with self.lock:
                cl.close()
                self.peers.remove(cl)

    def killloop(self, deadline):
        i = 0
        while not self.stop.is_set() and time.monotonic() < deadline - 10:
            self.loop.iteration(i)
            i += 1
            time.sleep(0.2)

    def sampler(self, t0):
        while not self.stop.wait(10):
            s = {"t": round(time.monotonic() - t0, 1)}
            for name, p in self.longlived.items():
                if p.alive():
                    s[name] = sample(p.pid)
            with self.lock:
                s["rundir_entries"] = len(list(self.rundir.iterdir()))
            s["killloop_iterations"] = len(self.loop.results)
            self.samples.append(s)
            if self.args.verbose:
                print(json.dumps(s), flush=True)

    def run(self):
        a = self.args
        secs = a.minutes * 60
        t0 = time.monotonic()
        deadline = t0 + secs
        self.shm_before = h.shm_snapshot()
        fsrv, fport = self.server("stable-fork-server", True, True)
        tsrv, tport = self.server("stable-thread-server", False, True)
        fcl = self.client("stable-fork-client", fport, 6, secs - 20, True)
        tcl = self.client("stable-thread-client", tport, 6, secs - 20, True)
        # The threaded pair's twin over plain TCP (USMC_DISABLE=1): what
        # Python and malloc grow by themselves under the same load.
        psrv, pport = self.server("plain-thread-server", False, True, env=self.plain_env())
        pcl = self.client("plain-thread-client", pport, 6, secs - 20, True,
                          env=self.plain_env())
        self.plain_pair = (psrv, pcl)
        # (the twins first: the leak report judges each against its twin)
        self.longlived = {"plain_thread_server": psrv, "plain_thread_client": pcl,
                          "stable_fork_server": fsrv, "stable_thread_server": tsrv,
                          "stable_fork_client": fcl, "stable_thread_client": tcl}
        self.cpairs = []
        for _ in range(2):
            s, p = self.server("chaos-server", True, False)
            self.cpairs.append((s, p, self.client("chaos-client", p, 4, secs - 20, False)))
        ths = [threading.Thread(target=self.chaos, args=(deadline,), daemon=True),
               threading.Thread(target=self.killloop, args=(deadline,), daemon=True),
               threading.Thread(target=self.churn, args=(deadline, [fport, tport]), daemon=True),
               threading.Thread(target=self.sampler, args=(t0,), daemon=True)]
        for t in ths:
            t.start()
        print("soak: %g min, seed %d, rundir %s, work %s" % (a.minutes, a.seed, self.rundir,
                                                               self.work), flush=True)
        while time.monotonic() < deadline:
            time.sleep(min(30, max(0.1, deadline - time.monotonic())))
            done = sum(1 for r in self.loop.results if r["ok"])
            print("  %.0f s: killloop %d/%d ok, events %s, stable fork %s, thread %s" % (
                time.monotonic() - t0, done, len(self.loop.results), self.events,
                last_stat(fcl), last_stat(tcl)), flush=True)
        self.stop.set()
        for t in ths:
            t.join(timeout=60)
        # the stable clients end by themselves (their duration), then a last sample
        for c in (fcl, tcl, self.plain_pair[1]):
            if c.wait(120) is None:
                self.failures.append("%s did not finish" % c.name)
        s = {"t": round(time.monotonic() - t0, 1), "final": True}
        for name, p in self.longlived.items():
            if p.alive():
                s[name] = sample(p.pid)
        self.samples.append(s)
        return self.report(t0, fsrv, tsrv, fcl, tcl)

    def report(self, t0, fsrv, tsrv, fcl, tcl):
        rep = {"minutes": self.args.minutes, "seed": self.args.seed, "build": self.args.build}
        stable = {}
        for name, p in (("fork_client", fcl), ("thread_client", tcl), ("thread_server", tsrv)):
            stable[name] = last_stat(p)
        stable["fork_server_failed_workers"] = sum(
            1 for l in fsrv.lines if l.startswith("FAIL") or l.startswith("WSTAT"))
        fails = list(self.failures)
        rep["churn_clients"] = self.churned
        for p in (fcl, tcl, tsrv, fsrv):
            fails += ["%s: %s" % (p.name, l) for l in p.lines if l.startswith("FAIL")]
        for name in ("fork_client", "thread_client"):
            st = stable[name]
            if not st or st.get("fail") or not st.get("ok"):
                fails.append("stable %s: %s" % (name, st))
        rep["stable_pairs"] = stable
        chaos = {"ok": 0, "early": 0, "refused": 0, "bytes": 0, "fail": 0}
        for srv, _, cl in self.cpairs:
            for p in (srv, cl):
                st = last_stat(p)
                if st:
                    self.retired.append(dict(st, who=p.name))
                fails += ["%s: %s" % (p.name, l) for l in p.lines if l.startswith("FAIL")]
        for st in self.retired:
            for k in chaos:
                chaos[k] += st.get(k, 0)
        rep["chaos"] = dict(chaos, **self.events)
        lres = self.loop.results
        lats = [r["latency_s"] for r in lres if r.get("latency_s") is not None]
        rep["killloop"] = {"iterations": len(lres), "failed": sum(1 for r in lres if not r["ok"]),
                           "latency_max_s": max(lats) if lats else None,
                           "latency_p99_s": kl.pct(lats, 0.99),
                           "failures": [r for r in lres if not r["ok"]][:50]}
        fails += ["killloop iter %d %s/%s: %s" % (r["iter"], r["victim"], r["moment"],
                                                 r["failures"]) for r in lres if not r["ok"]]
        # leak report: growth of the long-lived processes between the first
        # sample after warm-up and the last
        leaks = {}
        warm = [s for s in self.samples if s["t"] >= min(60, self.args.minutes * 15)] or \
            self.samples
        for name in self.longlived:
            ss = [s[name] for s in warm if name in s]
            if len(ss) < 2:
                continue
            first, last = ss[0], ss[-1]
            leaks[name] = {k: {"first": first[k], "last": last[k], "max": max(x[k] for x in ss)}
                           for k in first}
            grow = {k: last[k] - first[k] for k in first}
            flags = []
            if grow["fds"] > 8:
                flags.append("fds +%d" % grow["fds"])
            if grow["lg_maps"] > 2:
                flags.append("link group mappings +%d" % grow["lg_maps"])
            # Anonymous growth beyond what the plain twin of the same
            # role grew (a threaded Python client's malloc arenas grow
            # over TCP too).
            # (both stable clients run the twin's client script; they
            # differ only in the server they talk to)
            twin = {"stable_thread_server": "plain_thread_server",
                    "stable_thread_client": "plain_thread_client",
                    "stable_fork_client": "plain_thread_client"}.get(name)
            base = 0
            if twin and twin in leaks:
                base = max(0, leaks[twin]["rss_anon_kb"]["last"] -
                           leaks[twin]["rss_anon_kb"]["first"])
                leaks[name]["plain_twin_anon_growth_kb"] = base
            if name.startswith("plain_"):
                pass        # the baseline itself is not judged
            elif grow["rss_anon_kb"] - base > max(32768, first["rss_anon_kb"] // 2):
                flags.append("anonymous RSS +%d kB (plain twin +%d kB)" % (
                    grow["rss_anon_kb"], base))
            leaks[name]["growth_flags"] = flags
        rep["long_lived"] = leaks
        # stop everything; the runtime directory must return to idle
        self.close()
        c = self.loop.leak_check(final=True, wait_young=True)
        rep["rundir_after_stop"] = c["rundir_entries"]
        rep["rundir_problems"] = c["problems"] + c["notes"]
        final = self.loop.next_run_works()
        c2 = self.loop.leak_check(final=True)
        rep["final_run"] = final
        rep["rundir_problems"] += c2["problems"]
        if not final.get("ok"):
            fails.append("final run: %s" % final)
        fails += c["problems"] + c2["problems"]
        rep["samples"] = self.samples
        rep["failures"] = fails[:200]
        rep["leak_flags"] = {k: v["growth_flags"] for k, v in leaks.items() if v["growth_flags"]}
        rep["ok"] = not fails and not rep["leak_flags"]
        rep["elapsed_s"] = round(time.monotonic() - t0, 1)
        return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json")
    ap.add_argument("--build", choices=["plain", "asan"], default="plain")
    ap.add_argument("--build-dir")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    soak = Soak(args)
    rep = {"ok": False, "error": "interrupted"}
    try:
        rep = soak.run()
    except Exception as e:
        rep = {"ok": False, "error": repr(e), "samples": soak.samples}
        raise
    finally:
        soak.close()
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(rep, indent=1) + "\n")
        shutil.rmtree(soak.rundir, ignore_errors=True)
        if rep.get("ok"):
            shutil.rmtree(soak.work, ignore_errors=True)
        soak.build.cleanup()
    print("soak: %s in %s s; stable %s; chaos %s; killloop %s; leak flags %s; final run %s; "
          "%d failures%s" % (
              "OK" if rep.get("ok") else "NOT OK", rep.get("elapsed_s"),
              rep.get("stable_pairs"), rep.get("chaos"),
              {k: v for k, v in rep.get("killloop", {}).items() if k != "failures"},
              rep.get("leak_flags"), (rep.get("final_run") or {}).get("ok"),
              len(rep.get("failures", [])),
              "" if rep.get("ok") else " (work dir %s)" % soak.work))
    for f in rep.get("failures", [])[:20]:
        print("  FAIL", f)
    return 0 if rep.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
