"""Resource exhaustion: whatever runs out, every connect() and accept() a
plain TCP program makes succeeds, every byte arrives exactly, nothing
hangs, and the fallback is counted with its reason.

Injected faults (USMC_FAULT=point, src/options.h) on the server only, the
client only, and both; then real resources: a tiny tmpfs as the runtime
directory and a low RLIMIT_NOFILE for the server.

Each case runs xchg_server/xchg_client (relkit.py): NCONN connections, both
directions at once, sizes up to a few MB (the first connection 3 MB each
way), every byte compared, and the client half-closes only after it read
the server's whole stream (test_decline_half_closed_client covers the other
order).  The counters (`usmc stat --json`, both processes in one runtime
directory, so each connection counts once per end) must be exactly what
the design gives - reasoning per point in EXPECT below.
"""
import os
import re
import subprocess

import pytest

from . import helpers as h
from . import relkit as rk

NCONN = 5
PAR = 3
MAXSIZE = 3 << 20
POINTS = ["memfd", "mmap", "lgr", "dmb", "reserve", "bell", "attach", "clc", "fds"]

# What the point does to a client: the reason its connect() falls back with,
# before it proposes anything (af_usmc.c usmc_sock_connect):
#   memfd   no fork-shared socket state -> usmc_conn_resources: out_of_memory
#   mmap    the registry cannot be mapped -> client_match: rundir_unusable
#   lgr     link group creation fails -> usmc_lgr_slot_get: out_of_memory
#   dmb     DMB registration fails -> usmc_lgr_slot_get: out_of_memory
#   reserve the first page of its ring cannot be backed -> bind_slot: out_of_memory
#   bell    doorbell open fails with EMFILE -> bind_slot: limit_reached
#   fds     descriptor headroom -> usmc_conn_resources: limit_reached
#   attach  a client never attaches: no effect
#   clc     its CLC index page cannot be backed -> usmc_clc_propose: out_of_memory,
#           unless the page already has data (the server backed it, or read
#           it, for an earlier connection): depends on the ports, see below
CLIENT_REASON = {"memfd": "out_of_memory", "mmap": "rundir_unusable", "lgr": "out_of_memory",
                 "dmb": "out_of_memory", "reserve": "out_of_memory", "bell": "limit_reached",
                 "fds": "limit_reached", "attach": None}
# What the point does to a server that receives a proposal:
#   memfd   private socket state -> server_accept declines: out_of_memory (both ends)
#   mmap    the listener is never registered (registry/index not mappable):
#           the server counts rundir_unusable, the client finds no listener:
#           peer_not_usmc
#   reserve its ring's first page -> decline out_of_memory
#   bell    EMFILE on its doorbells -> decline limit_reached
#   attach  cannot attach the client's link group -> decline out_of_memory,
#           and a handshake error
#   fds     the listener is marked busy at accept (usmc_clc_ln_busy): the
#           first proposal is declined limit_reached, later clients see the
#           busy index and do not propose (limit_reached); the server counts
#           its no-proposal connections limit_reached too (server_settle)
#   lgr, dmb: servers do not create link groups or DMBs: no effect
#   clc     a proposal backs its index page itself, but a server that accepts
#           first needs to write its WAIT mark: see below
SERVER_DECLINE = {"memfd": "out_of_memory", "reserve": "out_of_memory",
                  "bell": "limit_reached", "attach": "out_of_memory", "fds": "limit_reached"}


def expect(point, side, n):
    """The exact counters for n connections, or None where they depend on
    the ports the kernel picks (clc on the client side)."""
    zero = {"smc_client": 0, "smc_server": 0, "tcp_conns": 2 * n, "handshake_errors": 0}
    if point == "clc":
        return None
    creason = CLIENT_REASON.get(point) if side in ("client", "both") else None
    server_hit = side in ("server", "both")
    if creason:
        # The client never proposes.  The server sees no proposal: for it the
        # peer is simply not a usmc process - unless its own fault says more.
        if server_hit and point == "mmap":
            sreason = "rundir_unusable"
        elif server_hit and point == "fds":
            sreason = "limit_reached"
        else:
            sreason = "peer_not_usmc"
        fb = {creason: n}
        fb[sreason] = fb.get(sreason, 0) + n
        return dict(zero, tcp_fallback=fb, late_declines=0)
    if server_hit and point == "mmap":
        return dict(zero, tcp_fallback={"rundir_unusable": n, "peer_not_usmc": n},
                    late_declines=0)
    if server_hit and point in SERVER_DECLINE:
        # Declined in the CLC index: the client moves its queued bytes to
        # TCP and is not counted as shared memory (migrate.c corrects it).
        out = dict(zero, tcp_fallback={SERVER_DECLINE[point]: 2 * n},
                   late_declines=None if point == "fds" else n)
        if point == "attach":
            out["handshake_errors"] = n
        return out
    return {"smc_client": n, "smc_server": n, "tcp_conns": 0, "handshake_errors": 0,
            "tcp_fallback": {}, "late_declines": 0}


@pytest.fixture
def rscripts(tmp_path):
    return rk.write_scripts(tmp_path / "rscripts")


def exchange(rundir, procs, rscripts, senv, cenv, n=NCONN, par=PAR, maxsize=MAXSIZE, seed=11,
             server_extra=(), client_extra=(), wrap=None, check=True):
    """One exchange; returns (server, client).  wrap: argv prefix for the
    server (then it is started as given, usmc run included by the caller)."""
    if wrap:
        port = h.free_port()
        srv = procs.start("xchg-server", [*wrap, h.PY, rscripts["xchg_server"], "127.0.0.1",
                                          port, n, *server_extra], senv, usmc=False)
        rk.wait_line(srv, "listening")
    else:
        srv, port = rk.start_xchg_server(procs, rscripts, senv, n, extra=server_extra)
    cl = procs.run("xchg-client", [h.PY, rscripts["xchg_client"], "127.0.0.1", port, n, maxsize,
                                   seed, par, *client_extra], cenv, timeout=150, check=False)
    try:
        src = srv.wait(60)
    except AssertionError:
        srv.stop(grace=0.5)
        raise
    if check:
        assert cl.popen.returncode == 0 and cl.text().startswith("OK conns=%d " % n), \
            "client failed (TCP would have completed):\n" + procs.diag()
        assert src == 0 and ("DONE accepted=%d ok=%d" % (n, n)) in srv.text(), \
            "server failed (TCP would have completed):\n" + procs.diag()
    return srv, cl


def ends(n):
    """Every end of n connections counted (shared memory or TCP)."""
    return lambda st: st["smc_client"] + st["smc_server"] + st["tcp_conns"] >= 2 * n


def pick(st):
    return {k: st[k] for k in ("smc_client", "smc_server", "tcp_conns", "handshake_errors",
                               "tcp_fallback", "late_declines")}


def assert_counts(st, want, diag=""):
    got = pick(st)
    msg = "\n" + h.fmt_stat(st) + ("\n" + diag if diag else "")
    if want.get("late_declines") is None:
        got.pop("late_declines")
        want = {k: v for k, v in want.items() if k != "late_declines"}
    assert got == want, "counters differ from the design's\nwant %s\n got %s%s" % (want, got, msg)
    assert st["smc_conns"] == st["smc_client"] + st["smc_server"], msg
    assert st["aborts"] == {}, msg
    if st["smc_client"]:
        assert st["tx_bytes"] > 0 and st["rx_bytes"] > 0, msg


def assert_clean(rundir, shm_before):
    left = rk.rundir_leftovers(rundir)
    assert not left, "runtime directory leftovers after every process ended: %s" % left
    stray = h.stray_shm(shm_before, h.shm_snapshot(), rundir.path.name)
    assert not stray, "stray objects in /dev/shm: %s" % stray


# ------------------------------------------------------------------ injected faults

@pytest.mark.timeout(240, method="signal")
@pytest.mark.parametrize("side", ["server", "client", "both"])
@pytest.mark.parametrize("point", POINTS)
def test_fault(rundir, procs, rscripts, point, side):
    shm_before = h.shm_snapshot()
    fault = {"USMC_FAULT": point}
    senv = rundir.env(debug=True, **(fault if side in ("server", "both") else {}))
    cenv = rundir.env(debug=True, **(fault if side in ("client", "both") else {}))
    srv, cl = exchange(rundir, procs, rscripts, senv, cenv)
    st = rundir.settle(ends(NCONN))
    want = expect(point, side, NCONN)
    if want is None:
        # clc on the client: a client that cannot back its index page does
        # not propose (out_of_memory; the server: peer_not_usmc).  The very
        # first connection always finds its page unbacked; later ones find
        # it backed when the server backed (or read) that page for an
        # earlier connection on a nearby port, and accelerate.
        # A server with the fault cannot back the page for its own mark
        # either (TCP when deciding, WAIT when it accepts before the
        # proposal): it degrades the listener, so later clients do not
        # propose (out_of_memory), and it says out_of_memory where it
        # would say peer_not_usmc (it never loads from an unbacked page:
        # clc.c).  Only proposals it found at accept() accelerate.
        a = st["smc_client"]
        fb = st["tcp_fallback"]
        # The first client always finds its page unbacked; with the fault
        # on the server only, every proposal it finds at accept() works.
        assert 0 <= a <= NCONN if side == "server" else 0 <= a < NCONN, h.fmt_stat(st)
        assert set(fb) <= {"out_of_memory", "peer_not_usmc"}, h.fmt_stat(st)
        assert fb.get("out_of_memory", 0) >= NCONN - a, h.fmt_stat(st)
        if side == "client":
            assert fb.get("peer_not_usmc", 0) == NCONN - a, h.fmt_stat(st)
        assert_counts(st, {"smc_client": a, "smc_server": a, "tcp_conns": 2 * (NCONN - a),
                           "handshake_errors": 0, "tcp_fallback": fb, "late_declines": 0},
                      diag=procs.diag())
    else:
        assert_counts(st, want, diag=procs.diag())
    assert_clean(rundir, shm_before)


@pytest.mark.timeout(300, method="signal")
@pytest.mark.parametrize("point", ["memfd", "bell"])
def test_decline_half_closed_client(rundir, procs, rscripts, point):
    """A server that declines (here for lack of memory/descriptors) while
    a live client has already half-closed (shutdown(SHUT_WR) raises DONE
    in the ring; its FIN follows the bytes it moves to TCP): the server must
    not take the client's later FIN for a close with bytes lost
    (accept.c server_decline looks for a hang-up before answering), and
    the DECLINE message is never read as data (interpose_io.c sk_rx).  Racy,
    so: 25 rounds of 6 connections."""
    senv = rundir.env(debug=True, USMC_FAULT=point)
    cenv = rundir.env(debug=True)
    for rnd in range(25):
        srv, cl = exchange(rundir, procs, rscripts, senv, cenv, n=6, par=3, maxsize=100,
                           seed=rnd, client_extra=("--early-shut",), check=False)
        ok = cl.popen.returncode == 0 and srv.popen.returncode == 0
        assert ok, "round %d: a connection failed that TCP completes:\n%s\n%s" % (
            rnd, srv.diag(), cl.diag())


# ------------------------------------------------------------------ a tiny tmpfs

class Tmpfs:
    """A tmpfs of its own as the runtime directory, sized relative to what
    the idle files (stats, registry) take."""

    def __init__(self, path):
        self.path = path
        self.mounted = False

    def mount(self, free_kb):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "usmc-tiny",
                            str(self.path)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip("cannot mount a tmpfs: " + r.stderr.strip())
        self.mounted = True
        rd = h.Rundir(self.path)
        rd.stat()       # creates stats and registry
        used = self.used_kb()
        rk.sh(["mount", "-o", "remount,size=%dk" % (used + free_kb), str(self.path)])
        assert self.free_kb() == free_kb, (used, self.free_kb())
        return rd

    def used_kb(self):
        s = os.statvfs(self.path)
        return (s.f_blocks - s.f_bfree) * s.f_frsize // 1024

    def free_kb(self):
        s = os.statvfs(self.path)
        return s.f_bavail * s.f_frsize // 1024

    def fill(self):
        """Take every free block (a file the library does not know)."""
        try:
            f = open(self.path / "filler", "wb", buffering=0)
        except OSError:         # already full: nothing left to take
            return self.free_kb()
        with f:
            while True:
                try:
                    f.write(b"\0" * 4096)
                    f.flush()
                except OSError:
                    break
        return self.free_kb()

    def unfill(self):
        try:
            (self.path / "filler").unlink()
        except FileNotFoundError:
            pass

    def umount(self):
        if self.mounted:
            r = subprocess.run(["umount", str(self.path)], capture_output=True)
            if r.returncode:
                subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


@pytest.fixture
def tmpfs(tmp_path, procs):
    # Depends on procs: every process stops before the unmount.
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "tiny-rundir"
    d.mkdir()
    t = Tmpfs(d)
    yield t
    procs.stop_all()
    t.umount()


@pytest.mark.timeout(180, method="signal")
def test_tmpfs_no_room_for_link_group(tmpfs, procs, rscripts):
    """24 KB free: the listener's index header and a few index pages fit, a
    link group (header + 64 control blocks: 36 KB) does not.  The client's
    connect falls back (out_of_memory), the server sees no proposal
    (peer_not_usmc); sequential connections keep their index pages few."""
    rd = tmpfs.mount(24)
    env = rd.env(debug=True)
    srv, cl = exchange(rd, procs, rscripts, env, env, n=3, par=1)
    st = rd.settle(ends(3))
    assert_counts(st, {"smc_client": 0, "smc_server": 0, "tcp_conns": 6, "handshake_errors": 0,
                       "tcp_fallback": {"out_of_memory": 3, "peer_not_usmc": 3},
                       "late_declines": 0}, diag=procs.diag())
    assert b"link group create failed" in cl.stderr(), cl.diag()
    assert not rk.rundir_leftovers(rd)


@pytest.mark.timeout(180, method="signal")
def test_tmpfs_full_server_survives(tmpfs, procs, rscripts):
    """A full runtime tmpfs, and a client whose CLC index page is not
    backed: the client cannot create its link group (out_of_memory, no
    proposal); the server must never load from the unbacked page (a load
    through a shared mapping allocates a tmpfs page: SIGBUS when full,
    clc.c entry_readable) and falls back with out_of_memory itself (it
    cannot write its TCP mark either).  The exchange completes as on TCP."""
    rd = tmpfs.mount(64)
    env = rd.env(debug=True)
    srv, port = rk.start_xchg_server(procs, rscripts, env, 1)
    left = tmpfs.fill()
    assert left == 0, "could not fill the tmpfs (%d KB left)" % left
    cl = procs.run("xchg-client", [h.PY, rscripts["xchg_client"], "127.0.0.1", port, 1, 1 << 20,
                                   3, 1], env, timeout=60, check=False)
    try:
        rc = srv.wait(30)
    except AssertionError:
        srv.stop(grace=0.5)
        raise
    assert rc != -7, "the server died of SIGBUS (full tmpfs, unbacked CLC index page)\n" + \
        procs.diag()
    assert rc == 0 and cl.popen.returncode == 0, procs.diag()
    tmpfs.unfill()
    st = rd.settle(ends(1))
    assert_counts(st, {"smc_client": 0, "smc_server": 0, "tcp_conns": 2, "handshake_errors": 0,
                       "tcp_fallback": {"out_of_memory": 2},
                       "late_declines": 0}, diag=procs.diag())


def assert_no_room(st, n, a, diag):
    """n connections, a of them on shared memory, the others out of room:
    each of those is out_of_memory at the end that found no room (the
    server declining, or the client not proposing), and at the other end
    out_of_memory too (a decline) or peer_not_usmc (a server that saw no
    proposal)."""
    fb = st["tcp_fallback"]
    assert_counts(st, {"smc_client": a, "smc_server": a, "tcp_conns": 2 * (n - a),
                       "handshake_errors": 0, "tcp_fallback": fb, "late_declines": None},
                  diag=diag)
    assert set(fb) <= {"out_of_memory", "peer_not_usmc"}, h.fmt_stat(st) + diag
    assert sum(fb.values()) == 2 * (n - a), h.fmt_stat(st) + diag
    assert fb.get("out_of_memory", 0) >= n - a, h.fmt_stat(st) + diag


@pytest.mark.timeout(180, method="signal")
def test_tmpfs_rings_partly_backed(tmpfs, procs, rscripts):
    """Room for the link group, 64 KB of both rings of two slots and 40 KB
    for index pages: the rings start with a page and grow (doubling) into
    what is free, so the 4 MB rings stay backed for a part ("the ring
    simply acts smaller"), and 3 MB each way still arrive exactly, with no
    access fault.  The first connection is on shared memory; a later one
    may find its slot not yet released by the server and need a second
    slot's rings, or a third, which may not fit: the server declines it
    (out_of_memory at both ends), or the client finds no room for its own
    first page and does not propose (out_of_memory, and peer_not_usmc at
    the server); its bytes move to TCP.  Nothing else is allowed."""
    rd = tmpfs.mount(36 + 2 * (64 + 64) + 40)
    env = rd.env(debug=True)
    n = 3
    srv, cl = exchange(rd, procs, rscripts, env, env, n=n, par=1)
    st = rd.settle(ends(n))
    a = st["smc_client"]
    assert 1 <= a <= n, h.fmt_stat(st)
    assert_no_room(st, n, a, procs.diag())
    # The first connection's 3 MB each way went through part of its ring.
    assert st["tx_bytes"] >= 2 * MAXSIZE and st["rx_bytes"] >= 2 * MAXSIZE, h.fmt_stat(st)
    assert not rk.rundir_leftovers(rd)


@pytest.mark.timeout(180, method="signal")
def test_tmpfs_server_ring_does_not_fit(tmpfs, procs, rscripts):
    """Room for the client's link group and its ring's first page, not for
    the server's: the server declines (out_of_memory, both ends), the
    client's queued bytes move to TCP in order.  The second connection
    reuses the slot (its page already backed: declined again), or, when the
    server has not let go of it yet, finds no room for a second slot's page
    and falls back before proposing (out_of_memory, and peer_not_usmc at
    the server, which saw no proposal)."""
    # (dev_copy: the server's view of the control blocks, 32 KiB, follows.)
    rd = tmpfs.mount(4 + 36 + 4 + 4 + (32 if h.UNSHARED else 0))
    env = rd.env(debug=True)
    srv, cl = exchange(rd, procs, rscripts, env, env, n=2, par=1)
    st = rd.settle(ends(2))
    assert st["late_declines"] >= 1, h.fmt_stat(st) + procs.diag()
    assert_no_room(st, 2, 0, procs.diag())
    assert not rk.rundir_leftovers(rd)


# ------------------------------------------------------------------ RLIMIT_NOFILE

NOFILE = 64


def accepted_fds(proc):
    return [int(m.group(1)) for m in re.finditer(rb"ACCEPTED \d+ fd (\d+)", proc.stdout())]


@pytest.mark.timeout(180, method="signal")
def test_nofile_headroom(rundir, procs, rscripts):
    """RLIMIT_NOFILE 64 on the server, 30 connections held open at once:
    every accept succeeds, with the numbers TCP would give below usmc's own
    descriptors (at the top of the limit, here its upper half, src/ifd.c).  Connections cost no descriptors
    of their own (a link group's three serve 64), so every connection whose
    socket is below 32 - 3 may accelerate, more than the 16 that fitted when
    each took two doorbells; one whose socket is above falls back with
    limit_reached at both ends, and once an accept finds no room the
    listener is marked busy and clients that see the mark in time do not
    propose (also limit_reached)."""
    n = 30
    env = rundir.env(debug=True)
    wrap = ["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "--", str(h.USMC), "run", "--"]
    srv, cl = exchange(rundir, procs, rscripts, env, env, n=n, par=n, maxsize=256 << 10,
                       server_extra=("--hold",), wrap=wrap)
    fds = accepted_fds(srv)
    assert len(fds) == n, srv.diag()
    low = [f for f in fds if f < NOFILE // 2]
    assert low == list(range(min(fds), NOFILE // 2)), "accepted fds %s: not dense below %d" % (
        fds, NOFILE // 2)
    most = sum(1 for f in fds if f + 3 < NOFILE // 2)
    assert most < n
    st = rundir.settle(ends(n))
    a = st.get("smc_client", 0)
    diag = "accepted fds %s\n%s" % (fds, procs.diag())
    assert 16 < a <= most, "%d accelerated, 17..%d expected\n%s" % (a, most, diag)
    assert_counts(st, {"smc_client": a, "smc_server": a, "tcp_conns": 2 * (n - a),
                       "handshake_errors": 0, "tcp_fallback": {"limit_reached": 2 * (n - a)},
                       "late_declines": None}, diag=diag)


@pytest.mark.timeout(240, method="signal")
def test_nofile_accepts_as_tcp(rundir, procs, rscripts):
    """RLIMIT_NOFILE 64, a server holding as many connections as fit in
    half of its table with TCP (8 + 24 descriptors; USMC_DISABLE=1 accepts
    them all): under usmc every accept() succeeds too - doorbells only
    take descriptors from the upper half (src/ifd.c), which leaves the
    application at least half of its table."""
    n = 24
    wrap = ["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "--", str(h.USMC), "run", "--"]
    tcp_env = rundir.env(debug=True, USMC_DISABLE=1)
    srv, cl = exchange(rundir, procs, rscripts, tcp_env, rundir.env(), n=n, par=n,
                       maxsize=64 << 10, server_extra=("--hold",), wrap=wrap, seed=1)
    assert len(accepted_fds(srv)) == n
    rundir.reset()
    env = rundir.env(debug=True)
    srv, cl = exchange(rundir, procs, rscripts, env, env, n=n, par=n, maxsize=64 << 10,
                       server_extra=("--hold",), wrap=wrap, seed=1, check=False)
    assert b"ACCEPT FAIL" not in srv.stdout(), \
        "accept() failed under usmc where TCP accepted all %d: %s\naccepted fds %s" % (
            n, re.findall(rb"ACCEPT FAIL.*", srv.stdout()), accepted_fds(srv))
    assert srv.popen.returncode == 0 and cl.popen.returncode == 0, procs.diag()


# Descriptors a usmc server keeps for serving on shared memory, beyond what
# the same library keeps when disabled: see test_nofile_holds_as_many_as_tcp.
USMC_KEEP = 3


def held_until_emfile(srv):
    """Connections the --hold server accepted before its accept() failed."""
    return len(accepted_fds(srv)), b"ACCEPT FAIL" in srv.stdout()


@pytest.mark.timeout(300, method="signal")
def test_nofile_holds_as_many_as_tcp(rundir, procs, rscripts):
    """Issue 15 row 12: RLIMIT_NOFILE 64, a Python server accepting and
    holding connections.  Interposed TCP (USMC_DISABLE=1: the same library,
    its runtime-directory, counters and family descriptors open) holds some
    number K before accept() fails with EMFILE.  Under usmc the server holds
    all but the few descriptors usmc keeps while it serves on shared memory
    (the listener's CLC index, locked while it listens; the client's link
    group, mapped while connections that were on it live; at most USMC_KEEP
    here): when the application needs the doorbells usmc keeps in the upper
    half of the table, usmc gives them back (src/shed.c), moving
    connections to TCP (limit_reached), every byte of every connection in
    order.  It used to hold 28 where TCP holds 59 (K - 3 now)."""
    wrap = ["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "--", str(h.USMC), "run", "--"]
    tcp_env = rundir.env(USMC_DISABLE=1)
    srv, cl = exchange(rundir, procs, rscripts, tcp_env, rundir.env(), n=NOFILE, par=NOFILE,
                       maxsize=4 << 10, server_extra=("--hold",), wrap=wrap, seed=3,
                       check=False)
    k, failed = held_until_emfile(srv)
    assert failed and NOFILE // 2 < k < NOFILE, "interposed TCP held %d (EMFILE: %s)\n%s" % (
        k, failed, procs.diag())
    rundir.reset()
    env = rundir.env(debug=True)
    n = k - USMC_KEEP
    srv, cl = exchange(rundir, procs, rscripts, env, env, n=n, par=n, maxsize=4 << 10,
                       server_extra=("--hold",), wrap=wrap, seed=3)
    held, failed = held_until_emfile(srv)
    assert held == n and not failed, "usmc held %d, interposed TCP %d\n%s" % (
        held, k, procs.diag())
    st = rundir.settle(ends(n))
    diag = "held %d\n%s" % (held, procs.diag())
    assert st.get("smc_server", 0) >= 1, "nothing accelerated\n" + diag
    assert st["handshake_errors"] == 0 and st["aborts"] == {}, h.fmt_stat(st) + diag
    assert st["tcp_fallback"].get("limit_reached", 0) >= 1, h.fmt_stat(st) + diag
    assert set(st["tcp_fallback"]) <= {"limit_reached", "peer_moved_to_tcp"}, \
        h.fmt_stat(st) + diag


# A server that fills its descriptor table itself, as Twisted's
# test_closePeerOnEMFILE does (os.dup(0) until EMFILE), then accepts.
FILL_SERVER = r'''
import os, socket, sys
how, n = sys.argv[1], int(sys.argv[2])
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(64)
print("PORT", ls.getsockname()[1], flush=True)
conns = [ls.accept()[0] for _ in range(n)]

def echo(c, size):
    got = b""
    while len(got) < size:
        b = c.recv(size - len(got))
        assert b, "EOF"
        got += b
    c.sendall(got)

for c in conns:
    echo(c, 4096)
for c in conns:            # the client read all of ours: an ack each
    assert c.recv(1) == b"A"
held = []
make = {"dup": lambda: [os.dup(0)], "open": lambda: [os.open("/dev/null", os.O_RDONLY)],
        "pipe": lambda: list(os.pipe())}[how]
for fill in (make, lambda: [os.dup(0)]):   # pipe() leaves one when one is free
    while True:
        try:
            held += fill()
        except OSError as e:
            assert e.errno == 24, e
            break
print("FILLED", len(held), flush=True)
late = None
try:
    late = ls.accept()[0]
    print("ACCEPT OK", flush=True)
except OSError as e:
    print("ACCEPT", "EMFILE" if e.errno == 24 else e, flush=True)
for fd in held:
    os.close(fd)
conns.append(late or ls.accept()[0])
for c in conns:
    echo(c, 65536)
print("DONE", flush=True)
'''

FILL_CLIENT = r'''
import os, socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
cs = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]

def round_trip(c, data):
    c.sendall(data)
    got = b""
    while len(got) < len(data):
        b = c.recv(len(data) - len(got))
        assert b, "EOF"
        got += b
    assert got == data, "bytes differ"

for i, c in enumerate(cs):
    round_trip(c, bytes((i + j) % 251 for j in range(4096)))
for c in cs:
    c.sendall(b"A")
cs.append(socket.create_connection(("127.0.0.1", port)))
for i, c in enumerate(cs):
    round_trip(c, os.urandom(65536))
print("CLIENT OK", flush=True)
'''


def fill_run(procs, tmp_path, env, how, n):
    """FILL_SERVER under RLIMIT_NOFILE 64 and usmc run, FILL_CLIENT under
    usmc; returns (descriptors the server filled, what its accept() gave)."""
    (tmp_path / "fill_server.py").write_text(FILL_SERVER)
    (tmp_path / "fill_client.py").write_text(FILL_CLIENT)
    wrap = ["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "--", str(h.USMC), "run", "--"]
    srv = procs.start("fill-server", [*wrap, h.PY, tmp_path / "fill_server.py", how, n], env,
                      usmc=False)
    h.wait_line(srv, "PORT")
    port = int(re.search(rb"PORT (\d+)", srv.stdout()).group(1))
    procs.run("fill-client", [h.PY, tmp_path / "fill_client.py", port, n], env, timeout=60)
    assert srv.wait(60) == 0, srv.diag()
    out = srv.stdout()
    assert b"DONE" in out, srv.diag()
    return (int(re.search(rb"FILLED (\d+)", out).group(1)),
            re.search(rb"ACCEPT (.*)", out).group(1).decode())


@pytest.mark.timeout(240, method="signal")
@pytest.mark.parametrize("how", ["dup", "open", "pipe"])
def test_nofile_filled_by_the_program(rundir, procs, tmp_path, how):
    """A program that fills its own descriptor table (dup, open or pipe
    until EMFILE) while it holds accelerated connections, then accepts:
    accept() fails with EMFILE as over TCP (USMC_DISABLE=1, the same
    library), because the filling calls already took usmc's doorbells back
    (src/shed.c: the connections moved to TCP, limit_reached); the program
    got all but USMC_KEEP of the descriptors TCP gave it; after it closes
    them, the pending connection is accepted and every connection, moved or
    not, carries 64 KB each way, byte for byte.  Without shedding at the
    filling call, the accept succeeded under usmc where TCP failed it
    (Twisted's test_closePeerOnEMFILE)."""
    n = 8
    tcp_filled, tcp_accept = fill_run(procs, tmp_path, rundir.env(USMC_DISABLE=1), how, n)
    assert tcp_accept == "EMFILE", tcp_accept
    rundir.reset()
    filled, accept = fill_run(procs, tmp_path, rundir.env(debug=True), how, n)
    st = rundir.settle(ends(n + 1))
    diag = "filled %d (TCP %d), accept %s\n%s\n%s" % (filled, tcp_filled, accept,
                                                      h.fmt_stat(st), procs.diag())
    assert accept == "EMFILE", diag
    assert tcp_filled - USMC_KEEP <= filled <= tcp_filled, diag
    assert st["smc_server"] >= 1 and st["tcp_fallback"].get("limit_reached", 0) >= 2, diag
    assert st["handshake_errors"] == 0 and st["aborts"] == {}, diag


# A server under RLIMIT_NOFILE 64: accepts n connections from n client
# processes, reads a byte on each, then says which numbers it got, the
# next one a socket would get, and which of usmc's link-group files sit
# below usmc's part of the table (its upper half here, src/ifd.c).
FDS_SERVER = r'''
import os, socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(64)
print("PORT", ls.getsockname()[1], flush=True)
n = int(sys.argv[1])
cs = [ls.accept()[0] for _ in range(n)]
[c.recv(1) for c in cs]
def lg(f):
    try:
        return "/lg-" in os.readlink("/proc/self/fd/%d" % f)
    except OSError:
        return False
print("accepted", [c.fileno() for c in cs], "next", socket.socket().fileno(),
      "link-group files below 32", [f for f in range(32) if lg(f)], flush=True)
'''

# Holds its connection until the server ends (a client that leaves
# before a server that then declines: docs/design.md, Limits).
FDS_CLIENT = r'''
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(float(sys.argv[2]))
s.send(b"x")
s.recv(1)
'''


@pytest.mark.timeout(120, method="signal")
def test_nofile_refused_link_group_keeps_no_number(rundir, procs, tmp_path):
    """A server whose part of the table for usmc's descriptors is full
    refuses the next client process's link group (limit_reached), and keeps
    none of its descriptors: the numbers it accepts and the next socket's
    are TCP's.  Before, each refused link group's file stayed open at the
    lowest free number (found by OpenLDAP's slapd under ulimit -n 64: its
    libwrap check of /etc/hosts.allow then failed with EMFILE, and clients
    were denied and reset)."""
    n = 11
    (tmp_path / "srv.py").write_text(FDS_SERVER)
    (tmp_path / "cli.py").write_text(FDS_CLIENT)
    out = {}
    for usmc in (False, True):
        rundir.reset()
        argv = ["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "--"]
        if usmc:
            argv += [str(h.USMC), "run", "--"]
        srv = procs.start("fds-server-%s" % usmc, argv + [h.PY, str(tmp_path / "srv.py"), str(n)],
                          rundir.env(), usmc=False)
        h.wait_line(srv, "PORT", timeout=20)
        port = int(srv.text().split()[1])
        clients = [procs.start("fds-client-%s-%d" % (usmc, i),
                               [h.PY, str(tmp_path / "cli.py"), str(port), "60"],
                               rundir.env(), usmc=usmc) for i in range(n)]
        assert srv.wait(30) == 0, srv.diag()
        for c in clients:
            c.wait(30)
        out[usmc] = srv.text().splitlines()[-1]
        if usmc:
            st = rundir.stat()
            assert st["smc_server"] >= 1, "nothing accelerated\n" + h.fmt_stat(st)
            assert st["tcp_fallback"].get("limit_reached", 0) >= 1, \
                "no link group refused: the test does not reach the limit\n" + h.fmt_stat(st)
    assert "link-group files below 32 []" in out[True], out
    assert out[True] == out[False], out
