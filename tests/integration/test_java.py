"""The JVM (OpenJDK) under usmc: java.net and java.nio sockets, each run the
same way over plain TCP and under `usmc run`; the transcripts must be
identical and, under usmc, the counters must show the connections on
shared memory.

The JDK is an interesting client of usmc: its selectors and asynchronous
channels use epoll directly (level-triggered, and EPOLLONESHOT in the
asynchronous channel group), a blocking socket closed from another thread
is first replaced by a pre-closed socketpair end with dup2() and its
blocked reader or writer signalled (NioSocketImpl/SocketDispatcher
"preClose", NativeThread.signal with a handler without SA_RESTART),
connects are non-blocking with poll() where a timeout is set, and
available() is FIONREAD.  The programs are in tests/integration/java/:

  UsmcServer   one JVM, four listeners: a ServerSocket with a thread per
               connection that takes commands (echo, sink, wait, flood,
               reset, close while its own read is blocked, spawn a child,
               report an outcome later), a Selector echo server, an
               AsynchronousServerSocketChannel echo server and
               com.sun.net.httpserver
  UsmcClient   scenarios, each printing a deterministic transcript (byte
               counts, CRC32s, exceptions' class names and messages)

Groups (one plain and one usmc run each, both sides under `usmc run`):

  stream  non-blocking connect + selector echo of 1 B..6 MiB messages
          (every byte checked), blocking echo with a writer thread,
          gathering/scattering I/O, half-close, shutdownInput, available(),
          SO_TIMEOUT, sendfile (FileChannel.transferTo), the asynchronous
          channels, tiny socket buffers, one channel in two selectors,
          OP_WRITE after a full ring, urgent data (moved to TCP: `oob`),
          HttpClient/HttpURLConnection, a child process spawned while
          connections are open, the JVM's own SIGBUS (MappedByteBuffer)
  close   a read, write, accept or select blocked in one thread and the
          socket closed (or the thread interrupted) from another, SO_LINGER
          0 and unread-data resets both ways, refused connects, reads
          racing a close while the server floods, a client whose listener
          accepts late, and a JVM that exits with bytes still unread by
          the server, a thread blocked in a read and bytes it never read
  many    hundreds of short connections (sequential and from 6 threads) to
          all three servers, one selector over many connections, 1000
          connections open at once, socket options round trips, two
          SO_REUSEPORT listeners (TCP by design: `reuseport`)

Not compared: how long close() with SO_LINGER {1, N} blocks while the peer
reads nothing.  TCP waits until what it sent is acknowledged, i.e. in the
peer's receive buffer; a ring is the peer's receive buffer (its DMB), so
everything a usmc send() accepted is there already and close() returns at
once, as TCP's does when the peer's buffer holds all it was sent (over TCP
here the sender also fills its own send buffer first, which a ring does not
have).  The peer reads every byte and then EOF either way.

CI: needs the Debian package openjdk-17-jdk-headless; skipped without
java/javac.
"""
import difflib
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from . import helpers as h

JAVA = shutil.which("java")
JAVAC = shutil.which("javac")
SRC = Path(__file__).resolve().parent / "java"
# Small, quick JVMs: this machine may have two CPUs.
JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-XX:ActiveProcessorCount=2", "-Xshare:auto"]

pytestmark = pytest.mark.skipif(not (JAVA and JAVAC),
                                reason="java/javac are not installed (openjdk-17-jdk-headless)")

GROUPS = {
    "stream": "nio_echo block_echo gather sink input transfer async small_buffers half_close "
              "two_selectors write_ready oob http sigbus spawn",
    "close": "close_read close_write close_accept close_select resets refused interrupt_write "
             "close_race late_accept exit_write",
    "many": "many nio_multi hold_many options reuseport",
}
# A second client run after the first, against the same server.
AFTER = {"close": "exit_result"}
# What each group's usmc run leaves on TCP, by reason: urgent data moves
# its connection to TCP (`oob` at the sender, `peer_moved_to_tcp` at the
# other end); an SO_REUSEPORT group with two sockets is TCP (`reuseport`
# at the client; the server saw no proposal: `peer_not_usmc`).
FALLBACK = {
    "stream": {"oob": 2, "peer_moved_to_tcp": 2},
    "close": {},
    "many": {"reuseport": 40, "peer_not_usmc": 40},
}
# Connections each group makes at least (client side, on shared memory).
MIN_CLIENTS = {"stream": 40, "close": 70, "many": 1300}


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    out = tmp_path_factory.mktemp("java-classes")
    sources = sorted(str(p) for p in SRC.glob("*.java"))
    r = subprocess.run([JAVAC, "-d", str(out), *sources], capture_output=True, timeout=180)
    assert r.returncode == 0, "javac failed:\n" + r.stderr.decode(errors="replace")
    return out


def start_server(procs, rundir, classes, usmc, host="127.0.0.1"):
    """UsmcServer on four free ports; ready when it printed "listening"
    (after all four listen() calls returned) and, under usmc, every
    listener's registration was logged.  Returns (proc, ports)."""
    last = None
    for _ in range(4):
        ports = sorted({h.free_port(host) for _ in range(4)})
        if len(ports) < 4:
            continue
        proc = procs.start("java-server-%s" % ("usmc" if usmc else "plain"),
                           [JAVA, *JVM, "-cp", classes, "UsmcServer", host, *ports],
                           rundir.env(debug=usmc), usmc=usmc)
        pats = [re.compile(rb"listen \S+:%d: registered for SMC-D" % p) for p in ports]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.alive():
            if b"listening" in proc.stdout() and (
                    not usmc or all(p.search(proc.stderr()) for p in pats)):
                return proc, ports
            time.sleep(0.05)
        last = proc
        proc.stop(grace=0.5)   # a port taken meanwhile (BindException): again
    raise AssertionError("UsmcServer did not start\n%s" % (last.diag() if last else ""))


def run_clients(procs, rundir, classes, usmc, ports, group, timeout=75):
    """UsmcClient with the group's scenarios (then the AFTER run); returns
    (transcript lines, diagnostics)."""
    lines, diag = [], []
    runs = [GROUPS[group]] + ([AFTER[group]] if group in AFTER else [])
    for i, scen in enumerate(runs):
        p = procs.start("java-client-%s-%s-%d" % (group, "usmc" if usmc else "plain", i),
                        [JAVA, *JVM, "-cp", classes, "UsmcClient", "127.0.0.1", *ports,
                         *scen.split()], rundir.env(), usmc=usmc)
        rc = p.wait(timeout)
        diag.append(p.diag())
        lines += p.text().splitlines() + ["(exit status %d)" % rc]
    return lines, "\n".join(diag)


def check_plain(lines, diag):
    """The reference run itself must be sound (else the JDK or the machine
    is at fault, not usmc)."""
    bad = [ln for ln in lines
           if re.search(r"FAILED|TIMEOUT|MISMATCH|STILL BLOCKED|NOT WRITABLE", ln)]
    assert not bad, "plain TCP run went wrong:\n%s\n%s" % ("\n".join(bad), diag)
    assert "done" in lines and "(exit status 0)" in lines, diag


def assert_same(plain, usmc, diag):
    if plain != usmc:
        d = "\n".join(difflib.unified_diff(plain, usmc, "plain TCP", "usmc", lineterm="", n=1))
        raise AssertionError("the JVM saw something else under usmc:\n%s\n%s" % (d, diag))


def strip_unshared(fb):
    """On the copy device (USMC_T_UNSHARED) the spawned child's fork or
    exec moves every connection open then to TCP first (device_unshared,
    peer_moved_to_tcp): those reasons are not compared there."""
    return {k: v for k, v in fb.items() if not (h.UNSHARED and k in h.UNSHARED_REASONS)}


@pytest.mark.timeout(200, method="signal")
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_java(rundir, procs, classes, group):
    server, ports = start_server(procs, rundir, classes, usmc=False)
    plain, pdiag = run_clients(procs, rundir, classes, False, ports, group)
    server.stop()
    check_plain(plain, pdiag + "\n" + server.diag())

    server, ports = start_server(procs, rundir, classes, usmc=True)
    usmc, udiag = run_clients(procs, rundir, classes, True, ports, group)
    assert_same(plain, usmc, udiag + "\n" + server.diag())

    want = MIN_CLIENTS[group]
    st = rundir.settle(lambda s: s["smc_client"] >= want and s["smc_server"] == s["smc_client"])
    msg = "\n" + h.fmt_stat(st) + "\n" + udiag
    assert st["handshake_errors"] == 0, "handshake errors" + msg
    assert st["smc_client"] >= want, "expected >= %d client connections on shared memory" % want + msg
    assert st["smc_server"] == st["smc_client"], "client/server counts differ" + msg
    assert st["smc_conns"] == st["smc_client"] + st["smc_server"], msg
    assert st["tx_bytes"] > 0 and st["rx_bytes"] > 0, "no bytes through shared memory" + msg
    assert strip_unshared(st["tcp_fallback"]) == strip_unshared(FALLBACK[group]), \
        "unexpected TCP fallback" + msg
    if not h.UNSHARED:
        assert st["tcp_conns"] == sum(FALLBACK[group].values()), "connections on TCP" + msg
