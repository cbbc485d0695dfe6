"""IPv6: a server on ::1, and a dual-stack listener (::, IPV6_V6ONLY off)
reached over IPv4 (the server sees a v4-mapped peer) and over IPv6.  Every
connection on shared memory, every byte echoed back."""
import pytest

from . import helpers as h

DUAL_SERVER = r'''
import socket, sys
ls = socket.socket(socket.AF_INET6)
ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
ls.bind(("::", int(sys.argv[1])))
ls.listen(8)
peers = []
for _ in range(2):
    s, a = ls.accept()
    peers.append(a[0])
    while True:
        d = s.recv(65536)
        if not d:
            break
        s.sendall(d)
    s.close()
print("peers", *peers, flush=True)
'''

DUAL_CLIENT = r'''
import socket, sys
for host in ("127.0.0.1", "::1"):
    c = socket.create_connection((host, int(sys.argv[1])))
    msg = bytes(range(256)) * 4000
    c.sendall(msg)
    c.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        got += d
    if got != msg:
        sys.exit("%s: echo differs (%d of %d bytes)" % (host, len(got), len(msg)))
    c.close()
print("OK", flush=True)
'''


@pytest.mark.timeout(120, method="signal")
def test_ipv6_loopback(rundir, procs, scripts):
    server, port = h.start_server(
        procs, "echo-server",
        lambda p: [h.PY, scripts["async_echo_server"], "::1", p],
        rundir.env(debug=True), host="::1")
    p = procs.run("echo-client", [h.PY, scripts["async_echo_client"], "::1", port, 3, 60, 65536, 5],
                  rundir.env(), timeout=90)
    assert p.text().startswith("OK conns=3 "), p.diag()
    st = rundir.settle(h.accel_pred(3))
    h.assert_accelerated(st, clients=3, diag=server.diag())


@pytest.mark.timeout(120, method="signal")
def test_dual_stack_listener(rundir, procs, tmp_path):
    srv, cli = tmp_path / "dual_server.py", tmp_path / "dual_client.py"
    srv.write_text(DUAL_SERVER)
    cli.write_text(DUAL_CLIENT)
    server, port = h.start_server(procs, "dual-server", lambda p: [h.PY, srv, p],
                                  rundir.env(debug=True), host="::")
    p = procs.run("dual-client", [h.PY, cli, port], rundir.env(), timeout=60)
    assert p.text().startswith("OK"), p.diag()
    assert server.wait(30) == 0, server.diag()
    assert server.text().split() == ["peers", "::ffff:127.0.0.1", "::1"], server.diag()
    st = rundir.settle(h.accel_pred(2))
    h.assert_accelerated(st, clients=2, diag=server.diag())
    assert st["tx_bytes"] == 2 * 2 * 1024000, h.fmt_stat(st)
