"""nginx (master + 2 epoll workers) serving static files, with sendfile on
and off; wrk and curl as clients.  Both ends under `usmc run`: every
connection must use shared memory and every download must be byte-exact."""
import hashlib
import os
import re
import shutil
import tempfile

import pytest

from . import helpers as h

BIG = 50 * 1000 * 1000


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """Static files: a 50 MB random file, a small page, their sha256."""
    d = tmp_path_factory.mktemp("www")
    big = h.random_bytes(BIG, seed=50)
    (d / "big.bin").write_bytes(big)
    (d / "index.html").write_bytes(b"<html>usmc</html>\n" * 20)
    return {"dir": d, "big_sha": hashlib.sha256(big).hexdigest(),
            "index": (d / "index.html").read_bytes()}


# The part every configuration here shares, up to the http block's own
# directives ({pid}: the pid file's name, {log}: access_log's argument).
CONF_HEAD = """\
daemon off;
master_process on;
user {user};
worker_processes 2;
pid {tmp}/{pid};
error_log stderr info;
events {{ use epoll; worker_connections 512; }}
http {{
    access_log {log};
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    default_type application/octet-stream;
"""

NGINX_CONF = CONF_HEAD + """\
    sendfile {sendfile};
    keepalive_timeout 30;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


def start_nginx(procs, rundir, tmp_path, root, sendfile="on", usmc=True, user="root"):
    conf_dir = tmp_path / "nginx"
    conf_dir.mkdir(exist_ok=True)

    def argv(port):
        conf = conf_dir / ("nginx-%d.conf" % port)
        conf.write_text(NGINX_CONF.format(tmp=conf_dir, sendfile=sendfile, port=port,
                                          root=root, user=user, pid="nginx.pid",
                                          log=conf_dir / "access.log"))
        return ["nginx", "-c", conf, "-p", conf_dir, "-e", "stderr"]

    return h.start_server(procs, "nginx", argv, rundir.env(debug=usmc), usmc=usmc)


def curl(procs, rundir, args, usmc=True, name="curl", timeout=60):
    return procs.run(name, ["curl", "-sS", "--fail", *args], rundir.env(debug=True),
                     usmc=usmc, timeout=timeout)


def parse_wrk(text):
    m = re.search(r"(\d+) requests in", text)
    assert m, text
    return int(m.group(1))


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("sendfile", ["on", "off"])
def test_nginx_curl_big_file(rundir, procs, tmp_path, www, sendfile):
    server, port = start_nginx(procs, rundir, tmp_path, www["dir"], sendfile)
    out = tmp_path / "big.out"
    curl(procs, rundir, ["-o", out, "http://127.0.0.1:%d/big.bin" % port])
    assert out.stat().st_size == BIG
    assert h.sha256_file(out) == www["big_sha"]
    st = rundir.settle(h.accel_pred(1))
    h.assert_accelerated(st, clients=1, diag=server.diag())
    assert st["tx_bytes"] >= BIG


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("sendfile", ["on", "off"])
def test_nginx_keepalive_and_close(rundir, procs, tmp_path, www, sendfile):
    server, port = start_nginx(procs, rundir, tmp_path, www["dir"], sendfile)
    url = "http://127.0.0.1:%d/index.html" % port
    big = "http://127.0.0.1:%d/big.bin" % port

    # Keep-alive: three requests (one of them the big file) on one connection.
    outs = [tmp_path / ("ka%d.out" % i) for i in range(3)]
    curl(procs, rundir, ["-o", outs[0], url, "-o", outs[1], big, "-o", outs[2], url])
    assert outs[0].read_bytes() == www["index"] and outs[2].read_bytes() == www["index"]
    assert h.sha256_file(outs[1]) == www["big_sha"]
    st = rundir.settle(h.accel_pred(1))
    h.assert_accelerated(st, clients=1, diag=server.diag())

    # Connection: close: three requests, three connections.
    outs = [tmp_path / ("cl%d.out" % i) for i in range(3)]
    curl(procs, rundir, ["-H", "Connection: close", "-o", outs[0], url, "-o", outs[1], url,
                         "-o", outs[2], url])
    assert all(o.read_bytes() == www["index"] for o in outs)
    st = rundir.settle(h.accel_pred(4))
    h.assert_accelerated(st, clients=4, diag=server.diag())


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("sendfile", ["on", "off"])
def test_nginx_wrk_keepalive(rundir, procs, tmp_path, www, sendfile):
    server, port = start_nginx(procs, rundir, tmp_path, www["dir"], sendfile)
    p = procs.run("wrk", ["wrk", "-t2", "-c10", "-d2s",
                          "http://127.0.0.1:%d/index.html" % port], rundir.env(), timeout=60)
    text = p.text()
    n = parse_wrk(text)
    assert n > 0, text
    assert "Socket errors" not in text, "wrk saw socket errors:\n" + text
    assert "Non-2xx" not in text, text
    # wrk's main thread first opens (and closes) one probe connection, then
    # its threads open exactly -c connections and keep them alive.
    st = rundir.settle(h.accel_pred(11))
    h.assert_accelerated(st, clients=11, diag=text + "\n" + server.diag())


@pytest.mark.timeout(180, method="signal")
def test_nginx_wrk_connection_close(rundir, procs, tmp_path, www):
    server, port = start_nginx(procs, rundir, tmp_path, www["dir"], "on")
    # One second: at 10k+ connections/s, more would run the ephemeral
    # ports out (TIME_WAIT sockets to one destination cannot be reused
    # within a second), and wrk counts the kernel's EADDRNOTAVAIL as a
    # connect error, with TCP as with usmc.
    p = procs.run("wrk", ["wrk", "-t2", "-c10", "-d1s", "-H", "Connection: close",
                          "http://127.0.0.1:%d/index.html" % port], rundir.env(), timeout=60)
    text = p.text()
    n = parse_wrk(text)
    assert n > 0, text
    assert "Socket errors" not in text, "wrk saw socket errors:\n" + text
    assert "Non-2xx" not in text, text
    # One connection per request, plus the probe connection and those cut
    # by the end of the run: wrk exits with up to -c connections in flight,
    # which one side may have counted and the other not.
    st = rundir.settle(h.accel_pred(n))
    msg = text + "\n" + h.fmt_stat(st) + "\n" + server.diag()
    assert st["tcp_fallback"] == {} and st["tcp_conns"] == 0, msg
    assert st["handshake_errors"] == 0, msg
    assert st["smc_client"] >= n and st["smc_server"] >= n, msg
    assert abs(st["smc_client"] - st["smc_server"]) <= 10, msg
    assert st["smc_conns"] == st["smc_client"] + st["smc_server"], msg


# Sequential HTTP/1.1 requests with Connection: close from one process;
# prints its descriptor count after the first request and after the rest.
SEQ_CLIENT = r"""
import os, socket, sys
port, n, want = int(sys.argv[1]), int(sys.argv[2]), open(sys.argv[3], "rb").read()
def get():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(want), data[:200]
def nfds():
    # usmc's per-thread wait instance (an epoll, made at the thread's
    # first sleep on a ring and kept) is not a connection's: not counted.
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink("/proc/self/fd/" + f) != "anon_inode:[eventpoll]"
        except OSError:
            pass
    return n
get()
first = nfds()
for _ in range(n):
    get()
print("OK fds %d %d" % (first, nfds()))
"""


@pytest.mark.timeout(180, method="signal")
def test_nginx_workers_other_user(rundir, procs, tmp_path, www):
    """nginx as packaged: the master runs as root, the workers as an
    unprivileged user, who cannot map the root client's link group and
    decline every proposal (reason permission).  Each declined client
    must give its slot back: a client making 300 connections keeps the
    descriptors it had after the first (a leaked slot keeps two doorbells
    and, every 64 slots, a link group), and every response is whole."""
    pub = tempfile.mkdtemp(prefix="usmc-nginx-www-", dir="/dev/shm")
    try:
        os.chmod(pub, 0o755)
        shutil.copy(www["dir"] / "index.html", pub)
        os.chmod(os.path.join(pub, "index.html"), 0o644)
        server, port = start_nginx(procs, rundir, tmp_path, pub, user="nobody nogroup")
        script = tmp_path / "seq_client.py"
        script.write_text(SEQ_CLIENT)
        n = 300
        p = procs.run("seq-client", [h.PY, script, str(port), str(n),
                                     os.path.join(pub, "index.html")],
                      rundir.env(), timeout=120)
        out = p.text().split()
        assert out[:2] == ["OK", "fds"], p.diag()
        assert out[2] == out[3], "descriptors grew from %s to %s over %d declined " \
            "connections\n%s" % (out[2], out[3], n, p.diag())
        st = rundir.settle(lambda st: st["tcp_fallback"].get("permission", 0) >= n + 1)
        msg = h.fmt_stat(st) + "\n" + server.diag()
        assert st["tcp_fallback"].get("permission", 0) >= n + 1, msg
        assert st["smc_client"] == 0, msg
        assert st["handshake_errors"] == 0, msg     # a decision, not an error
    finally:
        shutil.rmtree(pub, ignore_errors=True)


PROXY_CONF = CONF_HEAD + """\
    sendfile on;
    upstream back {{ server 127.0.0.1:{back}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://back;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering {buffering};
        }}
    }}
    server {{
        listen 127.0.0.1:{back};
        root {root};
    }}
}}
"""


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("buffering", ["on", "off"])
def test_nginx_reverse_proxy(rundir, procs, tmp_path, www, buffering):
    """nginx as a reverse proxy to an upstream (itself, on a second port)
    with a keep-alive pool: its workers are usmc clients too (non-blocking
    connect, epoll, upstream connections reused across requests).  Every
    hop on shared memory, every body byte-exact."""
    conf_dir = tmp_path / "proxy"
    conf_dir.mkdir()

    def argv(port):
        conf = conf_dir / ("nginx-%d.conf" % port)
        conf.write_text(PROXY_CONF.format(tmp=conf_dir, port=port, back=h.free_port(),
                                          root=www["dir"], buffering=buffering, user="root",
                                          pid="nginx-proxy.pid", log="off"))
        return ["nginx", "-c", conf, "-p", conf_dir, "-e", "stderr"]

    server, port = h.start_server(procs, "nginx-proxy", argv, rundir.env(debug=True))
    url = "http://127.0.0.1:%d/index.html" % port
    outs = [tmp_path / ("px%d.out" % i) for i in range(4)]
    curl(procs, rundir, ["-o", outs[0], url, "-o", outs[1], "http://127.0.0.1:%d/big.bin" % port,
                         "-o", outs[2], url])
    curl(procs, rundir, ["-H", "Connection: close", "-o", outs[3], url], name="curl-close")
    assert outs[0].read_bytes() == www["index"] and outs[2].read_bytes() == www["index"]
    assert outs[3].read_bytes() == www["index"]
    assert h.sha256_file(outs[1]) == www["big_sha"]
    # curl twice, and at least one upstream connection of the proxy.
    st = rundir.settle(h.accel_pred(3))
    h.assert_accelerated(st, min_clients=3, diag=server.diag())
    assert st["aborts"] == {}, h.fmt_stat(st)
    assert st["tx_bytes"] >= 2 * BIG, h.fmt_stat(st)
    # wrk stops with requests in flight: the proxy then drops the upstream
    # connection with a response unread (a reset, with TCP as with usmc).
    p = procs.run("wrk", ["wrk", "-t1", "-c8", "-d1s", url], rundir.env(), timeout=60)
    assert parse_wrk(p.text()) > 0 and "Socket errors" not in p.text(), p.text()
    # ... and wrk's probe and its 8.
    st = rundir.settle(h.accel_pred(12))
    h.assert_accelerated(st, min_clients=12, diag=server.diag())
