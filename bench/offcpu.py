#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""offcpu.py - where the threads of some processes spend their time, by
sampling /proc, for machines without perf or strace (the lent device).

    bench/offcpu.py --seconds 3 --interval 0.002 PID...
    bench/offcpu.py --seconds 3 --name nginx --name wrk

Every interval, for every thread of the processes (and of their children
found by --name): its state (R running or runnable, S sleeping, D
uninterruptible), and for a thread not running the system call it is in
(/proc/PID/task/TID/syscall) and the kernel function it waits in (wchan).
Printed per process name: the share of samples in each (state, system
call, wchan), the largest first.  A thread that runs shows as R; a thread
blocked on a lock shows the lock's kernel function (futex_wait for a
pthread mutex, rwsem_down_* for an inode or mmap lock).
"""
import argparse
import collections
import os
import sys
import time

# x86-64 numbers of the calls that matter here; others print as numbers.
SYSCALLS = {0: "read", 1: "write", 3: "close", 7: "poll", 9: "mmap", 10: "mprotect", 11: "munmap",
            13: "rt_sigaction", 16: "ioctl", 17: "pread64", 20: "writev", 23: "select",
            24: "sched_yield", 28: "madvise", 32: "dup", 33: "dup2", 40: "sendfile",
            41: "socket", 42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom",
            46: "sendmsg", 47: "recvmsg", 48: "shutdown", 49: "bind", 50: "listen",
            51: "getsockname", 52: "getpeername", 54: "setsockopt", 55: "getsockopt",
            72: "fcntl", 202: "futex", 232: "epoll_wait", 233: "epoll_ctl", 257: "openat",
            259: "mknodat", 262: "newfstatat", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
            285: "fallocate", 288: "accept4", 290: "eventfd2", 291: "epoll_create1",
            292: "dup3", 293: "pipe2", 302: "prlimit64", 319: "memfd_create", 435: "clone3",
            441: "epoll_pwait2"}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def children(pids, names):
    """The given PIDs and every process whose name is in names."""
    out = set(pids)
    if names:
        for d in os.listdir("/proc"):
            if d.isdigit():
                comm = (read("/proc/%s/comm" % d) or "").strip()
                if comm in names:
                    out.add(int(d))
    return out


def sample(pids, hist, comms):
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        comm = comms.get(pid) or (read("/proc/%d/comm" % pid) or "?").strip()
        comms[pid] = comm
        for tid in tids:
            base = "/proc/%d/task/%s/" % (pid, tid)
            st = read(base + "stat")
            if not st:
                continue
            state = st[st.rfind(")") + 2]
            if state == "R":
                key = ("R", "", "")
            else:
                sc = (read(base + "syscall") or "").split()
                name = ""
                if sc and sc[0].lstrip("-").isdigit():
                    n = int(sc[0])
                    name = SYSCALLS.get(n, str(n)) if n >= 0 else "user"
                key = (state, name, (read(base + "wchan") or "").strip())
            hist[comm][key] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pids", nargs="*", type=int)
    ap.add_argument("--name", action="append", default=[], help="also every process named so")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--interval", type=float, default=0.002)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    hist = collections.defaultdict(collections.Counter)
    comms = {}
    end = time.monotonic() + a.seconds
    pids = children(a.pids, a.name)
    n = 0
    while time.monotonic() < end:
        if n % 50 == 0:
            pids = children(a.pids, a.name)
        sample(pids, hist, comms)
        n += 1
        time.sleep(a.interval)
    for comm, h in sorted(hist.items()):
        tot = sum(h.values())
        print("%s: %d thread samples in %d rounds" % (comm, tot, n))
        for (state, sc, wchan), c in h.most_common(a.top):
            print("  %5.1f %%  %s %-12s %s" % (100.0 * c / tot, state, sc, wchan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
