"""Cross-namespace: server under `usmc run` in namespace A, client under
`usmc run` in namespace B, joined by a veth pair, sharing one runtime
directory.  The client reaches A's veth address by route; the transfer must
be byte-exact and go through shared memory."""
import contextlib
import os
import random
import subprocess

import pytest

from . import helpers as h


def ip(*args, check=True):
    r = subprocess.run(["ip", *map(str, args)], capture_output=True, timeout=30)
    if check and r.returncode != 0:
        raise AssertionError("ip %s: %s" % (" ".join(map(str, args)),
                                            r.stderr.decode(errors="replace")))
    return r


@contextlib.contextmanager
def veth_pair(name, dev, subnet, skip=False):
    """Two fresh namespaces usmc-NAME-TAG-a/-b joined by a veth pair (DEV
    names its ends), addresses SUBNET.N.1 and .2/24, lo up in both; removed
    whatever happens.  skip: a host that refuses `ip netns add` skips the
    test instead of failing it."""
    tag = "%d%04x" % (os.getpid() % 100000, random.getrandbits(16))
    a, b = "usmc-%s-%s-a" % (name, tag), "usmc-%s-%s-b" % (name, tag)
    va, vb = "%sa%s" % (dev, tag[-10:]), "%sb%s" % (dev, tag[-10:])
    net = random.randint(0, 255)
    addr_a, addr_b = "%s.%d.1" % (subnet, net), "%s.%d.2" % (subnet, net)
    created = []
    try:
        r = ip("netns", "add", a, check=not skip)
        if r.returncode != 0:
            pytest.skip("ip netns add not permitted: " + r.stderr.decode(errors="replace"))
        created.append(a)
        ip("netns", "add", b)
        created.append(b)
        ip("link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b)
        for ns, d, addr in ((a, va, addr_a), (b, vb, addr_b)):
            ip("-n", ns, "addr", "add", addr + "/24", "dev", d)
            ip("-n", ns, "link", "set", d, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield {"a": a, "b": b, "addr_a": addr_a, "addr_b": addr_b}
    finally:
        for ns in created:
            ip("netns", "del", ns, check=False)


@pytest.fixture
def netns_pair():
    with veth_pair("it", "u", "10.231", skip=True) as pair:
        yield pair


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("bind", ["veth", "any"])
def test_cross_namespace_echo(rundir, procs, scripts, netns_pair, bind):
    ns = netns_pair
    host = ns["addr_a"] if bind == "veth" else "0.0.0.0"
    port = 18000 + random.randint(0, 999)   # namespaces are ours: no one else binds there
    server, port = h.start_server(
        procs, "echo-server-ns-a",
        lambda p: [h.PY, scripts["async_echo_server"], host, p],
        rundir.env(debug=True), netns=ns["a"], port=port)
    p = procs.run("echo-client-ns-b", [h.PY, scripts["async_echo_client"], ns["addr_a"], port,
                                       3, 100, 131072, 11],
                  rundir.env(debug=True), netns=ns["b"], timeout=90)
    assert p.text().startswith("OK conns=3 msgs=300 "), p.diag()
    st = rundir.settle(h.accel_pred(3))
    h.assert_accelerated(st, clients=3, diag=p.diag() + "\n" + server.diag())
    total = int(p.text().split("bytes=")[1])
    assert st["tx_bytes"] == 2 * total, h.fmt_stat(st)


@pytest.mark.timeout(120, method="signal")
def test_cross_namespace_plain_client_falls_back(rundir, procs, scripts, netns_pair, tmp_path):
    """A plain client in B to a usmc server in A: TCP, exact bytes."""
    ns = netns_pair
    server, port = h.start_server(
        procs, "echo-server-ns-a",
        lambda p: [h.PY, scripts["async_echo_server"], ns["addr_a"], p],
        rundir.env(debug=True), netns=ns["a"], port=18500)
    data = h.random_bytes(1000 * 1000, seed=12)
    src, out = tmp_path / "send.bin", tmp_path / "received.bin"
    src.write_bytes(data)
    procs.run("raw-client-ns-b", [h.PY, scripts["raw_client"], ns["addr_a"], port, out, src],
              rundir.env(), usmc=False, netns=ns["b"])
    assert out.read_bytes() == data
    st = rundir.settle(lambda s: s["tcp_conns"] >= 1)
    assert st["smc_conns"] == 0 and st["tcp_fallback"] == {"peer_not_usmc": 1}, h.fmt_stat(st)
