"""A client that connects the moment the server's listen() lets it (a
reconnect loop: libzmq reconnects every 100 ms, and a restarted server
meets it this way) must find the server published: usmc registers the
listener before the kernel listens.  It used to register after, and a
client that connected in between stayed on TCP as if its peer were not
usmc (19 of 20 runs of a connect loop).

A shim preloaded behind libusmc stretches the kernel's listen() by 100 ms
on each side, so that the window is certain instead of rare: before the
kernel listens, clients that find the record are refused, as without
usmc; after, the first connection must be on shared memory."""
import subprocess

import pytest

from . import helpers as h

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

int listen(int fd, int backlog)
{
	int (*next)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
	int rc;

	usleep(100000);
	rc = next(fd, backlog);
	usleep(100000);
	return rc;
}
"""

SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
print("bound", flush=True)
s.listen(8)
c, _ = s.accept()
c.settimeout(20)
c.sendall(c.recv(100))
c.close()
"""

CLIENT = """
import socket, sys, time
refused = 0
while True:
    c = socket.socket()
    try:
        c.connect(("127.0.0.1", int(sys.argv[1])))
        break
    except ConnectionRefusedError:
        c.close()
        refused += 1
        time.sleep(0.002)
c.settimeout(20)
c.sendall(b"ping")
print("refused", refused, "got", c.recv(100).decode(), flush=True)
"""


@pytest.mark.timeout(120, method="signal")
def test_connect_as_listen_returns(rundir, procs, tmp_path):
    shim = tmp_path / "slow_listen.so"
    src = tmp_path / "slow_listen.c"
    src.write_text(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"], check=True,
                   timeout=60)
    port = h.free_port()
    senv = rundir.env(debug=True)
    senv["LD_PRELOAD"] = str(shim)       # usmc run puts libusmc in front
    client = procs.start("connect-loop", [h.PY, "-c", CLIENT, port], rundir.env(debug=True))
    server = procs.start("slow-listen", [h.PY, "-c", SERVER, port], senv)
    assert client.wait(60) == 0, client.diag() + server.diag()
    assert server.wait(30) == 0, server.diag()
    words = client.text().split()
    assert words[-2:] == ["got", "ping"], client.diag()
    # The loop met the closed port first: the window was there.
    assert int(words[words.index("refused") + 1]) > 0, client.diag()
    st = rundir.settle(h.accel_pred(1))
    h.assert_accelerated(st, clients=1, diag=client.diag() + server.diag())
