"""What closes leave in the kernel: the TCP states `ss` shows after a
connection ends must be TCP's, because they are what a busy host runs out
of.  Over TCP the end that closes first goes through TIME_WAIT and the
other one, closing after it read the FIN, does not (LAST_ACK, then gone).

usmc closes in the ring, and the TCP connection only carries the FIN at
the end.  It used to set the ring's CLOSED first and close the kernel
socket after: the peer, woken by the ring, closed its own kernel socket
before our FIN reached it, every close was a simultaneous one, and both
ends went through TIME_WAIT (200 connections: 398 TIME_WAIT sockets
against TCP's 200).  Between namespaces a client opening connections to
one server port runs out of ports twice as fast.  An orderly close now
sends the FIN first (close.c usmc_conn_close)."""
import subprocess

import pytest

from . import helpers as h

N = 100

# N connect / request / answer / close cycles between a forked client and
# the server; `first` says which end closes first, the other one closes
# when it read EOF (as an HTTP/1.1 client or an HTTP/1.0 server does);
# `exit`: the client closes first by exiting (a process of its own for
# each connection, which never calls close).
SCRIPT = r"""
import os, socket, sys
n, port, first = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(64)

def drain(s):
    while s.recv(65536):
        pass

def ask():
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"q" * 512)
    got = 0
    while got < 2048:
        d = c.recv(65536)
        assert d, "short answer"
        got += len(d)
    if first == "server":
        drain(c)
    if first == "exit":
        os._exit(0)     # the process's exit closes it
    c.close()

pid = os.fork()
if pid == 0:
    ls.close()
    for i in range(n):
        if first != "exit":
            ask()
            continue
        kid = os.fork()
        if kid == 0:
            ask()
        _, status = os.waitpid(kid, 0)
        assert status == 0, status
    os._exit(0)
for i in range(n):
    s, _ = ls.accept()
    got = 0
    while got < 512:
        got += len(s.recv(65536))
    s.sendall(b"a" * 2048)
    if first != "server":
        drain(s)
    s.close()
_, status = os.waitpid(pid, 0)
assert status == 0, status
print("ok")
"""


def time_wait(port):
    """TIME_WAIT sockets of the server's port: (server side, client side)."""
    def count(flt):
        out = subprocess.run(["ss", "-Htan", "state", "time-wait", flt], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        return len(out.splitlines())
    return count("( sport = :%s )" % port), count("( dport = :%s )" % port)


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("first", ["client", "server", "exit"])
def test_time_wait_as_tcp(rundir, procs, tmp_path, first):
    """The same N cycles plain and under usmc leave TIME_WAIT at the end
    that closed first only, as TCP does; usmc's are on shared memory.  The
    FIN goes before the ring's CLOSED, and the peer sees the ring only
    after that send returned: a softirq deferred past it (a loaded
    machine) can still make a close simultaneous, hence the slack of a
    tenth at the passive end (before the fix every one of the N was), and
    at the active end, whose count a loaded machine once showed 2 short
    of N (cause not found: this test asserts the passive end)."""
    script = tmp_path / "cycles.py"
    script.write_text(SCRIPT)
    got = {}
    for usmc in (False, True):
        port = h.free_port()
        p = procs.run("usmc" if usmc else "plain", ["python3", script, str(N), str(port), first],
                      rundir.env(), usmc=usmc, timeout=120)
        assert p.stdout().strip() == b"ok", p.diag()
        got[usmc] = time_wait(port)
    active = 0 if first == "server" else 1       # time_wait(): (server, client)
    # Plain TCP too: a loaded machine once made one close in 100
    # simultaneous (TIME_WAIT at both ends), so the same slack.
    assert got[False][active] == N and got[False][1 - active] <= N // 10, got
    assert got[True][active] >= N - N // 10, got
    assert got[True][1 - active] <= N // 10, got
    st = rundir.stat()
    h.assert_accelerated(st, clients=N)
