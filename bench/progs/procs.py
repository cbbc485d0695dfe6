# SPDX-License-Identifier: MIT
"""Processes of bench/programs.py: one process group each (all of them killed
whatever happens), CPU accounting from /proc, /proc helpers, environments.

PROCS is the single registry of every process the script starts; import it
from here (``from progs.procs import PROCS``), never create another Procs."""
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from .common import ANSI, HOST


# --------------------------------------------------------------------------
# Processes: one process group each, all of them killed whatever happens
# --------------------------------------------------------------------------

class Procs:
    """Every process this script starts (own session = own process group).

    A process group is signalled only while its leader is not yet reaped
    (alive, or a zombie we have not collected): the leader's pid then stays
    allocated and cannot be reused, so a signal can never reach someone
    else's processes (pid_max is often 32768).  Exits are detected with
    waitid(WNOWAIT), the group is SIGKILLed while the leader is a zombie,
    and only then is the leader reaped."""

    def __init__(self):
        self.live = {}      # pid -> Popen, not reaped yet

    def popen(self, argv, env, log, cwd=None):
        argv = [str(a) for a in argv]
        with open(str(log) + ".out", "wb") as fo, open(str(log) + ".err", "wb") as fe:
            p = subprocess.Popen(argv, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 start_new_session=True, cwd=cwd)
        p.log = Path(log)
        p.argv = argv
        p.reaped = False
        self.live[p.pid] = p
        return p

    @staticmethod
    def exited(p):
        """True once p has exited (without reaping it)."""
        if p.reaped:
            return True
        try:
            return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def alive(self, p):
        return not self.exited(p)

    def _killpg(self, p, sig):
        if p.reaped:
            return
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _wait_exit(self, p, timeout):
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not self.exited(p):
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        return True

    def _reap(self, p, rusage=False):
        cpu = None
        if not p.reaped:
            try:
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                cpu = ru.ru_utime + ru.ru_stime
            except ChildProcessError:
                pass
            p.reaped = True
        self.live.pop(p.pid, None)
        return cpu

    def stop(self, p, sig=signal.SIGTERM, grace=3.0):
        """Signal the group, give the leader grace seconds, SIGKILL the
        group (children such as nginx workers may outlive the leader), reap."""
        if p.reaped:
            return
        if not self.exited(p):
            self._killpg(p, sig)
            self._wait_exit(p, grace)
        self._killpg(p, signal.SIGKILL)
        self._wait_exit(p, 10)
        self._reap(p)

    def wait_rusage(self, p, timeout):
        """Wait for p with a deadline (SIGKILL of its group after it);
        returns (exit code, user+system CPU seconds of p and its children)."""
        if not self._wait_exit(p, timeout):
            self.stop(p, signal.SIGKILL, 0)
            raise RuntimeError("%s did not finish within %.0f s" % (p.argv[0], timeout))
        self._killpg(p, signal.SIGKILL)      # leftovers of the group
        cpu = self._reap(p)
        return p.returncode, cpu

    def kill_all(self):
        for p in list(self.live.values()):
            self._killpg(p, signal.SIGKILL)
        for p in list(self.live.values()):
            self._wait_exit(p, 10)
            self._reap(p)


PROCS = Procs()


def _on_signal(sig, frame):
    raise KeyboardInterrupt("signal %d" % sig)


def read_text(path, limit=None):
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    if limit:
        data = data[-limit:]
    return ANSI.sub("", data.decode("utf-8", "replace"))


def proc_output(p):
    return read_text(str(p.log) + ".out") + read_text(str(p.log) + ".err")


def group_pids(pgid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = Path("/proc/%s/stat" % d).read_text()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        if int(f[2]) == pgid:
            out.append(int(d))
    return out


TICK = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid):
    """{pid: utime+stime seconds} of every live process of the group."""
    out = {}
    for pid in group_pids(pgid):
        try:
            st = Path("/proc/%d/stat" % pid).read_text()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        out[pid] = (int(f[11]) + int(f[12])) / TICK
    return out


def cpu_delta(before, after):
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def maps_has_usmc(pid):
    try:
        return "libusmc" in Path("/proc/%d/maps" % pid).read_text()
    except OSError:
        return None


def preload_of(p, program, timeout=3.0):
    """Whether libusmc.so is mapped in p once it runs `program` (after the
    taskset / usmc run execs) and the dynamic loader has mapped libc; None
    if p exits before that can be seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and PROCS.alive(p):
        try:
            exe = os.path.basename(os.readlink("/proc/%d/exe" % p.pid))
            maps = Path("/proc/%d/maps" % p.pid).read_text()
        except OSError:
            return None
        if exe == program and "libc.so" in maps:
            return "libusmc" in maps
        time.sleep(0.002)
    return None


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def listening(pgid, port):
    """True if a process of the group owns a socket listening on port."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path("/proc/net/%s" % name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    if not inodes:
        return False
    for pid in group_pids(pgid):
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return True
        except OSError:
            pass
    return False


# --------------------------------------------------------------------------
# Environments and commands
# --------------------------------------------------------------------------

def plain_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("USMC_") and k != "LD_PRELOAD"}
    env["LC_ALL"] = "C"
    if extra:
        env.update(extra)
    return env


def shq(a):
    a = str(a)
    if re.match(r"^[A-Za-z0-9_./:=,@%+-]+$", a):
        return a
    return "'" + a.replace("'", "'\\''") + "'"
