"""Server-speaks-first protocols (banners: SMTP, FTP, MySQL...) between two
usmc processes: the server writes right after accept(), before the client
has sent anything.  Like kernel SMC, where the handshake completes before
accept() returns, the connection must still go through shared memory, and
the bytes must arrive exactly."""
import pytest

from . import helpers as h


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("nconn", [1, 4])
def test_server_writes_first_is_accelerated(rundir, procs, scripts, tmp_path, nconn):
    n = 2 * 1000 * 1000
    server, port = h.start_server(
        procs, "sender",
        lambda p: [h.PY, scripts["sender_server"], "127.0.0.1", p, n],
        rundir.env(debug=True))
    for i in range(nconn):
        out = tmp_path / ("received-%d.bin" % i)
        p = procs.run("raw-client", [h.PY, scripts["raw_client"], "127.0.0.1", port, out],
                      rundir.env(debug=True))
        assert out.read_bytes() == b"HELLO usmc\n" + h.pattern(0, n), p.diag()
    st = rundir.settle(h.accel_pred(nconn), timeout=5)
    h.assert_accelerated(st, clients=nconn, diag=p.diag() + "\n" + server.diag())


# A server that accepts only once a go-file exists, then echoes one message.
GATED_ECHO = """
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("listening", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
c, _ = s.accept()
c.settimeout(20)
c.sendall(c.recv(100))
c.close()
"""

PING = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
c.settimeout(20)
c.sendall(b"ping")
print("got", c.recv(100).decode(), flush=True)
"""


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("order", ["proposal-first", "accept-first"])
def test_wake_byte_only_for_a_waiting_server(rundir, procs, tmp_path, order):
    """The client sends its CLC wake message only when the server accepted the
    connection undecided and waits on TCP (clc.h: WAIT, +W).  A proposal
    posted before accept() finds the server needs none.  The late case
    (USMC_FAULT=late: the proposal 50 ms after the SYN) would hang without
    the byte, the server sleeping in recv()."""
    go = tmp_path / "go"
    if order == "accept-first":
        go.write_text("")
    server, port = h.start_server(procs, "gated-echo",
                                  lambda p: [h.PY, "-c", GATED_ECHO, p, go],
                                  rundir.env(debug=True))
    cenv = rundir.env(debug=True, USMC_FAULT="late" if order == "accept-first" else "")
    client = procs.start("ping", [h.PY, "-c", PING, port], cenv)
    h.wait_line(client, "connected")
    go.write_text("")
    assert client.wait(30) == 0, client.diag()
    assert client.text().splitlines()[-1] == "got ping", client.diag()
    st = rundir.settle(h.accel_pred(1))
    h.assert_accelerated(st, clients=1, diag=client.diag() + server.diag())
    want = 1 if order == "accept-first" or h.UNSHARED else 0
    assert h.proposals_on_tcp(st) == want, h.fmt_stat(st)
    server.stop()


# Echo one message, then hold the connection open until a stop file exists.
HOLD_ECHO = """
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
c, _ = s.accept()
c.settimeout(20)
c.sendall(c.recv(100))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
"""

PING_HOLD = """
import os, socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.settimeout(20)
c.sendall(b"ping")
print("got", c.recv(100).decode(), flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
"""


@pytest.mark.timeout(120, method="signal")
def test_accept_first_listed_with_its_link_group(rundir, procs, tmp_path):
    """A connection the server accepted before the proposal (undecided,
    then shared memory) is listed by `usmc stat` like any other: both ends
    with the client's link group, the same slot and the ring size (the
    server's entry said link group 0, slot 0, 0-byte rings before)."""
    stop = tmp_path / "stop"
    server, port = h.start_server(procs, "hold-echo",
                                  lambda p: [h.PY, "-c", HOLD_ECHO, p, stop],
                                  rundir.env(debug=True))
    client = procs.start("ping", [h.PY, "-c", PING_HOLD, port, stop],
                         rundir.env(debug=True, USMC_FAULT="late"))
    h.wait_line(client, "got ping")
    st = rundir.settle(lambda s: len([c for c in s["connections"] if c["mode"] == "SMCD"]) == 2)
    stop.write_text("")
    conns = {c["role"]: c for c in st["connections"]}
    assert set(conns) == {"client", "server"}, st["connections"]
    c, s = conns["client"], conns["server"]
    assert h.proposals_on_tcp(st) == 1, h.fmt_stat(st)   # the server accepted first
    assert c["mode"] == s["mode"] == "SMCD", st["connections"]
    assert c["lgr"] == s["lgr"] != "0000000000000000", st["connections"]
    assert c["slot"] == s["slot"] and c["dmb_size"] == s["dmb_size"] > 0, st["connections"]
    assert client.wait(30) == 0, client.diag()
