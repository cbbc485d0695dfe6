"""Reliability kit: verified-stream peers and checks shared by
tests/integration/test_{kill_loop,exhaustion,isolation}.py and the
bench/killloop.py and bench/soak.py drivers (not a test module itself).

Peers (run under /usr/bin/python3, written into a directory by
write_scripts()):

  xchg_server.py HOST PORT NCONN [--hold] [--fork]
      Prints "listening" once listen() returned (so a usmc listener is
      registered, or its registration failed, before any client can come),
      accepts NCONN connections and serves each in a thread (or, --fork, a
      forked child); --hold accepts all NCONN before serving any (descriptor
      pressure).  Per connection: a 28-byte header from the client
      (id, c2s, s2c, seed); the server writes s2c bytes of stream
      (seed, 1) while it reads and checks c2s bytes of stream (seed, 0);
      then it half-closes and expects EOF.  Prints one line per connection
      ("CONN id OK ..." or "CONN id FAIL ...") and "DONE accepted=N ok=M",
      exits 0 only when every connection was exact.

  xchg_client.py HOST PORT NCONN MAXSIZE SEED PARALLEL [--early-shut]
      NCONN connections, PARALLEL at a time, sizes drawn from SEED up to
      MAXSIZE each way (the first connection always MAXSIZE both ways);
      every connect() must succeed; both directions at once (a writer
      thread), every byte compared; prints "OK conns=N c2s=B s2c=B".
      The client half-closes once it has read the server's whole stream
      (so it cannot have sent its FIN before the server decided), or,
      --early-shut, as soon as it has sent its own.

Streams: bytes of stream (seed, dir) are random.Random(seed * 2 + dir)
.randbytes(n); a receiver can check any prefix exactly.
"""
import os
import re
import signal
import subprocess
from pathlib import Path

from . import helpers as h

XCHG_COMMON = r'''
import hashlib, os, random, socket, struct, sys, threading
HDR = struct.Struct("!IQQQ")

def stream(seed, d, n):
    return random.Random(seed * 2 + d).randbytes(n)

def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        d = s.recv(min(n - len(buf), 1 << 20))
        if not d:
            break
        buf += d
    return bytes(buf)

def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 65536):
        if a[i:i + 65536] != b[i:i + 65536]:
            for j in range(i, min(n, i + 65536)):
                if a[j] != b[j]:
                    return j
    return n

class Sender(threading.Thread):
    def __init__(self, s, data, shut):
        super().__init__(daemon=True)
        self.s, self.data, self.shut, self.err = s, data, shut, None
    def run(self):
        try:
            self.s.sendall(self.data)
            if self.shut:
                self.s.shutdown(socket.SHUT_WR)
        except OSError as e:
            self.err = e
'''

XCHG_SERVER = XCHG_COMMON + r'''
host, port, nconn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hold, fork = "--hold" in sys.argv, "--fork" in sys.argv
lock = threading.Lock()
ok = [0]

def report(line, good):
    with lock:
        print(line, flush=True)
        if good:
            ok[0] += 1

def serve(c, idx):
    try:
        hdr = recv_exact(c, HDR.size)
        if len(hdr) != HDR.size:
            report("CONN ? FAIL short header (%d bytes) accept#%d" % (len(hdr), idx), False)
            return False
        cid, c2s, s2c, seed = HDR.unpack(hdr)
        w = Sender(c, stream(seed, 1, s2c), True)
        w.start()
        got = recv_exact(c, c2s)
        want = stream(seed, 0, c2s)
        w.join()
        if w.err:
            report("CONN %d FAIL send: %r" % (cid, w.err), False)
            return False
        if got != want:
            report("CONN %d FAIL c2s got %d of %d bytes, first difference at %d"
                   % (cid, len(got), c2s, first_diff(got, want)), False)
            return False
        extra = c.recv(1)
        if extra:
            report("CONN %d FAIL bytes after the stream" % cid, False)
            return False
        report("CONN %d OK c2s=%d s2c=%d" % (cid, c2s, s2c), True)
        return True
    except OSError as e:
        report("CONN ? FAIL accept#%d %r" % (idx, e), False)
        return False
    finally:
        c.close()

ls = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(256)
print("listening", flush=True)
conns, threads, kids = [], [], []
for i in range(nconn):
    try:
        c, _ = ls.accept()
    except OSError as e:
        print("ACCEPT FAIL %d %r" % (i, e), flush=True)
        sys.exit(2)
    print("ACCEPTED %d fd %d" % (i, c.fileno()), flush=True)
    if hold:
        conns.append((c, i))
        continue
    if fork:
        pid = os.fork()
        if pid == 0:
            ls.close()
            os._exit(0 if serve(c, i) else 1)
        c.close()
        kids.append(pid)
        continue
    t = threading.Thread(target=serve, args=(c, i), daemon=True)
    t.start()
    threads.append(t)
print("accepted %d" % nconn, flush=True)
for c, i in conns:
    t = threading.Thread(target=serve, args=(c, i), daemon=True)
    t.start()
    threads.append(t)
for t in threads:
    t.join()
for pid in kids:
    _, st = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(st) == 0:
        ok[0] += 1
print("DONE accepted=%d ok=%d" % (nconn, ok[0]), flush=True)
sys.exit(0 if ok[0] == nconn else 1)
'''

XCHG_CLIENT = XCHG_COMMON + r'''
host, port, nconn, maxsize, seed, par = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:7])
early = "--early-shut" in sys.argv
rnd = random.Random(seed)
plan = []
for i in range(nconn):
    if i == 0:
        plan.append((maxsize, maxsize))
    else:
        pick = lambda: rnd.choice([rnd.randint(0, 100), rnd.randint(0, 65536),
                                   rnd.randint(0, maxsize)])
        plan.append((pick(), pick()))
lock = threading.Lock()
failures, totals = [], [0, 0]
sem = threading.Semaphore(par)

def one(i):
    c2s, s2c = plan[i]
    cseed = seed * 100003 + i
    try:
        s = socket.create_connection((host, port))
    except OSError as e:
        with lock:
            failures.append("conn %d: connect failed: %r" % (i, e))
        return
    try:
        s.sendall(HDR.pack(i, c2s, s2c, cseed))
        w = Sender(s, stream(cseed, 0, c2s), early)
        w.start()
        got = recv_exact(s, s2c + 1)
        w.join()
        want = stream(cseed, 1, s2c)
        if w.err:
            raise w.err
        if not early:
            s.shutdown(socket.SHUT_WR)
        if got != want:
            with lock:
                failures.append("conn %d: s2c got %d of %d bytes, first difference at %d"
                                % (i, len(got), s2c, first_diff(got, want)))
            return
        with lock:
            totals[0] += c2s
            totals[1] += s2c
    except OSError as e:
        with lock:
            failures.append("conn %d: %r" % (i, e))
    finally:
        s.close()

def run(i):
    with sem:
        one(i)

threads = [threading.Thread(target=run, args=(i,)) for i in range(nconn)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for f in failures:
    print("FAIL", f, flush=True)
if failures:
    sys.exit(1)
print("OK conns=%d c2s=%d s2c=%d" % (nconn, totals[0], totals[1]), flush=True)
'''

SCRIPTS = {
    "xchg_server.py": XCHG_SERVER,
    "xchg_client.py": XCHG_CLIENT,
}


def write_scripts(directory):
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in SCRIPTS.items():
        p = d / name
        p.write_text(text)
        out[name.rsplit(".", 1)[0]] = p
    return out


wait_line = h.wait_line


def start_xchg_server(procs, scripts, env, nconn, extra=(), usmc=True, name="xchg-server"):
    """Start xchg_server on a free port; returns (proc, port) once listen()
    returned (the script says so), retrying if the port was taken."""
    for _ in range(4):
        port = h.free_port()
        p = procs.start(name, [h.PY, scripts["xchg_server"], "127.0.0.1", port, nconn, *extra],
                        env, usmc=usmc)
        try:
            wait_line(p, "listening", timeout=15)
            return p, port
        except AssertionError:
            if b"Address already in use" in p.stderr():
                p.stop(grace=0.2)
                continue
            raise
    raise AssertionError("cannot start the exchange server")


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def rundir_leftovers(rundir):
    """After `usmc stat` (which folds dead processes' counters and removes
    lg-/ln-/t- objects whose owner lock is free): what is left beyond the
    idle set."""
    rundir.cli("stat")
    return sorted(set(rundir.entries()) - h.RUNDIR_IDLE_FILES)


def maps_of(pid, needle):
    """Lines of /proc/PID/maps that mention needle."""
    try:
        return [l for l in Path("/proc/%d/maps" % pid).read_text().splitlines() if needle in l]
    except OSError:
        return []


def sh(cmd, check=True, timeout=60, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode:
        raise AssertionError("%s failed (%d): %s %s" % (cmd, r.returncode, r.stdout, r.stderr))
    return r


def kill_tree(pid, sig=signal.SIGKILL):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


FALLBACK_LINE = re.compile(r"TCP \((\w+)")


# --------------------------------------------------------------------------
# Kill peers (bench/killloop.py, bench/soak.py, test_kill_loop.py)
# --------------------------------------------------------------------------
#
#   kpeer.py server HOST PORT PLANFILE [--fork] [--once]
#   kpeer.py client HOST PORT PLANJSON
#
# One connection per plan (a JSON object: iter, c2s, s2c, seed, victim
# client|server|worker|none, moment handshake|transfer|close, delay_us, at).
# The client connects, sends an 8-byte header (magic, iter) and then c2s
# bytes of stream (seed, 0) while it reads s2c bytes of stream (seed, 1);
# the server reads PLANFILE after each accept() (the harness rewrites it
# before each iteration: iterations are sequential), checks the header and
# does the mirror image.  Each side half-closes once it has sent its stream
# and reads until EOF.  Every received chunk is compared with the stream at
# once, so a side that stops early knows it holds an exact prefix.
#
# The victim kills itself with SIGKILL (a killer thread, so the signal lands
# wherever the other threads are: inside connect/accept, send/recv in the
# library, shutdown or close) delay_us after its trigger: handshake - right
# before connect() (client) or right after accept() (server/worker);
# transfer - once `at` bytes moved in both directions together; close -
# right before its shutdown(SHUT_WR) after sending everything.  victim
# server with --fork kills the whole process group (parent and workers);
# worker kills only the forked worker.  Right before the kill it writes
#   KILL {"iter", "pid", "t", "phase"}
# (t: CLOCK_MONOTONIC, shared by all processes).  A side that ends its
# connection writes
#   END {"iter", "role", "pid", "rx": [kind, t, bytes], "tx": [kind, t, bytes, op],
#        "bad": null or what was wrong, "want_rx", "want_tx", "fds", "maps"}
# kind: EOF / DONE or the errno name.  Lines are single write()s (atomic on
# the pipe that parent and workers share).  Other lines: listening, PID,
# ACCEPTED iter pid, WORKER iter pid, STALE iter, CONNECTED iter.
KPEER = r'''
import errno, json, os, random, signal, socket, struct, sys, threading, time
HDR = struct.Struct("!II")
MAGIC = 0x6b696c6c
CHUNK = 1 << 18

def stream(seed, d, n):
    return random.Random(seed * 2 + d).randbytes(n)

def out(*a):
    os.write(1, (" ".join(str(x) for x in a) + "\n").encode())

def ename(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__

def usmc_maps():
    try:
        lines = open("/proc/self/maps").read().splitlines()
    except OSError:
        return -1
    return sum(1 for l in lines if "memfd:" in l or "/lg-" in l or "/ln-" in l)

class Killer:
    def __init__(self, plan, group):
        self.plan, self.group, self.phase = plan, group, "start"
        self.armed = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
    def arm(self):
        self.armed.set()
    def run(self):
        self.armed.wait()
        d = self.plan["delay_us"]
        if d:
            time.sleep(d / 1e6)
        out("KILL", json.dumps({"iter": self.plan["iter"], "pid": os.getpid(),
                                "t": time.monotonic(), "phase": self.phase}))
        if self.group:
            os.killpg(0, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    def wait_fired(self):
        if self.armed.is_set():
            self.t.join()

class Nokill:
    phase = ""
    def arm(self):
        pass
    def wait_fired(self):
        pass

def exchange(s, plan, role, killer, hdr_got=b""):
    """Both directions at once; returns the END record."""
    mine, theirs = (0, 1) if role == "client" else (1, 0)
    size = {0: plan["c2s"], 1: plan["s2c"]}
    tx = stream(plan["seed"], mine, size[mine])
    want = stream(plan["seed"], theirs, size[theirs])
    if role == "server":
        want = HDR.pack(MAGIC, plan["iter"]) + want
    trig = plan["moment"] == "transfer" and not isinstance(killer, Nokill)
    moved = [0, 0]
    def progress(i, n):
        moved[i] += n
        if trig and moved[0] + moved[1] >= plan["at"]:
            killer.arm()
    res = {"tx": None}
    def writer():
        n, op = 0, "send"
        try:
            while n < len(tx):
                k = s.send(tx[n:n + CHUNK])
                n += k
                progress(0, k)
            if plan["moment"] == "close":
                killer.phase = "close"
                killer.arm()
            op = "shutdown"
            s.shutdown(socket.SHUT_WR)
            res["tx"] = ["DONE", time.monotonic(), n, op]
        except OSError as e:
            res["tx"] = [ename(e), time.monotonic(), n, op]
    killer.phase = "transfer"
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    got, bad, rx = len(hdr_got), None, None
    try:
        while True:
            d = s.recv(1 << 20)
            if not d:
                rx = ["EOF", time.monotonic(), got]
                break
            if got + len(d) > len(want):
                bad = "%d bytes beyond the %d-byte stream" % (got + len(d) - len(want), len(want))
            elif d != want[got:got + len(d)]:
                bad = "corrupt: chunk at %d (%d bytes) differs" % (got, len(d))
            got += len(d)
            progress(1, len(d))
            if bad:
                rx = ["BAD", time.monotonic(), got]
                break
    except OSError as e:
        rx = [ename(e), time.monotonic(), got]
    out("RXDONE", plan["iter"], role, rx[0])
    w.join()
    return {"iter": plan["iter"], "role": role, "pid": os.getpid(), "rx": rx, "tx": res["tx"],
            "bad": bad, "want_rx": len(want), "want_tx": len(tx)}

def finish(s, rec, killer):
    s.close()
    killer.phase = "closed"
    rec["fds"] = len(os.listdir("/proc/self/fd"))
    rec["maps"] = usmc_maps()
    out("END", json.dumps(rec))
    killer.wait_fired()

def client(host, port, plan):
    me = plan["victim"] == "client"
    killer = Killer(plan, False) if me else Nokill()
    s = socket.socket()
    if me and plan["moment"] == "handshake":
        killer.phase = "connect"
        killer.arm()
    op = "connect"
    try:
        s.connect((host, port))
        out("LPORT", plan["iter"], s.getsockname()[1])
        killer.phase = op = "header"
        s.sendall(HDR.pack(MAGIC, plan["iter"]))
    except OSError as e:
        rec = {"iter": plan["iter"], "role": "client", "pid": os.getpid(),
               "tx": [ename(e), time.monotonic(), 0, op], "bad": None,
               "want_rx": plan["s2c"], "want_tx": plan["c2s"]}
        rec["rx"] = [ename(e), rec["tx"][1], 0]
        if op == "header":
            try:
                d = s.recv(1 << 20)
                rec["rx"] = ["EOF", time.monotonic(), len(d)]
                if d:
                    rec["bad"] = "data from a server that never got the header"
            except OSError as e2:
                rec["rx"] = [ename(e2), time.monotonic(), 0]
        finish(s, rec, killer)
        return
    out("CONNECTED", plan["iter"])
    finish(s, exchange(s, plan, "client", killer), killer)

def serve(c, plan, group):
    try:
        peer = c.getpeername()[1]
    except OSError:         # reset before we looked (ENOTCONN, as TCP after an RST)
        peer = None
    t_acc = plan.get("t_accept")
    victim = plan["victim"] in ("server", "worker")
    killer = Killer(plan, group) if victim else Nokill()
    if victim and plan["moment"] == "handshake":
        killer.phase = "accepted"
        killer.arm()
    hdr = b""
    try:
        while len(hdr) < HDR.size:
            d = c.recv(HDR.size - len(hdr))
            if not d:
                break
            hdr += d
    except OSError:
        pass
    if len(hdr) == HDR.size and HDR.unpack(hdr) != (MAGIC, plan["iter"]):
        out("STALE", plan["iter"], HDR.unpack(hdr)[1], peer)
        c.close()
        return
    if len(hdr) < HDR.size:
        want = HDR.pack(MAGIC, plan["iter"])
        t = time.monotonic()
        rec = {"iter": plan["iter"], "role": "server", "pid": os.getpid(),
               "rx": ["EOF", t, len(hdr)], "tx": ["NOTSTARTED", t, 0, "-"],
               "bad": None if want.startswith(hdr) else "header %s is no prefix of %s" % (
                   hdr.hex(), want.hex()),
               "want_rx": plan["c2s"] + HDR.size, "want_tx": plan["s2c"], "peer": peer,
               "t_accept": t_acc}
        finish(c, rec, killer)
        return
    rec = exchange(c, plan, "server", killer, hdr)
    rec["peer"], rec["t_accept"] = peer, t_acc
    finish(c, rec, killer)

def server(host, port, planfile, fork, once):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(64)
    if fork and not once:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out("listening", os.getpid())
    while True:
        c, _ = ls.accept()
        t_acc = time.monotonic()
        with open(planfile) as f:
            plan = json.load(f)
        plan["t_accept"] = t_acc
        out("ACCEPTED", plan["iter"], os.getpid())
        if not fork:
            if plan["victim"] == "worker":
                plan = dict(plan, victim="server")
            serve(c, plan, False)
        else:
            pid = os.fork()
            if pid == 0:
                ls.close()
                out("WORKER", plan["iter"], os.getpid())
                serve(c, plan, plan["victim"] == "server")
                os._exit(0)
            c.close()
            if once:
                os.waitpid(pid, 0)
        if once:
            return

if sys.argv[1] == "server":
    server(sys.argv[2], int(sys.argv[3]), sys.argv[4], "--fork" in sys.argv, "--once" in sys.argv)
else:
    client(sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))
'''

SCRIPTS["kpeer.py"] = KPEER

# What a survivor may see when its peer dies: what TCP gives.
RX_OK = ("EOF", "ECONNRESET")
TX_OK = ("DONE", "EPIPE", "ECONNRESET", "NOTSTARTED")
SHUTDOWN_OK = ("ENOTCONN",)
