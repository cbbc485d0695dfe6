"""Differential conformance: real projects' own network test suites, run
plain and under `usmc run`, outcomes compared test by test.

A suite is a list of test targets of one project and a way to read each
test's outcome.  Both runs start cold: a fresh runtime directory, default
settings, no inherited USMC_* variables.  The usmc run's counters (`usmc
stat --json` on its runtime directory, after every process exited) say how
many TCP endpoints went through shared memory (smc_conns) and how many
stayed TCP and why (tcp_conns, tcp_fallback).

A test whose outcome differs is run again, alone, both ways, up to twice:
a difference that does not repeat is reported as flaky (it differs in one
run only, which plain TCP's own timing-dependent tests also do), one that
repeats every time is a difference.  The verdict of a suite is the list of
repeatable differences.

Used by tests/conformance/run.py (`make conformance`, the whole suites,
results in docs/conformance.md) and tests/integration/test_conformance.py
(the quick subsets, in tests/run).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD = Path(os.environ.get("USMC_TEST_BUILD") or REPO / "build").resolve()
USMC = BUILD / "usmc"
PY = "/usr/bin/python3"


@dataclass
class Suite:
    name: str
    project: str
    kind: str           # "pyunit" (unittest via pyunit.py) or "trial" (Twisted)
    full: list
    quick: list
    timeout: int = 2400  # one whole run, seconds (a loaded 2-CPU machine: twisted took 900+)
    exclude: list = field(default_factory=list)  # test ids containing these are not run


def _tornado_modules():
    try:
        out = subprocess.run([PY, "-c", "import tornado.test.runtests as r; "
                              "print(' '.join(r.TEST_MODULES))"],
                             capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    return out or ["tornado.test.iostream_test"]


SUITES = {
    "cpython": Suite(
        "cpython", "CPython 3.11's own test suite (Debian libpython3.11-testsuite)", "pyunit",
        full=["test.test_asyncio", "test.test_socketserver", "test.test_selectors",
              "test.test_httpservers", "test.test_httplib", "test.test_socket",
              "test.test_ftplib", "test.test_urllib2_localnet", "test.test_xmlrpc"],
        quick=["test.test_socketserver", "test.test_asyncio.test_streams",
               "test.test_asyncio.test_sock_lowlevel", "test.test_asyncio.test_sendfile",
               "test.test_httpservers"],
        # AF_VSOCK: no vsock transport here; the test waits in accept() forever.
        exclude=["VSOCK"]),
    "tornado": Suite(
        "tornado", "Tornado 6.2's own test suite (Debian python3-tornado)", "pyunit",
        full=[],  # filled from tornado.test.runtests.TEST_MODULES when run
        quick=["tornado.test.iostream_test", "tornado.test.tcpclient_test",
               "tornado.test.httpserver_test", "tornado.test.simple_httpclient_test"]),
    "twisted": Suite(
        "twisted", "Twisted 22.4's own test suite (Debian python3-twisted), run by trial",
        "trial",
        full=["twisted.internet.test.test_tcp", "twisted.test.test_tcp",
              "twisted.test.test_loopback", "twisted.test.test_ftp",
              "twisted.web.test.test_http", "twisted.web.test.test_agent",
              "twisted.web.test.test_webclient", "twisted.protocols.test",
              "twisted.test.test_sslverify", "twisted.words.test.test_irc"],
        quick=["twisted.internet.test.test_tcp", "twisted.test.test_tcp"]),
}


def available(suite):
    """Is the project installed?  (The import of its test package works.)"""
    mod = {"cpython": "test.support", "tornado": "tornado.test", "twisted": "twisted.trial"}
    r = subprocess.run([PY, "-c", "import " + mod[suite.name]], capture_output=True, timeout=60)
    return r.returncode == 0


def targets(suite, quick):
    if quick:
        return list(suite.quick)
    if suite.name == "tornado" and not suite.full:
        suite.full = _tornado_modules()
    return list(suite.full)


@dataclass
class Run:
    mode: str
    outcomes: dict
    seconds: float
    rc: int
    stat: dict = field(default_factory=dict)
    log: str = ""


_TRIAL_LINE = re.compile(r"^([\w.]+) \.\.\. \[(OK|FAIL|ERROR|SKIPPED|EXPECTED FAILURE|"
                         r"UNEXPECTED SUCCESS|TODO)\]", re.M)
_TRIAL_MAP = {"OK": "ok", "FAIL": "fail", "ERROR": "error", "SKIPPED": "skip",
              "EXPECTED FAILURE": "xfail", "TODO": "xfail", "UNEXPECTED SUCCESS": "xpass"}


def _env(rundir):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("USMC_") and k != "LD_PRELOAD"}
    env["USMC_RUNDIR"] = rundir
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _command(suite, names, out):
    if suite.kind == "pyunit":
        ex = [a for x in suite.exclude for a in ("--exclude", x)]
        return [PY, str(HERE / "pyunit.py"), out, *ex, *names]
    return [PY, "-m", "twisted.trial", "--reporter=bwverbose", "--temp-directory",
            out + ".trial", *names]


def run_once(suite, names, mode, timeout=None, workdir=None):
    """One run of the given tests, plain or under usmc; returns a Run."""
    timeout = timeout or suite.timeout
    work = Path(workdir or tempfile.mkdtemp(prefix="usmc-conf-"))
    work.mkdir(parents=True, exist_ok=True)
    rundir = tempfile.mkdtemp(prefix="usmc-conf-", dir="/dev/shm")
    out = str(work / ("%s-%s.jsonl" % (suite.name, mode)))
    logpath = work / ("%s-%s.log" % (suite.name, mode))
    cmd = _command(suite, names, out)
    if mode == "usmc":
        cmd = [str(USMC), "run", "--", *cmd]
    t0 = time.monotonic()
    try:
        with open(logpath, "wb") as log:
            p = subprocess.Popen(cmd, env=_env(rundir), cwd=str(work), stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = -1
            finally:
                # Whatever happened, nothing the suite started outlives it.
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        secs = time.monotonic() - t0
        text = logpath.read_text(errors="replace")
        if suite.kind == "pyunit":
            outcomes = {}
            try:
                for line in Path(out).read_text().splitlines():
                    try:
                        tid, what = json.loads(line)
                    except ValueError:
                        continue  # the last line of a run that died
                    outcomes[tid] = what
            except OSError:
                pass
        else:
            outcomes = {m.group(1): _TRIAL_MAP[m.group(2)] for m in _TRIAL_LINE.finditer(text)}
        stat = {}
        if mode == "usmc":
            r = subprocess.run([str(USMC), "stat", "--json"], env=_env(rundir),
                               capture_output=True, timeout=60)
            try:
                stat = json.loads(r.stdout)
            except ValueError:
                stat = {"error": r.stderr.decode(errors="replace")}
        return Run(mode, outcomes, secs, rc, stat, str(logpath))
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def _same(a, b):
    return a == b


def differential(suite, quick=False, reruns=2, workdir=None, log=print):
    """Run the suite both ways and compare; returns a result dict."""
    names = targets(suite, quick)
    plain = run_once(suite, names, "plain", workdir=workdir)
    log("  %s plain: %d tests in %.0f s" % (suite.name, len(plain.outcomes), plain.seconds))
    usmc = run_once(suite, names, "usmc", workdir=workdir)
    log("  %s usmc:  %d tests in %.0f s" % (suite.name, len(usmc.outcomes), usmc.seconds))
    ids = sorted(set(plain.outcomes) | set(usmc.outcomes))
    # A plain run cut off by its timeout compares nothing past the cut: the
    # result is incomplete (never a pass), not a list of differences.  A
    # usmc run cut off where the plain one finished is usmc's hang: its
    # missing tests stay differences.
    if plain.rc == -1:
        ids = [t for t in ids if t in plain.outcomes]
    differing = [t for t in ids if not _same(plain.outcomes.get(t), usmc.outcomes.get(t))]
    confirmed, flaky = [], []
    # A test missing from one run (the run died, or a module did not load)
    # cannot be re-run alone reliably; it stays a difference.
    for t in differing:
        if t not in plain.outcomes or t not in usmc.outcomes or len(differing) > 40:
            confirmed.append(t)
            continue
        repeat = True
        for _ in range(reruns):
            p = run_once(suite, [t], "plain", timeout=300, workdir=workdir).outcomes.get(t)
            u = run_once(suite, [t], "usmc", timeout=300, workdir=workdir).outcomes.get(t)
            if p == plain.outcomes[t] and u == usmc.outcomes[t] and p != u:
                continue
            repeat = False
            break
        (confirmed if repeat else flaky).append(t)
    st = usmc.stat
    smc, tcp = st.get("smc_conns", 0), st.get("tcp_conns", 0)
    return {
        "suite": suite.name, "project": suite.project, "quick": quick, "targets": names,
        "tests": len(ids),
        "plain": _summary(plain), "usmc": _summary(usmc),
        "differences": {t: [plain.outcomes.get(t), usmc.outcomes.get(t)] for t in confirmed},
        "flaky": {t: [plain.outcomes.get(t), usmc.outcomes.get(t)] for t in flaky},
        "smc_endpoints": smc, "tcp_endpoints": tcp,
        "tcp_fallback": st.get("tcp_fallback", {}),
        "accelerated_share": (smc / (smc + tcp)) if smc + tcp else 0.0,
        "logs": [plain.log, usmc.log],
        "timed_out": [r.mode for r in (plain, usmc) if r.rc == -1],
    }


def _summary(run):
    counts = {}
    for v in run.outcomes.values():
        counts[v] = counts.get(v, 0) + 1
    return {"seconds": round(run.seconds, 1), "rc": run.rc, "counts": counts}
