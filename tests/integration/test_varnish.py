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
import shutil

import pytest

from . import helpers as h
from .test_nginx import curl, parse_wrk, sha256_file, start_nginx

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
        assert sha256_file(out) == site["big_sha"]
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
