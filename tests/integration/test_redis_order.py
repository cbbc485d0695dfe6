"""Ready order (issue 14 item 7): the kernel's epoll ready list is first
come, first served, and programs rely on it.  One client blocks in
XREADGROUP ... BLOCK 0 and, right after, another deletes the stream: redis
handles the blocking command first and the blocked client learns that the
key is gone (-UNBLOCKED).  Handled the other way round, XREADGROUP finds no
group (-NOGROUP).  Plain TCP and usmc must answer alike, every time."""

import pytest

from . import helpers as h
from .test_redis import start_redis

# CLIENT PORT N: N rounds; prints a count of A's replies by kind.
CLIENT = r'''
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        out += b"$%d\r\n%s\r\n" % (len(x), x.encode())
    return out
def line(s):
    buf = b""
    while not buf.endswith(b"\r\n"):
        b = s.recv(1)
        if not b:
            raise EOFError
        buf += b
    return buf.decode()
a, b, c = (socket.create_connection(("127.0.0.1", port)) for _ in range(3))
kinds = {}
for i in range(n):
    key = "stream%d" % i
    c.sendall(cmd("XGROUP", "CREATE", key, "g", "$", "MKSTREAM"))
    assert line(c) == "+OK\r\n"
    time.sleep(0.002)           # redis goes back to sleep in epoll_wait
    a.sendall(cmd("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", key, ">"))
    b.sendall(cmd("DEL", key))
    kind = line(a).split()[0]
    assert line(b) == ":1\r\n"
    kinds[kind] = kinds.get(kind, 0) + 1
print(" ".join("%s=%d" % kv for kv in sorted(kinds.items())), flush=True)
'''


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_redis_blocking_before_del(rundir, procs, tmp_path, usmc):
    n = 200
    script = tmp_path / "order_client.py"
    script.write_text(CLIENT)
    server, port = start_redis(procs, rundir, usmc=usmc)
    p = procs.run("order-client", [h.PY, script, port, n], rundir.env(), usmc=usmc,
                  timeout=90)
    assert p.text().strip() == "-UNBLOCKED=%d" % n, p.diag() + "\n" + server.diag()
    if usmc:
        st = rundir.settle(h.accel_pred(3))
        h.assert_accelerated(st, clients=3, diag=server.diag())
