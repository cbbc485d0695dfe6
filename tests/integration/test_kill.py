"""SIGKILL of either side in the middle of a shared-memory transfer.

The survivor must see what TCP would give it - EOF or ECONNRESET when it
receives, EPIPE or ECONNRESET when it sends - within 1 s of the kill; the
runtime directory must end up holding only its counters and registry once
`usmc stat` collected the dead (no lg-*, ln-*, t-* leftovers), nothing stray
may appear in /dev/shm, and the next run in the same directory must work."""
import signal
import time

import pytest

from . import helpers as h

DEADLINE_S = 1.0


def parse_end(proc):
    for line in proc.text().splitlines():
        if line.startswith("END "):
            _, kind, t, n = line.split()
            return kind, float(t), int(n)
    raise AssertionError("%s did not report the end of its stream\n%s" % (proc.name, proc.diag()))


def assert_rundir_clean(rundir, shm_before):
    rundir.cli("stat")      # collects objects whose owners died
    left = set(rundir.entries())
    assert left == h.RUNDIR_IDLE_FILES, "runtime directory leftovers: %s" % sorted(
        left - h.RUNDIR_IDLE_FILES)
    stray = h.stray_shm(shm_before, h.shm_snapshot(), rundir.path.name)
    assert not stray, "stray objects in /dev/shm: %s" % stray


def next_run_works(rundir, procs, scripts):
    rundir.reset()
    server, port = h.start_server(
        procs, "echo-server-next",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    p = procs.run("echo-client-next", [h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                       2, 50, 65536, 3], rundir.env(), timeout=60)
    assert p.text().startswith("OK conns=2 msgs=100 "), p.diag()
    st = rundir.settle(h.accel_pred(2))
    h.assert_accelerated(st, clients=2, diag=server.diag())
    server.stop()


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("victim", ["server", "client"], ids=["kill-server", "kill-client"])
@pytest.mark.parametrize("sender", ["server", "client"], ids=["server-sends", "client-sends"])
def test_sigkill_mid_transfer(rundir, procs, scripts, victim, sender):
    shm_before = h.shm_snapshot()
    what = {"server": "send" if sender == "server" else "recv",
            "client": "send" if sender == "client" else "recv"}
    server, port = h.start_server(
        procs, "stream-server",
        lambda p: [h.PY, scripts["stream"], "server", "127.0.0.1", p, what["server"]],
        rundir.env(debug=True))
    client = procs.start("stream-client", [h.PY, scripts["stream"], "client", "127.0.0.1", port,
                                           what["client"]], rundir.env(debug=True))
    h.wait_line(server, "streaming")
    h.wait_line(client, "streaming")
    st = rundir.stat()
    h.assert_accelerated(st, clients=1)

    dead, survivor = (server, client) if victim == "server" else (client, server)
    t_kill = time.monotonic()
    dead.signal_group(signal.SIGKILL)
    rc = survivor.wait(30)
    dead.wait(10)
    kind, t_end, nbytes = parse_end(survivor)
    allowed = ("EOF", "ECONNRESET") if what[survivor.name.split("-")[1]] == "recv" \
        else ("EPIPE", "ECONNRESET")
    assert kind in allowed, "survivor saw %s, expected one of %s\n%s" % (
        kind, allowed, survivor.diag())
    assert rc == 0, survivor.diag()
    assert nbytes >= 8 << 20
    assert t_end - t_kill < DEADLINE_S, "survivor noticed the kill after %.3f s\n%s" % (
        t_end - t_kill, survivor.diag())
    st = rundir.stat()
    assert st["smc_conns"] == 2 and st["tcp_fallback"] == {} and st["handshake_errors"] == 0, \
        h.fmt_stat(st)

    assert_rundir_clean(rundir, shm_before)
    next_run_works(rundir, procs, scripts)
    assert_rundir_clean(rundir, shm_before)
