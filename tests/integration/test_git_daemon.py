"""git daemon (git://) under usmc: clients and the daemon both usmc, against
the same run over plain TCP.

git daemon forks and execs `git upload-pack` (and `git receive-pack` for
pushes) with the connection on descriptors 0 and 1; upload-pack writes its
ref advertisement with stdio (printf into stdout), which glibc sends with
its own internal write, past any LD_PRELOAD wrapper.  On shared memory
those bytes reached the client as TCP bytes on a shared-memory connection
and every git:// client was reset (protocol_violation).  A connection that
stdio may use is TCP (`stdio`, src/stdstream.c): each one starts on shared
memory, moves at the daemon's dup2 onto descriptor 0, and every clone,
fetch and push must give exactly what plain TCP gives."""
import os
import subprocess

import pytest

from . import helpers as h

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t",
       "-c", "init.defaultBranch=master", "-c", "protocol.version=2"]


def daemon_argv():
    """git-daemon itself: `git daemon` would run it as a child process,
    and readiness looks for the listening socket in the process it
    started."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True,
                               timeout=30).stdout.decode().strip()
    return [exec_path + "/git-daemon"]


# Fixed dates: both runs make the same commits, so the same hashes.
DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def git(*args, cwd=None):
    r = subprocess.run(GIT + list(args), cwd=cwd, capture_output=True, timeout=60,
                       env=dict(os.environ, **DATES))
    assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))
    return r.stdout


def make_repo(root):
    """A bare repository with three commits of pseudo-random files."""
    srv = root / "srv" / "repo.git"
    work = root / "seed"
    git("init", "-q", "--bare", str(srv))
    git("init", "-q", str(work))
    for c in range(3):
        for i in range(6):
            (work / ("f%d" % i)).write_bytes(h.random_bytes(30000 + 1000 * i, c * 10 + i))
        git("add", ".", cwd=work)
        git("commit", "-qm", "commit %d" % c, cwd=work)
    git("push", "-q", str(srv), "master", cwd=work)
    return srv, work


def run_clients(procs, env, usmc, port, root, tag):
    """ls-remote, clone, push a commit, fetch it back: what each printed and
    the resulting commit, for comparison between the two runs."""
    url = "git://127.0.0.1:%d/repo.git" % port
    out = {}
    p = procs.run("ls-remote-" + tag, GIT + ["ls-remote", url], env, usmc=usmc, timeout=60)
    out["ls-remote"] = p.stdout()
    clone = root / ("clone-" + tag)
    procs.run("clone-" + tag, GIT + ["clone", "-q", url, str(clone)], env, usmc=usmc,
              timeout=60)
    out["clone"] = git("rev-parse", "HEAD^{tree}", cwd=clone)
    (clone / "pushed").write_bytes(h.random_bytes(50000, 99))
    git("add", "pushed", cwd=clone)
    git("commit", "-qm", "pushed over git://", cwd=clone)
    procs.run("push-" + tag, GIT + ["push", "-q", "origin", "master"], env, usmc=usmc,
              timeout=60, cwd=str(clone))
    again = root / ("again-" + tag)
    procs.run("clone2-" + tag, GIT + ["clone", "-q", url, str(again)], env, usmc=usmc,
              timeout=60)
    out["after-push"] = git("rev-parse", "HEAD^{tree}", cwd=again)
    out["file"] = (again / "pushed").read_bytes()
    return out


@pytest.mark.timeout(180, method="signal")
def test_git_daemon(rundir, procs, tmp_path):
    results = {}
    for usmc in (False, True):
        tag = "usmc" if usmc else "plain"
        root = tmp_path / tag
        srv, _ = make_repo(root)
        env = rundir.env(debug=usmc)
        daemon, port = h.start_server(
            procs, "git-daemon-" + tag,
            lambda p: daemon_argv() + ["--reuseaddr", "--export-all", "--enable=receive-pack",
                             "--base-path=%s" % (root / "srv"), "--port=%s" % p,
                             "--listen=127.0.0.1"],
            env, usmc=usmc)
        results[tag] = run_clients(procs, rundir.env(), usmc, port, root, tag)
        daemon.stop()
    plain, accel = results["plain"], results["usmc"]
    assert accel["ls-remote"] == plain["ls-remote"] and b"refs/heads/master" in plain["ls-remote"]
    assert accel["clone"] == plain["clone"]
    assert accel["after-push"] == plain["after-push"]
    assert accel["file"] == plain["file"] == h.random_bytes(50000, 99)
    # Four connections (ls-remote, clone, push, clone): each moves to TCP
    # when the daemon's child puts it on stdin/stdout (the client follows:
    # peer_moved_to_tcp), or is declined there if the client's proposal
    # was not answered yet (the client learns stdio too).
    # (On a device without sharing, the daemon's fork moved it first.)
    st = rundir.settle(lambda s: s["tcp_conns"] >= 8)
    fb, why = st["tcp_fallback"], h.child_reason("stdio")
    assert set(fb) <= {why, "peer_moved_to_tcp"}, h.fmt_stat(st)
    assert st["tcp_conns"] == 8 and fb.get(why, 0) >= 4, h.fmt_stat(st)
    assert fb.get(why, 0) + fb.get("peer_moved_to_tcp", 0) == 8, h.fmt_stat(st)
    assert st["aborts"] == {} and st["handshake_errors"] == 0, h.fmt_stat(st)
