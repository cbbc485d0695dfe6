"""Dovecot IMAP under `usmc run`, with its default process limits.

Dovecot runs each imap-login and imap process under `vsz_limit` (256 MiB by
default: RLIMIT_AS).  usmc keeps its link groups within an eighth of a
process's limit, and a default link group reserves 512 MiB of address
space, so under the default configuration every connection went to TCP
(limit_reached).  Now the limited process that accepts publishes what fits
in its listener's index (lgr.c usmc_lgr_fit), and clients make link groups
of fewer slots for it: only a connection made before any login process
said so goes to TCP.  After login, imap-login hands the connection to an
imap process that the master starts for it, over a UNIX connection nobody
accepted yet: the connection stays on shared memory only because the
master announced its listener (scm_peer.c, found by the client in its
queue); it used to move to TCP there (handed_over), so the mail itself
crossed TCP.

Dovecot clears its children's environment: `import_environment` must name
LD_PRELOAD and USMC_RUNDIR (docs/usage.md).  Everything runs as dovenull,
one user, as a test's processes share one runtime directory.  The client
(python imaplib, under usmc) logs in, appends a message, fetches it back
byte for byte and logs out, on several connections one after another."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from . import helpers as h

DOVECOT = "/usr/sbin/dovecot"

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")

CONF = """\
base_dir = {root}/base
state_dir = {root}/state
instance_name = usmc-test-{port}
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
log_path = {root}/dovecot.log
default_internal_user = dovenull
default_internal_group = dovenull
default_login_user = dovenull
first_valid_uid = {uid}
mail_location = maildir:{root}/mail/%u
import_environment = TZ LD_PRELOAD USMC_RUNDIR USMC_DEBUG
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = static
  args = uid=dovenull gid=dovenull home={root}/mail/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service pop3-login {{
  chroot =
}}
service anvil {{
  chroot =
}}
"""

CLIENT = r'''
import imaplib, sys

port, conns = int(sys.argv[1]), int(sys.argv[2])
for i in range(conns):
    m = imaplib.IMAP4("127.0.0.1", port)
    m.login("tester", "secret")
    m.select("INBOX")
    body = b"".join(b"line %06d of message %d: usmc under dovecot\r\n" % (k, i)
                    for k in range(2000))
    msg = b"From: a@b\r\nSubject: %d\r\n\r\n" % i + body
    typ, data = m.append("INBOX", None, None, msg)
    assert typ == "OK", (typ, data)
    typ, data = m.search(None, "SUBJECT", str(i))
    n = data[0].split()[-1]
    typ, data = m.fetch(n, "(BODY.PEEK[])")
    got = data[0][1]
    if got != msg:
        sys.exit("connection %d: fetched %d bytes, appended %d, differ" % (i, len(got), len(msg)))
    m.logout()
    print("conn %d ok %d bytes" % (i, len(msg)), flush=True)
print("OK", flush=True)
'''


def dovenull():
    return h.user_ids("dovenull")


def as_dovenull(argv):
    return h.as_user("dovenull", argv)


def stat_as(rundir, uid, gid):
    """usmc stat --json of the runtime directory dovenull owns."""
    return h.stat_as_user("dovenull", rundir)


@pytest.fixture
def home():
    """Configuration, mail and logs where dovenull reaches them."""
    root = Path(tempfile.mkdtemp(prefix="usmc-dovecot-", dir="/tmp"))
    uid, gid = dovenull()
    for d in ("base", "state", "mail"):
        (root / d).mkdir()
    (root / "passwd").write_text("tester:{PLAIN}secret:%d:%d::%s/mail/tester\n" % (
        uid, gid, root))
    (root / "client.py").write_text(CLIENT)
    for p in [root, *root.rglob("*")]:
        os.chown(p, uid, gid)
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(180, method="signal")
def test_dovecot_default_limits(rundir, procs, home):
    if h.UNSHARED:
        # As t_aslimit's budget checks (tests/test_unit.py COPY_SKIP): the
        # copy device maps each link group twice, which lgr.c counts
        # against imap-login's address-space limit but does not size link
        # groups for, so every attach is refused (limit_reached).
        pytest.skip("the copy device's second mapping is not sized for an address-space limit")
    uid, gid = dovenull()
    os.chown(rundir.path, uid, gid)

    def argv(port):
        conf = home / ("dovecot-%d.conf" % port)
        conf.write_text(CONF.format(root=home, port=port, uid=uid))
        os.chown(conf, uid, gid)
        return as_dovenull([DOVECOT, "-F", "-c", conf])

    server, port = h.start_server(procs, "dovecot", argv, rundir.env(debug=True))
    conns = 5
    p = procs.run("imap-client", as_dovenull([h.PY, home / "client.py", port, conns]),
                  rundir.env(), timeout=120)
    out = p.text()
    log = (home / "dovecot.log").read_text(errors="replace") if (home / "dovecot.log").exists() else ""
    diag = out + "\n" + p.diag() + "\n--- dovecot.log ---\n" + log[-4000:] + "\n" + server.diag()
    assert out.rstrip().endswith("OK"), diag
    assert "Out of memory" not in log and "Fatal" not in log, diag
    st = rundir.settle(lambda s: s["smc_client"] >= conns - 1 and s["smc_server"] >= conns - 1,
                       stat=lambda: stat_as(rundir, uid, gid))
    msg = h.fmt_stat(st) + "\n" + diag
    # At most the first connection, made before any limited process could
    # say what fits: TCP, limit_reached (counted by both ends).  Every other
    # one on shared memory from its first byte.
    assert st["smc_client"] >= conns - 1, msg
    assert st["tcp_fallback"].get("limit_reached", 0) <= 2, msg
    assert st["handshake_errors"] == 0, msg
    # After login imap-login passes the connection to an imap process the
    # master starts for it, over a UNIX connection nobody accepted yet: the
    # socket goes along on shared memory (scm_peer.c: a listener only usmc
    # processes hold), and the mail itself crosses shared memory both ways.
    assert set(st["tcp_fallback"]) <= {"limit_reached"}, msg
    assert st["tx_bytes"] >= (conns - 1) * 2 * 90000, msg
