"""TCP options that change when the kernel sends or wakes: what usmc must
do so that a program using them never hangs where TCP would not.

TCP_DEFER_ACCEPT on a listener (Apache's default): the kernel completes
accept() only once the client sent data on TCP; a proposed usmc client
sends its request through the ring, so clients now always send the CLC wake
byte to such a listener (clc.h `wake_always`).  Without it the server never
accepted (30 s here) and the client hung.

TCP_FASTOPEN_CONNECT on a client: connect() returns at once and the first
write sends the SYN with the data; a write into the ring sends nothing, so
the server never saw a connection.  Such a socket stays TCP
(`unsupported_option`).  Fast Open needs the server side enabled, which is
a per-namespace setting: the test runs in a namespace of its own."""
import pytest

from . import helpers as h

# One server loop and one client loop for both options: each request is a
# line, each answer "pong " + the line, then the server closes.
PINGPONG = r"""
import socket, sys, threading

def serve(ls, n):
    for _ in range(n):
        c, _ = ls.accept()
        data = b""
        while not data.endswith(b"\n"):
            d = c.recv(4096)
            if not d:
                break
            data += d
        c.sendall(b"pong " + data)
        c.close()

def ask(port, n, tfo):
    for i in range(n):
        s = socket.socket()
        s.settimeout(20)
        if tfo:
            s.setsockopt(socket.IPPROTO_TCP, 30, 1)   # TCP_FASTOPEN_CONNECT
        s.connect(("127.0.0.1", port))
        s.sendall(b"ping %d\n" % i)
        got = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        assert got == b"pong ping %d\n" % i, got
        s.close()
    print("ok")

def listener(port, before=(), after=()):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for opt, val in before:
        ls.setsockopt(socket.IPPROTO_TCP, opt, val)
    ls.bind(("127.0.0.1", port))
    ls.listen(8)
    for opt, val in after:
        ls.setsockopt(socket.IPPROTO_TCP, opt, val)
    return ls
"""

DEFER_SERVER = PINGPONG + r"""
defer = [(socket.TCP_DEFER_ACCEPT, 30)]
port = int(sys.argv[1])
if sys.argv[2] == "before":
    serve(listener(port, before=defer), 3)
else:
    serve(listener(port, after=defer), 3)
"""

DEFER_CLIENT = PINGPONG + r"""
ask(int(sys.argv[1]), 3, False)
"""


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_defer_accept(rundir, procs, tmp_path, usmc, when):
    """A listener with TCP_DEFER_ACCEPT (set before or after listen) gets
    its clients' requests: without the wake byte a usmc client's request
    sat in the ring while the kernel waited for TCP data (30 s here)."""
    srv = tmp_path / "srv.py"
    srv.write_text(DEFER_SERVER)
    cli = tmp_path / "cli.py"
    cli.write_text(DEFER_CLIENT)
    server, port = h.start_server(procs, "server", lambda p: ["python3", srv, p, when],
                                  rundir.env(debug=usmc), usmc=usmc)
    p = procs.run("client", ["python3", cli, port], rundir.env(), usmc=usmc, timeout=60)
    assert p.stdout().strip() == b"ok", p.diag()
    assert server.wait(30) == 0, server.diag()
    if usmc:
        st = rundir.settle(h.accel_pred(3))
        h.assert_accelerated(st, clients=3, diag=server.diag())
        assert h.proposals_on_tcp(st) == 3, h.fmt_stat(st)


TFO_SCRIPT = PINGPONG + r"""
port = int(sys.argv[1])
ls = listener(port, before=[(socket.TCP_FASTOPEN, 16)])
threading.Thread(target=serve, args=(ls, 4), daemon=True).start()
ask(port, 4, True)
"""


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_tcp_fastopen_connect(rundir, procs, tmp_path, usmc):
    """Clients with TCP_FASTOPEN_CONNECT (a cookie cached after the first
    connection, so later connects send no SYN until the first write) get
    their answers, over TCP with unsupported_option."""
    script = tmp_path / "tfo.py"
    script.write_text(TFO_SCRIPT)
    inner = "ip link set lo up && sysctl -qw net.ipv4.tcp_fastopen=3 && exec %s python3 %s %d" % (
        ("%s run --" % h.USMC) if usmc else "", script, 8080)
    p = procs.run("tfo", ["unshare", "-n", "sh", "-c", inner], rundir.env(), usmc=False,
                  timeout=60)
    assert p.stdout().strip() == b"ok", p.diag()
    if usmc:
        st = rundir.stat()
        assert st["tcp_fallback"] == {"unsupported_option": 4, "peer_not_usmc": 4}, \
            h.fmt_stat(st)
        assert st["smc_conns"] == 0, h.fmt_stat(st)
