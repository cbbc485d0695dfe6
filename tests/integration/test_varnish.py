"""Varnish (Debian's varnishd: a manager process and a multi-threaded cache
child with its epoll waiter) in front of nginx, every process under `usmc
run`: clients -> varnish and varnish -> nginx both on shared memory, bodies
byte-exact, the child never panics.

Objects get no TTL (`default_ttl=0`), so every request also goes to the
backend over varnish's pool of reused backend connections, which its
waiter thread watches with epoll while worker threads add and remove them:
the pattern that delivered usmc's internal epoll tags to varnish
(`magic == 0x1743992d` assertion in its waiter) before.
"""
import hashlib
import os
import re
import shutil
import signal
import time

import pytest

from . import helpers as h
from .test_nginx import curl, parse_wrk, start_nginx

pytestmark = pytest.mark.skipif(not shutil.which("varnishd"), reason="varnishd not installed")

BODY = 3 * 1000 * 1000


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "www"
    d.mkdir()
    big = h.random_bytes(BODY, seed=77)
    (d / "big.bin").write_bytes(big)
    (d / "index.html").write_bytes(b"<html>varnish over usmc</html>\n" * 30)
    return {"dir": d, "big_sha": hashlib.sha256(big).hexdigest(),
            "index": (d / "index.html").read_bytes()}


def start_varnish(procs, rundir, tmp_path, backend_port, usmc=True):
    work = tmp_path / "varnish"
    work.mkdir(exist_ok=True)

    def argv(port):
        # -j none: no privilege separation (the test runs as root, and the
        # cache child must be the same user as nginx to share memory).
        return ["varnishd", "-F", "-j", "none", "-n", str(work), "-a", "127.0.0.1:%d" % port,
                "-b", "127.0.0.1:%d" % backend_port, "-s", "malloc,32m",
                "-p", "default_ttl=0", "-p", "default_grace=0", "-p", "default_keep=0",
                "-p", "thread_pools=2", "-p", "thread_pool_min=10"]

    return h.start_server(procs, "varnishd", argv, rundir.env(debug=usmc), usmc=usmc)


def child_panicked(proc):
    text = proc.text()
    return "Panic" in text or "Child (" in text and "died" in text


@pytest.mark.timeout(240, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_varnish_wrk_and_curl(rundir, procs, tmp_path, site, usmc):
    nginx, nport = start_nginx(procs, rundir, tmp_path, site["dir"], "on", usmc=usmc)
    varnish, vport = start_varnish(procs, rundir, tmp_path, nport, usmc=usmc)
    url = "http://127.0.0.1:%d/" % vport

    # Many short requests over 16 keep-alive connections, every one a miss.
    p = procs.run("wrk", ["wrk", "-t2", "-c16", "-d3s", url + "index.html"],
                  rundir.env(), usmc=usmc, timeout=90)
    text = p.text()
    n = parse_wrk(text)
    assert n > 0, text
    assert "Socket errors" not in text, "wrk saw socket errors:\n" + text
    assert "Non-2xx" not in text, text

    # Whole bodies, byte for byte, after the load.
    for i in range(3):
        out = tmp_path / ("big%d.out" % i)
        curl(procs, rundir, ["-o", out, url + "big.bin"], usmc=usmc, name="curl%d" % i)
        assert h.sha256_file(out) == site["big_sha"]
    out = tmp_path / "index.out"
    curl(procs, rundir, ["-o", out, url + "index.html"], usmc=usmc, name="curl-index")
    assert out.read_bytes() == site["index"]

    assert varnish.alive(), varnish.diag()
    assert not child_panicked(varnish), varnish.diag()
    if usmc:
        # wrk's probe + 16 + 4 curls towards varnish, and at least one
        # backend connection from varnish to nginx.
        st = rundir.settle(h.accel_pred(22))
        h.assert_accelerated(st, min_clients=22, diag=varnish.diag() + nginx.diag())


def wait_children(proc, n, usmc, vport, timeout=60.0):
    """Wait until varnish's manager has started its n-th cache child and
    (under usmc) that child registered the listener again."""
    pat = re.compile(r"Child \((\d+)\) said usmc\[\d+\]: listen 127\.0\.0\.1:%d: registered"
                     % vport if usmc else r"Child \((\d+)\) Started")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pat.findall(proc.stderr().decode(errors="replace") + proc.text())
        # Plain: the manager may open the socket again before the child
        # starts; the child is ready once the port listens.
        if len(set(found)) >= n and (usmc or h._listen_inodes(proc.pid, vport)):
            return found[-1]
        assert proc.alive(), proc.diag()
        time.sleep(0.05)
    raise AssertionError("no cache child #%d\n%s" % (n, proc.diag()))


@pytest.mark.timeout(240, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_varnish_child_restart(rundir, procs, tmp_path, site, usmc):
    """The cache child dies without a word (SIGKILL, as after a panic); the
    manager starts a new one, which calls listen() again on the socket the
    manager bound.  Connections to the new child are byte-exact and, under
    usmc, on shared memory: the dead child's listener record must not make
    clients' discovery ambiguous (before: every later client stayed on TCP,
    uncertain_route / peer_not_usmc).  No `usmc stat` runs between the kill
    and the end: its garbage collection would remove the dead record and
    hide the defect; the counters are compared with a snapshot taken
    before the kill."""
    nginx, nport = start_nginx(procs, rundir, tmp_path, site["dir"], "on", usmc=usmc)
    varnish, vport = start_varnish(procs, rundir, tmp_path, nport, usmc=usmc)
    url = "http://127.0.0.1:%d/" % vport
    first = wait_children(varnish, 1, usmc, vport)
    out = tmp_path / "before.out"
    curl(procs, rundir, ["-o", out, url + "index.html"], usmc=usmc, name="curl-before")
    assert out.read_bytes() == site["index"]
    before = rundir.stat() if usmc else None

    os.kill(int(first), signal.SIGKILL)
    second = wait_children(varnish, 2, usmc, vport)
    assert second != first

    for i, name in enumerate(["index.html", "big.bin", "index.html"]):
        out = tmp_path / ("after%d.out" % i)
        curl(procs, rundir, ["-o", out, url + name], usmc=usmc, name="curl-after%d" % i)
        if name == "big.bin":
            assert h.sha256_file(out) == site["big_sha"]
        else:
            assert out.read_bytes() == site["index"]
    assert varnish.alive(), varnish.diag()
    if usmc:
        # Three curls towards the new child and at least one backend
        # connection from it, all on shared memory; nothing new on TCP.
        st = rundir.settle(lambda s: s["smc_client"] - before["smc_client"] >= 4 and
                           s["smc_server"] - before["smc_server"] >= 4)
        diag = "\nbefore: " + h.fmt_stat(before) + "\nafter: " + h.fmt_stat(st) + "\n" + \
            varnish.diag()
        assert st["tcp_fallback"] == before["tcp_fallback"], "new TCP fallbacks" + diag
        assert st["tcp_conns"] == before["tcp_conns"], diag
        assert st["handshake_errors"] == before["handshake_errors"], diag
        assert st["smc_client"] - before["smc_client"] >= 4, diag
        assert st["smc_server"] - before["smc_server"] >= 4, diag
