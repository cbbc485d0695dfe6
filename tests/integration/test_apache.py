"""Apache httpd (event MPM: a listener thread, worker threads, keep-alive
connections handed back and forth between them) under `usmc run`, driven by
curl and wrk.

Apache sets TCP_DEFER_ACCEPT on its listeners (`AcceptFilter http data`, the
default on Linux): the kernel completes accept() only once the client sent
data on TCP.  A proposed usmc client sends its request through the ring, so
apache never accepted it and every client hung (curl: 0 bytes, wrk: 0
requests).  A listener with the option now makes its clients send the CLC
wake message always (clc.h `wake_always`); test_tcp_options.py shows it without
apache.

Apache started as root switches its children to `User www-data`; those
cannot open root's runtime directory, decline with `permission`, and the
clients go on over TCP (test_apache_root_user).  Run as one user, server and
clients share memory (test_apache_wrk)."""
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from . import helpers as h
from .test_nginx import parse_wrk

BIG = 2 * 1000 * 1000
MODULES = "/usr/lib/apache2/modules"

pytestmark = pytest.mark.skipif(not os.path.exists(MODULES + "/mod_mpm_event.so"),
                                reason="apache2 not installed")

CONF = """\
ServerRoot {root}
PidFile {root}/httpd.pid
Listen 127.0.0.1:{port}
ServerName localhost
{user}
LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
LoadModule dir_module {mods}/mod_dir.so
TypesConfig /etc/mime.types
ErrorLog {root}/error.log
LogLevel warn
DocumentRoot {root}/www
<Directory {root}/www>
  Require all granted
</Directory>
StartServers 1
ServerLimit 2
ThreadsPerChild 32
MaxRequestWorkers 64
MaxKeepAliveRequests 0
KeepAlive On
"""


def www_data():
    pw = pwd.getpwnam("www-data")
    return pw.pw_uid, pw.pw_gid


def as_user(argv, uid, gid):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups", *argv]


@pytest.fixture
def site():
    """The site, pid file and logs, where www-data can reach them (pytest's
    temporary directories are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="usmc-httpd-", dir="/tmp"))
    (root / "www").mkdir()
    (root / "www" / "big.bin").write_bytes(h.random_bytes(BIG, seed=21))
    (root / "www" / "index.html").write_bytes(b"<html>usmc under apache</html>\n" * 10)
    uid, gid = www_data()
    os.chmod(root, 0o755)
    os.chown(root, uid, gid)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def start_apache(procs, rundir, site, user_line, prefix=()):
    def argv(port):
        conf = site / ("httpd-%d.conf" % port)
        conf.write_text(CONF.format(root=site, port=port, mods=MODULES, user=user_line))
        return [*prefix, "apache2", "-D", "FOREGROUND", "-f", conf]
    return h.start_server(procs, "apache2", argv, rundir.env(debug=True))


def stat_as(rundir, uid, gid):
    """usmc stat --json of a runtime directory another user owns."""
    r = subprocess.run(as_user([str(h.USMC), "stat", "--json"], uid, gid), env=rundir.env(),
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return json.loads(r.stdout)


@pytest.mark.timeout(120, method="signal")
def test_apache_root_user(rundir, procs, tmp_path, site):
    """Started as root with `User www-data` (the usual set-up): the children
    cannot use root's runtime directory; each connection is declined
    (permission) and goes on over TCP, byte-exact, never hung."""
    apache, port = start_apache(procs, rundir, site, "User www-data\nGroup www-data")
    for i, name in enumerate(("index.html", "big.bin", "index.html")):
        out = tmp_path / ("out-%d" % i)
        procs.run("curl", ["curl", "-sS", "--fail", "-m", "30", "-o", out,
                           "http://127.0.0.1:%d/%s" % (port, name)], rundir.env(), timeout=60)
        assert out.read_bytes() == (site / "www" / name).read_bytes(), apache.diag()
    st = rundir.settle(lambda s: s["tcp_fallback"].get("permission", 0) >= 3)
    assert st["tcp_fallback"].get("permission", 0) >= 3, h.fmt_stat(st) + apache.diag()
    assert st["smc_server"] == 0, h.fmt_stat(st)
    # A decision of the policy, counted as such and not as an error.
    assert st["handshake_errors"] == 0, h.fmt_stat(st)
    assert apache.alive(), apache.diag()


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("close", [False, True], ids=["keepalive", "close"])
def test_apache_wrk(rundir, procs, site, close):
    """Apache and its clients as one user (www-data): every connection on
    shared memory, wrk without errors, a large file byte-exact after the
    load."""
    uid, gid = www_data()
    os.chown(rundir.path, uid, gid)
    apache, port = start_apache(procs, rundir, site, "", prefix=as_user([], uid, gid))
    extra = ["-H", "Connection: close"] if close else []
    p = procs.run("wrk", as_user(["wrk", "-t2", "-c16", "-d2s", *extra,
                                  "http://127.0.0.1:%d/index.html" % port], uid, gid),
                  rundir.env(), timeout=60)
    text = p.text()
    n = parse_wrk(text)
    msg = text + "\n" + apache.diag()
    assert n > 0, msg
    assert "Socket errors" not in text, msg
    assert "Non-2xx" not in text, msg
    curl = procs.run("curl", as_user(["curl", "-sS", "--fail", "-m", "30",
                                      "http://127.0.0.1:%d/big.bin" % port], uid, gid),
                     rundir.env(), timeout=60)
    assert curl.stdout() == (site / "www" / "big.bin").read_bytes(), msg
    assert apache.alive(), msg
    # wrk: a probe connection, then 16 (keep-alive) or one per request; curl: one.
    want = 18 if not close else n + 2
    st = rundir.settle(h.accel_pred(want), stat=lambda: stat_as(rundir, uid, gid))
    h.assert_accelerated(st, min_clients=want, diag=msg)
