"""Ten thousand concurrent connections between two processes (issue 16
item 3, issue 15 row 12), with the machine's default descriptor limits.

A Python server accepts N connections and echoes one 4-byte id on each; a
Python client connects N times, sends the ids, reads every echo, and both
hold everything open while the test looks at them: every connection runs
on shared memory (counters), and each process holds its N sockets plus
three descriptors per link group (its file and two doorbells, shared by
USMC_LGR_SLOTS connections) and a few more, not two doorbells per
connection (which put 10,000 connections out of reach of a 20,000 limit:
usmc's descriptors live above the program's).  The memory they cost is
measured, printed and held to issue 16 item 4's budget: at most 200 MB for
both processes (their PSS, which holds the runtime directory's pages they
map, once) plus what of the runtime directory they do not map; each idle
connection's rings are backed for one page each way.

test_hundred_thousand_cycles: 100,000 connect/request/close cycles leave
descriptors, the runtime directory and anonymous memory of both processes
where they were after the first 10,000.
"""
import os
import re
import resource

import pytest

from . import helpers as h

N = 10000
SLOTS = 64          # USMC_LGR_SLOTS default (src/options.c)
SLACK = 40          # stdio, the interpreter's own files, runtime-directory files

MANY = r'''
import os, socket, sys, time
role, n = sys.argv[1], int(sys.argv[2])
if role == "server":
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4096)
    print("PORT", ls.getsockname()[1], flush=True)
    conns = [ls.accept()[0] for _ in range(n)]
    for c in conns:
        got = c.recv(4, socket.MSG_WAITALL)
        assert len(got) == 4, got
        c.sendall(got)
    print("HELD", len(conns), flush=True)
    for c in conns:
        assert c.recv(1) == b"", "not EOF"
    print("DONE", flush=True)
else:
    port, go = int(sys.argv[3]), sys.argv[4]
    t0 = time.monotonic()
    conns = []
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        conns.append(c)
        c.sendall(i.to_bytes(4, "little"))
    for i, c in enumerate(conns):
        assert c.recv(4, socket.MSG_WAITALL) == i.to_bytes(4, "little"), i
    print("HELD", len(conns), "in %.1f s" % (time.monotonic() - t0), flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    for c in conns:
        c.close()
    print("DONE", flush=True)
'''


def fds(pid):
    """(descriptors, doorbell FIFOs, distinct link groups) of a process."""
    n, bells, lgs = 0, 0, set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        n += 1
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if "/lg-" in target and target[-2:] in ("/c", "/s"):
            bells += 1
            lgs.add(target[:-2])
    return n, bells, len(lgs)


def rollup_kb(pid, key):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def pss_kb(pid):
    return rollup_kb(pid, "Pss")


def tmpfs_kb(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total // 1024


@pytest.mark.timeout(300)
def test_ten_thousand_connections(rundir, procs, tmp_path):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < N + 1000:
        pytest.skip("RLIMIT_NOFILE %d: this machine's default is 20,000" % soft)
    script = tmp_path / "many.py"
    script.write_text(MANY)
    go = tmp_path / "go"
    env = rundir.env()
    srv = procs.start("many-server", [h.PY, script, "server", N], env)
    h.wait_line(srv, "PORT")
    port = int(re.search(rb"PORT (\d+)", srv.stdout()).group(1))
    cl = procs.start("many-client", [h.PY, script, "client", N, port, go], env)
    h.wait_line(cl, "HELD", timeout=200)
    h.wait_line(srv, "HELD", timeout=60)
    st = rundir.settle(h.accel_pred(N), timeout=30)
    measured = {}
    for name, p in (("server", srv), ("client", cl)):
        measured[name] = (fds(p.pid), pss_kb(p.pid))
    shm = tmpfs_kb(rundir.path)
    mapped = sum(rollup_kb(p.pid, "Pss_Shmem") for p in (srv, cl))
    go.write_text("")
    assert cl.wait(120) == 0, cl.diag()
    assert srv.wait(120) == 0, srv.diag()
    report = ", ".join("%s: %d fds (%d doorbells, %d link groups), PSS %.1f MB" % (
        name, f[0], f[1], f[2], pss / 1024) for name, (f, pss) in measured.items())
    total = sum(pss for _, pss in measured.values()) + max(0, shm - mapped)
    report += "; runtime directory %.1f MB of tmpfs; total %.1f MB" % (shm / 1024, total / 1024)
    print("\n%d connections: %s" % (N, report))
    h.assert_accelerated(st, clients=N, diag=report)
    # Issue 16's budget is loopback's: dev_copy (USMC_T_UNSHARED) keeps a
    # second view of every control block and a private sndbuf per ring.
    assert total <= (200 << 10) * (1.1 if h.UNSHARED else 1), report
    lgs = -(-N // SLOTS)
    for name, ((n, bells, groups), _) in measured.items():
        assert groups == lgs and bells == 2 * groups, "%s: %s" % (name, report)
        assert n <= N + 3 * lgs + SLACK, "%s holds %d descriptors for %d connections: %s" % (
            name, n, N, report)


CYCLES = r'''
import os, socket, sys, time
role = sys.argv[1]
if role == "server":
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(512)
    print("PORT", ls.getsockname()[1], os.getpid(), flush=True)
    while True:
        c = ls.accept()[0]
        got = c.recv(64)
        if got == b"quit":
            break
        c.sendall(got)
        c.close()
else:
    port, n, go = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        msg = b"%d" % i
        c.sendall(msg)
        assert c.recv(64) == msg and c.recv(1) == b"", i
        c.close()
        if i + 1 in (n // 10, n):
            print("AT", i + 1, flush=True)     # the test samples both processes
            while not os.path.exists(go + str(i + 1)):
                time.sleep(0.02)
    socket.create_connection(("127.0.0.1", port)).sendall(b"quit")
'''

NCYCLES = 100000


def sample(pids, rundir):
    """(descriptors, anonymous KB) per process, and the runtime directory's KB."""
    return [(fds(pid)[0], rollup_kb(pid, "Anonymous")) for pid in pids], tmpfs_kb(rundir)


@pytest.mark.timeout(400)
def test_hundred_thousand_cycles(rundir, procs, tmp_path):
    script = tmp_path / "cycles.py"
    script.write_text(CYCLES)
    go = tmp_path / "go"
    env = rundir.env()
    srv = procs.start("cycles-server", [h.PY, script, "server"], env)
    h.wait_line(srv, "PORT")
    port = int(re.search(rb"PORT (\d+)", srv.stdout()).group(1))
    cl = procs.start("cycles-client", [h.PY, script, "client", port, NCYCLES, go], env)
    at = {}
    for mark in (NCYCLES // 10, NCYCLES):
        h.wait_line(cl, "AT %d\n" % mark, timeout=300)
        at[mark] = sample((srv.pid, cl.pid), rundir.path)
        (tmp_path / ("go%d" % mark)).write_text("")
    assert cl.wait(60) == 0, cl.diag()
    assert srv.wait(30) == 0, srv.diag()
    (early, shm0), (late, shm1) = at[NCYCLES // 10], at[NCYCLES]
    report = "after %d / %d cycles: server fds %d / %d, anon %d / %d KB; client fds %d / %d, " \
        "anon %d / %d KB; runtime directory %d / %d KB" % (
            NCYCLES // 10, NCYCLES, early[0][0], late[0][0], early[0][1], late[0][1],
            early[1][0], late[1][0], early[1][1], late[1][1], shm0, shm1)
    print("\n" + report)
    st = rundir.settle(h.accel_pred(NCYCLES), timeout=30)
    assert st["smc_client"] >= NCYCLES and st["handshake_errors"] == 0, h.fmt_stat(st) + report
    for (fd0, anon0), (fd1, anon1) in zip(early, late):
        assert fd1 <= fd0 + 2, report
        assert anon1 <= anon0 + 2048, report
    assert shm1 <= shm0 + 256, report
