"""Fallback both ways: a usmc process talking to a plain (not preloaded)
peer must behave exactly like plain TCP - same results, and the plain side
sees exactly the bytes it would have seen - with the reason peer_not_usmc
counted on the usmc side and nothing counted as shared memory."""
import hashlib

import pytest

from . import helpers as h
from .test_nginx import start_nginx
from .test_redis import parse_benchmark, start_redis


def assert_fallback(st, n, exact=True, diag=""):
    msg = "\n" + h.fmt_stat(st) + ("\n" + diag if diag else "")
    assert st["smc_conns"] == 0, "a connection to/from a plain peer used shared memory" + msg
    assert st["handshake_errors"] == 0, msg
    assert st["tx_bytes"] == 0 and st["rx_bytes"] == 0, msg
    if exact:
        assert st["tcp_fallback"] == {"peer_not_usmc": n}, msg
        assert st["tcp_conns"] == n, msg
    else:
        assert set(st["tcp_fallback"]) == {"peer_not_usmc"}, msg
        assert st["tcp_fallback"]["peer_not_usmc"] == st["tcp_conns"] >= n, msg


def fallback_pred(n):
    return lambda st: st["tcp_fallback"].get("peer_not_usmc", 0) >= n


@pytest.fixture(scope="module")
def small_www(tmp_path_factory):
    d = tmp_path_factory.mktemp("www-small")
    data = h.random_bytes(5 * 1000 * 1000, seed=5)
    (d / "file.bin").write_bytes(data)
    return d, hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- usmc client -> plain server

@pytest.mark.timeout(120, method="signal")
def test_usmc_redis_clients_to_plain_server(rundir, procs):
    server, port = start_redis(procs, rundir, usmc=False)
    value = h.random_bytes(100 * 1024, seed=2)
    env = rundir.env(debug=True)
    p = procs.run("redis-cli-set", ["redis-cli", "-p", port, "-x", "SET", "blob"], env,
                  input_bytes=value)
    assert p.stdout() == b"OK\n"
    p = procs.run("redis-cli-get", ["redis-cli", "-p", port, "GET", "blob"], env)
    assert p.stdout() == value + b"\n"
    assert b"TCP (peer_not_usmc" in p.stderr(), p.diag()
    st = rundir.settle(fallback_pred(2))
    assert_fallback(st, 2)

    p = procs.run("redis-benchmark", ["redis-benchmark", "-h", "127.0.0.1", "-p", port,
                                      "-t", "set,get", "-d", 1024, "-c", 5, "-n", 2000, "-q"],
                  rundir.env(), timeout=90)
    assert set(parse_benchmark(p.text())) == {"SET", "GET"}, p.diag()
    # 5 connections per test plus the config probe, all counted client side only.
    st = rundir.settle(fallback_pred(2 + 10))
    assert_fallback(st, 2 + 10, exact=False)


@pytest.mark.timeout(120, method="signal")
def test_usmc_curl_to_plain_nginx(rundir, procs, tmp_path, small_www):
    root, sha = small_www
    server, port = start_nginx(procs, rundir, tmp_path, root, "on", usmc=False)
    out = tmp_path / "file.out"
    procs.run("curl", ["curl", "-sS", "--fail", "-o", out,
                       "http://127.0.0.1:%d/file.bin" % port], rundir.env(debug=True))
    assert hashlib.sha256(out.read_bytes()).hexdigest() == sha
    st = rundir.settle(fallback_pred(1))
    assert_fallback(st, 1)


# ---------------------------------------------------------------- plain client -> usmc server

@pytest.mark.timeout(120, method="signal")
def test_plain_redis_cli_to_usmc_server(rundir, procs):
    server, port = start_redis(procs, rundir, usmc=True)
    value = h.random_bytes(100 * 1024, seed=3)
    env = rundir.env()
    p = procs.run("redis-cli-set", ["redis-cli", "-p", port, "-x", "SET", "blob"], env,
                  usmc=False, input_bytes=value)
    assert p.stdout() == b"OK\n"
    p = procs.run("redis-cli-get", ["redis-cli", "-p", port, "GET", "blob"], env, usmc=False)
    assert p.stdout() == value + b"\n"
    p = procs.run("redis-cli-mget", ["redis-cli", "-p", port, "MGET", "blob", "nokey"], env,
                  usmc=False)
    assert p.stdout() == value + b"\n\n"
    st = rundir.settle(fallback_pred(3))
    assert_fallback(st, 3, diag=server.diag())


@pytest.mark.timeout(120, method="signal")
@pytest.mark.parametrize("sendfile", ["on", "off"])
def test_plain_curl_to_usmc_nginx(rundir, procs, tmp_path, small_www, sendfile):
    root, sha = small_www
    server, port = start_nginx(procs, rundir, tmp_path, root, sendfile, usmc=True)
    out1, out2 = tmp_path / "file1.out", tmp_path / "file2.out"
    url = "http://127.0.0.1:%d/file.bin" % port
    procs.run("curl", ["curl", "-sS", "--fail", "-o", out1, url, "-o", out2, url],
              rundir.env(), usmc=False)
    procs.run("curl-close", ["curl", "-sS", "--fail", "-H", "Connection: close", "-o", out1, url],
              rundir.env(), usmc=False)
    assert hashlib.sha256(out1.read_bytes()).hexdigest() == sha
    assert hashlib.sha256(out2.read_bytes()).hexdigest() == sha
    st = rundir.settle(fallback_pred(2))
    assert_fallback(st, 2, diag=server.diag())


# ---------------------------------------------------------------- the plain side's bytes

CLIENT_HELLO = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "s.sendall(b'hello')\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "buf = b''\n"
    "while True:\n"
    "    d = s.recv(100)\n"
    "    if not d: break\n"
    "    buf += d\n"
    "sys.stdout.write(repr(buf))\n"
)


@pytest.mark.timeout(120, method="signal")
def test_plain_server_sees_exact_bytes_from_usmc_client(rundir, procs, scripts, tmp_path):
    rec = tmp_path / "recorded.bin"
    server, port = h.start_server(
        procs, "recorder", lambda p: [h.PY, scripts["recorder"], "127.0.0.1", p, rec, "raw"],
        rundir.env(), usmc=False)
    p = procs.run("client", [h.PY, "-c", CLIENT_HELLO, port], rundir.env(debug=True))
    assert p.text() == "b'ok'", p.diag()
    assert server.wait(10) == 0, server.diag()
    assert rec.read_bytes() == b"hello"
    st = rundir.settle(fallback_pred(1))
    assert_fallback(st, 1, diag=p.diag())


@pytest.mark.timeout(120, method="signal")
def test_plain_server_sees_same_http_request_from_usmc_curl(rundir, procs, scripts, tmp_path):
    """The request a usmc curl sends must equal, byte for byte, the one the
    same curl sends without usmc (no wake message, nothing extra)."""
    recorded = {}
    port = None
    for usmc in (False, True):
        rec = tmp_path / ("recorded-%s.bin" % usmc)
        server, port = h.start_server(
            procs, "recorder", lambda p: [h.PY, scripts["recorder"], "127.0.0.1", p, rec, "http"],
            rundir.env(), usmc=False, port=port)
        p = procs.run("curl", ["curl", "-sS", "--fail", "http://127.0.0.1:%d/some/path" % port],
                      rundir.env(debug=True), usmc=usmc)
        assert p.stdout() == b"ok"
        assert server.wait(10) == 0, server.diag()
        recorded[usmc] = rec.read_bytes()
    assert recorded[False].startswith(b"GET /some/path HTTP/1.1\r\n")
    assert recorded[True] == recorded[False]
    st = rundir.settle(fallback_pred(1))
    assert_fallback(st, 1)


@pytest.mark.timeout(120, method="signal")
def test_plain_client_sees_exact_bytes_from_usmc_server_writing_first(rundir, procs, scripts,
                                                                      tmp_path):
    n = 3 * 1000 * 1000
    server, port = h.start_server(
        procs, "sender", lambda p: [h.PY, scripts["sender_server"], "127.0.0.1", p, n],
        rundir.env(debug=True))
    out = tmp_path / "received.bin"
    procs.run("raw-client", [h.PY, scripts["raw_client"], "127.0.0.1", port, out],
              rundir.env(), usmc=False)
    assert out.read_bytes() == b"HELLO usmc\n" + h.pattern(0, n)
    st = rundir.settle(fallback_pred(1))
    assert_fallback(st, 1, diag=server.diag())


@pytest.mark.timeout(120, method="signal")
def test_plain_client_sees_exact_echo_from_usmc_server(rundir, procs, scripts, tmp_path):
    server, port = h.start_server(
        procs, "echo-server",
        lambda p: [h.PY, scripts["async_echo_server"], "127.0.0.1", p],
        rundir.env(debug=True))
    data = h.random_bytes(2 * 1000 * 1000, seed=9)
    src, out = tmp_path / "send.bin", tmp_path / "received.bin"
    src.write_bytes(data)
    procs.run("raw-client", [h.PY, scripts["raw_client"], "127.0.0.1", port, out, src],
              rundir.env(), usmc=False)
    assert out.read_bytes() == data
    st = rundir.settle(fallback_pred(1))
    assert_fallback(st, 1, diag=server.diag())
