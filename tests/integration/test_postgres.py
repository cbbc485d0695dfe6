"""PostgreSQL under usmc: pgbench against a real postmaster, plain and
under usmc, the same outcome required.

The postmaster forks a backend per connection and each backend closes its
copy of the listening socket at once (issue 14 item 14: that close used
to unregister the listener the postmaster still serves, so after the first
backend every later connection fell back with peer_not_usmc; 1 of 10
connections was accelerated).  Under usmc every pgbench connection must go
through shared memory (counters), and pgbench must process every
transaction, as over plain TCP.

PostgreSQL refuses to run as root: the cluster, the server, pgbench and the
runtime directory belong to the postgres user."""
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from . import helpers as h

PGBIN = Path("/usr/lib/postgresql/15/bin")
CLIENTS, TXNS = 8, 40


def as_pg(pg, argv):
    return ["setpriv", "--reuid=%d" % pg.pw_uid, "--regid=%d" % pg.pw_gid, "--init-groups",
            "--", *[str(a) for a in argv]]


def pg_env(rundir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("USMC_") and k != "LD_PRELOAD"}
    env.update({"USMC_RUNDIR": str(rundir), "HOME": "/tmp", "PGUSER": "postgres",
                "PGDATABASE": "postgres"})
    return env


@pytest.fixture
def pg():
    if not (PGBIN / "postgres").exists():
        pytest.skip("PostgreSQL 15 is not installed")
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user")


@pytest.fixture
def pgdirs(pg):
    """A directory for the cluster and a runtime directory, both the
    postgres user's; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="usmc-pg-", dir="/tmp"))
    rd = Path(tempfile.mkdtemp(prefix="usmc-pg-", dir="/dev/shm"))
    for d in (base, rd):
        os.chown(d, pg.pw_uid, pg.pw_gid)
        d.chmod(0o700)
    yield base, rd
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(rd, ignore_errors=True)


def usmc_stat(pg, rd):
    r = subprocess.run(as_pg(pg, [h.USMC, "stat", "--json"]), env=pg_env(rd),
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return json.loads(r.stdout)


@pytest.mark.timeout(300, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_pgbench(procs, pg, pgdirs, usmc):
    base, rd = pgdirs
    env = pg_env(rd)
    data, sock = base / "data", base / "sock"
    r = subprocess.run(as_pg(pg, [PGBIN / "initdb", "-D", data, "-A", "trust", "-U", "postgres",
                                  "--no-sync"]), env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    sock.mkdir()
    os.chown(sock, pg.pw_uid, pg.pw_gid)
    wrap = [h.USMC, "run", "--"] if usmc else []
    port = h.free_port()
    server = procs.start("postgres", as_pg(pg, wrap + [
        PGBIN / "postgres", "-D", data, "-p", port, "-k", sock,
        "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=40"]),
        env, usmc=False)
    deadline = time.monotonic() + 60
    while True:
        # Over its UNIX socket: no TCP connection of ours to count.
        r = subprocess.run([PGBIN / "pg_isready", "-h", str(sock), "-p", str(port)],
                           capture_output=True, timeout=30)
        if r.returncode == 0:
            break
        assert server.popen.poll() is None and time.monotonic() < deadline, server.diag()
        time.sleep(0.2)
    pgbench = wrap + [PGBIN / "pgbench", "-h", "127.0.0.1", "-p", port]
    procs.run("pgbench-init", as_pg(pg, pgbench + ["-i", "-s", "1", "-q"]), env, usmc=False,
              timeout=120)
    before = usmc_stat(pg, rd) if usmc else None
    run = procs.run("pgbench", as_pg(pg, pgbench + ["-c", CLIENTS, "-j", "2", "-t", TXNS]), env,
                    usmc=False, timeout=180)
    out = run.text()
    m = re.search(r"number of transactions actually processed: (\d+)/(\d+)", out)
    assert m and m.group(1) == m.group(2) == str(CLIENTS * TXNS), out + server.diag()
    assert "number of failed transactions: 0" in out, out
    if usmc:
        # The run's pgbench connections (one per client, plus the one that
        # checks the tables first) all on shared memory, both ends.
        want = before["smc_client"] + CLIENTS + 1
        deadline = time.monotonic() + 10
        st = usmc_stat(pg, rd)
        while st["smc_server"] < want and time.monotonic() < deadline:
            time.sleep(0.1)
            st = usmc_stat(pg, rd)
        h.assert_accelerated(st, clients=want, diag=server.diag(), handed=True)
