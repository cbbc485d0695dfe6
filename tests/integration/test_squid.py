"""Squid (Debian's HTTP proxy) in front of lighttpd, driven by curl and a
python CONNECT client, under `usmc run` against the same run over plain
TCP.  Every status line, header (less its date), body checksum, error page
and exit status must be what plain TCP gives.

Squid refuses to run as root ("Don't run Squid as root, set
'cache_effective_user'!"), and a squid started as root becomes `proxy`,
which cannot use root's runtime directory (test_apache.py shows that
case).  So squid, lighttpd, the clients and `usmc stat` all run as
`proxy` (setpriv), in a directory and a runtime directory it owns; squid
started by a non-root user ignores cache_effective_user.

* `squid -N` (one process, its own listener): curl -> squid and squid ->
  lighttpd are both usmc pairs, every connection on shared memory; a
  request to a closed port gets squid's error page (ERR_CONNECT_FAIL with
  errno 111, as over TCP); squid's refused connects count as nothing.
* `workers 2` (squid --foreground: a master, two worker kids and a
  coordinator): the coordinator opens the listening socket and passes it
  to each worker over its unconnected UNIX datagram socket in
  /run/squid (SCM_RIGHTS, sendmsg with a destination address), and each
  worker listen()s on it.  A listening socket received so is never
  published (handover.c receive_fd: its queue is shared with the sender
  and the other receivers, usmc or not), clients connect over TCP
  (peer_not_usmc at curl, handed_over at squid), while squid -> lighttpd
  stays on shared memory.
* CONNECT through squid to an echo server (usmc too): megabytes both ways
  in one tunnel, a tunnel to a closed port, and curl --proxytunnel.
* Lifecycle, with one kid and with `workers 2`: a keep-alive client
  connection held across `squid -k reconfigure` (each worker closes its
  listener and opens it again; with workers the coordinator hands it over
  again), `squid -k shutdown` (the master exits 0, no process left), and
  with one kid a fresh start on the same port.

Squid's own files: each run has its own service name (-n: the IPC sockets
in /run/squid and /dev/shm segments), removed at the end."""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from . import helpers as h

SQUID = shutil.which("squid") or "/usr/sbin/squid"
LIGHTTPD = shutil.which("lighttpd") or "/usr/sbin/lighttpd"
IPC_DIR = Path("/run/squid")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(SQUID) and os.path.exists(LIGHTTPD) and shutil.which("curl")
         and shutil.which("setpriv")),
    reason="squid, lighttpd, curl or setpriv not installed")

FILES = {"empty.bin": 0, "k1.bin": 1024, "k100.bin": 100 * 1024, "m5.bin": 5 * 1024 * 1024}
POST_SIZE = 1024 * 1024

LIGHTTPD_CONF = """\
server.document-root = "{root}/www"
server.bind = "127.0.0.1"
server.port = {port}
server.pid-file = "{root}/{tag}-lighttpd.pid"
server.errorlog = "{root}/{tag}-lighttpd.log"
server.modules = ("mod_setenv", "mod_cgi")
server.max-keep-alive-requests = 1000
cgi.assign = (".cgi" => "")
setenv.add-environment = ("USMC_RUNDIR" => "{rundir}")
mimetype.assign = (".bin" => "application/octet-stream", ".html" => "text/html")
"""

SQUID_CONF = """\
http_port 127.0.0.1:{port}
workers {workers}
pid_filename {root}/{tag}-squid.pid
cache_effective_user proxy
cache_log {root}/{tag}-cache.log
access_log stdio:{root}/{tag}-access.log
cache_store_log none
coredump_dir {root}
cache deny all
cache_mem 4 MB
memory_cache_shared off
http_access allow all
visible_hostname usmc-squid-test
dns_nameservers 127.0.0.1
pinger_enable off
icp_port 0
htcp_port 0
shutdown_lifetime 0 seconds
connect_timeout 10 seconds
"""

# POST body -> its length, method and SHA-256 (sha256sum reads the body
# from lighttpd's pipe until lighttpd closes it).  lighttpd gives its CGI
# LD_PRELOAD but none of the USMC_* settings: without setenv's USMC_RUNDIR
# the CGI's processes would run libusmc in proxy's default runtime
# directory (/dev/shm/usmc-UID), created for them.
POST_CGI = """\
#!/bin/sh
printf 'Content-Type: text/plain\\r\\n\\r\\n'
echo "$REQUEST_METHOD $CONTENT_LENGTH"
sha256sum | cut -d' ' -f1
"""

# CONNECT client: PROXY_PORT TARGET_PORT NBYTES.  One tunnel to the echo
# server: NBYTES of pattern sent while the echo is read back and compared;
# then SHUT_WR and how the connection ends.  A second tunnel, to a port
# nobody listens on: squid's answer (status line, X-Squid-Error).
CONNECT_CLIENT = r'''
import errno, hashlib, socket, sys, threading
pport, tport, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(1)
        if not d:
            break
        buf += d
    lines = buf.decode("latin-1").split("\r\n")
    keep = [l for l in lines[1:] if l.lower().startswith(("x-squid-error", "content-type"))]
    return [lines[0]] + sorted(keep)

def tunnel(port):
    s = socket.create_connection(("127.0.0.1", pport))
    s.settimeout(20)
    s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
    return s, head(s)

s, hd = tunnel(tport)
print("echo tunnel:", hd)
data = (bytes(range(251)) * (n // 251 + 1))[:n]
def send():
    for i in range(0, n, 65536):
        s.sendall(data[i:i + 65536])
t = threading.Thread(target=send)
t.start()
got = bytearray()
while len(got) < n:
    d = s.recv(1 << 20)
    if not d:
        break
    got += d
t.join()
print("echoed %d of %d, equal %s, sha %s" % (len(got), n, bytes(got) == data,
                                            hashlib.sha256(got).hexdigest()[:16]))
s.shutdown(socket.SHUT_WR)
try:
    rest = s.recv(65536)
    print("after SHUT_WR:", "EOF" if not rest else "%d more bytes" % len(rest))
except OSError as e:
    print("after SHUT_WR:", errno.errorcode.get(e.errno, e.errno))
s.close()

s, hd = tunnel(int(sys.argv[4]))
print("closed-port tunnel:", hd)
body = b""
while True:
    try:
        d = s.recv(65536)
    except OSError as e:
        print("closed-port body end:", errno.errorcode.get(e.errno, e.errno))
        break
    if not d:
        print("closed-port body end: EOF")
        break
    body += d
print("closed-port body mentions errno 111:", b"(111) Connection refused" in body)
'''

# Keep-alive client held across `squid -k reconfigure`: PROXY_PORT URL.
# GET, then wait for a line on stdin, GET again on the same connection
# (or report how it ended), then a GET on a new connection.
HOLD_CLIENT = r'''
import errno, socket, sys
pport, url = int(sys.argv[1]), sys.argv[2]

def get(s):
    s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % url.encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            return "EOF before headers (%d bytes)" % len(buf)
        buf += d
    hd, body = buf.split(b"\r\n\r\n", 1)
    n = int(next(l.split(b":")[1] for l in hd.split(b"\r\n") if l.lower().startswith(b"content-length")))
    while len(body) < n:
        d = s.recv(65536)
        if not d:
            return "EOF in body"
        body += d
    return "%s %d" % (hd.split(b"\r\n")[0].decode(), len(body))

s = socket.create_connection(("127.0.0.1", pport))
s.settimeout(20)
print("first:", get(s), flush=True)
sys.stdin.readline()
try:
    print("same connection after reconfigure:", get(s), flush=True)
except OSError as e:
    print("same connection after reconfigure:", errno.errorcode.get(e.errno, e.errno), flush=True)
s2 = socket.create_connection(("127.0.0.1", pport))
s2.settimeout(20)
print("new connection:", get(s2), flush=True)
'''


def proxy_user():
    return h.user_ids("proxy")


def as_proxy(argv):
    return h.as_user("proxy", argv)


def stat_as(rundir):
    """usmc stat --json of the runtime directory proxy owns."""
    return h.stat_as_user("proxy", rundir)


class Site:
    def __init__(self, root, rundir):
        self.root, self.rundir = root, rundir
        self.uid, self.gid = proxy_user()
        self.services = []
        self.sha = {name: h.sha256_file(root / "www" / name) for name in FILES}
        self.post_sha = h.sha256_file(root / "post.bin")

    def service(self, tag):
        """A squid service name (-n) of its own: names the IPC sockets in
        /run/squid and the shared memory segments in /dev/shm."""
        name = "usmcsq%d%s" % (os.getpid(), re.sub(r"[^A-Za-z0-9]", "", tag))
        if name not in self.services:
            self.services.append(name)
        return name

    def dir(self, name):
        d = self.root / name
        d.mkdir(exist_ok=True)
        os.chown(d, self.uid, self.gid)
        return d

    def stat(self):
        return stat_as(self.rundir)


@pytest.fixture
def site(rundir):
    """Content, configuration, logs and curl's output where proxy reaches
    them (pytest's temporary directories are private to root); the
    runtime directory given to proxy.  Squid's IPC sockets and shared
    memory segments removed at the end (a killed squid leaves them)."""
    root = Path(tempfile.mkdtemp(prefix="usmc-squid-", dir="/tmp"))
    (root / "www").mkdir()
    for i, (name, size) in enumerate(sorted(FILES.items())):
        (root / "www" / name).write_bytes(h.random_bytes(size, seed=500 + i))
    (root / "www" / "post.cgi").write_text(POST_CGI)
    os.chmod(root / "www" / "post.cgi", 0o755)
    (root / "post.bin").write_bytes(h.random_bytes(POST_SIZE, seed=600))
    (root / "connect.py").write_text(CONNECT_CLIENT)
    (root / "hold.py").write_text(HOLD_CLIENT)
    (root / "echo.py").write_text(h.ASYNC_ECHO_SERVER)
    uid, gid = proxy_user()
    for p in [root, *root.rglob("*")]:
        os.chown(p, uid, gid)
    os.chmod(root, 0o755)
    os.chown(rundir.path, uid, gid)
    s = Site(root, rundir)
    yield s
    for name in s.services:
        for d in (IPC_DIR, Path("/dev/shm")):
            for p in d.glob(name + "-*"):
                try:
                    p.unlink()
                except OSError:
                    pass
    shutil.rmtree(root, ignore_errors=True)


def both(fn):
    """fn(usmc) over plain TCP, then under usmc: (plain, usmc)."""
    return fn(False), fn(True)


def start_lighttpd(procs, site, tag, usmc):
    def argv(port):
        conf = site.root / ("%s-lighttpd.conf" % tag)
        conf.write_text(LIGHTTPD_CONF.format(root=site.root, port=port, tag=tag,
                                             rundir=site.rundir.path))
        return as_proxy([LIGHTTPD, "-D", "-f", conf])
    return h.start_server(procs, "lighttpd-" + tag, argv, site.rundir.env(debug=usmc),
                          usmc=usmc)


def squid_log(site, tag):
    p = site.root / ("%s-cache.log" % tag)
    return p.read_text(errors="replace") if p.exists() else ""


def squid_conf(site, tag, port, workers):
    conf = site.root / ("%s-squid.conf" % tag)
    conf.write_text(SQUID_CONF.format(root=site.root, port=port, tag=tag, workers=workers))
    os.chown(conf, site.uid, site.gid)
    return conf


def start_squid_n(procs, site, tag, usmc):
    """squid -N: one process that listens itself (its usmc registration is
    the readiness)."""
    svc = site.service(tag)
    return h.start_server(procs, "squid-" + tag,
                          lambda p: as_proxy([SQUID, "-N", "-n", svc, "-f",
                                              squid_conf(site, tag, p, 1)]),
                          site.rundir.env(debug=usmc), usmc=usmc)


def wait_accepting(proc, site, tag, n, timeout=20.0):
    """Until squid's cache.log said n times that it accepts HTTP."""
    deadline = time.monotonic() + timeout
    while squid_log(site, tag).count("Accepting HTTP Socket connections") < n:
        assert proc.alive() and time.monotonic() < deadline, \
            proc.diag() + "\n--- cache.log:\n" + squid_log(site, tag)[-4000:]
        time.sleep(0.05)


def start_squid_fg(procs, site, tag, usmc, workers, port=None):
    """squid --foreground: a master that forks its kids (and a coordinator
    with workers > 1) and stays in our process group."""
    svc = site.service(tag)
    port = port or h.free_port()
    conf = squid_conf(site, tag, port, workers)
    proc = procs.start("squid-" + tag, as_proxy([SQUID, "--foreground", "-n", svc, "-f", conf]),
                       site.rundir.env(debug=usmc), usmc=usmc)
    wait_accepting(proc, site, tag, workers)
    return proc, port, svc, conf


def squid_errors(site, tag):
    """What in cache.log says a squid process failed."""
    bad = ("FATAL", "assertion failed", "exited due to signal", "Terminated abnormally",
           "WARNING: Closing", "BUG")
    return [l for l in squid_log(site, tag).splitlines() if any(b in l for b in bad)]


def procs_cmdline():
    """(pid, /proc/PID, argv as bytes) of every process that still runs."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                yield int(d.name), d, (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue


def kids(pid):
    """(pid, command line) of pid's children."""
    out = []
    for p, d, argv in procs_cmdline():
        try:
            st = (d / "stat").read_text()
            if int(st[st.rfind(")") + 2:].split()[1]) == pid:
                out.append((p, b" ".join(argv).decode(errors="replace").strip()))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(out)


def service_procs(svc):
    """Processes whose command line names squid service svc."""
    return [p for p, _, argv in procs_cmdline() if svc.encode() in argv]


def listener_holders(pids, port):
    """pid -> inodes of the sockets listening on port that pid holds."""
    out = {}
    for pid in pids:
        inodes = h._listen_inodes(pid, port) & h._own_sockets(pid)
        if inodes:
            out[pid] = inodes
    return out


class Norm:
    """Transcript text without what changes between runs: dates and the
    ports picked."""

    def __init__(self, **ports):
        self.ports = ports

    def __call__(self, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for name, port in self.ports.items():
            text = re.sub(r"\b%d\b" % port, "<%s>" % name, text)
        text = re.sub(r"(?im)^(date|expires|last-modified):.*$", r"\1: X", text)
        text = re.sub(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", "DATE", text)
        return text


def curl(procs, site, usmc, name, args, timeout=30):
    """Run curl as proxy; its exit status, -w output and stderr."""
    p = procs.run(name, as_proxy(["curl", "-sS", "-m", "20", *args]), site.rundir.env(),
                  usmc=usmc, timeout=timeout, check=False)
    return p.popen.returncode, p.text(), p.stderr().decode("utf-8", "replace")


W = "%{http_code} %{size_download} %{num_connects}\\n"


def requests(procs, site, usmc, tag, pport, lport, closed):
    """The request set: keep-alive GETs of every size (and a 404), the
    same with Connection: close, HEADs, a 1 MB POST, a request to a closed
    port.  Returns the normalised transcript; asserts every body."""
    norm = Norm(proxy=pport, origin=lport, closed=closed)
    out = site.dir("out-%s" % tag)
    proxy = "http://127.0.0.1:%d" % pport
    base = "http://127.0.0.1:%d/" % lport
    names = ["empty.bin", "k1.bin", "k100.bin", "m5.bin", "k1.bin", "missing.bin", "k100.bin",
             "m5.bin", "empty.bin"]
    res = {}

    def fetch(key, extra):
        # One header file for all (curl appends each response's headers).
        args = ["-x", proxy, "-w", W, "-D", out / (key + ".h"), *extra]
        for i, n in enumerate(names):
            args += ["-o", out / ("%s-%d.b" % (key, i)), base + n]
        rc, w, err = curl(procs, site, usmc, key, args)
        res[key] = (rc, w, err, norm((out / (key + ".h")).read_bytes()))
        for i, n in enumerate(names):
            # (curl creates no file for an empty body)
            b = out / ("%s-%d.b" % (key, i))
            sha = h.sha256_file(b) if b.exists() else hashlib.sha256(b"").hexdigest()
            if n in FILES:
                assert sha == site.sha[n], (key, i, n, res[key])
            res["%s-%d-sha" % (key, i)] = sha

    fetch("keepalive", [])
    fetch("close", ["-H", "Connection: close"])
    for n in ("m5.bin", "k1.bin", "empty.bin"):
        rc, w, err = curl(procs, site, usmc, "head", ["-x", proxy, "-I", base + n])
        res["head-" + n] = (rc, norm(w), err)
    rc, w, err = curl(procs, site, usmc, "post", ["-x", proxy, "--data-binary",
                                                  "@%s" % (site.root / "post.bin"),
                                                  "-H", "Content-Type: application/octet-stream",
                                                  "-D", "-", base + "post.cgi"])
    res["post"] = (rc, norm(w), err)
    assert ("POST %d\n%s\n" % (POST_SIZE, site.post_sha)) in w, w + err
    rc, w, err = curl(procs, site, usmc, "closed", ["-x", proxy, "-D", "-", "-w", W,
                                                    "http://127.0.0.1:%d/x" % closed])
    res["closed"] = (rc, norm(w), err)
    return res


def concurrent(procs, site, usmc, tag, pport, lport, n=50):
    """n curl processes at once, each with two GETs on one connection."""
    out = site.dir("par-%s" % tag)
    proxy = "http://127.0.0.1:%d" % pport
    base = "http://127.0.0.1:%d/" % lport
    order = ["k100.bin", "k1.bin", "empty.bin", "k100.bin", "k1.bin"]
    started = []
    for i in range(n):
        a = "m5.bin" if i % 25 == 0 else order[i % len(order)]
        b = order[(i + 2) % len(order)]
        argv = as_proxy(["curl", "-sS", "-m", "30", "-x", proxy, "-w", W,
                         "-o", out / ("%d-a" % i), base + a, "-o", out / ("%d-b" % i), base + b])
        started.append((i, a, b, procs.start("par%d" % i, argv, site.rundir.env(), usmc=usmc)))
    res = []

    def sha(path):
        return h.sha256_file(path) if path.exists() else hashlib.sha256(b"").hexdigest()
    for i, a, b, p in started:
        rc = p.wait(60)
        ok = [sha(out / ("%d-a" % i)) == site.sha[a], sha(out / ("%d-b" % i)) == site.sha[b]]
        res.append((i, rc, p.text(), p.stderr().decode(errors="replace"), ok))
    return res


def check_squid(proc, site, tag):
    assert proc.alive(), proc.diag() + squid_log(site, tag)[-4000:]
    assert squid_errors(site, tag) == [], squid_log(site, tag)[-4000:]


def start_echo(procs, site, tag, usmc):
    return h.start_server(procs, "echo-" + tag,
                          lambda p: as_proxy([h.PY, site.root / "echo.py", "127.0.0.1", p]),
                          site.rundir.env(debug=usmc), usmc=usmc)


def everything(procs, site, usmc, tag, pport, lport, eport):
    """The request set, 50 concurrent clients, CONNECT tunnels (to the
    echo server, to a closed port, curl --proxytunnel to lighttpd)."""
    closed = h.free_port()
    res = {"requests": requests(procs, site, usmc, tag, pport, lport, closed)}
    res["concurrent"] = concurrent(procs, site, usmc, tag, pport, lport)
    p = procs.run("connect", as_proxy([h.PY, site.root / "connect.py", pport, eport,
                                       3 * 1000 * 1000, closed]),
                  site.rundir.env(), usmc=usmc, timeout=30, check=False)
    norm = Norm(proxy=pport, origin=lport, closed=closed, echo=eport)
    res["connect"] = (p.popen.returncode, norm(p.text()), p.stderr().decode(errors="replace"))
    out = site.dir("out-" + tag) / "tunnel.b"
    res["proxytunnel"] = curl(procs, site, usmc, "tunnel",
                              ["-p", "-x", "http://127.0.0.1:%d" % pport, "-w", W, "-o", out,
                               "http://127.0.0.1:%d/m5.bin" % lport])
    res["proxytunnel-sha"] = h.sha256_file(out) == site.sha["m5.bin"]
    return res


def check_plain(plain):
    """What plain TCP shows (so that usmc's equal transcript means
    something)."""
    r = plain["requests"]
    assert r["keepalive"][0] == 0 and r["keepalive"][1].split("\n") == [
        "200 0 1", "200 1024 0", "200 102400 0", "200 5242880 0", "200 1024 0", "404 341 0",
        "200 102400 0", "200 5242880 0", "200 0 0", ""], r["keepalive"]
    assert r["close"][0] == 0 and [l.split()[2] for l in r["close"][1].split("\n")[:-1]] == \
        ["1"] * 9, r["close"]
    assert all(r["head-" + n][1].startswith("HTTP/1.1 200 OK") for n in
               ("m5.bin", "k1.bin", "empty.bin")), r
    assert r["closed"][1].startswith("HTTP/1.1 503 "), r["closed"]
    assert "X-Squid-Error: ERR_CONNECT_FAIL 111" in r["closed"][1], r["closed"]
    assert "(111) Connection refused" in r["closed"][1], r["closed"]
    assert all(x[1] == 0 and x[4] == [True, True] for x in plain["concurrent"]), \
        plain["concurrent"]
    c = plain["connect"][1]
    assert "echoed 3000000 of 3000000, equal True" in c, c
    assert "closed-port tunnel: ['HTTP/1.1 503" in c, c
    assert "closed-port body mentions errno 111: True" in c, c
    assert plain["proxytunnel"][0] == 0 and plain["proxytunnel-sha"], plain["proxytunnel"]


def same(plain, accel, where=""):
    """Every transcript entry of the usmc run is the plain run's."""
    assert set(accel) == set(plain), (where, sorted(plain), sorted(accel))
    for key in plain:
        if isinstance(plain[key], dict) and isinstance(accel[key], dict):
            same(plain[key], accel[key], where + key + ".")
        elif accel[key] != plain[key]:
            if isinstance(plain[key], list):
                diff = [(p, a) for p, a in zip(plain[key], accel[key]) if p != a]
                detail = "first differences (plain, usmc): %r" % diff[:3]
            else:
                detail = "plain: %r\nusmc:  %r" % (plain[key], accel[key])
            raise AssertionError("%s%s differs under usmc\n%s" % (where, key, detail[:6000]))


# curl -> squid per run: keep-alive 1, Connection: close 9, HEAD 3, POST 1,
# closed port 1, concurrent 50, CONNECT client 2, curl --proxytunnel 1.
CLIENT_CONNS = 68


@pytest.mark.timeout(60, method="signal")
def test_squid_single(rundir, procs, site):
    """squid -N in front of lighttpd.  Under usmc every connection between
    usmc processes (curl -> squid, squid -> lighttpd, squid -> echo) is on
    shared memory, none on TCP; squid's connects to the closed port are
    refused as over TCP and counted nowhere."""

    def run(usmc):
        tag = "n-usmc" if usmc else "n-plain"
        light, lport = start_lighttpd(procs, site, tag, usmc)
        squid, pport = start_squid_n(procs, site, tag, usmc)
        echo, eport = start_echo(procs, site, tag, usmc)
        res = everything(procs, site, usmc, tag, pport, lport, eport)
        check_squid(squid, site, tag)
        assert light.alive() and echo.alive(), light.diag() + echo.diag()
        if usmc:
            # squid -> lighttpd (its pool: several) and -> echo on top.
            res["stat"] = rundir.settle(lambda s: s["smc_client"] >= CLIENT_CONNS + 3 and
                                        s["smc_client"] == s["smc_server"], stat=site.stat)
        squid.stop(grace=0.5)
        light.stop()
        echo.stop()
        return res

    plain, accel = both(run)
    st = accel.pop("stat")
    print("usmc stat (squid -N):", h.fmt_stat(st).split("\n")[0])
    check_plain(plain)
    same(plain, accel)
    h.assert_accelerated(st, min_clients=CLIENT_CONNS + 3)
    assert st["tx_bytes"] > 60 * 1000 * 1000, h.fmt_stat(st)


@pytest.mark.timeout(60, method="signal")
def test_squid_smp_workers(rundir, procs, site):
    """squid --foreground with `workers 2`: the master starts two worker
    kids and a coordinator; the coordinator binds the listening socket and
    hands it to both workers (SCM_RIGHTS over its UNIX datagram sockets in
    /run/squid), each of which listens on it.  The same requests, the same
    answers.  Under usmc the handed listener is never published (a listening
    socket received over SCM_RIGHTS never is: its queue is shared with the
    sender and every other receiver, usmc or not, handover.c): every client
    connection is TCP, counted at both ends (peer_not_usmc at curl,
    handed_over at the worker that accepted it), every squid -> lighttpd
    and squid -> echo connection on shared memory."""

    def run(usmc):
        tag = "smp-usmc" if usmc else "smp-plain"
        light, lport = start_lighttpd(procs, site, tag, usmc)
        echo, eport = start_echo(procs, site, tag, usmc)
        squid, pport, svc, conf = start_squid_fg(procs, site, tag, usmc, workers=2)
        ks = kids(squid.pid)
        roles = sorted(c.split("--kid ")[1].split()[0] for _, c in ks if "--kid " in c)
        assert roles == ["squid-1", "squid-2", "squid-coord-3"], (ks, squid.diag())
        holders = listener_holders([pid for pid, _ in ks], pport)
        workers = [pid for pid, c in ks if "--kid squid-coord" not in c]
        # One socket, held by the coordinator that made it and both workers.
        assert set(workers) <= set(holders) and len(set().union(*holders.values())) == 1, \
            (ks, holders)
        res = everything(procs, site, usmc, tag, pport, lport, eport)
        res["kids"] = roles
        log = (site.root / ("%s-access.log" % tag)).read_text()
        check_squid(squid, site, tag)
        assert squid_log(site, tag).count("Accepting HTTP Socket connections") == 2, \
            squid_log(site, tag)
        assert sorted(kids(squid.pid)) == sorted(ks), "a kid restarted"
        assert light.alive() and echo.alive(), light.diag() + echo.diag()
        res["life"] = reconfigure_and_shutdown(procs, site, usmc, tag, squid, svc, conf, pport,
                                               lport, 2)
        if usmc:
            # The request set and the lifecycle's 4 client connections.
            res["stat"] = rundir.settle(
                lambda s: s["tcp_fallback"].get("handed_over", 0) >= CLIENT_CONNS + 4 and
                s["tcp_fallback"].get("peer_not_usmc", 0) >= CLIENT_CONNS + 4 and
                s["smc_client"] == s["smc_server"] >= 3, stat=site.stat)
        light.stop()
        echo.stop()
        assert log.count("\n") >= CLIENT_CONNS, log
        return res

    plain, accel = both(run)
    st = accel.pop("stat")
    msg = h.fmt_stat(st)
    print("usmc stat (squid workers 2):", msg.split("\n")[0])
    check_plain(plain)
    check_lifecycle(plain["life"], 2)
    same(plain, accel)
    assert st["handshake_errors"] == 0, msg
    # The client side of every connection to squid: TCP, peer_not_usmc;
    # the worker's side: TCP, handed_over.  Nothing else on TCP.
    n = CLIENT_CONNS + 4
    fb = dict(st["tcp_fallback"])
    moved = 0
    if h.UNSHARED:
        # lighttpd forks its CGI with squid's connections open: those move
        # to TCP at the fork (device_unshared, peer_moved_to_tcp).
        moved = sum(fb.pop(r, 0) for r in h.UNSHARED_REASONS)
    assert fb == {"peer_not_usmc": n, "handed_over": n}, msg
    assert st["tcp_conns"] == 2 * n + moved, msg
    # squid -> lighttpd (each worker's pool) and squid -> echo.
    assert st["smc_client"] == st["smc_server"] >= 3, msg
    assert st["tx_bytes"] > 20 * 1000 * 1000, msg


def get(procs, site, usmc, pport, lport, name):
    return curl(procs, site, usmc, name, ["-x", "http://127.0.0.1:%d" % pport, "-w", W, "-o",
                                         "/dev/null", "http://127.0.0.1:%d/k100.bin" % lport])


def reconfigure_and_shutdown(procs, site, usmc, tag, squid, svc, conf, pport, lport, workers):
    """A keep-alive connection held across `squid -k reconfigure` (each
    worker closes its listener and opens it again: with workers > 1 the
    coordinator hands it over again), then `squid -k shutdown`: the
    master exits 0 and no process of the service is left."""
    out = {"before": get(procs, site, usmc, pport, lport, "before")}
    hold = procs.start("hold", as_proxy([h.PY, site.root / "hold.py", pport,
                                         "http://127.0.0.1:%d/k1.bin" % lport]),
                       site.rundir.env(), usmc=usmc, stdin=subprocess.PIPE)
    h.wait_line(hold, "first:")
    k = procs.run("reconfigure", as_proxy([SQUID, "-k", "reconfigure", "-n", svc, "-f", conf]),
                  site.rundir.env(), usmc=usmc, timeout=20, check=False)
    out["reconfigure"] = (k.popen.returncode, k.text(), k.stderr().decode(errors="replace"))
    wait_accepting(squid, site, tag, 2 * workers)
    hold.popen.stdin.write(b"go\n")
    hold.popen.stdin.close()
    out["hold-rc"] = hold.wait(30)
    out["hold"] = Norm(proxy=pport, origin=lport)(hold.text())
    out["after-reconfigure"] = get(procs, site, usmc, pport, lport, "after")
    ks = kids(squid.pid)
    out["kids"] = len(ks)
    out["holders"] = sorted(len(v) for v in listener_holders([p for p, _ in ks], pport).values())
    k = procs.run("shutdown", as_proxy([SQUID, "-k", "shutdown", "-n", svc, "-f", conf]),
                  site.rundir.env(), usmc=usmc, timeout=20, check=False)
    out["shutdown"] = (k.popen.returncode, k.text(), k.stderr().decode(errors="replace"))
    out["master-rc"] = squid.wait(15)
    deadline = time.monotonic() + 5
    while service_procs(svc) and time.monotonic() < deadline:
        time.sleep(0.05)
    out["left"] = service_procs(svc)
    assert squid_errors(site, tag) == [], squid_log(site, tag)[-4000:]
    return out


def check_lifecycle(plain, workers):
    assert plain["before"][:2] == (0, "200 102400 1\n"), plain
    assert plain["reconfigure"][0] == 0 and plain["shutdown"][0] == 0, plain
    assert plain["hold-rc"] == 0 and plain["hold"] == (
        "first: HTTP/1.1 200 OK 1024\nsame connection after reconfigure: HTTP/1.1 200 OK 1024\n"
        "new connection: HTTP/1.1 200 OK 1024\n"), plain
    assert plain["after-reconfigure"][:2] == (0, "200 102400 1\n"), plain
    assert plain["master-rc"] == 0 and plain["left"] == [], plain
    assert plain["kids"] == (workers + 1 if workers > 1 else 1), plain
    assert plain["holders"] == [1] * plain["kids"], plain


@pytest.mark.timeout(60, method="signal")
def test_squid_lifecycle(rundir, procs, site):
    """squid --foreground (master and one kid that listens itself):
    reconfigure_and_shutdown(), then a fresh start on the same port that
    serves."""

    def run(usmc):
        tag = "life-usmc" if usmc else "life-plain"
        light, lport = start_lighttpd(procs, site, tag, usmc)
        squid, pport, svc, conf = start_squid_fg(procs, site, tag, usmc, workers=1)
        out = reconfigure_and_shutdown(procs, site, usmc, tag, squid, svc, conf, pport, lport, 1)
        # A fresh start, same port, same service.
        (site.root / ("%s-cache.log" % tag)).unlink()
        squid2, _, _, _ = start_squid_fg(procs, site, tag, usmc, workers=1, port=pport)
        out["fresh"] = get(procs, site, usmc, pport, lport, "fresh")
        check_squid(squid2, site, tag)
        if usmc:
            # before, hold (2), after, fresh; squid -> lighttpd (at least
            # one per squid kid).
            out["stat"] = rundir.settle(lambda s: s["smc_client"] >= 7 and
                                        s["smc_client"] == s["smc_server"], stat=site.stat)
        squid2.stop()
        light.stop()
        return out

    plain, accel = both(run)
    st = accel.pop("stat")
    print("usmc stat (lifecycle):", h.fmt_stat(st).split("\n")[0])
    check_lifecycle(plain, 1)
    assert plain["fresh"][:2] == (0, "200 102400 1\n"), plain
    same(plain, accel)
    h.assert_accelerated(st, min_clients=7)
