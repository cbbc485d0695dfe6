"""Containers from kernel primitives (issue 20): two "containers", each in
its own network, mount, PID, IPC and user namespace (root inside mapped to
an unprivileged host uid, as rootless runtimes do), joined by a veth pair,
sharing nothing but the runtime directory (bind-mounted at /mnt; /dev/shm
and /tmp private).  Same host uid on both sides: accelerated.  Different
host uids: refused, plain TCP, every byte intact.  No shared directory:
not accelerated.  docs/containers.md is the recipe for real runtimes."""
import os
import random
import re
import shutil
import subprocess
import tempfile

import pytest

from . import helpers as h
from .test_netns import veth_pair

UID_A, UID_B = 64201, 64202      # unprivileged host uids, no account needed


def can_run():
    if os.geteuid() != 0:
        return "needs root (network namespaces, uid switching)"
    for tool in ("ip", "unshare", "setpriv"):
        if not shutil.which(tool):
            return "%s not installed" % tool
    r = subprocess.run(["setpriv", "--reuid", str(UID_A), "--regid", str(UID_A),
                        "--clear-groups", "unshare", "--user", "--map-root-user", "--mount",
                        "--pid", "--ipc", "--fork", "--mount-proc", "true"],
                       capture_output=True, timeout=30)
    if r.returncode:
        return "user namespaces not available: " + r.stderr.decode(errors="replace")
    return None


@pytest.fixture
def world(tmp_path):
    why = can_run()
    if why:
        pytest.skip(why)
    # Scripts readable by the unprivileged uids; directories to share.
    pub = tempfile.mkdtemp(prefix="usmc-ct-", dir="/var/tmp")   # /tmp is private inside
    shared = tempfile.mkdtemp(prefix="usmc-ct-rundir-", dir="/dev/shm")
    try:
        os.chmod(pub, 0o755)
        h.write_scripts(pub)
        for f in os.listdir(pub):
            os.chmod(os.path.join(pub, f), 0o644)
        with veth_pair("ct", "c", "10.232") as pair:
            yield {"a": pair["a"], "b": pair["b"], "addr_a": pair["addr_a"], "pub": pub,
                   "shared": shared}
    finally:
        shutil.rmtree(pub, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)


def container(netns, uid, shared, argv):
    """argv run as root of a fresh user namespace mapped to host uid, in
    netns, with new mount, PID and IPC namespaces: private /dev/shm and
    /tmp, the runtime directory shared at /mnt (or a private one)."""
    mnt = 'mount --bind "$0" /mnt' if shared else "mount -t tmpfs tmpfs /mnt"
    # A private /tmp, unless the checkout (usmc, the library) lives there.
    tmp = "" if str(h.USMC.resolve()).startswith("/tmp/") else " && mount -t tmpfs tmpfs /tmp"
    setup = (mnt + " && mount -t tmpfs tmpfs /dev/shm" + tmp + " && "
             'test "$(id -u)" = 0 && exec "$@"')
    return ["ip", "netns", "exec", netns, "setpriv", "--reuid", str(uid), "--regid", str(uid),
            "--clear-groups", "unshare", "--user", "--map-root-user", "--mount", "--pid", "--ipc",
            "--fork", "--kill-child", "--mount-proc", "sh", "-c", setup, shared or "-"] + \
        [str(x) for x in argv]


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("USMC_") and k != "LD_PRELOAD"}
    e.update(USMC_RUNDIR="/mnt", USMC_DEBUG="1")
    return e


def exchange(procs, w, uid_a, uid_b, shared, tag):
    """Echo server in container A, client in container B over the veth."""
    port = 18000 + random.randint(0, 999)
    server = procs.start("server-" + tag, container(w["a"], uid_a, shared and w["shared"], [
        h.USMC, "run", "--", h.PY, os.path.join(w["pub"], "async_echo_server.py"), "0.0.0.0",
        port]), env(), usmc=False)
    h.wait_line(server, "listening", timeout=30)
    client = procs.run("client-" + tag, container(w["b"], uid_b, shared and w["shared"], [
        h.USMC, "run", "--", h.PY, os.path.join(w["pub"], "async_echo_client.py"), w["addr_a"],
        port, 3, 40, 131072, 5]), env(), usmc=False, timeout=90)
    assert client.text().startswith("OK conns=3 "), client.diag() + server.diag()
    server.stop()
    return client.stderr().decode(errors="replace"), server


def host_stat(w, uid):
    """`usmc stat --json` as the host uid the containers map to."""
    import json
    r = subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups",
                        str(h.USMC), "stat", "--json"], capture_output=True, timeout=30,
                       env=dict(env(), USMC_RUNDIR=w["shared"]))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.timeout(240, method="signal")
def test_containers_same_user_accelerated(world, procs):
    w = world
    os.chown(w["shared"], UID_A, UID_A)
    os.chmod(w["shared"], 0o700)
    err, server = exchange(procs, w, UID_A, UID_A, True, "same")
    assert len(re.findall(r"connect \S+ -> %s:\d+: SMC-D" % re.escape(w["addr_a"]), err)) == 3, err
    assert re.search(rb"accept \S+ <- \S+: SMC-D", server.stderr()), server.diag()
    st = host_stat(w, UID_A)
    h.assert_accelerated(st, clients=3)
    # Everything in the shared directory belongs to the mapped host uid.
    for root, dirs, files in os.walk(w["shared"]):
        for n in dirs + files:
            assert os.lstat(os.path.join(root, n)).st_uid == UID_A, n


@pytest.mark.timeout(240, method="signal")
def test_containers_different_users_refused(world, procs):
    """Root in B is another host uid: A's objects are owned by an unmapped
    uid there (nobody), which usmc never trusts.  Plain TCP, intact."""
    w = world
    os.chown(w["shared"], UID_A, UID_A)
    os.chmod(w["shared"], 0o1777)
    err, server = exchange(procs, w, UID_A, UID_B, True, "other")
    reasons = re.findall(r"connect \S+ -> %s:\d+: (\S+) \((\w+)" % re.escape(w["addr_a"]), err)
    assert len(reasons) == 3 and {r for _, r in reasons} <= {"rundir_unusable", "permission"} \
        and all(m == "TCP" for m, _ in reasons), err
    assert h.SMCD_LOG not in server.stderr(), server.diag()
    st = host_stat(w, UID_A)
    assert st["smc_conns"] == 0 and st["tcp_conns"] >= 3, st


@pytest.mark.timeout(240, method="signal")
def test_containers_without_shared_directory(world, procs):
    w = world
    err, server = exchange(procs, w, UID_A, UID_A, False, "private")
    reasons = re.findall(r"connect \S+ -> %s:\d+: TCP \((\w+)" % re.escape(w["addr_a"]), err)
    assert reasons == ["peer_not_usmc"] * 3, err
    assert os.listdir(w["shared"]) == [], "nothing may reach the host's directory"
