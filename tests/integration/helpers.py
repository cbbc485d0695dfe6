"""Shared helpers for the usmc integration tests (real Debian programs).

Everything a test starts goes through Procs: one process group per command
(start_new_session=True), output captured in files under the test's tmp
directory, and the whole group killed in the fixture's finalizer whatever
happens.  Every command gets an environment built by Rundir.env(): the
test's own runtime directory in USMC_RUNDIR, no inherited USMC_* settings
and no inherited LD_PRELOAD.

Acceleration is proved with counters (`usmc stat --json`), never with timing.
"""
import hashlib
import json
import os
import pwd
import random
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# USMC_TEST_BUILD=DIR runs the suite against another build (a snapshot that
# a concurrent `make` cannot change underneath a run); default build/.
BUILD = Path(os.environ.get("USMC_TEST_BUILD") or REPO / "build").resolve()
USMC = BUILD / "usmc"
LIB = BUILD / "libusmc.so"
# USMC_T_UNSHARED=1 (make test-copy): the build's device cannot share a
# connection between processes (src/dev_copy.c), so a fork, exec or
# SCM_RIGHTS moves it to TCP first: device_unshared at that end,
# peer_moved_to_tcp at the other.  assert_accelerated() allows those two.
UNSHARED = os.environ.get("USMC_T_UNSHARED") == "1"
UNSHARED_REASONS = {"device_unshared", "peer_moved_to_tcp"}
# USMC_DEBUG=1's line for a connection on shared memory (af_usmc.c), on the
# build's device.
SMCD_LOG = b"SMC-D copy (" if UNSHARED else b"SMC-D loopback ("
# The device a link group uses (`usmc lg`).
DEVICE = "copy" if UNSHARED else "loopback"


def proposals_on_tcp(st):
    """PROPOSALs clients sent on TCP (src/clc_inband.h): on loopback the
    wakes of servers that accepted first (wake_bytes); on a device whose
    proposals always travel there (UNSHARED: the copy device), every one."""
    return st["wake_bytes"] + st.get("clc_inband_tx", 0)


def child_reason(reason):
    """The reason a connection gets where a forked or exec'd child moves it
    to TCP (stdio, sandboxed): on a device without sharing, the fork before
    it moved the connection first (device_unshared)."""
    return "device_unshared" if UNSHARED else reason
PY = "/usr/bin/python3"


def _shm_format():
    """The shared-memory format of the build under test: `usmc version`,
    else src/usmc.h (before the first build)."""
    try:
        out = subprocess.run([str(USMC), "version"], capture_output=True, text=True,
                             timeout=10).stdout
        return int(re.search(r"format (\d+)", out).group(1))
    except (OSError, AttributeError, subprocess.SubprocessError):
        text = (REPO / "src" / "usmc.h").read_text()
        return int(re.search(r"#define USMC_PROTO_VERSION\s+(\d+)", text).group(1))


# The runtime directory's shared files, named after their format (usmc.h).
SHM_FORMAT = _shm_format()
REGISTRY_FILE = "registry-v%d" % SHM_FORMAT
STATS_FILE = "stats-v%d" % SHM_FORMAT
# Objects a runtime directory may hold once every usmc process has exited
# and `usmc stat` has collected what the dead left behind.
RUNDIR_IDLE_FILES = {STATS_FILE, REGISTRY_FILE}

def tail(path, n=4000):
    """Last n characters of a log file (for failure messages)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return "<no %s>" % path
    return data[-n:].decode("utf-8", "replace")


# --------------------------------------------------------------------------
# Runtime directory and `usmc stat`
# --------------------------------------------------------------------------

class Rundir:
    """One test's runtime directory (tmpfs) and the CLI views of it."""

    def __init__(self, path):
        self.path = Path(path)

    def env(self, debug=False, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("USMC_") and k != "LD_PRELOAD"}
        env["USMC_RUNDIR"] = str(self.path)
        if debug:
            env["USMC_DEBUG"] = "1"
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def cli(self, *args, check=True, timeout=30):
        r = subprocess.run([str(USMC), *args], env=self.env(), capture_output=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("usmc %s failed (rc %d): %s" % (
                " ".join(args), r.returncode, r.stderr.decode(errors="replace")))
        return r

    def stat(self):
        r = self.cli("stat", "--json")
        try:
            return json.loads(r.stdout)
        except ValueError as e:
            raise AssertionError("usmc stat --json is not JSON (%s):\n%s" % (
                e, r.stdout.decode(errors="replace")))

    def stat_text(self):
        return self.cli("stat").stdout.decode()

    def reset(self):
        return self.cli("stat", "--reset").stdout.decode()

    def dev(self, as_json=False):
        if as_json:
            r = self.cli("dev", "--json")
            return json.loads(r.stdout)
        return self.cli("dev").stdout.decode()

    def settle(self, pred, timeout=10.0, stat=None):
        """Poll `usmc stat --json` (or stat(), e.g. run as the directory's
        owner) until pred(stat) holds (peers may still be counting a
        connection the other side already finished); return the last
        snapshot either way so the caller asserts on it."""
        stat = stat or self.stat
        deadline = time.monotonic() + timeout
        st = stat()
        while not pred(st) and time.monotonic() < deadline:
            time.sleep(0.05)
            st = stat()
        return st

    def entries(self):
        return sorted(p.name for p in self.path.iterdir()) if self.path.exists() else []


def fmt_stat(st):
    st = dict(st)
    conns = st.pop("connections", [])
    return json.dumps(st, sort_keys=True) + "\nlive connections: %d %s" % (
        len(conns), json.dumps(conns[:8]))


def assert_accelerated(st, clients=None, min_clients=1, diag="", handed=False):
    """Every connection both ends of which were usmc used shared memory:
    no fallback, no handshake error, both sides counted.  handed: the
    server hands every connection to another process (a forked child, an
    SCM_RIGHTS receiver) before its first byte, so on a device without
    sharing each one moved to TCP there, and no byte crossed shared memory."""
    msg = "\n" + fmt_stat(st) + ("\n" + diag if diag else "")
    assert st["handshake_errors"] == 0, "handshake errors" + msg
    moved = set(st["tcp_fallback"]) <= UNSHARED_REASONS if UNSHARED else False
    assert st["tcp_fallback"] == {} or moved, "unexpected TCP fallback" + msg
    assert st["tcp_conns"] == 0 or (moved and st["tcp_conns"] <= sum(st["tcp_fallback"].values())), \
        "connections on TCP" + msg
    assert st["smc_conns"] > 0, "no connection used shared memory" + msg
    assert st["smc_conns"] == st["smc_client"] + st["smc_server"], msg
    assert st["smc_client"] == st["smc_server"], "client/server counts differ" + msg
    if clients is not None:
        assert st["smc_client"] == clients, "expected %d client connections" % clients + msg
        assert st["smc_conns"] == 2 * clients, msg
    else:
        assert st["smc_client"] >= min_clients, msg
    if handed and UNSHARED:
        fb = st["tcp_fallback"]
        assert fb.get("device_unshared", 0) == fb.get("peer_moved_to_tcp", 0) == \
            st["smc_client"], "every connection moved at its hand-over" + msg
        return
    assert st["tx_bytes"] > 0 and st["rx_bytes"] > 0, "no bytes through shared memory" + msg


def accel_pred(clients):
    return lambda st: st["smc_client"] >= clients and st["smc_server"] >= clients


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

class Proc:
    def __init__(self, name, argv, popen, out, err):
        self.name, self.argv, self.popen = name, argv, popen
        self.out, self.err = Path(out), Path(err)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def wait(self, timeout):
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not finish within %ss\n%s" % (
                self.name, timeout, self.diag()))

    def signal_group(self, sig):
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace=3.0):
        """SIGTERM the process group, SIGKILL it after grace seconds."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # Children (nginx workers, forked servers) may outlive the leader.
        self.signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def stdout(self):
        return self.out.read_bytes() if self.out.exists() else b""

    def stderr(self):
        return self.err.read_bytes() if self.err.exists() else b""

    def text(self):
        return self.stdout().decode("utf-8", "replace")

    def diag(self):
        return "--- %s %s (rc %s)\n--- stdout:\n%s\n--- stderr:\n%s" % (
            self.name, " ".join(map(str, self.argv)), self.popen.poll(),
            tail(self.out), tail(self.err))


class Procs:
    """Starts commands in their own process groups and stops them all."""

    def __init__(self, logdir):
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.procs = []
        self.n = 0

    def start(self, name, argv, env, usmc=True, netns=None, stdin=None, cwd=None):
        self.n += 1
        argv = [str(a) for a in argv]
        cmd = list(argv)
        if usmc:
            cmd = [str(USMC), "run", "--"] + cmd
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd
        out = self.logdir / ("%02d-%s.out" % (self.n, name))
        err = self.logdir / ("%02d-%s.err" % (self.n, name))
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe,
                                 stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                 start_new_session=True, cwd=cwd)
        proc = Proc(name, cmd, p, out, err)
        self.procs.append(proc)
        return proc

    def run(self, name, argv, env, timeout=60, check=True, input_bytes=None, **kw):
        """Run to completion; returns the Proc (exit status in .popen.returncode)."""
        stdin = None
        if input_bytes is not None:
            path = self.logdir / ("%02d-%s.in" % (self.n + 1, name))
            path.write_bytes(input_bytes)
            stdin = open(path, "rb")
        try:
            proc = self.start(name, argv, env, stdin=stdin, **kw)
        finally:
            if stdin is not None:
                stdin.close()
        try:
            rc = proc.wait(timeout)
        except AssertionError:
            proc.stop(grace=0.5)
            raise
        if check:
            assert rc == 0, "%s exited with %d\n%s" % (name, rc, proc.diag())
        return proc

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop()

    def diag(self):
        return "\n".join(p.diag() for p in self.procs)


# --------------------------------------------------------------------------
# Ports and readiness
# --------------------------------------------------------------------------

def wait_line(proc, text, timeout=30.0):
    """Wait until proc printed a whole line (newline included) containing
    text on stdout: a program run unbuffered (PYTHONUNBUFFERED, as CI sets)
    writes print("PORT", n)'s pieces separately, so "PORT" alone can be
    there before the number is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = proc.stdout()
        if text.encode() in out[:out.rfind(b"\n") + 1]:
            return
        if not proc.alive():
            break
        time.sleep(0.01)
    raise AssertionError("%s never printed %r\n%s" % (proc.name, text, proc.diag()))


def free_port(host="127.0.0.1"):
    """A port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listen_inodes(pid, port):
    """Inodes of the sockets listening on port in pid's network namespace."""
    found = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path("/proc/%d/net/%s" % (pid, name)).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.add(f[9])
    return found


def _own_sockets(pid):
    out = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def wait_listen(proc, port, usmc=True, timeout=15.0):
    """Wait until proc listens on port without connecting to it (a probe
    connection would be counted).  For a usmc server also wait for the
    listener's registration (its USMC_DEBUG line), so that the first client
    cannot race it.  Returns False if proc exited first."""
    pat = re.compile(rb"listen \S+:%d: registered for SMC-D" % port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            return False
        inodes = _listen_inodes(proc.pid, port)
        if inodes:
            if not usmc:
                # Ours, not someone else's on the same port.
                if inodes & _own_sockets(proc.pid):
                    return True
                time.sleep(0.02)
                continue
            if pat.search(proc.stderr()):
                return True
        time.sleep(0.02)
    raise AssertionError("%s not listening on %d after %ss\n%s" % (
        proc.name, port, timeout, proc.diag()))


def wait_pid_listen(pidfile, port, timeout=15.0):
    """A daemonized server: its pid (from its pidfile) once it listens on
    port itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = int(Path(pidfile).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        if pid and _listen_inodes(pid, port) & _own_sockets(pid):
            return pid
        time.sleep(0.05)
    raise AssertionError("no daemon listening on %d (pidfile %s)" % (port, pidfile))


def start_server(procs, name, argv_for_port, env, usmc=True, host="127.0.0.1",
                 tries=4, netns=None, port=None):
    """Start a server on a free port (retrying if someone took the port in
    between); returns (proc, port).  env must contain USMC_DEBUG=1 for usmc
    servers (readiness is the registration message)."""
    if usmc:
        assert env.get("USMC_DEBUG"), "usmc servers need USMC_DEBUG=1 for readiness"
    last = None
    for _ in range(tries):
        p = port or free_port(host if not netns else "127.0.0.1")
        proc = procs.start(name, argv_for_port(p), env, usmc=usmc, netns=netns)
        if wait_listen(proc, p, usmc=usmc):
            return proc, p
        last = proc
        proc.stop(grace=0.5)
        if port:
            break
    raise AssertionError("cannot start %s\n%s" % (name, last.diag() if last else ""))


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

PATTERN_PERIOD = 251


def pattern(offset, n):
    """Bytes offset..offset+n of the endless pattern 0,1,..,250,0,1,..."""
    base = bytes(range(PATTERN_PERIOD))
    reps = (n + PATTERN_PERIOD * 2) // PATTERN_PERIOD
    start = offset % PATTERN_PERIOD
    return (base * reps)[start:start + n]


def random_bytes(n, seed):
    return random.Random(seed).randbytes(n)


def shm_snapshot():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def stray_shm(before, after, own):
    """New top-level /dev/shm objects that look like usmc's (files, or lg-/ln-/t-
    objects) - other sessions' runtime directories are directories and are
    left alone."""
    out = []
    for name in sorted(after - before):
        if name == own:
            continue
        path = os.path.join("/dev/shm", name)
        if not os.path.isdir(path) or re.match(r"^(lg-|ln-|t-)", name):
            out.append(name)
    return out


# --------------------------------------------------------------------------
# Scripts run under /usr/bin/python3 (written into the test's tmp directory)
# --------------------------------------------------------------------------

# asyncio echo server: HOST PORT.  Echoes every byte, closes after EOF.
ASYNC_ECHO_SERVER = r'''
import asyncio, sys

async def handle(reader, writer):
    try:
        while True:
            data = await reader.read(262144)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except ConnectionError as e:
        print("connection error:", e, file=sys.stderr, flush=True)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass

async def main():
    server = await asyncio.start_server(handle, sys.argv[1], int(sys.argv[2]))
    print("listening", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
'''

# asyncio echo client: HOST PORT CONNS MSGS MAXSIZE SEED [hold]
# Every message: 16-byte header (conn, seq, length) + payload stamped with
# (conn, seq); pipelines 1-4 messages, reads the echo back and compares
# byte for byte; half-closes and expects EOF.  "hold": keep the first
# connection open after the exchange until stdin closes.
ASYNC_ECHO_CLIENT = r'''
import asyncio, random, struct, sys

host, port = sys.argv[1], int(sys.argv[2])
conns, msgs, maxsize, seed = (int(x) for x in sys.argv[3:7])
hold = len(sys.argv) > 7 and sys.argv[7] == "hold"
BASE = bytes(range(251)) * (maxsize // 251 + 3)

def message(c, seq, size):
    start = (c * 7919 + seq * 104729) % 251
    return struct.pack("!IIQ", c, seq, size) + BASE[start:start + size]

async def one(c, stats):
    rnd = random.Random(seed * 1000 + c)
    reader, writer = await asyncio.open_connection(host, port)
    seq = 0
    while seq < msgs:
        batch = []
        for _ in range(min(rnd.randint(1, 4), msgs - seq)):
            size = rnd.choice([rnd.randint(0, 64), rnd.randint(0, min(4096, maxsize)),
                               rnd.randint(min(4097, maxsize), maxsize)])
            m = message(c, seq, size)
            batch.append(m)
            writer.write(m)
            seq += 1
        await writer.drain()
        for m in batch:
            got = await reader.readexactly(len(m))
            if got != m:
                bad = next(i for i in range(len(m)) if got[i] != m[i])
                print("MISMATCH conn %d msg %s len %d first bad byte %d: got %r want %r"
                      % (c, struct.unpack("!IIQ", m[:16]), len(m), bad,
                         got[bad:bad + 16], m[bad:bad + 16]), flush=True)
                sys.exit(1)
            stats[0] += 1
            stats[1] += len(m)
    if hold and c == 0:
        print("holding", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
    writer.write_eof()
    rest = await reader.read()
    if rest:
        print("conn %d: %d unexpected bytes after the last echo" % (c, len(rest)), flush=True)
        sys.exit(1)
    writer.close()
    await writer.wait_closed()

async def main():
    stats = [0, 0]
    await asyncio.gather(*(one(c, stats) for c in range(conns)))
    print("OK conns=%d msgs=%d bytes=%d" % (conns, stats[0], stats[1]), flush=True)

asyncio.run(main())
'''

# Forking echo server: HOST PORT.  Blocking sockets; each accepted
# connection is served by a forked child (fd inherited across fork).
FORK_ECHO_SERVER = r'''
import os, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ls = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(64)
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        ls.close()
        while True:
            d = c.recv(262144)
            if not d:
                break
            c.sendall(d)
        c.shutdown(socket.SHUT_WR)
        c.close()
        os._exit(0)
    c.close()
'''

# Streaming peer for the SIGKILL tests:
#   stream.py server|client HOST PORT send|recv|recvstop
# The client speaks first (one byte "G", so that the connection is decided
# by the client's proposal, see test_server_first.py for the other order);
# then the sender writes the endless pattern, the receiver verifies it.  Once
# 8 MB went through, each side prints "streaming".  On the end of the
# stream it prints "END <kind> <CLOCK_MONOTONIC seconds> <bytes>", kind
# EOF or the errno name, and exits 0 (EOF/ECONNRESET/EPIPE) or 3.
STREAM = r'''
import errno, os, socket, sys, time
role, host, port, what = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
P = 251
BASE = bytes(range(P)) * (1048576 // P + 3)
CHUNK = 1048576 // P * P

if role == "server":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    s, _ = ls.accept()
    if s.recv(1) != b"G":
        print("no start byte", flush=True)
        sys.exit(5)
else:
    s = socket.create_connection((host, port))
    s.sendall(b"G")

def end(kind, n):
    print("END %s %.6f %d" % (kind, time.monotonic(), n), flush=True)
    sys.exit(0 if kind in ("EOF", "ECONNRESET", "EPIPE") else 3)

n = 0
announced = False
try:
    if what == "send":
        while True:
            n += s.send(BASE[n % P:n % P + CHUNK])
            if not announced and n >= 8 << 20:
                print("streaming", flush=True)
                announced = True
    else:
        while True:
            d = s.recv(1048576)
            if not d:
                end("EOF", n)
            if d != BASE[n % P:n % P + len(d)]:
                print("CORRUPT at byte %d" % n, flush=True)
                sys.exit(4)
            n += len(d)
            if not announced and n >= 8 << 20:
                print("streaming", flush=True)
                announced = True
                if what == "recvstop":
                    # Stop reading: whatever arrives from now on stays
                    # unread until the process dies.
                    time.sleep(3600)
except OSError as e:
    end(errno.errorcode.get(e.errno, str(e.errno)), n)
'''

# Plain recorder: HOST PORT OUTFILE MODE.  Accepts one connection, records
# every byte it receives until EOF into OUTFILE.  MODE http: answer the
# first request (after the blank line) with a tiny response and close the
# write side; MODE raw: answer "ok" after EOF.
RECORDER = r'''
import socket, sys
host, port, path, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(1)
c, _ = ls.accept()
buf = b""
answered = False
while True:
    d = c.recv(65536)
    if not d:
        break
    buf += d
    if mode == "http" and not answered and b"\r\n\r\n" in buf:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        c.shutdown(socket.SHUT_WR)
        answered = True
if mode == "raw":
    c.sendall(b"ok")
c.close()
open(path, "wb").write(buf)
'''

# Sender server: HOST PORT NBYTES.  For each connection, first sends a
# greeting and NBYTES of pattern, then closes (the server writes first).
SENDER_SERVER = r'''
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
P = 251
data = b"HELLO usmc\n" + (bytes(range(P)) * (n // P + 1))[:n]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(8)
while True:
    c, _ = ls.accept()
    c.sendall(data)
    c.close()
'''

# Plain client: HOST PORT OUTFILE [SENDFILE].  Connects, sends SENDFILE's
# content (if any) and half-closes, records everything until EOF.
RAW_CLIENT = r'''
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
if len(sys.argv) > 4:
    s.sendall(open(sys.argv[4], "rb").read())
    s.shutdown(socket.SHUT_WR)
buf = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    buf += d
open(sys.argv[3], "wb").write(buf)
'''

SCRIPTS = {
    "async_echo_server.py": ASYNC_ECHO_SERVER,
    "async_echo_client.py": ASYNC_ECHO_CLIENT,
    "fork_echo_server.py": FORK_ECHO_SERVER,
    "stream.py": STREAM,
    "recorder.py": RECORDER,
    "sender_server.py": SENDER_SERVER,
    "raw_client.py": RAW_CLIENT,
}


def write_scripts(directory):
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, text in SCRIPTS.items():
        p = d / name
        p.write_text(text)
        paths[name.rsplit(".", 1)[0]] = p
    return paths


def user_ids(name):
    """(uid, gid) of a system user."""
    pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


def as_user(name, argv):
    """argv run as user name: its ids, no supplementary groups (setpriv).
    Servers that will not run as root (squid), or whose children must reach
    a runtime directory that user owns (dovecot)."""
    uid, gid = user_ids(name)
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups", *argv]


def stat_as_user(name, rundir):
    """usmc stat --json of a runtime directory user name owns."""
    r = subprocess.run(as_user(name, [str(USMC), "stat", "--json"]), env=rundir.env(),
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return json.loads(r.stdout)


def sha256_file(path):
    d = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            d.update(block)
    return d.hexdigest()


def kill_daemon(pid, pidfile):
    """SIGCONT and SIGKILL a daemonized server (its pid, else its pidfile's)."""
    if pid is None:
        try:
            pid = int(Path(pidfile).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.02)
