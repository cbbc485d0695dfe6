"""python3 asyncio echo server and client (epoll event loop) under
`usmc run`: many pattern-stamped messages of random sizes, pipelined, on
several concurrent connections, echoed back byte for byte."""
import pytest

from . import helpers as h


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("conns,msgs,maxsize", [(1, 400, 262144), (8, 150, 65536)],
                         ids=["one-conn-large", "eight-conns"])
def test_asyncio_echo(rundir, procs, scripts, conns, msgs, maxsize):
    server, port = h.start_server(
        procs, "echo-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    p = procs.run("echo-client", [h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                  conns, msgs, maxsize, 7],
                  rundir.env(), timeout=90)
    assert p.text().startswith("OK conns=%d msgs=%d " % (conns, conns * msgs)), p.diag()
    st = rundir.settle(h.accel_pred(conns))
    h.assert_accelerated(st, clients=conns, diag=server.diag())
    total = int(p.text().split("bytes=")[1])
    # Every byte crossed shared memory twice (there and back).
    assert st["tx_bytes"] == 2 * total and st["rx_bytes"] == 2 * total, h.fmt_stat(st)
