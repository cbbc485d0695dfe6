#!/usr/bin/python3
"""Run unit programs many times at once, to shake out races one run on two
CPUs does not show (many cores, a loaded machine).

    tests/unit_loop.py [-j JOBS] [-n ROUNDS] [-o OUTDIR] [BUILD/PROG[:CHECK] ...]

BUILD is plain (build/) or copy (build/copy/, USMC_T_UNSHARED=1); the
default list is the concurrency-heavy programs in both.  Each run gets a
runtime directory of its own and a time limit.  Prints one line per
program (passed of ROUNDS), keeps the output of every run that did not pass
in OUTDIR (default /tmp/usmc-unit-loop), and exits 1 if any did not.  The checks
tests/test_unit.py leaves out of a build (COPY_SKIP, KNOWN_BUGS) are left out
here too.  `make unit-loop` runs the default list; on a machine with more
cores (the lent 16-CPU one: carry build/libusmc.so, build/usmc, build/tests
and build/copy) more of them run at once.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _skips():
    """COPY_SKIP and KNOWN_BUGS of tests/test_unit.py, read from its source
    (the machine this runs on may have no pytest to import it with)."""
    src = (ROOT / "tests" / "test_unit.py").read_text()
    ns = {}
    for name in ("COPY_SKIP", "KNOWN_BUGS"):
        exec(re.search(rf"^{name} = {{.*?^}}", src, re.S | re.M).group(0), ns)  # noqa: S102
    return ns["COPY_SKIP"], ns["KNOWN_BUGS"]


COPY_SKIP, KNOWN_BUGS = _skips()

DEFAULT = ["plain/t_epoll_threads", "copy/t_epoll_threads", "plain/t_stress", "copy/t_stress",
           "copy/t_devcopy", "plain/t_migrate2", "copy/t_migrate2", "plain/t_accept_queue",
           "copy/t_accept_queue", "copy/t_inherit:fork_churn", "plain/t_decline",
           "copy/t_decline", "plain/t_epoll_mt", "copy/t_epoll_mt", "copy/t_clc_bind",
           "plain/t_clc_bind"]
LIMIT = 240


def run_one(spec, rnd, out):
    bp, _, check = spec.partition(":")
    build, prog = bp.split("/")
    bdir = ROOT / "build" / ("copy" if build == "copy" else "")
    skip = list(COPY_SKIP.get(prog, ())) if build == "copy" else []
    skip += [c for c, builds in KNOWN_BUGS.get(prog, {}).items() if build in builds]
    rundir = tempfile.mkdtemp(prefix="usmc-loop.", dir="/dev/shm")
    env = dict(os.environ, USMC_RUNDIR=rundir, USMC_CLI=str(bdir / "usmc"),
               USMC_T_SKIP=",".join(skip), USMC_T_UNSHARED="1" if build == "copy" else "0")
    cmd = ["timeout", "-k", "5", str(LIMIT), "env", f"LD_PRELOAD={bdir / 'libusmc.so'}",
           str(bdir / "tests" / prog)] + ([check] if check else [])
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                           timeout=LIMIT + 30, start_new_session=True)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"{e}"
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
    if rc not in (0, 77):
        name = f"{build}-{prog}{'-' + check if check else ''}-{rnd}.log"
        (Path(out) / name).write_text(f"rc={rc}\n{text}")
    return spec, rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("-o", default="/tmp/usmc-unit-loop")
    ap.add_argument("specs", nargs="*", default=DEFAULT)
    a = ap.parse_args()
    os.makedirs(a.o, exist_ok=True)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(a.j) as ex:
        futs = [ex.submit(run_one, s, r, a.o) for r in range(a.n) for s in a.specs]
        for f in concurrent.futures.as_completed(futs):
            spec, rc = f.result()
            results.setdefault(spec, []).append(rc)
    bad = False
    for spec in a.specs:
        rcs = results.get(spec, [])
        ok = sum(rc in (0, 77) for rc in rcs)
        bad |= ok != len(rcs)
        fails = ",".join(str(rc) for rc in rcs if rc not in (0, 77))
        print(f"{spec:40s} {ok}/{len(rcs)} passed" + (f"  (rc {fails})" if fails else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
