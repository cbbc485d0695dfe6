"""Python `selectors` (epoll) servers under `usmc run`, each run the same way
over plain TCP: the outcome must be the same, and under usmc the counters
must show every connection on shared memory.

  echo_many       a level-triggered echo server (accept loop, one recv and
                  one send per ready connection) and one client opening
                  connections one after another: a ready connection's recv
                  never raises EAGAIN
  echo_undecided  the same, with every client's proposal late (the server
                  accepts undecided and the client sends the CLC wake message)
                  and a pause between connect and the first byte: the wake
                  byte must not show as readable
"""
import pytest

from . import helpers as h

# SERVER HOST PORT TOTAL: echo until TOTAL connections have closed.  A ready
# connection whose recv would block kills it (BlockingIOError).
SERVER = r'''
import selectors, socket, sys
host, port, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sel = selectors.DefaultSelector()
assert type(sel).__name__ == "EpollSelector", type(sel).__name__
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(128)
ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ, None)
print("listening", flush=True)
served = closed = 0
while closed < total:
    for key, events in sel.select():
        if key.data is None:
            while True:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    break
                c.setblocking(False)
                sel.register(c, selectors.EVENT_READ, "conn")
            continue
        c = key.fileobj
        try:
            d = c.recv(4096)
        except BlockingIOError:
            print("EAGAIN after readable: connection %d, events %#x" % (closed + 1, events),
                  flush=True)
            raise
        if d:
            c.send(d)
            served += 1
        else:
            sel.unregister(c)
            c.close()
            closed += 1
print("OK served=%d closed=%d" % (served, closed), flush=True)
'''

# CLIENT HOST PORT N PAUSE: N connections in turn, one byte there and back.
CLIENT = r'''
import socket, sys, time
host, port, n, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for i in range(n):
    with socket.create_connection((host, port)) as s:
        s.settimeout(30)
        if pause:
            time.sleep(pause)
        s.sendall(b"x")
        assert s.recv(1) == b"x", i
print("OK n=%d" % n, flush=True)
'''


def run_echo(rundir, procs, tmp_path, usmc, n, pause=0.0, client_env=None):
    server_py = tmp_path / "sel_server.py"
    client_py = tmp_path / "sel_client.py"
    server_py.write_text(SERVER)
    client_py.write_text(CLIENT)
    server, port = h.start_server(
        procs, "sel-server", lambda p: [h.PY, server_py, "127.0.0.1", p, n],
        rundir.env(debug=usmc), usmc=usmc)
    client = procs.start("sel-client", [h.PY, client_py, "127.0.0.1", port, n, pause],
                         rundir.env(**(client_env or {})), usmc=usmc)
    client.wait(240)
    server.wait(30)
    return server, client


@pytest.mark.timeout(300, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_echo_many(rundir, procs, tmp_path, usmc):
    n = 3000
    server, client = run_echo(rundir, procs, tmp_path, usmc, n)
    diag = server.diag() + "\n" + client.diag()
    assert server.text().splitlines()[-1] == "OK served=%d closed=%d" % (n, n), diag
    assert client.text().strip() == "OK n=%d" % n, diag
    if usmc:
        st = rundir.settle(h.accel_pred(n))
        h.assert_accelerated(st, clients=n, diag=diag)


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_echo_undecided(rundir, procs, tmp_path, usmc):
    n = 10
    server, client = run_echo(rundir, procs, tmp_path, usmc, n, pause=0.02,
                              client_env={"USMC_FAULT": "late"} if usmc else None)
    diag = server.diag() + "\n" + client.diag()
    assert server.text().splitlines()[-1] == "OK served=%d closed=%d" % (n, n), diag
    assert client.text().strip() == "OK n=%d" % n, diag
    if usmc:
        st = rundir.settle(h.accel_pred(n))
        h.assert_accelerated(st, clients=n, diag=diag)
        # Every server accepted undecided: each client sent a wake message.
        assert h.proposals_on_tcp(st) == n, h.fmt_stat(st)
