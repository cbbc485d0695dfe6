"""sockperf over TCP: server (sr) and client (pp, tp, ul) under `usmc run`.
Each client run is one connection that must go through shared memory."""
import re

import pytest

from . import helpers as h

# sockperf sizes its sequence table for about 600k round trips per second
# unless told otherwise, and aborts ("_seqN > m_maxSequenceNo") when shared
# memory goes faster; --mps raises the table, it does not pace ping-pong.
MODES = {
    "pp": ["pp", "-m", "14", "--mps", "10000000"],
    "tp": ["tp", "-m", "64000"],
    "ul": ["ul"],
}


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("mode", sorted(MODES))
def test_sockperf(rundir, procs, mode):
    server, port = h.start_server(
        procs, "sockperf-sr",
        lambda p: ["sockperf", "sr", "--tcp", "-i", "127.0.0.1", "-p", p],
        rundir.env(debug=True))
    p = procs.run("sockperf-" + mode,
                  ["sockperf", *MODES[mode], "--tcp", "-i", "127.0.0.1", "-p", port, "-t", "2"],
                  rundir.env(), timeout=60)
    text = p.text() + p.stderr().decode(errors="replace")
    assert "ERROR" not in text, text
    if mode == "tp":
        m = re.search(r"Total of (\d+) messages sent", text)
        assert m and int(m.group(1)) > 0, text
        assert "Summary: Message Rate is" in text, text
    else:
        m = re.search(r"\[Valid Duration\].*SentMessages=(\d+); ReceivedMessages=(\d+)", text)
        assert m and int(m.group(2)) > 0, text
        m = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                      r"# out-of-order messages = (\d+)", text)
        assert m and m.groups() == ("0", "0", "0"), text
        assert "Summary: Latency is" in text, text
    assert server.alive(), server.diag()
    st = rundir.settle(h.accel_pred(1))
    h.assert_accelerated(st, clients=1, diag=text + "\n" + server.diag())
