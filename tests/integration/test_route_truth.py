"""Route truth: the same address in two namespaces, a usmc listener in one.

Namespace C (the clients) has a veth into X and one into B.  X holds
address D; B holds D too (on its loopback) and runs a usmc echo server on
D's port.  Where a connection from C to D goes is the kernel's route in C:

  * to X (the connected /24 route): X's plain echo server must answer, on
    TCP, every byte; the client used to match B's listener from the
    registry (B publishes D, X publishes nothing), propose there, and its
    request sat in B's ring while X waited for it: a hang.  Now the next
    hop the kernel resolved must be one of B's interfaces (src/route.c):
    uncertain_route.
  * to B (a /32 route into the C-B veth): B's usmc server is the one the
    kernel connects, and the route proves it: shared memory.
"""
import contextlib
import os
import random

import pytest

from . import helpers as h
from .test_netns import ip


@contextlib.contextmanager
def three_namespaces():
    tag = "%d%04x" % (os.getpid() % 100000, random.getrandbits(16))
    names = {k: "usmc-rt-%s-%s" % (tag, k) for k in "cbx"}
    net = "10.%d" % random.randint(100, 199)
    d = "%s.1.2" % net
    created = []
    try:
        r = ip("netns", "add", names["c"], check=False)
        if r.returncode != 0:
            pytest.skip("ip netns add not permitted: " + r.stderr.decode(errors="replace"))
        created.append(names["c"])
        for k in "bx":
            ip("netns", "add", names[k])
            created.append(names[k])
        # C-X: 10.N.1.1 - 10.N.1.2 (= D); C-B: 10.N.2.1 - 10.N.2.2, and D on B's lo.
        for peer, sub in (("x", 1), ("b", 2)):
            vc, vp = "rt%s%sc" % (peer, tag[-8:]), "rt%s%sp" % (peer, tag[-8:])
            ip("link", "add", vc, "netns", names["c"], "type", "veth", "peer", "name", vp,
               "netns", names[peer])
            ip("-n", names["c"], "addr", "add", "%s.%d.1/24" % (net, sub), "dev", vc)
            ip("-n", names[peer], "addr", "add", "%s.%d.2/24" % (net, sub), "dev", vp)
            for ns, dev in ((names["c"], vc), (names[peer], vp)):
                ip("-n", ns, "link", "set", dev, "up")
                ip("-n", ns, "link", "set", "lo", "up")
            names["dev_" + peer] = vc
        ip("-n", names["b"], "addr", "add", d + "/32", "dev", "lo")
        yield names, d
    finally:
        for ns in created:
            ip("netns", "del", ns, check=False)


def _run(rundir, procs, scripts, tmp_path, route_to_b, client):
    """Three connections from C to D: asyncio's (non-blocking connect: the
    route is checked when it completes, the proposal taken back if need
    be) or a blocking connect each (checked before proposing); every byte
    echoed back and compared."""
    with three_namespaces() as (ns, d):
        if route_to_b:
            ip("-n", ns["c"], "route", "add", d + "/32", "dev", ns["dev_b"])
        port = 19000 + random.randint(0, 999)
        h.start_server(procs, "usmc-echo-b",
                       lambda p: [h.PY, scripts["async_echo_server"], "0.0.0.0", p],
                       rundir.env(debug=True), netns=ns["b"], port=port)
        h.start_server(procs, "plain-echo-x",
                       lambda p: [h.PY, scripts["async_echo_server"], d, p],
                       rundir.env(), usmc=False, netns=ns["x"], port=port)
        if client == "asyncio":
            p = procs.run("echo-client-c",
                          [h.PY, scripts["async_echo_client"], d, port, 3, 50, 65536, 5],
                          rundir.env(debug=True), netns=ns["c"], timeout=60)
            assert p.text().startswith("OK conns=3 msgs=150 "), p.diag()
            return p
        for i in range(3):
            data = h.random_bytes(300000, seed=i)
            src, out = tmp_path / ("send%d" % i), tmp_path / ("got%d" % i)
            src.write_bytes(data)
            p = procs.run("raw-client-c", [h.PY, scripts["raw_client"], d, port, out, src],
                          rundir.env(debug=True), netns=ns["c"], timeout=60)
            assert out.read_bytes() == data, p.diag()
        return p


CLIENTS = ["asyncio", "blocking"]


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("client", CLIENTS)
def test_same_address_elsewhere_kernel_wins(rundir, procs, scripts, tmp_path, client):
    p = _run(rundir, procs, scripts, tmp_path, False, client)
    st = rundir.settle(lambda s: s["tcp_conns"] >= 3)
    # X's plain server answered every byte; none of it went near B's
    # listener, which never saw a connection.
    assert st["smc_conns"] == 0, h.fmt_stat(st) + "\n" + p.diag()
    assert st["tcp_fallback"] == {"uncertain_route": 3}, h.fmt_stat(st)
    assert st["aborts"] == {} and st["handshake_errors"] == 0, h.fmt_stat(st)


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("client", CLIENTS)
def test_route_into_listener_namespace_accelerated(rundir, procs, scripts, tmp_path, client):
    p = _run(rundir, procs, scripts, tmp_path, True, client)
    st = rundir.settle(h.accel_pred(3))
    h.assert_accelerated(st, clients=3, diag=p.diag())


@pytest.mark.timeout(120, method="signal")
def test_across_a_bridge_accelerated(rundir, procs, scripts):
    """The container layout: C holds a bridge, B hangs off it by a veth
    (docker0 and a container).  The next hop for B's address is B's own
    interface behind the bridge: proven, shared memory."""
    tag = "%d%04x" % (os.getpid() % 100000, random.getrandbits(16))
    c, b = "usmc-br-%s-c" % tag, "usmc-br-%s-b" % tag
    br, vc, vb = "br%s" % tag[-8:], "bv%sc" % tag[-8:], "bv%sb" % tag[-8:]
    net = "10.%d.7" % random.randint(100, 199)
    created = []
    try:
        r = ip("netns", "add", c, check=False)
        if r.returncode != 0:
            pytest.skip("ip netns add not permitted: " + r.stderr.decode(errors="replace"))
        created.append(c)
        ip("netns", "add", b)
        created.append(b)
        ip("-n", c, "link", "add", br, "type", "bridge")
        ip("link", "add", vc, "netns", c, "type", "veth", "peer", "name", vb, "netns", b)
        ip("-n", c, "link", "set", vc, "master", br)
        ip("-n", c, "addr", "add", net + ".1/24", "dev", br)
        ip("-n", b, "addr", "add", net + ".2/24", "dev", vb)
        for ns, dev in ((c, br), (c, vc), (b, vb), (c, "lo"), (b, "lo")):
            ip("-n", ns, "link", "set", dev, "up")
        port = 19500 + random.randint(0, 499)
        h.start_server(procs, "usmc-echo-b",
                       lambda p: [h.PY, scripts["async_echo_server"], "0.0.0.0", p],
                       rundir.env(debug=True), netns=b, port=port)
        p = procs.run("echo-client-c",
                      [h.PY, scripts["async_echo_client"], net + ".2", port, 3, 50, 65536, 6],
                      rundir.env(debug=True), netns=c, timeout=60)
        assert p.text().startswith("OK conns=3 msgs=150 "), p.diag()
        st = rundir.settle(h.accel_pred(3))
        h.assert_accelerated(st, clients=3, diag=p.diag())
    finally:
        for ns in created:
            ip("netns", "del", ns, check=False)
