"""Forking servers, run plain and under usmc with the same result.

* socketserver.ForkingTCPServer whose client is another thread of the same
  process: every request answered (the children, which inherit the client
  thread's connection too and leave with os._exit, used to crash in their
  first call on the request socket, and the client read b'' or got
  ECONNRESET from the second request on); one link group serves all of
  them (a child's share of the client's connection used to stay counted
  after its os._exit, so slots were never reused and link groups piled up
  until descriptors ran out).
"""
import pytest

from . import helpers as h

FORKING_SERVER = r'''
import mmap, os, socketserver, socket, threading, sys
n = int(sys.argv[1])
# Room above usmc's counters (mapped at listen, below it): a forked child,
# which maps them again, then gets a new address for them, as it does by
# itself on file systems that align such mappings (see t_inherit.c).
room = mmap.mmap(-1, 64 << 20)
class H(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(self.rfile.readline())
srv = socketserver.ForkingTCPServer(("127.0.0.1", 0), H)
port = srv.server_address[1]
room.close()
answered = 0
def client():
    global answered
    for i in range(n):
        with socket.create_connection(("127.0.0.1", port)) as s:
            line = b"hello world %d\n" % i
            s.sendall(line)
            got = s.makefile("rb").readline()
            if got != line:
                print("request %d: %r" % (i, got), flush=True)
                os._exit(3)     # the server would wait for the next one
            answered += 1
t = threading.Thread(target=client)
t.start()
for i in range(n):
    srv.handle_request()
t.join()
srv.server_close()
print("answered %d of %d" % (answered, n), flush=True)
'''

N_REQUESTS = 200   # more than the 64 slots of a link group


@pytest.mark.timeout(240, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_forking_server_thread_client(rundir, procs, tmp_path, usmc):
    script = tmp_path / "forking_server.py"
    script.write_text(FORKING_SERVER)
    p = procs.run("forking-server", [h.PY, script, N_REQUESTS], rundir.env(), timeout=180,
                  usmc=usmc, check=False)
    # The same outcome either way: every request answered, a clean exit.
    assert p.popen.returncode == 0, p.diag()
    assert p.text().strip() == "answered %d of %d" % (N_REQUESTS, N_REQUESTS), p.diag()
    if not usmc:
        return
    st = rundir.settle(h.accel_pred(N_REQUESTS))
    h.assert_accelerated(st, clients=N_REQUESTS, diag=p.diag(), handed=True)
    assert st["aborts"] == {}, "connections reset\n" + h.fmt_stat(st)
    if h.UNSHARED:
        return		# each connection moved at its fork: bytes partly on TCP
    line_bytes = sum(len(b"hello world %d\n" % i) for i in range(N_REQUESTS))
    assert st["tx_bytes"] == 2 * line_bytes and st["rx_bytes"] == 2 * line_bytes, h.fmt_stat(st)
    # Each connection was let go by whichever process held it last (a
    # child's os._exit included), so its slot was used again.
    assert st["lgr_created"] == 1, "slots not reused\n" + h.fmt_stat(st)
