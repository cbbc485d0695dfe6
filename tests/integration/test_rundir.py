"""The runtime directory across builds and when it cannot be used.

Files another usmc format left (an upgrade while old programs run, or their
leftovers) must neither disable acceleration nor be touched.  A registry that
cannot be attached makes connections fall back with rundir_unusable, and
each such connection costs a lookup, not a new open, map and unmap."""
import socket
import struct
import threading

import pytest

from . import helpers as h

REG_MAGIC = 0x474552434d535555      # registry.h USMC_REG_MAGIC
STATS_MAGIC = 0x5441545343534d55    # stats.h USMC_STATS_MAGIC


def old_format_file(path, magic, size):
    """A valid-looking file of format 1, as the previous build left them."""
    head = struct.pack("<QIII", magic, 1, 512, 128)
    path.write_bytes(head + bytes(size - len(head)))
    path.chmod(0o600)
    return path.read_bytes()


def echo_accelerated(rundir, procs, scripts, name):
    server, port = h.start_server(
        procs, name + "-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    p = procs.run(name + "-client", [h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                     2, 20, 4096, 5], rundir.env(debug=True), timeout=60)
    assert p.text().startswith("OK conns=2 msgs=40 "), p.diag()
    assert p.stderr().count(h.SMCD_LOG) == 2, p.diag()
    st = rundir.settle(h.accel_pred(2))
    h.assert_accelerated(st, clients=2, diag=server.diag())
    server.stop()


@pytest.mark.timeout(120, method="signal")
def test_files_of_another_format_are_ignored(rundir, procs, scripts):
    rundir.path.mkdir(exist_ok=True)
    planted = {
        "registry": REG_MAGIC, "stats": STATS_MAGIC,
        "registry-v%d" % (h.SHM_FORMAT + 1): REG_MAGIC,
        "stats-v%d" % (h.SHM_FORMAT + 1): STATS_MAGIC,
    }
    before = {n: old_format_file(rundir.path / n, m, 286784) for n, m in planted.items()}
    echo_accelerated(rundir, procs, scripts, "echo")
    for n, data in before.items():
        assert (rundir.path / n).read_bytes() == data, "%s was changed" % n
    rundir.cli("stat")              # collects what the stopped server left
    left = set(rundir.entries()) - set(planted)
    assert left == h.RUNDIR_IDLE_FILES, sorted(left)


def plain_listener():
    """A plain TCP listener in this process; a thread accepts and closes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(512)
    stop = threading.Event()

    def loop():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                c.close()
            except OSError:
                pass
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return srv, stop, t


CONNECTS = """
import socket, sys
for _ in range(int(sys.argv[2])):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.close()
print("OK")
"""


@pytest.mark.timeout(120, method="signal")
def test_unusable_registry_is_not_reopened_per_connection(rundir, procs, tmp_path):
    rundir.path.mkdir(exist_ok=True)
    # Something that is not a registry at its name: a directory.
    (rundir.path / h.REGISTRY_FILE).mkdir(mode=0o700)
    rundir.stat()                     # the counters file exists before the trace
    srv, stop, t = plain_listener()
    n = 100
    trace = tmp_path / "openat.trace"
    try:
        p = procs.run("connects", ["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace,
                                   h.USMC, "run", "--", h.PY, "-c", CONNECTS,
                                   srv.getsockname()[1], n],
                      rundir.env(), usmc=False, timeout=90)
    finally:
        stop.set()
        t.join(5)
        srv.close()
    assert p.text().strip() == "OK", p.diag()
    opens = [line for line in trace.read_text().splitlines() if h.REGISTRY_FILE in line]
    # One attempt per 250 ms at most; the old code tried on every connect.
    assert 1 <= len(opens) <= 8, "%d opens of %s for %d connections:\n%s" % (
        len(opens), h.REGISTRY_FILE, n, "\n".join(opens[:10]))
    st = rundir.settle(lambda s: s["tcp_conns"] >= n)
    assert st["tcp_fallback"] == {"rundir_unusable": n}, h.fmt_stat(st)
    assert st["smc_conns"] == 0, h.fmt_stat(st)
