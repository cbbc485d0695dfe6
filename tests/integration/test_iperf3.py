"""iperf3 (one-off server, -1) and client under `usmc run`: forward,
reverse (-R) and two parallel streams (-P 2).  The control connection and
every data stream must go through shared memory."""
import json

import pytest

from . import helpers as h


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("args,streams", [([], 1), (["-R"], 1), (["-P", "2"], 2)],
                         ids=["forward", "reverse", "parallel2"])
def test_iperf3(rundir, procs, args, streams):
    server, port = h.start_server(
        procs, "iperf3-s",
        lambda p: ["iperf3", "-s", "-1", "-p", p, "-B", "127.0.0.1"],
        rundir.env(debug=True))
    p = procs.run("iperf3-c", ["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "2", "-J", *args],
                  rundir.env(), timeout=60)
    try:
        res = json.loads(p.stdout())
    except ValueError:
        raise AssertionError("iperf3 -J output is not JSON\n" + p.diag())
    assert "error" not in res, res.get("error")
    end = res["end"]
    assert end["sum_sent"]["bytes"] > 0, end["sum_sent"]
    assert end["sum_received"]["bytes"] > 0, end["sum_received"]
    assert len(end["streams"]) == streams
    # The one-off server exits by itself once the test is over.
    rc = server.wait(30)
    assert rc == 0, server.diag()
    # One control connection plus one per stream.
    st = rundir.settle(h.accel_pred(1 + streams))
    h.assert_accelerated(st, clients=1 + streams, diag=server.diag())
