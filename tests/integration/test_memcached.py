"""memcached (multi-threaded, libevent/epoll; its listener thread accepts
and hands each connection to one of its worker threads) under `usmc run`,
with a python3 client under `usmc run` speaking the text protocol on
several connections: values from 0 bytes to 300 KB set and read back byte
for byte, every connection on shared memory."""
import os

import pytest

from . import helpers as h

CLIENT = r'''
import random, socket, sys

host, port, conns, ops, seed = sys.argv[1], int(sys.argv[2]), *(int(x) for x in sys.argv[3:6])
rnd = random.Random(seed)
socks = [socket.create_connection((host, port)) for _ in range(conns)]
bufs = [b""] * conns

def fill(i, n):
    while len(bufs[i]) < n:
        d = socks[i].recv(262144)
        if not d:
            sys.exit("connection %d: EOF" % i)
        bufs[i] += d

def readline(i):
    while b"\r\n" not in bufs[i]:
        fill(i, len(bufs[i]) + 1)
    line, bufs[i] = bufs[i].split(b"\r\n", 1)
    return line

def readn(i, n):
    fill(i, n)
    out, bufs[i] = bufs[i][:n], bufs[i][n:]
    return out

store, moved = {}, 0
for k in range(ops):
    i = rnd.randrange(conns)
    key = b"key:%d" % rnd.randrange(300)
    if key not in store or rnd.random() < 0.4:
        size = rnd.choice([rnd.randint(0, 100), rnd.randint(101, 8192), rnd.randint(8193, 300000)])
        val = rnd.randbytes(size)
        socks[i].sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, size, val))
        r = readline(i)
        if r != b"STORED":
            sys.exit("set %s: %r" % (key, r))
        store[key] = val
    else:
        socks[i].sendall(b"get %s\r\n" % key)
        hdr = readline(i).split()
        if len(hdr) != 4 or hdr[0] != b"VALUE" or hdr[1] != key:
            sys.exit("get %s: %r" % (key, hdr))
        val = readn(i, int(hdr[3]) + 2)
        if readline(i) != b"END" or val[-2:] != b"\r\n":
            sys.exit("get %s: bad framing" % key)
        if val[:-2] != store[key]:
            sys.exit("get %s: value differs" % key)
    moved += len(store[key])
socks[0].sendall(b"stats\r\n")
stats = {}
while True:
    line = readline(0)
    if line == b"END":
        break
    _, name, value = line.split(b" ", 2)
    stats[name.decode()] = value.decode()
for s in socks:
    s.close()
print("OK ops=%d bytes=%d threads=%s curr_connections=%s" % (
    ops, moved, stats["threads"], stats["curr_connections"]), flush=True)
'''


@pytest.mark.timeout(120, method="signal")
def test_memcached_set_get(rundir, procs, tmp_path):
    client = tmp_path / "mc_client.py"
    client.write_text(CLIENT)
    user = ["-u", "root"] if os.geteuid() == 0 else []
    server, port = h.start_server(
        procs, "memcached",
        lambda p: ["memcached", *user, "-U", "0", "-l", "127.0.0.1", "-p", p, "-t", "4",
                   "-m", "256", "-I", "2m", "-c", "256"],
        rundir.env(debug=True))
    conns = 12
    p = procs.run("mc-client", [h.PY, client, "127.0.0.1", port, conns, 2500, 11],
                  rundir.env(), timeout=90)
    out = p.text()
    assert out.startswith("OK "), p.diag()
    fields = dict(kv.split("=") for kv in out.split()[1:])
    assert fields["threads"] == "4", out
    # memcached saw all of them at once (its own count includes a listener).
    assert int(fields["curr_connections"]) >= conns, out
    st = rundir.settle(h.accel_pred(conns))
    h.assert_accelerated(st, clients=conns, diag=server.diag())
    assert st["aborts"] == {}, h.fmt_stat(st)
    # Requests and replies both crossed shared memory: at least the values.
    assert st["tx_bytes"] >= int(fields["bytes"]), h.fmt_stat(st)
