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
