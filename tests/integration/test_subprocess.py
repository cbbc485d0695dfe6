"""A usmc'd python3 program that starts subprocesses while it holds
accelerated connections, as any tool does (subprocess.run: vfork, then
close_range of the child's descriptors, then exec).  Until the library made
vfork() a fork(), the child's close_range went through libusmc in the
parent's memory and reset every connection of the parent.  Also: a child
that inherits a connection (pass_fds) and serves it while the parent has
already closed its copy."""
import sys

import pytest

from . import helpers as h

CLIENT = r'''
import os, socket, subprocess, sys

host, port = sys.argv[1], int(sys.argv[2])

def echo(s, tag, n):
    msg = (tag.encode() * (n // len(tag) + 1))[:n]
    s.sendall(msg)
    got = b""
    while len(got) < n:
        d = s.recv(n - len(got))
        if not d:
            sys.exit("%s: EOF after %d of %d bytes" % (tag, len(got), n))
        got += d
    if got != msg:
        sys.exit("%s: echo differs" % tag)
    return n

total = 0
a = socket.create_connection((host, port))
total += echo(a, "before-", 100000)
for i in range(3):
    r = subprocess.run(["/bin/true"])
    if r.returncode:
        sys.exit("true exited %d" % r.returncode)
    total += echo(a, "after-run-%d-" % i, 50000)

b = socket.create_connection((host, port))
total += echo(b, "b-first-", 1000)
b.set_inheritable(True)
child = subprocess.Popen([sys.executable, "-c", CHILD, str(b.fileno())], pass_fds=[b.fileno()])
b.close()
if child.wait(timeout=60):
    sys.exit("inheriting child exited %d" % child.returncode)
total += 70000
total += echo(a, "after-child-", 100000)
a.shutdown(socket.SHUT_WR)
if a.recv(1) != b"":
    sys.exit("no EOF on a")
a.close()
print("OK bytes=%d" % total, flush=True)
'''

CHILD = r'''
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
msg = b"inherited!" * 7000
s.sendall(msg)
got = b""
while len(got) < len(msg):
    d = s.recv(65536)
    if not d:
        sys.exit("child: EOF after %d bytes" % len(got))
    got += d
if got != msg:
    sys.exit("child: echo differs")
s.shutdown(socket.SHUT_WR)
if s.recv(1) != b"":
    sys.exit("child: no EOF")
s.close()
'''


@pytest.mark.timeout(120, method="signal")
def test_subprocess_keeps_connections(rundir, procs, scripts, tmp_path):
    # subprocess uses vfork() from Python 3.10 on (the path this covers).
    assert sys.version_info >= (3, 10), sys.version
    client = tmp_path / "spawning_client.py"
    client.write_text("CHILD = %r\n" % CHILD + CLIENT)
    server, port = h.start_server(
        procs, "echo-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    p = procs.run("spawning-client", [h.PY, client, "127.0.0.1", port], rundir.env(), timeout=90)
    assert p.text().startswith("OK bytes="), p.diag()
    st = rundir.settle(h.accel_pred(2))
    h.assert_accelerated(st, clients=2, diag=server.diag() + p.diag())
    assert st["aborts"] == {}, "connections reset\n" + h.fmt_stat(st)
    total = int(p.text().split("bytes=")[1])
    if h.UNSHARED:
        # A device without sharing: `a` (close-on-exec, as Python makes
        # sockets) stays through every spawn; `b` moves to TCP when the
        # inheriting child is spawned, its first 1000 bytes already echoed.
        assert st["tcp_fallback"] == {"device_unshared": 1, "peer_moved_to_tcp": 1}, \
            h.fmt_stat(st)
        assert st["tx_bytes"] == st["rx_bytes"] == 2 * (total - 70000), h.fmt_stat(st)
        return
    # Every byte (the child's included) crossed shared memory there and back.
    assert st["tx_bytes"] == 2 * total and st["rx_bytes"] == 2 * total, h.fmt_stat(st)
