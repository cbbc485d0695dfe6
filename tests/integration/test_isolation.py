"""Isolation between users, tested with two real unprivileged users.

Runs as root (as CI does): creates the system users usmc-iso-a and
usmc-iso-b when missing and runs every usmc process as one of them
(setpriv).  Checked: the default runtime directory is per user (cross-user
connections work on TCP with a visible reason, same-user ones accelerate,
modes are private while a connection is live, the other user reads
nothing); a shared directory locks the other user out; symlinks and
pre-created objects are never followed or trusted; USMC_ALLOW never loosens
modes.  Counters (`usmc stat --json` of each user) and USMC_DEBUG=1 lines
prove what happened; every connection echoes and compares some KB.
"""
import fcntl
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections import namedtuple
from pathlib import Path

import pytest

from . import helpers as h

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to create and become two users")

USER_NAMES = ("usmc-iso-a", "usmc-iso-b")
User = namedtuple("User", "name uid gid")
Kit = namedtuple("Kit", "base usmc lib scripts")

# B's attempts on A's objects: "f:PATH" open/read/open-for-write, "d:PATH"
# list.  Prints {path: "ok" | errno name} as JSON.
PROBE = r'''
import errno, json, os, sys
def attempt(f, *args):
    try:
        f(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def read1(path, fl):
    fd = os.open(path, fl | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        os.read(fd, 1)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
out = {}
for arg in sys.argv[1:]:
    p = arg[2:]
    out[p] = ([attempt(os.listdir, p)] if arg[0] == "d" else
              [attempt(read1, p, fl) for fl in (os.O_RDONLY, os.O_RDWR)])
print(json.dumps(out))
'''


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def users():
    out = []
    for name in USER_NAMES:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            r = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", name],
                               capture_output=True, timeout=60)
            # 9: created meanwhile by a concurrent run.
            assert r.returncode in (0, 9), "useradd %s: %s" % (name, r.stderr.decode())
            pw = pwd.getpwnam(name)
        out.append(User(name, pw.pw_uid, pw.pw_gid))
    return out


@pytest.fixture(autouse=True)
def serial():
    """The users and their default runtime directories are shared by every
    run of this module on the machine: one test at a time."""
    fd = os.open("/tmp/usmc-iso-tests.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def su(u):
    return ["setpriv", "--reuid=%d" % u.uid, "--regid=%d" % u.gid, "--init-groups", "--"]


def runs_as(u, argv):
    return subprocess.run(su(u) + [str(a) for a in argv], env=uenv(None),
                          capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def kit(users):
    """usmc, libusmc.so and the helper scripts where both users can read
    and execute them (a copy when the build is not reachable for them)."""
    base = Path(tempfile.mkdtemp(prefix="usmc-iso-", dir="/tmp"))
    os.chmod(base, 0o755)
    usmc, lib = h.USMC, h.LIB
    if not all(runs_as(u, ["test", "-x", usmc, "-a", "-r", lib]) for u in users):
        (base / "bin").mkdir(mode=0o755)
        usmc, lib = base / "bin" / "usmc", base / "bin" / "libusmc.so"
        for src, dst in ((h.USMC, usmc), (h.LIB, lib)):
            shutil.copy(src, dst)
            os.chmod(dst, 0o755)
    scripts = h.write_scripts(base / "scripts")
    scripts["probe"] = base / "scripts" / "probe.py"
    scripts["probe"].write_text(PROBE)
    os.chmod(base / "scripts", 0o755)
    for p in scripts.values():
        os.chmod(p, 0o644)
    try:
        yield Kit(base, usmc, lib, scripts)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def default_dir(u):
    """u's default runtime directory as rundir.c picks it (no XDG_RUNTIME_DIR)."""
    r = subprocess.run(["stat", "-f", "-c", "%T", "/dev/shm"], capture_output=True, timeout=9)
    if r.stdout.strip() == b"tmpfs":
        return Path("/dev/shm/usmc-%d" % u.uid)
    return Path("/tmp/usmc-%d" % u.uid)


def remove(path):
    """Remove path without following a symlink at it."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def defaults(users):
    """Both users start from no default runtime directory (fresh counters)."""
    dirs = [default_dir(u) for u in users]
    for d in dirs:
        remove(d)
    yield dirs
    for d in dirs:
        remove(d)


@pytest.fixture
def area():
    """A root-owned 0755 scratch directory for shared dirs, traps, victims."""
    d = Path(tempfile.mkdtemp(prefix="usmc-iso-", dir="/dev/shm"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# Running things as a user
# --------------------------------------------------------------------------

def uenv(kit, rundir=None, debug=True, **extra):
    """A clean environment: no inherited USMC_*, LD_PRELOAD or XDG_RUNTIME_DIR."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/",
           "LANG": "C.UTF-8"}
    if kit is not None:
        env["USMC_LIB"] = str(kit.lib)
    if rundir is not None:
        env["USMC_RUNDIR"] = str(rundir)
    if debug:
        env["USMC_DEBUG"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def usmc_argv(kit, u, script, *args):
    return su(u) + [kit.usmc, "run", "--", h.PY, kit.scripts[script], *args]


def start_echo(procs, kit, u, env, registered=True):
    """A usmc asyncio echo server as u; registered: wait for its listener's
    registration (else only for the listening socket)."""
    last = None
    for _ in range(4):
        port = h.free_port()
        p = procs.start("server-" + u.name, usmc_argv(kit, u, "async_echo_server",
                                                       "127.0.0.1", port), env, usmc=False)
        if h.wait_listen(p, port, usmc=registered):
            if not registered:
                wait_for(lambda: b"not registered" in p.stderr(), p)
                assert b"registered for SMC-D" not in p.stderr(), p.diag()
            return p, port
        last = p
        p.stop(grace=0.5)
    raise AssertionError("cannot start the echo server\n" + last.diag())


def echo(procs, kit, u, env, port, conns=2, msgs=10, seed=1):
    """Echo conns x msgs messages (up to 8 KB each) and compare them."""
    p = procs.run("client-" + u.name, usmc_argv(kit, u, "async_echo_client", "127.0.0.1",
                                                port, conns, msgs, 8192, seed), env, timeout=60)
    assert p.text().startswith("OK conns=%d msgs=%d " % (conns, conns * msgs)), p.diag()
    return p


def hold(procs, kit, u, env, port):
    """A client whose connection stays open (after an echo check) until
    release(proc) closes its stdin."""
    p = procs.start("holder-" + u.name, usmc_argv(kit, u, "async_echo_client", "127.0.0.1",
                                                   port, 1, 6, 8192, 7, "hold"),
                    env, usmc=False, stdin=subprocess.PIPE)
    wait_for(lambda: b"holding" in p.stdout(), p)
    return p


def release(p):
    p.popen.stdin.close()
    assert p.wait(30) == 0, p.diag()
    assert p.text().splitlines()[-1].startswith("OK conns=1 msgs=6 "), p.diag()


def wait_for(pred, proc, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if not proc.alive() or time.monotonic() > deadline:
            raise AssertionError("condition not reached\n" + proc.diag())
        time.sleep(0.02)


def ustat(kit, u, rundir=None, check=True, **extra):
    r = subprocess.run(su(u) + [str(kit.usmc), "stat", "--json"],
                       env=uenv(kit, rundir, debug=False, **extra), capture_output=True,
                       timeout=30)
    if not check:
        return r
    assert r.returncode == 0, "usmc stat as %s: rc %d %s" % (u.name, r.returncode, r.stderr)
    return json.loads(r.stdout)


def usettle(kit, u, pred, rundir=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    st = ustat(kit, u, rundir)
    while not pred(st) and time.monotonic() < deadline:
        time.sleep(0.05)
        st = ustat(kit, u, rundir)
    return st


def assert_stat_refused(kit, u, rundir=None, **extra):
    """`usmc stat` in an unusable runtime directory: a clean error, no crash."""
    r = ustat(kit, u, rundir, check=False, **extra)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith(b"usmc stat: "), r.stderr


def tcp_reason(proc, reason):
    line = ("TCP (%s:" % reason).encode()
    assert line in proc.stderr(), "no '%s' line\n%s" % (line.decode(), proc.diag())
    assert h.SMCD_LOG not in proc.stderr(), proc.diag()


def tree(root):
    """Every path under root (root included), never following symlinks."""
    out = [Path(root)]
    for dirpath, dirnames, filenames in os.walk(root):
        out += [Path(dirpath) / n for n in dirnames + filenames]
    return out


def assert_private(root, owner, top_mode=0o700):
    """root has top_mode; everything in it belongs to owner, is no symlink
    and has no group/other permission bits."""
    entries = tree(root)
    st = os.lstat(root)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == top_mode, oct(st.st_mode)
    assert st.st_uid == owner.uid
    bad = []
    for p in entries[1:]:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != owner.uid or st.st_mode & 0o077:
            bad.append("%s uid %d mode %o" % (p, st.st_uid, st.st_mode))
    assert not bad, "objects readable by others or foreign:\n" + "\n".join(bad)
    return entries


def probe(kit, u, entries):
    """Try, as u, to list every directory and open every file in entries."""
    args = [("d:%s" if p.is_dir() and not p.is_symlink() else "f:%s") % p for p in entries]
    r = subprocess.run(su(u) + [h.PY, str(kit.scripts["probe"])] + args, env=uenv(None),
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_locked_out(kit, u, entries):
    res = probe(kit, u, entries)
    opened = {p: v for p, v in res.items() if any(x != "EACCES" for x in v)}
    assert not opened, "%s could open (or did not get EACCES for): %s" % (u.name, opened)


def make_dir(path, owner, mode):
    path.mkdir()
    os.chown(path, owner.uid if owner else 0, owner.gid if owner else 0)
    os.chmod(path, mode)
    return path


def snapshot(path):
    """What an attacker planted at path: kind, owner, mode, target/content."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        what = os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        what = sorted(os.listdir(path))
    elif stat.S_ISREG(st.st_mode):
        what = Path(path).read_bytes()
    else:
        what = None
    return (st.st_mode, st.st_uid, st.st_ino, what)


# --------------------------------------------------------------------------
# 1. Default runtime directory: per user
# --------------------------------------------------------------------------

@pytest.mark.timeout(180, method="signal")
def test_default_rundir_is_per_user(users, kit, procs, defaults):
    a, b = users
    da, db = defaults
    env = uenv(kit)
    server, port = start_echo(procs, kit, a, env)

    # A -> A: accelerated; while it is live, A's directory is private.
    holder = hold(procs, kit, a, env, port)
    try:
        assert h.SMCD_LOG in holder.stderr(), holder.diag()
        entries = assert_private(da, a)
        names = {p.name for p in entries}
        assert {h.REGISTRY_FILE, h.STATS_FILE, "mem"} <= names, names
        assert any(n.startswith("lg-") for n in names) and any(n.startswith("ln-") for n in names)
        # B can neither list the directory nor open anything in it, nor
        # reach the mappings through A's processes.
        via_proc = [Path("/proc/%d/%s" % (p.pid, n)) for p in (server, holder)
                    for n in ("fd", "map_files")]
        assert_locked_out(kit, b, entries + via_proc)
        # B's `usmc stat` pointed at A's directory is refused without a crash.
        assert_stat_refused(kit, b, rundir=da)
    finally:
        release(holder)

    # B -> A: works on TCP; B's proposal cannot even be made (B's own
    # directory has no listener on the port).
    client = echo(procs, kit, b, env, port)
    tcp_reason(client, "peer_not_usmc")
    sb = ustat(kit, b)
    assert sb["rundir"] == str(db), sb
    assert sb["smc_conns"] == 0 and sb["tx_bytes"] == 0, h.fmt_stat(sb)
    assert sb["tcp_fallback"] == {"peer_not_usmc": 2} and sb["tcp_conns"] == 2, h.fmt_stat(sb)
    assert_private(db, b)

    sa = usettle(kit, a, lambda st: st["tcp_fallback"].get("peer_not_usmc", 0) >= 2)
    assert sa["rundir"] == str(da), sa
    assert sa["smc_client"] == 1 and sa["smc_server"] == 1, h.fmt_stat(sa)
    assert sa["tx_bytes"] > 0 and sa["rx_bytes"] > 0, h.fmt_stat(sa)
    assert sa["tcp_fallback"] == {"peer_not_usmc": 2}, h.fmt_stat(sa)
    assert sa["handshake_errors"] == 0, h.fmt_stat(sa)
    assert_private(da, a)


# --------------------------------------------------------------------------
# 2. A shared runtime directory
# --------------------------------------------------------------------------

@pytest.mark.timeout(180, method="signal")
def test_shared_rundir_other_user_locked_out(users, kit, procs, area):
    a, b = users
    shared = make_dir(area / "shared", a, 0o1777)
    env_a = uenv(kit, shared)
    server, port = start_echo(procs, kit, a, env_a)
    holder = hold(procs, kit, a, env_a, port)
    try:
        assert h.SMCD_LOG in holder.stderr(), holder.diag()
        entries = assert_private(shared, a, top_mode=0o1777)
        assert any(p.name == "mem" for p in entries), entries
        # Every object of A's (the directory itself is world-listable by
        # choice): no read, no attach.
        assert_locked_out(kit, b, entries[1:])
        assert_stat_refused(kit, b, rundir=shared)
        assert_stat_refused(kit, b, rundir=shared, USMC_ALLOW=a.uid)

        # B's default policy refuses A's directory outright; trusting it
        # (USMC_ALLOW=A) still cannot open A's registry.  Both work on TCP.
        for policy in ("user", str(a.uid), "all"):
            client = echo(procs, kit, b, uenv(kit, shared, USMC_ALLOW=policy), port)
            tcp_reason(client, "rundir_unusable")
        # B left nothing in A's directory.
        assert_private(shared, a, top_mode=0o1777)
    finally:
        release(holder)
    sa = usettle(kit, a, lambda st: st["tcp_fallback"].get("peer_not_usmc", 0) >= 6,
                 rundir=shared)
    assert sa["smc_client"] == 1 and sa["smc_server"] == 1, h.fmt_stat(sa)
    assert sa["tcp_fallback"] == {"peer_not_usmc": 6}, h.fmt_stat(sa)


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("owner,mode", [("root", 0o1777), ("b", 0o1777), ("b", 0o777),
                                        ("b", 0o700)])
def test_rundir_of_another_owner_refused(users, kit, procs, area, owner, mode):
    """USMC_RUNDIR pointing at a directory that belongs to someone else
    (/tmp-like 1777 owned by root, or B's) is refused by A: TCP with reason
    rundir_unusable, nothing created in it."""
    a, b = users
    d = make_dir(area / "other", None if owner == "root" else b, mode)
    before = snapshot(d)
    env = uenv(kit, d)
    server, port = start_echo(procs, kit, a, env, registered=False)
    client = echo(procs, kit, a, env, port)
    tcp_reason(client, "rundir_unusable")
    assert_stat_refused(kit, a, rundir=d)
    assert snapshot(d) == before


# --------------------------------------------------------------------------
# 3. Symlinks and pre-created objects
# --------------------------------------------------------------------------

PLANTS = ["symlink-to-own-private-dir", "symlink-to-other-user-dir", "symlink-to-file",
          "dir-of-other-user", "own-dir-group-readable", "file-of-other-user"]


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("plant", PLANTS)
def test_default_rundir_precreated(users, kit, procs, defaults, area, plant):
    """Someone created A's default runtime directory path before A's first
    run: A never follows or trusts it, works on TCP, and touches nothing."""
    a, b = users
    da = defaults[0]
    trap_a = make_dir(area / "trap-a", a, 0o700)   # would pass every check
    trap_b = make_dir(area / "trap-b", b, 0o777)
    victim = area / "victim"
    victim.write_bytes(b"victim: must never change\n")
    os.chown(victim, a.uid, a.gid)
    os.chmod(victim, 0o600)
    victim_before = snapshot(victim)
    if plant == "symlink-to-own-private-dir":
        os.symlink(trap_a, da)
    elif plant == "symlink-to-other-user-dir":
        os.symlink(trap_b, da)
    elif plant == "symlink-to-file":
        os.symlink(victim, da)
    elif plant == "dir-of-other-user":
        make_dir(da, b, 0o777)
    elif plant == "own-dir-group-readable":
        make_dir(da, a, 0o755)
    else:
        da.write_bytes(b"not a directory\n")
        os.chown(da, b.uid, b.gid)
    if stat.S_ISLNK(os.lstat(da).st_mode):
        os.lchown(da, b.uid, b.gid)
    before = snapshot(da)

    env = uenv(kit)
    server, port = start_echo(procs, kit, a, env, registered=False)
    client = echo(procs, kit, a, env, port)
    tcp_reason(client, "rundir_unusable")
    assert_stat_refused(kit, a)
    assert snapshot(da) == before
    assert os.listdir(trap_a) == [] and os.listdir(trap_b) == []
    assert snapshot(victim) == victim_before


# Objects planted at the names the library creates or collects, in A's
# shared directory (B can plant there) or A's default one (a leftover only
# root could make).  Kinds, all owned by B: "link" -> the valid file of the
# same role in another runtime directory of A's (following it would use and
# change it); "copy" -> a valid file of B's, mode 0666 (trusting it would
# register A's listener in B's memory); "fifo"; "bait" -> a directory of B's
# with symlinks at a link group's names.
REG, STATS = h.REGISTRY_FILE, h.STATS_FILE
INNER = {
    "registry-symlink": [(REG, "link")],
    "stats-symlink": [(STATS, "link")],
    "registry-of-b": [(REG, "copy")],
    "stats-of-b": [(STATS, "copy")],
    "registry-fifo-of-b": [(REG, "fifo")],
    "gc-bait": [("lg-00000000000000aa", "link"), ("ln-00000000000000ab", "link"),
                ("t-00000000000000ac", "link"), ("lg-00000000000000ad", "bait"),
                ("t-00000000000000ae", "bait")],
}


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("where", ["shared", "default"])
@pytest.mark.parametrize("case", sorted(INNER))
def test_precreated_objects_in_rundir(users, kit, procs, defaults, area, where, case):
    """Never followed, never trusted, never written; the programs work (TCP
    with a reason, or accelerated when the bait is not on their path)."""
    a, b = users
    if where == "shared":
        d = make_dir(area / "shared", a, 0o1777)
    else:
        d = make_dir(defaults[0], a, 0o700)
    rd = d if where == "shared" else None
    # Valid runtime objects of A's (the victims) and of B's (the copies).
    priv = make_dir(area / "priv", a, 0o700)
    ustat(kit, a, rundir=priv)
    bdir = make_dir(area / "bdir", b, 0o700)
    ustat(kit, b, rundir=bdir)
    victims = {p: p.read_bytes() for p in tree(priv)[1:]}
    assert {p.name for p in victims} >= {REG, STATS}, victims
    planted = []
    for name, kind in INNER[case]:
        p = d / name
        if kind == "link":
            os.symlink(priv / (name if name in (REG, STATS) else REG), p)
        elif kind == "copy":
            p.write_bytes((bdir / name).read_bytes())
            os.chmod(p, 0o666)
        elif kind == "fifo":
            os.mkfifo(p, 0o666)
        else:
            make_dir(p, b, 0o777)
            for n in ("mem", "0c", "0s"):
                os.symlink(priv / REG, p / n)
                os.lchown(p / n, b.uid, b.gid)
        os.lchown(p, b.uid, b.gid)
        planted.append((p, snapshot(p)))

    env = uenv(kit, rd)
    blocks_registry = case.startswith("registry-")
    blocks_stats = case.startswith("stats-")
    server, port = start_echo(procs, kit, a, env, registered=not blocks_registry)
    client = echo(procs, kit, a, env, port)
    if blocks_registry:
        tcp_reason(client, "rundir_unusable")
    else:
        assert client.stderr().count(h.SMCD_LOG) == 2, client.diag()
    if blocks_stats:
        assert_stat_refused(kit, a, rundir=rd)
    else:
        st = usettle(kit, a, lambda s: s["tcp_conns"] + s["smc_conns"] >= 4, rundir=rd)
        if blocks_registry:
            # Client: registry unusable; server: never registered.
            assert st["tcp_fallback"] == {"rundir_unusable": 4}, h.fmt_stat(st)
            assert st["smc_conns"] == 0, h.fmt_stat(st)
        else:
            assert st["smc_client"] == 2 and st["smc_server"] == 2, h.fmt_stat(st)
            assert st["tcp_fallback"] == {}, h.fmt_stat(st)
    server.stop()
    ustat(kit, a, rundir=rd, check=False)     # collects the dead (gc walks the bait)
    for p, data in victims.items():
        assert p.read_bytes() == data, "%s was changed through a symlink" % p
    for p, snap in planted:
        assert snapshot(p) == snap, p


# --------------------------------------------------------------------------
# 4. USMC_ALLOW: who may accelerate with whom
# --------------------------------------------------------------------------

@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("policy", ["all", "uids"])
def test_allow_policy_never_loosens_isolation(users, kit, procs, area, policy):
    """USMC_ALLOW=all or a uid list on both sides of a shared directory:
    file modes stay private, B can open nothing of A's, every connection
    works and carries its data; whatever the connection uses is visible."""
    a, b = users
    shared = make_dir(area / "shared", a, 0o1777)
    pol_a = "all" if policy == "all" else "%d,%d" % (a.uid, b.uid)
    pol_b = "all" if policy == "all" else "%d,%d" % (b.uid, a.uid)
    env_a = uenv(kit, shared, USMC_ALLOW=pol_a)
    env_b = uenv(kit, shared, USMC_ALLOW=pol_b)
    server, port = start_echo(procs, kit, a, env_a)
    holder = hold(procs, kit, a, env_a, port)
    try:
        assert h.SMCD_LOG in holder.stderr(), holder.diag()
        entries = assert_private(shared, a, top_mode=0o1777)
        assert_locked_out(kit, b, entries[1:])
        client = echo(procs, kit, b, env_b, port)
        # Cross-user acceleration needs B to open A's 0600 objects, which
        # the modes forbid: B stays on TCP and says why.
        tcp_reason(client, "rundir_unusable")
        assert_private(shared, a, top_mode=0o1777)
    finally:
        release(holder)
    sa = usettle(kit, a, lambda st: st["tcp_fallback"].get("peer_not_usmc", 0) >= 2,
                 rundir=shared)
    assert sa["smc_client"] == 1 and sa["smc_server"] == 1, h.fmt_stat(sa)
    assert sa["tcp_fallback"] == {"peer_not_usmc": 2}, h.fmt_stat(sa)
