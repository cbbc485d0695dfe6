"""The usmc command's contract: `usmc stat` (text and --json, --reset,
counters of exited processes, live connections), `usmc dev`, and `usmc run`
(LD_PRELOAD kept, sh -c wrappers and children, USMC_DEBUG messages)."""
import glob
import json
import os
import re
import struct
import subprocess
import time

import pytest

from . import helpers as h

COUNTER_FIELDS = (
    "smc_conns", "smc_client", "smc_server", "tcp_conns", "handshake_errors",
    "tx_bytes", "rx_bytes", "tcp_tx_bytes", "tcp_rx_bytes", "tx_calls", "rx_calls",
    "tx_fast", "rx_fast",
    "doorbells", "sleeps", "spin_hits", "lgr_created", "lgr_attached",
    "dmbs_registered", "dmbs_reused", "late_declines", "wake_bytes",
)
# The counters after doorbells_unarmed, in their order (src/stats.h), with
# the values the layout check writes.
LAST_COUNTERS = {"clc_msgs_tx": 4545, "clc_msgs_rx": 4646, "clc_inband_tx": 4747,
                 "clc_inband_rx": 4848}
CONN_FIELDS = {"pid": int, "fd": int, "role": str, "local": str, "peer": str, "mode": str,
               "tx_bytes": int, "rx_bytes": int}
ADDR = re.compile(r"^(\d+\.\d+\.\d+\.\d+|\[[0-9a-f:.]+\]):\d+$")


def check_stat_json(st, rundir):
    assert st["rundir"] == str(rundir.path)
    for f in COUNTER_FIELDS:
        assert isinstance(st[f], int) and not isinstance(st[f], bool) and st[f] >= 0, f
    for f in ("tcp_fallback", "aborts"):
        assert isinstance(st[f], dict), f
        for k, v in st[f].items():
            assert re.match(r"^[a-z_]+$", k) and isinstance(v, int) and v > 0, (f, k, v)
    assert isinstance(st["connections"], list)
    for c in st["connections"]:
        for k, t in CONN_FIELDS.items():
            assert isinstance(c[k], t), (k, c)
        assert c["role"] in ("client", "server"), c
        assert c["mode"] in ("SMCD", "TCP", "UNDECIDED", "PROPOSED", "MIGRATING"), c
        assert ADDR.match(c["local"]) and ADDR.match(c["peer"]), c
        assert "reason" in c


def zeroed(st):
    return all(st[f] == 0 for f in COUNTER_FIELDS) and not st["tcp_fallback"] \
        and not st["aborts"]


def echo_pair(procs, rundir, scripts, conns=2, msgs=40, name="echo"):
    server, port = h.start_server(
        procs, name + "-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    p = procs.run(name + "-client", [h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                     conns, msgs, 65536, 5], rundir.env(), timeout=60)
    assert p.text().startswith("OK conns=%d " % conns), p.diag()
    return server, port


@pytest.mark.timeout(60, method="signal")
def test_stat_fresh_rundir_wellformed(rundir):
    st = rundir.stat()
    check_stat_json(st, rundir)
    assert zeroed(st) and st["connections"] == []
    text = rundir.stat_text()
    assert text.split("\n")[0].split() == ["PID", "FD", "ROLE", "LOCAL", "PEER", "MODE",
                                            "REASON", "SENT", "RECEIVED"]
    assert "rundir %s\n" % rundir.path in text
    assert "connections: 0 on shared memory (0 client, 0 server), 0 on TCP, " \
           "0 handshake errors" in text
    assert "tcp fallback: none" in text
    r = rundir.cli("stat", "--help")
    assert b"usage" in r.stdout
    r = rundir.cli("stat", "--bogus", check=False)
    assert r.returncode != 0


@pytest.mark.timeout(120, method="signal")
def test_stat_and_dev_show_live_connection(rundir, procs, scripts):
    server, port = h.start_server(
        procs, "echo-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    client = procs.start("echo-client-hold",
                         [h.PY, scripts["async_echo_client"], "127.0.0.1", port, 1, 20, 65536, 1,
                          "hold"], rundir.env(), stdin=subprocess.PIPE)
    try:
        # The exchange is over once the client says "holding": from then on
        # the connection is idle and every view of it must agree.
        deadline = time.monotonic() + 30
        while b"holding" not in client.stdout() and client.alive() \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b"holding" in client.stdout(), client.diag()
        st = rundir.settle(
            lambda s: len([c for c in s["connections"] if c["mode"] == "SMCD"]) == 2)
        check_stat_json(st, rundir)
        conns = {c["role"]: c for c in st["connections"]}
        assert len(st["connections"]) == 2 and set(conns) == {"client", "server"}, \
            h.fmt_stat(st) + client.diag()
        c, s = conns["client"], conns["server"]
        assert c["mode"] == s["mode"] == "SMCD" and c["reason"] is None, st["connections"]
        assert c["pid"] == client.pid and s["pid"] == server.pid, st["connections"]
        assert c["local"] == s["peer"] and c["peer"] == s["local"] == "127.0.0.1:%d" % port
        assert c["tx_bytes"] == s["rx_bytes"] > 0 and s["tx_bytes"] == c["rx_bytes"] > 0

        text = rundir.stat_text()
        lines = [ln.split() for ln in text.splitlines()[1:] if ln.strip() and ln[0].isdigit()]
        assert sorted((ln[0], ln[2], ln[5]) for ln in lines) == sorted(
            [(str(client.pid), "C", "SMCD"), (str(server.pid), "S", "SMCD")]), text

        dev = rundir.dev(as_json=True)
        lo = [d for d in dev["devices"] if d["name"] == "loopback"]
        assert len(lo) == 1, dev
        lo = lo[0]
        assert lo["type"] == "SMC-D" and lo["usable"] is True and lo["rundir"] == str(rundir.path)
        assert lo["link_groups"] >= 1 and lo["connections"] == 2, lo
        assert lo["xfer_bytes"] == st["tx_bytes"] > 0 and lo["dmbs_registered"] >= 2, lo
        text = rundir.dev()
        row = [ln.split() for ln in text.splitlines() if ln.startswith("loopback")]
        assert row and row[0][1:4] == ["SMC-D", str(lo["id"]), "usable"], text
        assert row[0][4] == "yes" and int(row[0][5]) >= 1 and int(row[0][6]) == 2, text
    finally:
        client.popen.stdin.close()
    assert client.wait(30) == 0, client.diag()

    # The client exited, the server is gone too: counters stay.
    server.stop()
    st = rundir.settle(lambda s: not s["connections"])
    assert st["connections"] == [], h.fmt_stat(st)
    h.assert_accelerated(st, clients=1)
    lo = [d for d in rundir.dev(as_json=True)["devices"] if d["name"] == "loopback"][0]
    assert lo["link_groups"] == 0 and lo["connections"] == 0 and lo["xfer_bytes"] > 0, lo


@pytest.mark.timeout(120, method="signal")
def test_stat_counts_exited_processes_and_reset(rundir, procs, scripts):
    # Three server/client generations, each stopped before the next.
    for gen in range(3):
        server, _ = echo_pair(procs, rundir, scripts, conns=2, name="gen%d" % gen)
        server.stop()
        st = rundir.stat()
        check_stat_json(st, rundir)
        h.assert_accelerated(st, clients=2 * (gen + 1))
    assert rundir.stat()["connections"] == []

    assert rundir.reset().strip() == "counters reset"
    st = rundir.stat()
    check_stat_json(st, rundir)
    assert zeroed(st), h.fmt_stat(st)

    # Counting starts again from zero.
    server, _ = echo_pair(procs, rundir, scripts, conns=3, name="after-reset")
    st = rundir.settle(h.accel_pred(3))
    h.assert_accelerated(st, clients=3)

    # --json --reset prints the zeroed counters.
    r = rundir.cli("stat", "--json", "--reset")
    st = json.loads(r.stdout)
    check_stat_json(st, rundir)
    assert zeroed(st), h.fmt_stat(st)
    server.stop()


def harmless_lib():
    for pat in ("/lib/*/libm.so.6", "/usr/lib/*/libm.so.6", "/lib64/libm.so.6"):
        found = sorted(glob.glob(pat))
        if found:
            return os.path.realpath(found[0])
    pytest.skip("no libm.so.6 to preload")


@pytest.mark.timeout(60, method="signal")
def test_run_keeps_existing_ld_preload(rundir, procs):
    libm = harmless_lib()
    lib = os.path.realpath(h.LIB)
    p = procs.run("sh", ["sh", "-c", 'echo "$LD_PRELOAD"'], rundir.env(LD_PRELOAD=libm))
    entries = re.split(r"[: ]", p.text().strip())
    assert entries == [lib, libm], p.text()
    # Already preloaded: not added twice.
    p = procs.run("sh", ["sh", "-c", 'echo "$LD_PRELOAD"'],
                  rundir.env(LD_PRELOAD="%s:%s" % (lib, libm)))
    assert re.split(r"[: ]", p.text().strip()) == [lib, libm], p.text()
    # Nothing set before: just the library.
    p = procs.run("sh", ["sh", "-c", 'echo "$LD_PRELOAD"'], rundir.env())
    assert p.text().strip() == lib
    # A command that does not exist: 127, like a shell.
    p = procs.run("missing", ["/nonexistent/command"], rundir.env(), check=False)
    assert p.popen.returncode == 127


@pytest.mark.timeout(120, method="signal")
def test_run_through_sh_wrappers_and_forked_children(rundir, procs, scripts):
    """The server is a child of a shell and serves each connection from a
    forked child; the client is a child of a shell too."""
    server, port = h.start_server(
        procs, "sh-fork-server",
        lambda p: ["sh", "-c", '"$0" "$1" 127.0.0.1 "$2"; echo server ended',
                   h.PY, scripts["fork_echo_server"], p],
        rundir.env(debug=True))
    p = procs.run("sh-client", ["sh", "-c", '"$0" "$@" && echo client done',
                                h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                3, 60, 131072, 13],
                  rundir.env(), timeout=60)
    assert p.text().startswith("OK conns=3 msgs=180 ") and "client done" in p.text(), p.diag()
    st = rundir.settle(h.accel_pred(3))
    h.assert_accelerated(st, clients=3, diag=server.diag(), handed=True)


@pytest.mark.timeout(120, method="signal")
def test_debug_says_why(rundir, procs, scripts, tmp_path):
    server, port = h.start_server(
        procs, "echo-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    accel = re.compile(r"usmc\[\d+\]: connect 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:%d: SMC-D" % port)

    # USMC_DEBUG=1 and `usmc run -d` both report an accelerated connection.
    p = procs.run("client-debug-env", [h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                       1, 5, 1024, 1], rundir.env(debug=True))
    assert accel.search(p.stderr().decode()), p.diag()
    p = procs.run("client-debug-flag", [str(h.USMC), "run", "-d", "--", h.PY,
                                        scripts["async_echo_client"], "127.0.0.1", port,
                                        1, 5, 1024, 1], rundir.env(), usmc=False)
    assert accel.search(p.stderr().decode()), p.diag()
    assert re.search(rb"accept 127\.0\.0\.1:%d <- 127\.0\.0\.1:\d+: SMC-D" % port,
                     server.stderr()), server.diag()
    # Without it the library says nothing.
    p = procs.run("client-quiet", [h.PY, scripts["async_echo_client"], "127.0.0.1", port,
                                   1, 5, 1024, 1], rundir.env())
    assert b"usmc[" not in p.stderr(), p.diag()

    # A plain server: the client says why it stayed on TCP.
    rec = tmp_path / "rec.bin"
    plain, pport = h.start_server(
        procs, "recorder", lambda q: [h.PY, scripts["recorder"], "127.0.0.1", q, rec, "raw"],
        rundir.env(), usmc=False)
    p = procs.run("client-to-plain", [h.PY, "-c",
                                      "import socket,sys; s=socket.create_connection(("
                                      "'127.0.0.1', int(sys.argv[1]))); s.sendall(b'x'); "
                                      "s.shutdown(1); s.recv(10)", pport],
                  rundir.env(debug=True))
    assert re.search(r"connect 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:%d: TCP \(peer_not_usmc" % pport,
                     p.stderr().decode()), p.diag()

    # --tcp (USMC_DISABLE): tracked, never accelerated, reason "disabled".
    before = rundir.stat()
    p = procs.run("client-tcp", [str(h.USMC), "run", "--tcp", "-d", "--", h.PY,
                                 scripts["async_echo_client"], "127.0.0.1", port, 1, 5, 1024, 1],
                  rundir.env(), usmc=False)
    assert re.search(r"TCP \(disabled", p.stderr().decode()), p.diag()
    st = rundir.settle(lambda s: s["tcp_fallback"].get("disabled", 0) >= 1)
    assert st["tcp_fallback"].get("disabled") == 1, h.fmt_stat(st)
    assert st["smc_client"] == before["smc_client"], h.fmt_stat(st)


# `usmc stat` text lines, each naming the counters its numbers show, in order.
TEXT_COUNTERS = (
    (r"connections: (\d+) on shared memory \((\d+) client, (\d+) server\), (\d+) on TCP, "
     r"(\d+) handshake errors",
     ("smc_conns", "smc_client", "smc_server", "tcp_conns", "handshake_errors")),
    (r"shared memory: (\d+) bytes sent, (\d+) received, (\d+) doorbells, (\d+) sleeps, "
     r"(\d+) spin hits", ("tx_bytes", "rx_bytes", "doorbells", "sleeps", "spin_hits")),
    (r"calls: (\d+) send, (\d+) receive \((\d+) send, (\d+) receive on the fast path\)",
     ("tx_calls", "rx_calls", "tx_fast", "rx_fast")),
    (r"tcp mode: (\d+) bytes sent, (\d+) received", ("tcp_tx_bytes", "tcp_rx_bytes")),
    (r"link groups: (\d+) created, (\d+) attached; dmbs: (\d+) registered, (\d+) reused",
     ("lgr_created", "lgr_attached", "dmbs_registered", "dmbs_reused")),
    (r"handshake: (\d+) late declines, (\d+) wake bytes", ("late_declines", "wake_bytes")),
    (r"rings: (\d+) bytes given back by idle connections", ("ring_given_back",)),
    (r"doorbells: (\d+) spared \(the peer was awake\), (\d+) dropped \(not re-armed\)",
     ("doorbells_spared", "doorbells_unarmed")),
    (r"clc messages on tcp: (\d+) sent, (\d+) taken; in-band proposals: (\d+) sent, (\d+) taken",
     ("clc_msgs_tx", "clc_msgs_rx", "clc_inband_tx", "clc_inband_rx")),
)


def stat_text_counters(text):
    """Every counter the text output shows, by its JSON name."""
    got = {}
    for pat, names in TEXT_COUNTERS:
        m = re.search("^" + pat + "$", text, re.M)
        if m:
            got.update(zip(names, (int(v) for v in m.groups())))
    for key, label in (("tcp_fallback", "tcp fallback:"), ("aborts", "resets:")):
        line = [ln for ln in text.splitlines() if ln.startswith(label)]
        assert len(line) == 1, text
        rest = line[0][len(label):].split()
        got[key] = {} if rest == ["none"] else {
            k: int(v) for k, v in (kv.split("=") for kv in rest)}
    return got


@pytest.mark.timeout(60, method="signal")
def reason_count():
    """USMC_R_MAX: the entries of enum usmc_reason in src/usmc.h."""
    text = (h.REPO / "src" / "usmc.h").read_text()
    body = re.search(r"enum usmc_reason \{(.*?)USMC_R_MAX", text, re.S).group(1)
    return len(re.findall(r"^\s*USMC_R_\w+", body, re.M))


def test_stat_text_matches_json(rundir):
    """Every counter of the text output equals the JSON one of the same
    name.  The counters file's totals get a distinct value each, so a text
    line that shows one counter in another's place cannot match by chance."""
    rundir.stat()
    path = rundir.path / h.STATS_FILE
    # struct usmc_stats_file: a 64-byte header, then the totals
    # (struct usmc_counters: the scalars, aborts[], fallback[]).
    totals = 64
    nscalar = len(COUNTER_FIELDS)
    want = {f: 1000003 + 7919 * i for i, f in enumerate(COUNTER_FIELDS)}
    aborts = {1: 17, 2: 29, 4: 43}
    fallback = {1: 101, 2: 211, 3: 307}
    with open(path, "r+b", buffering=0) as f:
        for i, fld in enumerate(COUNTER_FIELDS):
            f.seek(totals + 8 * i)
            f.write(struct.pack("<Q", want[fld]))
        for k, v in aborts.items():
            f.seek(totals + 8 * (nscalar + k))
            f.write(struct.pack("<Q", v))
        # fallback[] follows aborts[USMC_A_MAX] (usmc.h: 5 abort reasons).
        abort_max = 5
        for k, v in fallback.items():
            f.seek(totals + 8 * (nscalar + abort_max + k))
            f.write(struct.pack("<Q", v))
        # ring_given_back, the last counter: after fallback[USMC_R_MAX],
        # tx_full, fallback_server[USMC_R_MAX], ring_hist[13] and the two
        # size histograms[8].
        r_max = reason_count()
        f.seek(totals + 8 * (nscalar + abort_max + r_max + 1 + r_max + 13 + 8 + 8))
        f.write(struct.pack("<Q", 4242))
        f.write(struct.pack("<Q", 4343))     # doorbells_spared, right after
        f.write(struct.pack("<Q", 4444))     # doorbells_unarmed, after that
        for v in LAST_COUNTERS.values():     # the CLC message counters
            f.write(struct.pack("<Q", v))
    st = rundir.stat()
    check_stat_json(st, rundir)
    # The layout assumed above is the real one: JSON shows what was written.
    assert {f: st[f] for f in COUNTER_FIELDS} == want, h.fmt_stat(st)
    assert st["ring_given_back"] == 4242, h.fmt_stat(st)
    assert st["doorbells_spared"] == 4343, h.fmt_stat(st)
    assert st["doorbells_unarmed"] == 4444, h.fmt_stat(st)
    assert {f: st[f] for f in LAST_COUNTERS} == LAST_COUNTERS, h.fmt_stat(st)
    assert sorted(st["aborts"].values()) == sorted(aborts.values()), st["aborts"]
    assert sorted(st["tcp_fallback"].values()) == sorted(fallback.values()), st["tcp_fallback"]

    text = rundir.stat_text()
    got = stat_text_counters(text)
    for f in COUNTER_FIELDS:
        if f in got:
            assert got[f] == st[f], (f, got[f], st[f], text)
    assert got.get("ring_given_back") == 4242, text
    assert got.get("doorbells_spared") == 4343, text
    assert got.get("doorbells_unarmed") == 4444, text
    assert {f: got.get(f) for f in LAST_COUNTERS} == LAST_COUNTERS, text
    assert set(got) == set(COUNTER_FIELDS) | set(LAST_COUNTERS) | {
        "tcp_fallback", "aborts", "ring_given_back", "doorbells_spared",
        "doorbells_unarmed"}, text
    assert got["tcp_fallback"] == st["tcp_fallback"], text
    assert got["aborts"] == st["aborts"], text
