# SPDX-License-Identifier: MIT
"""The "Where the time goes" part of docs/performance.md: per-workload
paragraphs built from the profile runs (perf stat counts, usmc counters) and
the CPU split of the measured runs, plus the fixed explanations (WHY)."""
import statistics

from .common import TRANSPORTS


def pget(prof, placement, wl, t, side, key):
    try:
        return prof[placement][wl][t][side].get(key)
    except (KeyError, TypeError, AttributeError):
        return None


def fnum(v, nd=2):
    if v is None:
        return "?"
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return ("%." + str(nd) + "f") % v


def top_syscalls(prof, placement, wl, t, side, n=4):
    try:
        d = prof[placement][wl][t][side]
    except (KeyError, TypeError):
        return "?"
    items = sorted(((k[4:], v) for k, v in d.items() if k.startswith("sys_") and v >= 0.05),
                   key=lambda kv: -kv[1])[:n]
    if not items:
        return "none that matter"
    return ", ".join("%s %s" % (fnum(v), k) for k, v in items)


def side_summary(prof, placement, wl, t):
    parts = []
    for side in ("client", "server"):
        sc = pget(prof, placement, wl, t, side, "syscalls")
        cs = pget(prof, placement, wl, t, side, "context-switches")
        if sc is None and cs is None:
            continue
        parts.append("%s %s syscalls (%s), %s context switches" % (
            side, fnum(sc), top_syscalls(prof, placement, wl, t, side), fnum(cs)))
    return "; ".join(parts) if parts else "(no profile)"


def usmc_counters(prof, placement, wl):
    try:
        u = prof[placement][wl]["usmc"]["usmc"]
    except (KeyError, TypeError):
        return ""
    return ("usmc counters per operation: %s tx calls, %s rx calls, %s doorbells rung, "
            "%s sleeps, %s spin hits" % (fnum(u.get("tx_calls")), fnum(u.get("rx_calls")),
                                         fnum(u.get("doorbells")), fnum(u.get("sleeps")),
                                         fnum(u.get("spin_hits"))))


def cpu_split(prog, placement, wl, t):
    """Median client and server CPU per operation (us) from the measured runs."""
    try:
        runs = prog["placements"][placement]["workloads"][wl]["runs"]
    except (KeyError, TypeError):
        return None, None
    cs, ss = [], []
    for r in runs:
        if r["transport"] != t or not r["ok"]:
            continue
        info = r["info"]
        items = [info] if "ops" in info else [v for v in info.values() if isinstance(v, dict)]
        ops = sum(i["ops"] for i in items)
        cs.append(sum(i["client_cpu_s"] for i in items) / ops * 1e6)
        ss.append(sum(i["server_cpu_s"] for i in items) / ops * 1e6)
    if not cs:
        return None, None
    return statistics.median(cs), statistics.median(ss)


def where_time_goes(prog, placement):
    """One paragraph per workload: measured costs per operation, both sides,
    what they mean, and the library overheads the counts show."""
    prof = (prog or {}).get("profile") or {}
    pl = (prog or {}).get("placements", {}).get(placement)
    if not pl:
        return []
    out = []
    for name, w in pl["workloads"].items():
        unit = "round trip" if name.startswith("pp") else \
            "message" if name.startswith("tp") else "request"
        if name == "tp64k":
            unit = "64 KB message"
        lines = ["**%s** (%s)." % (name, w["title"])]
        for t in TRANSPORTS:
            c, s = cpu_split(prog, placement, name, t)
            lines.append("%s: CPU per %s client %s µs + server %s µs; per %s: %s." % (
                "TCP" if t == "tcp" else "usmc", unit, fnum(c), fnum(s), unit,
                side_summary(prof, placement, name, t)))
        uc = usmc_counters(prof, placement, name)
        if uc:
            lines.append(uc + ".")
        note = WHY.get(name)
        if note:
            lines.append(note)
        findings = overheads(prog, prof, placement, name, unit)
        if findings:
            lines.append("*Library overheads in these counts:* " + " ".join(findings))
        out.append(" ".join(lines))
    return out


def overheads(prog, prof, placement, name, unit):
    """Sentences about what the usmc side does beyond the application's own
    system calls, each only when the profile shows it (so a regenerated
    document never describes an overhead that a newer library removed)."""
    out = []

    def g(t, side, key):
        return pget(prof, placement, name, t, side, key) or 0.0

    for side in ("client", "server"):
        extra = {k: g("usmc", side, "sys_" + k) - g("tcp", side, "sys_" + k)
                 for k in ("getsockopt", "fcntl", "epoll_ctl", "futex", "sched_yield",
                           "mknodat", "fallocate", "recvfrom", "poll")}
        if extra["getsockopt"] >= 0.2:
            out.append("The %s makes %s `getsockopt` per %s that the program does not: "
                       "the library's own (e.g. `usmc_sock_timeout` reads SO_RCVTIMEO/SO_SNDTIMEO "
                       "whenever a blocking call has to wait, before it spins)." % (
                           side, fnum(extra["getsockopt"]), unit))
        if extra["fcntl"] >= 0.5:
            out.append("%s %s extra `fcntl` per %s (the library's own)." % (
                           side.capitalize(), fnum(extra["fcntl"]), unit))
        if extra["epoll_ctl"] >= 0.5:
            out.append("%s %s more kernel `epoll_ctl` per %s than with TCP (%s vs %s): the "
                       "first `EPOLL_CTL_ADD` of a shared-memory socket becomes two kernel "
                       "calls, one for the TCP socket and one for the doorbell FIFO." % (
                           side.capitalize(), fnum(extra["epoll_ctl"]), unit,
                           fnum(g("usmc", side, "sys_epoll_ctl")),
                           fnum(g("tcp", side, "sys_epoll_ctl"))))
        elif extra["epoll_ctl"] <= -0.5:
            out.append("%s %s fewer kernel `epoll_ctl` per %s than with TCP (%s vs %s): "
                       "`EPOLL_CTL_MOD`, and `EPOLL_CTL_DEL` followed by a new "
                       "`EPOLL_CTL_ADD`, of a shared-memory socket stay in the library "
                       "(a deleted registration is parked with its kernel entries, "
                       "`src/epoll.c`)." % (
                           side.capitalize(), fnum(-extra["epoll_ctl"]), unit,
                           fnum(g("usmc", side, "sys_epoll_ctl")),
                           fnum(g("tcp", side, "sys_epoll_ctl"))))
        if extra["futex"] >= 0.2:
            out.append("%s %s `futex` per %s: after each sleep on the doorbell the library "
                       "wakes possible follower threads (`FUTEX_WAKE`), even in a "
                       "single-threaded program." % (side.capitalize(), fnum(extra["futex"]),
                                                     unit))
        if extra["sched_yield"] >= 0.1:
            out.append("%s %s `sched_yield` per %s: a server that accepted before the "
                       "client's proposal waits for clients in flight (`wait_connecting`: "
                       "20 µs of spinning, then yields)." % (
                           side.capitalize(), fnum(extra["sched_yield"]), unit))
        if extra["mknodat"] >= 0.5 or extra["fallocate"] >= 0.5:
            out.append("%s %s `mknodat` and %s `fallocate` per %s: doorbell FIFOs are "
                       "created (EEXIST when the slot is reused) and ring memory backed "
                       "again for every connection." % (
                           side.capitalize(), fnum(g("usmc", side, "sys_mknodat")),
                           fnum(g("usmc", side, "sys_fallocate")), unit))
    # Doorbells rung for waiters that did not sleep.
    try:
        u = prof[placement][name]["usmc"]["usmc"]
    except (KeyError, TypeError):
        u = {}
    bells = u.get("doorbells") or 0
    cs = g("usmc", "client", "context-switches") + g("usmc", "server", "context-switches")
    if bells >= 0.3 and cs < 0.25 * bells:
        out.append("Doorbells are rung %s times per %s but both sides together switch "
                   "context only %s times: most rings (a `write(2)` each) find a peer that "
                   "armed its doorbell and then did not sleep." % (fnum(bells), unit,
                                                                 fnum(cs)))
    sleeps = u.get("sleeps") or 0
    if name.startswith("pp") and sleeps > 2.2:
        out.append("%s sleeps per round trip (two would do: one per message)." % fnum(sleeps))
    # Busy-poll on one CPU.
    if name == "pp14-busy":
        try:
            wl = prog["placements"][placement]["workloads"]
            busy = wl["pp14-busy"]["metrics"]["lat_p50_us"]["usmc"]["median"]
            plain = wl["pp14"]["metrics"]["lat_p50_us"]["usmc"]["median"]
            cpus = prog["placements"][placement]["cpus"]
        except (KeyError, TypeError):
            busy = plain = None
        if busy and plain and busy > 2 * plain and cpus[0] == cpus[1]:
            out.append("With both ends on one CPU busy-poll makes usmc %.1f× slower than "
                       "its default mode (p50 %s vs %s µs): the busy-poll budget is spent "
                       "even when the peer, which must run on this CPU to answer, is "
                       "waiting for it (the same-CPU rule applies to the adaptive spin "
                       "only)." % (busy / plain, fnum(busy), fnum(plain)))
    return out


# Fixed explanations per workload (what the numbers above mean); the numbers
# themselves always come from the JSON.
WHY = {
    "pp14": "With TCP every message is a `sendto` plus a blocking `recvfrom`: each "
            "round trip crosses the loopback stack twice and wakes a sleeping reader "
            "twice.  With usmc a message is a copy into the peer's ring and a cursor "
            "store; the waiting side first spins (adaptive, up to USMC_SPIN_US) on the "
            "producer cursor, so with the peer on another CPU it sees the message as a "
            "cache-line transfer, without entering the kernel for the data.  With both "
            "on one CPU spinning is pointless (the peer needs the CPU): the waiting side "
            "hands the CPU over instead (`sched_yield`, up to four times, a look after "
            "each), the peer answers without a doorbell and hands it back, so a message "
            "costs one system call and one context switch, without the loopback stack.",
    "pp14-busy": "Busy-poll (USMC_BUSY_POLL) spins for a fixed time before sleeping "
                 "instead of the adaptive budget.  With the peer on another CPU the "
                 "adaptive spin already catches every message, so both modes should "
                 "give the same latency.",
    "tp64k": "TCP copies each 64 KB write into socket buffers and the receiver copies it "
             "out, with wake-ups whenever the receive queue runs empty or the send buffer "
             "full.  usmc copies straight into the peer's 4 MB ring and the receiver "
             "copies out; a side waits (and, after its spin, sleeps) only when the ring is "
             "empty or full.  sockperf's own figure is the sender's rate; the rate above "
             "is the receiver's (`sockperf sr -A`).",
    "tp100": "sockperf tp with 100 B messages, Nagle on.  With TCP the sender makes one "
             "`sendto` per message and the kernel coalesces them, so the receiver gets "
             "many messages per `recvfrom`.  With usmc a `send` is a copy into the ring "
             "and a cursor store without a system call; the receiver takes whatever the "
             "ring holds per `recv` (rx calls per message below one).",
    "redis-c50": "redis-benchmark and redis-server are single-threaded `epoll` loops; "
                 "with TCP the client (one CPU) is the bottleneck, so its CPU per request "
                 "decides the rate.  redis-benchmark adds and removes its read and write "
                 "interest around every request (`EPOLL_CTL_DEL` then `EPOLL_CTL_ADD`, "
                 "five `epoll_ctl` per request with TCP).  With usmc the reads and writes "
                 "go through the rings, and those `epoll_ctl` calls never reach the "
                 "kernel: a deleted registration is parked, its kernel entries kept, and "
                 "revived by the next ADD.  What is left per request is redis itself, the "
                 "copies, and a doorbell whenever the other side went to sleep in "
                 "`epoll_wait`.",
    "redis-c200": "As redis-c50 with 200 connections: more ready connections per "
                  "`epoll_wait` on the server, the same per-request work on the client.",
    "redis-c50-P16": "16 requests per write: the event-loop costs are shared by 16 "
                     "requests; what remains per request is mostly redis itself and "
                     "copying 1 KB values.",
    "nginx-ka": "wrk (one thread, `epoll`) against nginx workers (`epoll`, `sendfile`); "
                "nginx opens and closes the file per request (no open_file_cache).  With "
                "usmc the request and response bytes move through the rings and "
                "`sendfile` becomes a read from the file into the ring; `epoll_wait` "
                "and the doorbells remain in the kernel, `epoll_ctl` changes of "
                "shared-memory sockets do not.",
    "nginx-close": "One connection per request: socket, connect, accept4, close and the "
                   "TCP handshake dominate, and usmc keeps all of them (the TCP connection "
                   "stays open beside the rings); on top of that come the CLC proposal "
                   "and answer in shared memory (a wake message on TCP only when the server "
                   "accepted before the proposal), link-group slot reuse and "
                   "the epoll translation of a new socket.",
}
