"""smc-tools parity (issue 20): `usmc stat -a/-d/-l`, `usmc stat summary`,
`usmc lg`, `usmc dev`, `usmc ctl` (runtime controls taking effect in running
programs, policy, a hostile controls file) and `usmc chk`; text output
compared with the JSON output, and the man page generated from the table."""
import json
import os
import re
import struct
import subprocess
import time
from pathlib import Path

import pytest

from . import helpers as h

ROOT = Path(__file__).resolve().parents[2]

# A client that opens one new connection per line on stdin: sends the line,
# reads the echo, prints "ok <local port>", and keeps nothing open.  The
# same process lives across `usmc ctl` changes.
LINE_CLIENT = r'''
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
for line in sys.stdin:
    s = socket.create_connection((host, port))
    msg = line.strip().encode() or b"x"
    s.sendall(msg)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    print("ok" if got == msg else "bad %r" % got, s.getsockname()[1], flush=True)
    s.close()
'''

# Connects, sends, then holds the connection until stdin closes.
HOLD_CLIENT = r'''
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"hello")
if len(sys.argv) < 4:       # an echo server: read the echo
    got = b""
    while len(got) < 5:
        got += s.recv(5 - len(got))
print("holding", flush=True)
sys.stdin.read()
'''


def stats_const(name):
    return int(re.search(r"#define %s\s+(\d+)" % name,
                         (ROOT / "src" / "stats.h").read_text()).group(1))


RING_HIST, SIZE_HIST = stats_const("USMC_RING_HIST"), stats_const("USMC_SIZE_HIST")

# Echoes one connection; the client sends one message of each size given
# and reads each echo whole before the next.
SIZES_ECHO = r'''
import socket, sys, threading
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
def serve():
    c, _ = l.accept()
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        c.sendall(d)
    c.close()
t = threading.Thread(target=serve); t.start()
s = socket.create_connection(l.getsockname())
for n in map(int, sys.argv[1:]):
    s.sendall(b"x" * n)
    got = 0
    while got < n:
        got += len(s.recv(n - got))
s.close(); t.join()
print("done", flush=True)
'''


def reasons_count():
    text = (ROOT / "src" / "usmc.h").read_text()
    body = text[text.index("enum usmc_reason {"):text.index("USMC_R_MAX")]
    return len(re.findall(r"^\s*USMC_R_\w+", body, re.M))


def serve(procs, rundir, scripts, name="echo-server", **env):
    return h.start_server(procs, name,
                          lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
                          rundir.env(debug=True, **env))


def wait_out(proc, text, count=1, timeout=20):
    deadline = time.monotonic() + timeout
    while proc.stdout().decode().count(text) < count and time.monotonic() < deadline:
        if not proc.alive():
            break
        time.sleep(0.02)
    assert proc.stdout().decode().count(text) >= count, proc.diag()


class LineClient:
    """One long-lived client process; connect() makes one new connection."""

    def __init__(self, procs, rundir, tmp_path, port, **env):
        script = tmp_path / "line_client.py"
        script.write_text(LINE_CLIENT)
        self.p = procs.start("line-client", [h.PY, script, "127.0.0.1", port],
                             rundir.env(debug=True, **env), stdin=subprocess.PIPE)
        self.n = 0

    def connect(self):
        self.n += 1
        self.p.popen.stdin.write(b"msg%d\n" % self.n)
        self.p.popen.stdin.flush()
        wait_out(self.p, "ok ", self.n)

    def close(self):
        self.p.popen.stdin.close()
        assert self.p.wait(20) == 0, self.p.diag()


def table(text, header_first):
    """Rows (lists of cells split on 2+ spaces) of the table whose header
    line starts with header_first."""
    lines = text.splitlines()
    start = [i for i, ln in enumerate(lines) if ln.strip().startswith(header_first)]
    assert start, text
    rows = []
    for ln in lines[start[0] + 1:]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return rows


def human(n):
    """The CLI's fmt_bytes."""
    if n < 1024:
        return "%d B" % n
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, u = float(n), 0
    while v >= 1024 and u + 1 < len(units):
        v /= 1024
        u += 1
    return ("%.1f %s" if v < 10 else "%.0f %s") % (v, units[u])


@pytest.mark.timeout(120, method="signal")
def test_stat_details_listeners_lg_dev(rundir, procs, scripts, tmp_path):
    server, port = serve(procs, rundir, scripts)
    script = tmp_path / "hold.py"
    script.write_text(HOLD_CLIENT)
    client = procs.start("hold-client", [h.PY, script, "127.0.0.1", port], rundir.env(),
                         stdin=subprocess.PIPE)
    try:
        wait_out(client, "holding")
        st = rundir.settle(lambda s: len([c for c in s["connections"]
                                          if c["mode"] == "SMCD"]) == 2 and all(
            c["rx_bytes"] == 5 for c in s["connections"] if c["role"] == "server"))
        d = json.loads(rundir.cli("stat", "-d", "--json").stdout)
        conns = {c["role"]: c for c in d["connections"]}
        assert set(conns) == {"client", "server"}, d
        c, s = conns["client"], conns["server"]
        assert c["lgr"] == s["lgr"] and c["slot"] == s["slot"] and c["dmb_size"] == 4 << 20
        # The client's send ring is the server's receive ring: same cursors.
        assert c["cursors"]["tx"] == s["cursors"]["rx"], d
        assert c["cursors"]["rx"] == s["cursors"]["tx"], d
        assert c["cursors"]["tx"]["prod"] >= 5 and c["cursors"]["tx"]["queued"] == 0, d
        assert c["closing"] is False and c["reason"] is None

        text = rundir.cli("stat", "-d").stdout.decode()
        rows = table(text, "PID")
        by_pid = {r[0]: r for r in rows}
        assert set(by_pid) == {str(client.pid), str(server.pid)}, text
        for conn, proc in ((c, client), (s, server)):
            r = by_pid[str(proc.pid)]
            assert r[1] == str(conn["fd"]) and r[5] == "SMCD", (r, text)
            assert r[7] == human(conn["tx_bytes"]) and r[8] == human(conn["rx_bytes"]), r
            assert r[9] == conn["lgr"] and r[10] == str(conn["slot"]) and r[11] == "4.0 MiB", r
            assert r[12] == human(conn["cursors"]["tx"]["queued"]), r

        # Listeners: -l alone, and within -a; text and JSON agree.
        ls = json.loads(rundir.cli("stat", "-l", "--json").stdout)
        assert ls["connections"] == [] and len(ls["listeners"]) == 1, ls
        lst = ls["listeners"][0]
        assert lst["pid"] == server.pid and lst["local"] == "127.0.0.1:%d" % port
        assert lst["state"] == "listening" and lst["uid"] == os.geteuid(), lst
        rows = table(rundir.cli("stat", "-l").stdout.decode(), "PID")
        assert rows == [[str(server.pid), str(os.geteuid()), lst["local"], lst["netns"], "-",
                         "listening"]], rows
        text = rundir.cli("stat", "-a").stdout.decode()
        assert "127.0.0.1:%d" % port in text and "listening" in text, text

        # Link groups: the client owns it, the server is its peer.
        lg = json.loads(rundir.cli("lg", "--json").stdout)
        assert len(lg["link_groups"]) == 1, lg
        g = lg["link_groups"][0]
        assert g["id"] == c["lgr"] and g["owner_pid"] == client.pid, g
        assert g["peer_pids"] == [server.pid] and g["connections"] == 1, g
        assert g["slots_busy"] == 1 and g["ring_size"] == 4 << 20 and g["alive"], g
        assert 0 < g["committed"] <= g["size"], g
        rows = table(rundir.cli("lg").stdout.decode(), "ID")
        assert rows == [[g["id"], h.DEVICE, str(client.pid), str(server.pid), str(os.geteuid()),
                         "1/%d" % g["slots"], "1", "4.0 MiB", human(g["size"]),
                         human(g["committed"]), "live"]], rows

        dev = json.loads(rundir.cli("dev", "--json").stdout)
        lo = [x for x in dev["devices"] if x["name"] == "loopback"][0]
        assert lo["in_use"] is True and lo["active"] is True and lo["link_groups"] == 1, lo
        assert lo["controls"] == {"active": True, "dmb_type": "regular", "dmb_copy": False,
                                  "ring_size": 4 << 20}, lo
        assert lo["committed_bytes"] == g["committed"], (lo, g)
        rows = table(rundir.dev(), "NAME")
        assert rows[0][:7] == ["loopback", "SMC-D", "1", "usable", "yes", "1", "2"], rows
        assert rows[0][9] == human(lo["xfer_bytes"]), rows
        assert st["tx_bytes"] >= 10
    finally:
        client.popen.stdin.close()
    assert client.wait(20) == 0, client.diag()


@pytest.mark.timeout(60, method="signal")
def test_summary_text_matches_json_and_reset(rundir):
    """Plant a distinct value in every counter the summary shows; JSON shows
    exactly those, and the text shows the JSON's numbers."""
    rundir.stat()
    nscalar, abort_max, r_max = 22, 5, reasons_count()
    totals = 64
    fb = {1: 101, 6: 9, 10: 57}         # peer_not_usmc, permission, uncertain_route
    fb_srv = {1: 40, 6: 9}
    hist = {0: 3, 8: 12}                 # 16 KiB and 4 MiB rings
    sizes_tx = {0: 40, 7: 5}             # <=64 B and >256 KiB sends
    sizes_rx = {2: 10}                   # <=1 KiB receives
    with open(rundir.path / h.STATS_FILE, "r+b", buffering=0) as f:
        def put(i, v):
            f.seek(totals + 8 * i)
            f.write(struct.pack("<Q", v))
        for i in range(nscalar):
            put(i, 1000 + 37 * i)
        base_fb = nscalar + abort_max
        for k, v in fb.items():
            put(base_fb + k, v)
        put(base_fb + r_max, 77)                          # tx_full
        for k, v in fb_srv.items():
            put(base_fb + r_max + 1 + k, v)
        for k, v in hist.items():
            put(base_fb + 2 * r_max + 1 + k, v)
        base_sz = base_fb + 2 * r_max + 1 + RING_HIST
        for k, v in sizes_tx.items():
            put(base_sz + k, v)
        for k, v in sizes_rx.items():
            put(base_sz + SIZE_HIST + k, v)
    sm = json.loads(rundir.cli("stat", "summary", "--json").stdout)
    assert sm["buffers"]["tx_full"] == 77, sm
    assert {k: v for k, v in sm["call_sizes"]["tx"].items() if v} == {"<=64": 40, ">256K": 5}
    assert {k: v for k, v in sm["call_sizes"]["rx"].items() if v} == {"<=1K": 10}, sm
    assert list(sm["call_sizes"]["rx"]) == ["<=64", "<=256", "<=1K", "<=4K", "<=16K", "<=64K",
                                            "<=256K", ">256K"], sm
    assert {k: v for k, v in sm["buffers"]["ring_sizes"].items() if v} == {
        "16384": 3, "4194304": 12}, sm
    names = {f["reason"]: f for f in sm["fallback"]}
    assert [f["reason"] for f in sm["fallback"]] == ["peer_not_usmc", "uncertain_route",
                                                      "permission"], sm["fallback"]
    assert (names["peer_not_usmc"]["client"], names["peer_not_usmc"]["server"]) == (61, 40)
    assert (names["permission"]["client"], names["permission"]["server"]) == (0, 9)
    assert (names["uncertain_route"]["client"], names["uncertain_route"]["server"]) == (57, 0)
    assert all(f["what_to_do"] and f["text"] for f in sm["fallback"]), sm
    st = rundir.stat()
    assert sm["connections"]["smc"] == st["smc_conns"] and sm["smc_data"]["tx_bytes"] == \
        st["tx_bytes"] and sm["connections"]["tcp_server"] == 49, sm

    text = rundir.cli("stat", "summary").stdout.decode()
    rows = table(text, "REASON")
    assert [r[:4] for r in rows] == [["peer_not_usmc", "101", "61", "40"],
                                     ["uncertain_route", "57", "57", "0"],
                                     ["permission", "9", "0", "9"]], text
    assert re.search(r"buffer full\s+77\s", text), text
    assert re.search(r"^\s+<=64\s+40 #{20}\s+0$", text, re.M) and \
        re.search(r"^\s+<=1K\s+0 \s+10 #{5}$", text, re.M) and \
        re.search(r"^\s+>256K\s+5 #{3}\s+0$", text, re.M), text
    assert re.search(r" 16 KiB\s+3\s+#{10}$", text, re.M) and \
        re.search(r"4\.0 MiB\s+12\s+#{40}$", text, re.M), text
    assert re.search(r"on shared memory\s+%s\s+client %d, server %d" % (
        format(st["smc_conns"], ","), st["smc_client"], st["smc_server"]), text), text
    for r in ("peer_not_usmc", "uncertain_route", "permission"):
        assert re.search(r"^  %s\s+%s$" % (r, re.escape(names[r]["what_to_do"])), text, re.M), \
            text
    # --reset: shown, then zeroed.
    out = rundir.cli("stat", "summary", "--reset").stdout.decode()
    assert "peer_not_usmc" in out and out.rstrip().endswith("counters reset"), out
    sm = json.loads(rundir.cli("stat", "summary", "--json").stdout)
    assert sm["fallback"] == [] and sm["resets"] == 1 and sm["buffers"]["tx_full"] == 0, sm


@pytest.mark.timeout(60, method="signal")
def test_reasons_explained_in_stat_and_man(rundir, procs, scripts, tmp_path):
    """A live TCP connection (the peer is not usmc): -d says why and what to
    do, the counters section explains every counted reason, JSON carries the
    same words; every reason has an explanation in usmc(7)."""
    plain, port = h.start_server(
        procs, "plain", lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(), usmc=False)
    script = tmp_path / "hold.py"
    script.write_text(HOLD_CLIENT)
    client = procs.start("hold-client", [h.PY, script, "127.0.0.1", port, "noecho"],
                         rundir.env(), stdin=subprocess.PIPE)
    try:
        wait_out(client, "holding")
        st = rundir.settle(lambda s: s["tcp_fallback"].get("peer_not_usmc") == 1)
        d = json.loads(rundir.cli("stat", "-d", "--json").stdout)
        c = [x for x in d["connections"] if x["pid"] == client.pid]
        assert len(c) == 1 and c[0]["mode"] == "TCP" and c[0]["reason"] == "peer_not_usmc", d
        assert "cursors" not in c[0]
        text = rundir.cli("stat", "-d").stdout.decode()
        m = re.search(r"pid %d fd \d+ \S+ -> 127\.0\.0\.1:%d: peer_not_usmc: (.*)\.\n"
                      r"\s+what to do: (.*)\n" % (client.pid, port), text)
        assert m and m.group(1) == c[0]["reason_text"] and m.group(2) == c[0]["what_to_do"], text
        assert "usmc run" in c[0]["what_to_do"]
        text = rundir.stat_text()
        assert re.search(r"Fallback reasons\n  peer_not_usmc \(1\): %s\.\n\s+what to do: %s\n" % (
            re.escape(c[0]["reason_text"]), re.escape(c[0]["what_to_do"])), text), text
        assert st["tcp_fallback"] == {"peer_not_usmc": 1}, h.fmt_stat(st)
    finally:
        client.popen.stdin.close()
    assert client.wait(20) == 0, client.diag()

    man = rundir.cli("env", "--man-reasons").stdout.decode()
    entries = re.findall(r"^\.TP\n\.B (\w+)\n(.+)\.\nWhat to do: (.+)\.$", man, re.M)
    assert len(entries) == reasons_count() - 1, man
    assert len({e[0] for e in entries}) == len(entries) and all(e[1] and e[2] for e in entries)


def man_block(name):
    text = (ROOT / "man" / "usmc.7").read_text()
    m = re.search(r'\.\\" BEGIN %s \(usmc env [^)]*\)\n(.*?)\.\\" END %s\n' % (name, name),
                  text, re.S)
    assert m, "man/usmc.7 has no generated %s block" % name
    return m.group(1)


@pytest.mark.timeout(30, method="signal")
def test_man_page_generated_from_the_option_table(rundir):
    """usmc(7) holds exactly what the code's tables print: regenerate with
    `usmc env --man` / `--man-reasons` when they change."""
    assert man_block("OPTIONS") == rundir.cli("env", "--man").stdout.decode()
    assert man_block("REASONS") == rundir.cli("env", "--man-reasons").stdout.decode()
    listed = json.loads(rundir.cli("ctl", "--json").stdout)["settings"]
    envs = re.findall(r"^(USMC_\w+)", rundir.cli("env").stdout.decode(), re.M)
    assert [s["env"] for s in listed] == envs and len(envs) >= 15


@pytest.mark.timeout(60, method="signal")
def test_ctl_list_set_unset_reset_and_refusals(rundir):
    def setting(key, env=None):
        r = subprocess.run([str(h.USMC), "ctl", "--json"], capture_output=True, timeout=30,
                           env=rundir.env(**(env or {})))
        assert r.returncode == 0, r.stderr
        return {s["key"]: s for s in json.loads(r.stdout)["settings"]}[key]

    ctl = rundir.path / "controls"
    assert setting("ring_size") == dict(setting("ring_size"), value="4M", source="default")
    out = rundir.cli("ctl", "ring_size=1M", "exclude_ports=7000,8000-8100").stdout.decode()
    assert out == "ring_size=1M (usmc ctl)\nexclude_ports=7000,8000-8100 (usmc ctl)\n", out
    assert ctl.stat().st_mode & 0o777 == 0o600
    assert [ln for ln in ctl.read_text().splitlines() if not ln.startswith("#")] == [
        "ring_size=1M", "exclude_ports=7000,8000-8100"]
    assert setting("ring_size")["source"] == "usmc ctl" and setting("ring_size")["value"] == "1M"
    # The environment wins, and says so.
    s = setting("ring_size", {"USMC_RING_SIZE": "2M"})
    assert (s["value"], s["source"]) == ("2M", "environment"), s
    text = rundir.cli("ctl").stdout.decode()
    row = [r for r in table(text, "KEY") if r[0] == "ring_size"]
    assert row and row[0][1:3] == ["1M", "usmc ctl"], text

    # Refused, with what is wrong; the file is unchanged.
    before = ctl.read_text()
    for args, words in ((["ring_size=lots"], "expected a size"),
                        (["ring_size=1G"], "out of range"),
                        (["bogus=1"], "unknown setting"),
                        (["allow=all"], "environment only"),
                        (["dmb_type=giant"], "regular|huge"),
                        (["ports=70000"], "expected ports"),
                        (["ring_size"], "expected KEY=VALUE")):
        r = rundir.cli("ctl", *args, check=False)
        assert r.returncode == 2 and words in r.stderr.decode(), (args, r.stderr)
    assert ctl.read_text() == before

    rundir.cli("ctl", "--unset", "ring_size")
    assert setting("ring_size")["source"] == "default"
    rundir.cli("ctl", "exclude_ports=")
    assert setting("exclude_ports")["source"] == "default"
    rundir.cli("ctl", "dmb_type=huge")
    assert rundir.cli("ctl", "--reset").stdout.startswith(b"controls reset")
    assert not ctl.exists() and setting("dmb_type")["value"] == "regular"


@pytest.mark.timeout(180, method="signal")
def test_ctl_applies_to_running_programs(rundir, procs, scripts, tmp_path):
    """The same server and client processes, connections made one after
    another: `usmc ctl` turns acceleration off, on, excludes the port, and
    changes the ring size, each for the next connection, no restart."""
    server, port = serve(procs, rundir, scripts)
    cl = LineClient(procs, rundir, tmp_path, port)

    def step(pred):
        base = rundir.stat()
        cl.connect()
        st = rundir.settle(lambda s: pred(s, base))
        assert pred(st, base), h.fmt_stat(st) + "\n" + cl.p.diag()
        return st

    accel = lambda s, b: s["smc_client"] == b["smc_client"] + 1 and \
        s["smc_server"] == b["smc_server"] + 1
    step(accel)
    for ctl, reason in (("disable=1", "disabled"), ("loopback=0", "no_common_device"),
                        ("exclude_ports=%d" % port, "policy")):
        rundir.cli("ctl", ctl)
        time.sleep(0.25)        # USMC_CTL_CHECK_NS: the next look sees it
        step(lambda s, b, r=reason: s["tcp_fallback"].get(r, 0) == b["tcp_fallback"].get(r, 0) + 2)
        rundir.cli("ctl", "--reset")
        time.sleep(0.25)
        step(accel)
    sm = json.loads(rundir.cli("stat", "summary", "--json").stdout)
    assert {f["reason"]: (f["client"], f["server"]) for f in sm["fallback"]} == {
        "disabled": (1, 1), "no_common_device": (1, 1), "policy": (1, 1)}, sm
    assert re.search(rb"policy: port %d in python3: USMC_EXCLUDE_PORTS \(set by usmc ctl\)" % port,
                     cl.p.stderr()), cl.p.diag()

    # Ring size: the next connection uses 1 MiB rings (ring size histogram).
    rundir.cli("ctl", "ring_size=1M")
    time.sleep(0.25)
    step(lambda s, b: s["smc_client"] == b["smc_client"] + 1)
    sm = json.loads(rundir.cli("stat", "summary", "--json").stdout)
    assert sm["buffers"]["ring_sizes"]["1048576"] == 2, sm["buffers"]

    # Only the server is off (the client's environment says otherwise): its
    # listener tells clients, which stay on TCP with the server's reason.
    cl.close()
    cl = LineClient(procs, rundir, tmp_path, port, USMC_DISABLE="0")
    rundir.cli("ctl", "disable=1")
    time.sleep(0.25)
    st = step(lambda s, b: s["tcp_fallback"].get("disabled", 0) ==
              b["tcp_fallback"].get("disabled", 0) + 2)
    rundir.cli("ctl", "--reset")
    time.sleep(0.25)
    cl.connect()     # the server's next accept clears its listener's mark
    step(accel)
    cl.close()
    assert st["aborts"] == {} and st["handshake_errors"] == 0, h.fmt_stat(st)


@pytest.mark.timeout(120, method="signal")
def test_ctl_hostile_controls_file(rundir, procs, scripts, tmp_path):
    """A controls file that is not ours, too large, a FIFO or a symlink is
    ignored (no hang, nothing applied); bad lines of a good file are
    skipped, the good ones applied."""
    server, port = serve(procs, rundir, scripts)
    cl = LineClient(procs, rundir, tmp_path, port)
    ctl = rundir.path / "controls"
    target = tmp_path / "elsewhere"
    target.write_text("disable=1\n")

    def planted(make):
        if ctl.exists() or ctl.is_symlink():
            ctl.unlink()
        make()
        time.sleep(0.25)
        base = rundir.stat()
        cl.connect()
        st = rundir.settle(lambda s: s["smc_client"] == base["smc_client"] + 1)
        assert st["smc_client"] == base["smc_client"] + 1, h.fmt_stat(st)
        r = rundir.cli("ctl", "debug=1", check=False)
        assert r.returncode == 1, r

    planted(lambda: ctl.symlink_to(target))
    planted(lambda: os.mkfifo(ctl, 0o600))

    def big():
        ctl.write_text("disable=1\n" + "#" * 9000 + "\n")
    planted(big)

    def loose():
        ctl.write_text("disable=1\n")
        ctl.chmod(0o666)
    planted(loose)

    def other_owner():
        ctl.write_text("disable=1\n")
        os.chown(ctl, 4242, 4242)
    if os.geteuid() == 0:
        planted(other_owner)

    ctl.unlink()
    ctl.write_text("garbage\nring_size=99\n\x01=2\nexclude_ports=%d\n" % port)
    ctl.chmod(0o600)
    time.sleep(0.25)
    base = rundir.stat()
    cl.connect()
    st = rundir.settle(lambda s: s["tcp_fallback"].get("policy", 0) ==
                       base["tcp_fallback"].get("policy", 0) + 2)
    assert st["tcp_fallback"].get("policy") == 2, h.fmt_stat(st)
    assert re.search(rb"controls: line 'garbage' ignored: not KEY=VALUE", cl.p.stderr()), \
        cl.p.diag()
    assert re.search(rb"controls: line 'ring_size=99' ignored: out of range", cl.p.stderr())
    cl.close()


@pytest.mark.timeout(120, method="signal")
def test_chk(rundir, procs, scripts):
    server, port = serve(procs, rundir, scripts)
    before = rundir.stat()
    r = rundir.cli("chk", "127.0.0.1:%d" % port)
    text = r.stdout.decode()
    assert "result       accelerated" in text and "pid %d" % server.pid in text, text
    v = json.loads(rundir.cli("chk", "--json", "localhost:%d" % port).stdout)
    assert v["accelerated"] is True and v["reason"] is None, v
    assert v["listener"]["pid"] == server.pid and v["listener"]["same_netns"] is True, v
    # Nothing reached the listener: no connection, no counter moved.
    after = rundir.stat()
    assert after == before, (h.fmt_stat(before), h.fmt_stat(after))
    assert b"accept" not in server.stderr(), server.diag()

    plain, pport = h.start_server(
        procs, "plain", lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(), usmc=False)
    r = rundir.cli("chk", "127.0.0.1:%d" % pport, check=False)
    assert r.returncode == 1 and b"TCP: peer_not_usmc" in r.stdout, r
    assert b"what to do   start the peer under usmc run" in r.stdout, r.stdout

    rundir.cli("ctl", "exclude_ports=%d" % port)
    v = json.loads(rundir.cli("chk", "--json", "127.0.0.1:%d" % port, check=False).stdout)
    assert (v["accelerated"], v["reason"]) == (False, "policy") and "usmc ctl" in v["what_to_do"]
    rundir.cli("ctl", "--reset")

    for bad in ("nonsense", "127.0.0.1", "no.such.host.invalid:80"):
        r = rundir.cli("chk", bad, check=False)
        assert r.returncode == 2 and r.stderr.startswith(b"usmc chk: "), (bad, r.stderr)


@pytest.mark.timeout(60, method="signal")
def test_summary_call_sizes_counted(rundir, procs):
    """A program's sends and receives on shared memory land in the call size
    histogram by their size: 10 B, 100 B and 3000 B messages echoed (each a
    single send, under the ring size) show up in their buckets on both
    sides, and the buckets add up to the calls counted."""
    sizes = [10] * 3 + [100] * 2 + [3000]
    p = procs.run("sizes", [str(h.USMC), "run", "--", "python3", "-c", SIZES_ECHO] +
                  [str(n) for n in sizes], rundir.env())
    assert p.popen.returncode == 0
    sm = json.loads(rundir.cli("stat", "summary", "--json").stdout)
    assert sm["connections"]["smc"] == 2, sm
    tx, rx = sm["call_sizes"]["tx"], sm["call_sizes"]["rx"]
    # Client and echo server each send every message once, whole.
    assert (tx["<=64"], tx["<=256"], tx["<=4K"]) == (6, 4, 2), tx
    assert sum(tx.values()) == sm["smc_data"]["tx_calls"], sm
    assert sum(rx.values()) == sm["smc_data"]["rx_calls"], sm
    assert rx["<=64"] >= 6 and rx["<=256"] >= 4 and rx["<=4K"] >= 2, rx
    assert tx["<=1K"] == tx["<=16K"] == tx[">256K"] == 0, tx
