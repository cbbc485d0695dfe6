"""OpenSSH's sshd (Debian's /usr/sbin/sshd, default privilege separation
and seccomp sandbox) under `usmc run`, on a loopback port of its own with
its own host key, configuration and an authorized key for root.

Which connections can be accelerated, and what the counters must show:
  * plain ssh -> sshd: plain TCP (peer_not_usmc at sshd's end).  sshd's
    privilege-separated child runs under a seccomp filter; it used to be
    killed by SIGSYS at exit (libusmc released its statistics slot with
    fcntl(F_OFD_SETLK)), and the login failed.
  * ssh under usmc -> sshd: on shared memory for the banner exchange, then
    the privilege-separated child moves the connection to TCP before it
    installs its filter: `sandboxed` at sshd's end, `peer_moved_to_tcp` at
    ssh's (a filtered process gets no shared memory: sandbox.c).  In the
    default re-exec mode sshd's child puts the connection on descriptors
    0 and 1 for the exec, where stdio could write it past usmc: it moves
    to TCP there, before any byte (`stdio`, src/stdstream.c).
  * ssh -L: the local client -> ssh's forwarding listener and sshd -> the
    forwarded-to server are made by processes without a filter (sshd's
    monitor serves root's session itself): both on shared memory.
  * sshd under `usmc run -t`: nothing accelerated, every login works.
Every transfer is checked byte for byte.  sshd runs with -r (no re-exec
per connection) and in its default re-exec mode.
"""
import hashlib
import os
import subprocess

import pytest

from . import helpers as h

SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
KEYGEN = "/usr/bin/ssh-keygen"

pytestmark = [
    pytest.mark.skipif(not all(os.access(p, os.X_OK) for p in (SSHD, SSH, KEYGEN)),
                       reason="needs openssh-server and openssh-client"),
    pytest.mark.skipif(os.geteuid() != 0, reason="sshd's privilege separation needs root"),
]

CONFIG = """\
ListenAddress 127.0.0.1
HostKey {d}/host_ed25519
PidFile none
AuthorizedKeysFile {d}/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
LogLevel VERBOSE
"""

ECHO = r'''
import socket, sys, threading
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(16)
def serve(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''

CLIENT = r'''
import socket, sys, threading
port, n, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import random
data = random.Random(seed).randbytes(n)
s = socket.create_connection(("127.0.0.1", port))
def send():
    for i in range(0, n, 16384):
        s.sendall(data[i:i + 16384])
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send)
t.start()
got = bytearray()
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
t.join()
s.close()
if bytes(got) != data:
    sys.exit("echo through the forward differs: %d of %d bytes" % (len(got), n))
print("OK %d" % n, flush=True)
'''

# sshd re-execs itself with the connection on fds 0 and 1 (adopted as one
# socket, exec.c), or serves it in the listening process's child (-r).
MODES = [pytest.param(False, id="no-rexec"), pytest.param(True, id="rexec")]


@pytest.fixture
def sshd_dir(tmp_path):
    d = tmp_path / "sshd"
    d.mkdir()
    for name in ("host_ed25519", "client_ed25519"):
        r = subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
    (d / "authorized_keys").write_bytes((d / "client_ed25519.pub").read_bytes())
    (d / "sshd_config").write_text(CONFIG.format(d=d))
    # The privilege-separation chroot Debian's sshd service normally creates.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    return d


def start_sshd(procs, rundir, d, rexec):
    argv = [SSHD, "-D", "-e"] + ([] if rexec else ["-r"]) + ["-f", d / "sshd_config"]
    return h.start_server(procs, "sshd", lambda p: argv + ["-p", p], rundir.env(debug=True))


def ssh_argv(d, port, *args):
    return [SSH, "-F", "/dev/null", "-i", d / "client_ed25519", "-p", port,
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", *args]


def run_session(procs, rundir, d, port, usmc_client, tag):
    """`cat` and `sha256sum` on the server: a byte-exact round trip of 1 MB
    and a digest of 100000 bytes."""
    data = h.random_bytes(1 << 20, seed=len(tag))
    p = procs.run("ssh-cat-" + tag, ssh_argv(d, port, "root@127.0.0.1", "cat"), rundir.env(),
                  usmc=usmc_client, input_bytes=data, timeout=60)
    assert p.stdout() == data, "cat through ssh differs (%d of %d bytes)\n%s" % (
        len(p.stdout()), len(data), p.diag())
    small = h.random_bytes(100000, seed=7)
    p = procs.run("ssh-sha-" + tag, ssh_argv(d, port, "root@127.0.0.1", "sha256sum"),
                  rundir.env(), usmc=usmc_client, input_bytes=small, timeout=60)
    assert p.text().split()[0] == hashlib.sha256(small).hexdigest(), p.diag()


def assert_no_sigsys(sshd):
    err = sshd.stderr()
    assert b"terminated by signal" not in err and b"banner exchange" not in err, sshd.diag()


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("rexec", [False, True], ids=["no-rexec", "rexec"])
def test_sshd_plain_client(rundir, procs, sshd_dir, rexec):
    sshd, port = start_sshd(procs, rundir, sshd_dir, rexec)
    run_session(procs, rundir, sshd_dir, port, False, "plain")
    st = rundir.settle(lambda s: s["tcp_conns"] >= 2)
    assert_no_sigsys(sshd)
    assert st["smc_conns"] == 0, h.fmt_stat(st)
    assert st["tcp_fallback"] == {"peer_not_usmc": 2}, h.fmt_stat(st)
    assert st["aborts"] == {}, h.fmt_stat(st)


@pytest.mark.timeout(120, method="signal")
def test_sshd_tcp_only(rundir, procs, sshd_dir):
    """`usmc run -t` (USMC_DISABLE=1): every socket tracked, none
    accelerated; the privilege-separated child still must not die at exit."""
    port = h.free_port()
    sshd = procs.start("sshd-t", [SSHD, "-D", "-e", "-f", sshd_dir / "sshd_config", "-p", port],
                       rundir.env(USMC_DISABLE=1))
    assert h.wait_listen(sshd, port, usmc=False), sshd.diag()
    run_session(procs, rundir, sshd_dir, port, False, "plain")
    run_session(procs, rundir, sshd_dir, port, True, "usmc")
    want = {"disabled": 4, "peer_not_usmc": 2}
    st = rundir.settle(lambda s: s["tcp_fallback"] == want)
    assert_no_sigsys(sshd)
    assert st["smc_conns"] == 0 and st["tcp_fallback"] == want, h.fmt_stat(st)
    assert st["aborts"] == {}, h.fmt_stat(st)


def stdio_tcp(st, n):
    """n connections that went to TCP at sshd's dup2 onto stdin: each
    moved (stdio + peer_moved_to_tcp, counted on shared memory at both
    ends first) or declined (stdio at both ends, never on shared memory).
    Returns how many moved."""
    fb, why = st["tcp_fallback"], h.child_reason("stdio")
    assert set(fb) <= {why, "peer_moved_to_tcp"}, h.fmt_stat(st)
    moved = fb.get("peer_moved_to_tcp", 0)
    assert fb.get(why, 0) + moved == 2 * n and moved <= n, h.fmt_stat(st)
    assert st["tcp_conns"] == 2 * n, h.fmt_stat(st)
    assert st["smc_client"] == st["smc_server"], h.fmt_stat(st)
    return moved


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("rexec", MODES)
def test_sshd_usmc_client(rundir, procs, sshd_dir, rexec):
    sshd, port = start_sshd(procs, rundir, sshd_dir, rexec)
    run_session(procs, rundir, sshd_dir, port, True, "usmc")
    if rexec:
        # Re-exec'd: at the dup2 onto stdin, before the banners, each
        # login moves to TCP (the client follows) or, its proposal not
        # answered yet, is declined (the client learns stdio too).
        st = rundir.settle(lambda s: s["tcp_conns"] >= 4)
        assert_no_sigsys(sshd)
        moved = stdio_tcp(st, 2)
        assert st["smc_client"] == moved, h.fmt_stat(st)
        assert st["handshake_errors"] == 0 and st["aborts"] == {}, h.fmt_stat(st)
        return
    want = {h.child_reason("sandboxed"): 2, "peer_moved_to_tcp": 2}
    st = rundir.settle(lambda s: s["tcp_fallback"] == want and s["smc_server"] >= 2)
    assert_no_sigsys(sshd)
    # Each login: on shared memory for the banners, then moved to TCP by
    # the privilege-separated child before its filter.
    assert st["smc_client"] == 2 and st["smc_server"] == 2, h.fmt_stat(st)
    assert st["tcp_fallback"] == want, h.fmt_stat(st)
    # (Without sharing, sshd's fork moved it before the banners.)
    assert h.UNSHARED or (st["tx_bytes"] > 0 and st["rx_bytes"] > 0), h.fmt_stat(st)
    assert st["handshake_errors"] == 0 and st["aborts"] == {}, h.fmt_stat(st)


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("rexec", MODES)
def test_sshd_local_forward(rundir, procs, sshd_dir, rexec, tmp_path):
    echo = tmp_path / "echo.py"
    echo.write_text(ECHO)
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    sshd, port = start_sshd(procs, rundir, sshd_dir, rexec)
    _, eport = h.start_server(procs, "echo", lambda p: [h.PY, echo, p], rundir.env(debug=True))
    fwd, lport = h.start_server(
        procs, "ssh-L",
        lambda p: ssh_argv(sshd_dir, port, "-N", "-o", "ExitOnForwardFailure=yes",
                           "-L", "127.0.0.1:%s:127.0.0.1:%d" % (p, eport), "root@127.0.0.1"),
        rundir.env(debug=True))
    n = 1 << 20
    for seed in (1, 2):
        p = procs.run("fwd-client-%d" % seed, [h.PY, client, lport, n, seed], rundir.env(),
                      timeout=60)
        assert p.text().startswith("OK %d" % n), p.diag()
    fwd.stop()
    # client -> ssh -L (2 connections) and sshd -> echo server (2): shared
    # memory throughout; ssh <-> sshd: shared memory, then TCP (sandboxed;
    # re-exec'd: stdio, moved or declined as in test_sshd_usmc_client).
    if rexec:
        st = rundir.settle(lambda s: s["smc_server"] >= 4 and s["tcp_conns"] >= 2)
        assert_no_sigsys(sshd)
        smc = stdio_tcp(st, 1)
        assert st["smc_client"] == 4 + smc and st["smc_server"] == 4 + smc, h.fmt_stat(st)
    else:
        want = {h.child_reason("sandboxed"): 1, "peer_moved_to_tcp": 1}
        st = rundir.settle(lambda s: s["smc_server"] >= 5 and s["tcp_fallback"] == want)
        assert_no_sigsys(sshd)
        assert st["smc_client"] == 5 and st["smc_server"] == 5, h.fmt_stat(st)
        assert st["tcp_fallback"] == want, h.fmt_stat(st)
    # Both directions of both forwarded streams crossed shared memory twice.
    assert st["tx_bytes"] >= 2 * 4 * n, h.fmt_stat(st)
    assert st["handshake_errors"] == 0, h.fmt_stat(st)
