"""Hostile neighbours (issue 15): whatever a process of the same user or of
another user plants in, truncates in or forges in the runtime directory,
no usmc process dies (SIGBUS), hangs or loses a byte; the worst it gets is
TCP, and each attack shows as a counted reason.

Each test runs real servers (redis-server, nginx) under `usmc run` in a
runtime directory on a small tmpfs of its own (mounted here, so filling it
never touches /dev/shm), verifying clients (every value read back and
compared), and tests/integration/hostile_attacker.py as the attacker.
Runs as root (mounts, a second user created with useradd, setpriv).
USMC_TEST_BUILD=build/asan runs the victims under ASan (helpers.BUILD).
"""
import json
import os
import pwd
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from . import helpers as h
from .test_nginx import NGINX_CONF

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount, useradd)")

ATTACKER = Path(__file__).resolve().parent / "hostile_attacker.py"
OTHER_USER = "usmc-hostile"
ASAN = (h.BUILD / "obj").exists() and "asan" in str(h.BUILD)

# Verifying redis client: HOST PORT ROUNDS CONNS SEED [SRCPORT].  One
# connection stays open through every round and is checked in each; each
# round also opens CONNS new connections (from SRCPORT when given), SETs
# random values up to 64 KB, GETs them back and compares.  Between rounds it
# prints "ROUND k OK" and waits for a line on stdin.
REDIS_CHECK = r'''
import random, socket, sys
host, port, rounds, conns, seed = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
src = int(sys.argv[6]) if len(sys.argv) > 6 else 0
rnd = random.Random(seed)

def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out

class Conn:
    def __init__(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if src:
            s.bind(("127.0.0.1", src))
        s.connect((host, port))
        self.s, self.f = s, s.makefile("rb")
    def call(self, *args):
        self.s.sendall(cmd(*args))
        line = self.f.readline()
        if line.startswith(b"$"):
            n = int(line[1:])
            data = self.f.read(n + 2)[:n] if n >= 0 else None
            return data
        return line.rstrip(b"\r\n")
    def check(self, tag):
        for i in range(4):
            v = rnd.randbytes(rnd.choice([1, 100, 5000, 65536]))
            k = "%s-%d-%d" % (tag, seed, i)
            assert self.call("SET", k, v) == b"+OK", tag
            got = self.call("GET", k)
            if got != v:
                print("MISMATCH %s %d" % (tag, i), flush=True)
                sys.exit(1)
    def close(self):
        self.s.close()

keep = Conn()
for r in range(rounds):
    keep.check("keep%d" % r)
    for c in range(conns):
        x = Conn()
        x.check("r%dc%d" % (r, c))
        x.close()
    print("ROUND %d OK" % r, flush=True)
    if r + 1 < rounds:
        sys.stdin.readline()
keep.close()
print("DONE", flush=True)
'''


# --------------------------------------------------------------------------
# Fixtures: a tmpfs of our own as the runtime directory, the other user
# --------------------------------------------------------------------------

@pytest.fixture
def mnt():
    d = Path(tempfile.mkdtemp(prefix="usmc-hostile-", dir="/tmp"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=1777", "tmpfs", str(d)],
                       capture_output=True, timeout=30)
    if r.returncode:
        os.rmdir(d)
        pytest.skip("cannot mount a tmpfs: %s" % r.stderr.decode())
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], timeout=30)
        os.rmdir(d)


@pytest.fixture
def rundir(mnt):
    """Overrides conftest's: the victims' runtime directory on our tmpfs
    (procs depends on it, so every process stops before the unmount)."""
    d = mnt / "rd"
    d.mkdir(mode=0o700)
    return h.Rundir(d)


@pytest.fixture(scope="module")
def other():
    try:
        pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
        r = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", OTHER_USER],
                           capture_output=True, timeout=60)
        assert r.returncode in (0, 9), r.stderr.decode()
        pw = pwd.getpwnam(OTHER_USER)
    return pw


@pytest.fixture
def kit(tmp_path):
    """The attacker and the verifying client where any user can run them."""
    d = Path(tempfile.mkdtemp(prefix="usmc-hostile-kit-", dir="/tmp"))
    os.chmod(d, 0o755)
    shutil.copy(ATTACKER, d / "attacker.py")
    (d / "redis_check.py").write_text(REDIS_CHECK)
    for p in d.iterdir():
        os.chmod(p, 0o644)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def attack(kit, *args, user=None):
    argv = [h.PY, str(kit / "attacker.py"), *map(str, args)]
    if user is not None:
        argv = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                "--clear-groups", "--"] + argv
    r = subprocess.run(argv, capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == b"done", (args, r.stdout, r.stderr)


def venv(rundir, **extra):
    """Victims' environment (ASan: the runtime must come first)."""
    env = rundir.env(debug=True, **extra)
    if ASAN:
        env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0:symbolize=0"
    return env


def start_redis(procs, rundir, usmc=True, port=None, env=None):
    return h.start_server(
        procs, "redis-server",
        lambda p: ["redis-server", "--save", "", "--appendonly", "no", "--port", p,
                   "--bind", "127.0.0.1"],
        env or venv(rundir), usmc=usmc, port=port)


def client(procs, kit, rundir, port, rounds=1, conns=2, seed=1, src=None, usmc=True,
           env=None, name="check"):
    """Start the verifying client; returns it after its first round."""
    argv = [h.PY, kit / "redis_check.py", "127.0.0.1", port, rounds, conns, seed]
    if src:
        argv.append(src)
    p = procs.start(name, argv, env or venv(rundir), usmc=usmc, stdin=subprocess.PIPE)
    wait_out(p, b"ROUND 0 OK")
    return p


def next_round(p, k):
    p.popen.stdin.write(b"\n")
    p.popen.stdin.flush()
    wait_out(p, b"ROUND %d OK" % k)


def finish(p):
    if p.popen.stdin:
        p.popen.stdin.close()
    assert p.wait(60) == 0, p.diag()
    assert p.stdout().rstrip().endswith(b"DONE"), p.diag()


def wait_out(p, text, timeout=30.0):
    deadline = time.monotonic() + timeout
    while text not in p.stdout():
        if not p.alive() or time.monotonic() > deadline:
            raise AssertionError("%s never printed %r\n%s" % (p.name, text, p.diag()))
        time.sleep(0.02)


def assert_alive(*procs_):
    for p in procs_:
        assert p.alive(), "%s died\n%s" % (p.name, p.diag())


def only(rundir, prefix):
    names = [n for n in rundir.entries() if n.startswith(prefix)]
    assert len(names) == 1, rundir.entries()
    return rundir.path / names[0]


def report(what, st):
    """The counters that show the attack (pytest -s prints them)."""
    print("\n%s: smc_client=%d smc_server=%d tcp_conns=%d tcp_fallback=%s" % (
        what, st["smc_client"], st["smc_server"], st["tcp_conns"], st["tcp_fallback"]))


# --------------------------------------------------------------------------
# Rows 1-3: truncated shared files (SIGBUS)
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
@pytest.mark.parametrize("target", ["index", "registry", "stats"])
def test_truncated_shared_file(rundir, procs, kit, target):
    """Same user truncates the listener's CLC index, the registry or the
    statistics file while redis-server and a client have them mapped."""
    server, port = start_redis(procs, rundir)
    c = client(procs, kit, rundir, port, rounds=3)
    st = rundir.stat()
    assert st["smc_client"] >= 3 and st["tcp_conns"] == 0, h.fmt_stat(st)
    path = {"index": lambda: only(rundir, "ln-"),
            "registry": lambda: rundir.path / h.REGISTRY_FILE,
            "stats": lambda: rundir.path / h.STATS_FILE}[target]()
    attack(kit, "truncate", path)
    next_round(c, 1)                # the same client process: mapped before
    c2 = client(procs, kit, rundir, port, seed=2, name="check-new")
    next_round(c, 2)
    finish(c)
    c2.popen.stdin.close()
    assert c2.wait(60) == 0 and c2.stdout().rstrip().endswith(b"DONE"), c2.diag()
    assert_alive(server)
    if target == "stats":
        # Counters are lost at worst; `usmc stat` starts a fresh file and
        # new connections count again.
        rundir.stat()
        c3 = client(procs, kit, rundir, port, seed=3, name="check-after")
        finish(c3)
        st = rundir.settle(lambda s: s["smc_client"] >= 2)
        assert st["smc_client"] >= 2, h.fmt_stat(st)
    else:
        fb = rundir.settle(lambda s: s["tcp_fallback"].get("rundir_unusable", 0) >= 1)
        report("truncated %s" % target, fb)
        assert fb["tcp_fallback"].get("rundir_unusable", 0) >= 1, h.fmt_stat(fb)
        # `usmc stat` (just run) removed a truncated registry: a server
        # that listens from now on accelerates again.
        rundir.reset()
        server2, port2 = start_redis(procs, rundir)
        finish(client(procs, kit, rundir, port2, seed=4, name="check-server2"))
        st = rundir.settle(h.accel_pred(3))
        assert st["smc_client"] == 3 and st["smc_server"] == 3, h.fmt_stat(st)
        server2.stop()
    server.stop()
    assert b"SIGBUS" not in server.stderr() and server.popen.returncode in (0, -15), \
        server.diag()


@pytest.mark.timeout(90, method="signal")
def test_truncated_index_nginx(rundir, procs, kit, tmp_path):
    """nginx (master and two workers share the listener's index): the
    index truncated between downloads; every download stays byte-exact."""
    www = tmp_path / "www"
    www.mkdir()
    body = h.random_bytes(3 << 20, seed=15)
    (www / "big.bin").write_bytes(body)
    conf_dir = tmp_path / "nginx"
    conf_dir.mkdir()

    def argv(port):
        conf = conf_dir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=conf_dir, sendfile="on", port=port, root=www,
                                          user="root", pid="nginx.pid",
                                          log=conf_dir / "access.log"))
        return ["nginx", "-c", conf, "-p", conf_dir, "-e", "stderr"]

    server, port = h.start_server(procs, "nginx", argv, venv(rundir))
    out = tmp_path / "got.bin"

    def download(name):
        out.unlink(missing_ok=True)
        procs.run(name, ["curl", "-sS", "--fail", "-o", out,
                         "http://127.0.0.1:%d/big.bin" % port], venv(rundir), timeout=60)
        assert out.read_bytes() == body, name

    download("curl-before")
    assert rundir.stat()["smc_server"] >= 1
    attack(kit, "truncate", only(rundir, "ln-"))
    for i in range(3):
        download("curl-after-%d" % i)
    assert_alive(server)
    st = rundir.settle(lambda s: s["tcp_fallback"].get("rundir_unusable", 0) >= 3)
    report("nginx index truncated", st)
    assert st["tcp_fallback"].get("rundir_unusable", 0) >= 3, h.fmt_stat(st)
    assert st["smc_client"] >= 1, h.fmt_stat(st)


# --------------------------------------------------------------------------
# Row 4: another user fills the tmpfs before the victim's server starts
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
def test_full_tmpfs_before_listen(rundir, procs, kit, mnt, other):
    rundir.stat()                   # the victim ran usmc before: registry, stats
    rundir.cli("stat")
    attack(kit, "fill", mnt, user=other)
    env = venv(rundir)
    port = h.free_port()
    server = procs.start("redis-server", ["redis-server", "--save", "", "--appendonly", "no",
                                          "--port", port, "--bind", "127.0.0.1"], env)
    h.wait_listen(server, port, usmc=False)
    c = client(procs, kit, rundir, port)
    finish(c)
    assert_alive(server)
    st = rundir.settle(lambda s: s["tcp_conns"] >= 6)
    report("tmpfs filled by another user", st)
    assert st["smc_conns"] == 0, h.fmt_stat(st)
    assert st["tcp_fallback"].get("out_of_memory", 0) >= 3, h.fmt_stat(st)


# --------------------------------------------------------------------------
# Rows 5-7: FIFOs where usmc expects files
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
def test_forged_entries_owned_by_fifo(rundir, procs, kit):
    """Index entries of a foreign 4-tuple whose link group memory is a FIFO:
    the server must not block opening it; a plain client is served."""
    server, port = start_redis(procs, rundir)
    src = h.free_port()
    attack(kit, "forge-entries", only(rundir, "ln-"), src, "0xfeed")
    attack(kit, "lgfifo", rundir.path, "0xfeed")
    c = client(procs, kit, rundir, port, conns=0, src=src, usmc=False)
    finish(c)
    assert_alive(server)
    st = rundir.settle(lambda s: s["tcp_conns"] >= 1)
    report("forged entries, lg-X/mem a FIFO", st)
    assert st["tcp_fallback"].get("rundir_unusable", 0) >= 1, h.fmt_stat(st)


@pytest.mark.timeout(90, method="signal")
def test_dead_listener_index_is_fifo(rundir, procs, kit):
    """A SIGKILLed usmc server's index replaced by a FIFO, a plain server on
    the same port: a usmc client must connect (TCP), not hang."""
    server, port = start_redis(procs, rundir)
    ln = only(rundir, "ln-")
    server.signal_group(signal.SIGKILL)
    server.popen.wait(10)
    attack(kit, "fifo", ln)
    plain, _ = start_redis(procs, rundir, usmc=False, port=port)
    c = client(procs, kit, rundir, port)
    finish(c)
    st = rundir.settle(lambda s: s["tcp_conns"] >= 3)
    report("dead listener's index a FIFO", st)
    assert st["smc_conns"] == 0, h.fmt_stat(st)
    assert st["tcp_fallback"].get("rundir_unusable", 0) >= 1, h.fmt_stat(st)


@pytest.mark.timeout(60, method="signal")
def test_cli_with_fifo_in_link_group(rundir, procs, kit):
    rundir.stat()
    attack(kit, "lgfifo", rundir.path, "0xbad")
    st = rundir.stat()
    assert "tcp_fallback" in st
    assert "1 link group(s) refused" in rundir.dev(), rundir.dev()
    assert rundir.dev(as_json=True)["devices"][0]["refused_objects"] == 1
    rundir.cli("stat")
    assert (rundir.path / "lg-0000000000000bad" / "mem").exists()


@pytest.mark.timeout(90, method="signal")
def test_symlink_at_registry(rundir, procs, kit, tmp_path):
    """The registry replaced by a symlink to a file of the victim's: never
    followed, never written, left in place; TCP with a counted reason."""
    rundir.stat()
    precious = tmp_path / "precious"
    data = b"must never change\n" * 1000
    precious.write_bytes(data)
    attack(kit, "symlink", rundir.path / h.REGISTRY_FILE, precious)
    port = h.free_port()
    server = procs.start("redis-server", ["redis-server", "--save", "", "--appendonly", "no",
                                          "--port", port, "--bind", "127.0.0.1"], venv(rundir))
    h.wait_listen(server, port, usmc=False)
    finish(client(procs, kit, rundir, port))
    assert_alive(server)
    assert precious.read_bytes() == data
    assert (rundir.path / h.REGISTRY_FILE).is_symlink()
    st = rundir.settle(lambda s: s["tcp_conns"] >= 6)
    report("registry a symlink", st)
    assert st["tcp_fallback"] == {"rundir_unusable": 6}, h.fmt_stat(st)


# --------------------------------------------------------------------------
# Row 8: forged "client inside connect()" announcements
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
def test_forged_announcements_are_cleared(rundir, procs, kit):
    server, port = start_redis(procs, rundir)
    ln = only(rundir, "ln-")
    attack(kit, "forge-announce", ln, 4)
    c = client(procs, kit, rundir, port, conns=2, usmc=False)
    finish(c)
    data = ln.read_bytes()[40:40 + 8 * 64]
    left = [i for i, (t,) in enumerate(struct.iter_unpack("<Q", data)) if t]
    assert left == [], "announcements never cleared: %s" % left
    assert_alive(server)


# --------------------------------------------------------------------------
# Row 9: another user plants a registry in a shared directory (-a all)
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
def test_shared_dir_planted_registry(procs, kit, mnt, other):
    theirs = mnt / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other.pw_uid, other.pw_gid)
    r = subprocess.run(["setpriv", "--reuid=%d" % other.pw_uid, "--regid=%d" % other.pw_gid,
                        "--clear-groups", "--", str(h.USMC), "stat"],
                       env=h.Rundir(theirs).env(), capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    shared = mnt / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    attack(kit, "plant", theirs / h.REGISTRY_FILE, shared / h.REGISTRY_FILE, user=other)
    rd = h.Rundir(shared)
    env = venv(rd, USMC_ALLOW="all")
    port = h.free_port()
    server = procs.start("redis-server", ["redis-server", "--save", "", "--appendonly", "no",
                                          "--port", port, "--bind", "127.0.0.1"], env)
    h.wait_listen(server, port, usmc=False)
    c = client(procs, kit, rd, port, rounds=2, env=env)
    attack(kit, "truncate", shared / h.REGISTRY_FILE, user=other)
    next_round(c, 1)
    finish(c)
    assert_alive(server)
    st = rd.settle(lambda s: s["tcp_fallback"].get("rundir_unusable", 0) >= 4)
    report("planted 0666 registry, then truncated", st)
    assert st["tcp_fallback"].get("rundir_unusable", 0) >= 4, h.fmt_stat(st)


# --------------------------------------------------------------------------
# Row 10: a SIGKILLed server restarted on the same port
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
def test_restart_after_sigkill_accelerates(rundir, procs, kit):
    server, port = start_redis(procs, rundir)
    c = client(procs, kit, rundir, port)
    finish(c)
    rundir.settle(lambda s: s["smc_client"] >= 3)
    rundir.reset()
    # Nobody runs `usmc stat` (which collects the dead) from here until
    # the clients of the restarted server are done.
    server.signal_group(signal.SIGKILL)
    server.popen.wait(10)
    server2, _ = start_redis(procs, rundir, port=port)
    c = client(procs, kit, rundir, port, seed=5, name="check-restarted")
    finish(c)
    st = rundir.settle(h.accel_pred(3))
    report("restarted after SIGKILL", st)
    h.assert_accelerated(st, clients=3, diag=server2.diag())


# --------------------------------------------------------------------------
# Row 13: another user pre-created the victim's default runtime directory
# --------------------------------------------------------------------------

VICTIM_USER = "usmc-hostile-v"


@pytest.mark.timeout(60, method="signal")
def test_default_rundir_taken_is_explained(other):
    try:
        v = pwd.getpwnam(VICTIM_USER)
    except KeyError:
        r = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", VICTIM_USER],
                           capture_output=True, timeout=60)
        assert r.returncode in (0, 9), r.stderr.decode()
        v = pwd.getpwnam(VICTIM_USER)
    d = Path("/dev/shm/usmc-%d" % v.pw_uid)
    if d.is_symlink() or d.is_file():
        d.unlink()
    elif d.exists():
        shutil.rmtree(d)
    d.mkdir()
    os.chown(d, other.pw_uid, other.pw_gid)
    os.chmod(d, 0o777)
    try:
        env = {"PATH": os.environ["PATH"], "HOME": "/"}
        r = subprocess.run(["setpriv", "--reuid=%d" % v.pw_uid, "--regid=%d" % v.pw_gid,
                            "--clear-groups", "--", str(h.USMC), "stat"], env=env,
                           capture_output=True, timeout=30)
        err = r.stderr.decode()
        assert r.returncode == 1, (r.returncode, err)
        assert err.startswith("usmc stat: "), err
        assert str(d) in err and "uid %d" % other.pw_uid in err, err
        assert "-R" in err and "USMC_RUNDIR" in err, err
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# Row 11: SIGKILL of the reading client mid-stream, differential
# --------------------------------------------------------------------------

def unread_bytes_wait(env, port, usmc, timeout=30.0):
    """Until the reader's side holds bytes it has not read: in its TCP
    receive queue (ss), or in its ring (usmc stat -d)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if usmc:
            r = subprocess.run([str(h.USMC), "stat", "-d", "--json"], env=env,
                               capture_output=True, timeout=30)
            st = json.loads(r.stdout)
            if any(c.get("cursors", {}).get(ring, {}).get("queued", 0) > 0
                   for c in st.get("connections", []) for ring in ("tx", "rx")):
                return
        else:
            r = subprocess.run(["ss", "-tnH", "state", "established", "dport", "= :%d" % port],
                               capture_output=True, text=True, timeout=30)
            if any(int(line.split()[0]) > 0 for line in r.stdout.splitlines() if line.split()):
                return
        time.sleep(0.05)
    raise AssertionError("the stopped reader never had unread bytes")


def stream_end_after_reader_kill(procs, scripts, env, usmc):
    port = h.free_port()
    srv = procs.start("stream-server", [h.PY, scripts["stream"], "server", "127.0.0.1", port,
                                        "send"], env, usmc=usmc)
    h.wait_listen(srv, port, usmc=usmc)
    # The reader stops reading once it streams, so that bytes are surely
    # left unread when it dies: TCP's RST, whatever the machine's load
    # (a reader that drained its buffer before the kill would send a FIN,
    # and the writer would get EPIPE, under TCP as under usmc).
    cli = procs.start("stream-client", [h.PY, scripts["stream"], "client", "127.0.0.1", port,
                                        "recvstop"], env, usmc=usmc)
    wait_out(cli, b"streaming")
    unread_bytes_wait(env, port, usmc)
    cli.signal_group(signal.SIGKILL)
    assert srv.wait(30) == 0, srv.diag()
    return srv.text().split("END ")[1].split()[0]


@pytest.mark.timeout(90, method="signal")
def test_reader_killed_writer_sees_what_tcp_gives(rundir, procs, scripts):
    plain = stream_end_after_reader_kill(procs, scripts, rundir.env(), usmc=False)
    assert plain == "ECONNRESET"
    ours = stream_end_after_reader_kill(procs, scripts, venv(rundir), usmc=True)
    st = rundir.stat()
    assert st["smc_server"] == 1 and st["smc_client"] == 1, h.fmt_stat(st)
    assert ours == plain
