"""redis-server and its own clients (redis-benchmark, redis-cli), both ends
under `usmc run`: every connection must go through shared memory and the
data must come back byte for byte."""
import re
import time

import pytest

from . import helpers as h


def start_redis(procs, rundir, usmc=True, extra=()):
    env = rundir.env(debug=usmc)
    return h.start_server(
        procs, "redis-server",
        lambda p: ["redis-server", "--save", "", "--appendonly", "no", "--port", p,
                   "--bind", "127.0.0.1", *extra],
        env, usmc=usmc)


# A correct run takes about a second; the limit only keeps a stalled
# benchmark (no reply ever read) from holding the suite.
BENCH_LIMIT_S = 30


def parse_benchmark(text):
    """redis-benchmark -q: progress lines end in \\r, results in \\n."""
    res = {}
    for line in re.split(r"[\r\n]", text):
        m = re.match(r"^\s*([A-Z_]+): ([\d.]+) requests per second", line)
        if m:
            res[m.group(1)] = float(m.group(2))
    return res


def redis_cli(procs, rundir, port, *args, usmc=True, input_bytes=None, name="redis-cli"):
    p = procs.run(name, ["redis-cli", "-p", port, *args], rundir.env(debug=True),
                  usmc=usmc, input_bytes=input_bytes, timeout=30)
    return p.stdout()


@pytest.mark.timeout(120, method="signal")
def test_redis_benchmark_set_get(rundir, procs):
    server, port = start_redis(procs, rundir)
    p = procs.run("redis-benchmark", ["redis-benchmark", "-h", "127.0.0.1", "-p", port,
                                      "-t", "set,get", "-d", 1024, "-c", 50, "-n", 20000, "-q"],
                  rundir.env(), timeout=BENCH_LIMIT_S)
    res = parse_benchmark(p.text())
    assert set(res) == {"SET", "GET"}, p.diag()
    assert all(v > 0 for v in res.values()), p.diag()
    assert "error" not in p.text().lower(), p.diag()
    # 50 connections per test plus the one that reads the server's config.
    st = rundir.settle(h.accel_pred(100))
    h.assert_accelerated(st, min_clients=100, diag=server.diag())
    assert st["tx_bytes"] >= 20000 * 1024, h.fmt_stat(st)


@pytest.mark.timeout(120, method="signal")
def test_redis_benchmark_pipelined(rundir, procs):
    server, port = start_redis(procs, rundir)
    p = procs.run("redis-benchmark", ["redis-benchmark", "-h", "127.0.0.1", "-p", port,
                                      "-t", "set,get", "-d", 1024, "-c", 50, "-n", 20000,
                                      "-P", 16, "-q"],
                  rundir.env(), timeout=BENCH_LIMIT_S)
    res = parse_benchmark(p.text())
    assert set(res) == {"SET", "GET"}, p.diag()
    assert "error" not in p.text().lower(), p.diag()
    st = rundir.settle(h.accel_pred(100))
    h.assert_accelerated(st, min_clients=100, diag=server.diag())


@pytest.mark.timeout(120, method="signal")
def test_redis_cli_data_integrity(rundir, procs):
    server, port = start_redis(procs, rundir)
    value = h.random_bytes(100 * 1024, seed=1)
    assert redis_cli(procs, rundir, port, "-x", "SET", "blob", input_bytes=value) == b"OK\n"
    got = redis_cli(procs, rundir, port, "GET", "blob")
    assert got[:-1] == value and got[-1:] == b"\n", "GET returned %d bytes" % len(got)
    assert redis_cli(procs, rundir, port, "STRLEN", "blob") == b"%d\n" % len(value)

    pairs = [("key:%d" % i, h.random_bytes(48, seed=100 + i).hex()) for i in range(64)]
    args = [x for kv in pairs for x in kv]
    assert redis_cli(procs, rundir, port, "MSET", *args) == b"OK\n"
    got = redis_cli(procs, rundir, port, "MGET", *[k for k, _ in pairs])
    assert got.decode().split("\n")[:-1] == [v for _, v in pairs]

    # Five redis-cli invocations, one connection each.
    st = rundir.settle(h.accel_pred(5))
    h.assert_accelerated(st, clients=5, diag=server.diag())


@pytest.mark.timeout(120, method="signal")
def test_redis_replication(rundir, procs, tmp_path):
    """A replica (a redis-server that connects to its master) under usmc:
    a diskless full sync of 20000 keys, then the live command stream; the
    replica's copy must match, and the replication link is on shared
    memory like every client."""
    master, mport = start_redis(procs, rundir, extra=("--repl-diskless-sync", "yes",
                                                      "--repl-diskless-sync-delay", "0"))
    lines = b"".join(b"SET key:%d %s\n" % (i, h.random_bytes(40, seed=i).hex().encode())
                     for i in range(20000))
    out = redis_cli(procs, rundir, mport, "--pipe", input_bytes=lines, name="fill")
    assert b"errors: 0, replies: 20000" in out, out
    env = rundir.env(debug=True)
    replica, rport = h.start_server(
        procs, "redis-replica",
        lambda p: ["redis-server", "--save", "", "--appendonly", "no", "--port", p,
                   "--bind", "127.0.0.1", "--dir", str(tmp_path),
                   "--replicaof", "127.0.0.1", mport],
        env)
    more = b"".join(b"SET live:%d %d\n" % (i, i * i) for i in range(2000))
    out = redis_cli(procs, rundir, mport, "--pipe", input_bytes=more, name="live")
    assert b"errors: 0, replies: 2000" in out, out
    # The replica applies the stream asynchronously: wait for all of it.
    deadline = time.monotonic() + 30
    while (redis_cli(procs, rundir, rport, "DBSIZE", name="dbsize") != b"22000\n" and
           time.monotonic() < deadline):
        time.sleep(0.1)
    assert redis_cli(procs, rundir, rport, "DBSIZE") == b"22000\n"
    for i in (0, 12345, 19999):
        assert (redis_cli(procs, rundir, rport, "GET", "key:%d" % i) ==
                h.random_bytes(40, seed=i).hex().encode() + b"\n")
    assert redis_cli(procs, rundir, rport, "GET", "live:1999") == b"%d\n" % (1999 * 1999)
    info = redis_cli(procs, rundir, rport, "INFO", "replication").decode()
    assert "master_link_status:up" in info, info
    # fill, live, the DBSIZE polls, 3 GETs, GET, INFO, plus the replica.
    st = rundir.settle(h.accel_pred(8))
    h.assert_accelerated(st, min_clients=8, diag=master.diag() + replica.diag())
