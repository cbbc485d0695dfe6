"""Smoke tests of the benchmarks: `usmc bench` and bench/programs.py.

Short runs with the quickest settings; they check that the output is
well-formed (every workload and transport present, numbers finite and
positive, usmc runs verified to be on shared memory, a plot written) and
that nothing is left running.  No timing thresholds: the numbers of a
40 ms run on a shared machine mean nothing.
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from integration import helpers as h  # noqa: E402

PROGRAMS = h.REPO / "bench" / "programs.py"
BENCH_WORKLOADS = ["pp14", "pp1k", "rr1", "rr16", "stream64k", "stream1m", "msg100", "conn"]
BENCH_TRANSPORTS = ["tcp", "unix", "usmc"]


def have_matplotlib():
    r = subprocess.run([h.PY, "-c", "import matplotlib"], capture_output=True, timeout=60)
    return r.returncode == 0


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("USMC_") and k != "LD_PRELOAD"}


def run_group(argv, timeout, env=None, cwd=None):
    """Run argv in its own process group; kill the group on a timeout and
    check that nothing of the group outlives it."""
    p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env or clean_env(), start_new_session=True, cwd=cwd)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError("%s did not finish within %ss\nstdout:\n%s\nstderr:\n%s" % (
            argv[:3], timeout, out.decode(errors="replace")[-3000:],
            err.decode(errors="replace")[-3000:]))
    finally:
        try:
            os.killpg(p.pid, 0)
            leftover = True
        except ProcessLookupError:
            leftover = False
        except PermissionError:
            leftover = True
        if leftover:
            os.killpg(p.pid, signal.SIGKILL)
    assert not leftover, "processes of %s outlived it" % argv[:3]
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def finite_pos(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def is_png(path):
    return Path(path).exists() and Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------
# usmc bench
# --------------------------------------------------------------------------

@pytest.mark.timeout(90, method="signal")
def test_usmc_bench_json_smoke(tmp_path):
    png = tmp_path / "bench.png"
    plot = have_matplotlib()
    argv = [h.USMC, "bench", "--json", "--reps", "1", "--duration", "0.05", "--warmup", "0.01",
            "--workloads", "all"]
    if plot:
        argv += ["--plot", png]
    rc, out, err = run_group(argv, timeout=75)
    assert rc == 0, "usmc bench failed (rc %d):\n%s" % (rc, err[-4000:])
    res = json.loads(out)      # stdout is one JSON object and nothing else

    assert res["tool"] == "usmc bench" and res["ok"] is True and res["failures"] == [], err
    assert res["config"]["transports"] == BENCH_TRANSPORTS
    assert res["machine"]["cpus"] >= 1
    assert set(res["workloads"]) == set(BENCH_WORKLOADS) | {"floor"}
    for name in BENCH_WORKLOADS:
        wl = res["workloads"][name]
        assert wl["metrics"], name
        for key, m in wl["metrics"].items():
            assert m["better"] in ("lower", "higher"), (name, key)
            for t in BENCH_TRANSPORTS:
                s = m[t]
                assert finite_pos(s["median"]), (name, key, t, s)
                assert s["min"] <= s["median"] <= s["max"], (name, key, t, s)
                assert len(s["samples"]) == 1 and all(finite_pos(x) for x in s["samples"])
            for t in ("unix", "usmc"):
                assert finite_pos(m["ratio_vs_tcp"][t]), (name, key, t)
        chk = wl["usmc_check"]
        assert chk["ok"] is True, (name, chk)
        assert chk["runs"], name
        for run in chk["runs"]:
            assert run["ok"] and run["smc_conns"] > 0 and run["tcp_conns"] == 0, (name, run)
            assert run["tcp_fallback"] == {} and run["handshake_errors"] == 0, (name, run)
    floor = res["workloads"]["floor"]["metrics"]
    assert floor, "no floor metrics"
    for key, m in floor.items():
        assert finite_pos(m["machine"]["median"]), (key, m)
    for k, v in res["vs_floor"].items():
        assert v is None or finite_pos(v), (k, v)
    if plot:
        assert is_png(png), "no plot written:\n" + err[-2000:]
        check_plot_layout(tmp_path, out)


def check_plot_layout(tmp_path, results):
    """The plot's title, legend and panels do not overlap (the legend once
    covered the title)."""
    js = tmp_path / "results.json"
    js.write_text(results)
    r = subprocess.run([h.PY, str(Path(__file__).parent.parent / "bench" / "plot.py"), str(js),
                        str(tmp_path / "check.png")], capture_output=True, timeout=60,
                       env=dict(os.environ, USMC_PLOT_CHECK="1"))
    assert r.returncode == 0, r.stderr
    boxes = json.loads(r.stdout)

    def overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    names = sorted(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if a.startswith("panel") and b.startswith("panel"):
                continue
            assert not overlap(boxes[a], boxes[b]), (a, b, boxes)


@pytest.mark.timeout(60, method="signal")
def test_usmc_bench_options_smoke():
    """Busy-poll, two transports, same CPU: the config is reflected in the JSON."""
    argv = [h.USMC, "bench", "--json", "--reps", "2", "--duration", "0.05", "--warmup", "0.01",
            "--workloads", "pp14,conn", "--transports", "tcp,usmc", "--busy-poll", "20",
            "--cpus", "0,0"]
    rc, out, err = run_group(argv, timeout=45)
    assert rc == 0, err[-4000:]
    res = json.loads(out)
    assert res["config"]["transports"] == ["tcp", "usmc"]
    assert res["config"]["busy_poll_us"] == 20
    assert res["machine"]["cpu_client"] == res["machine"]["cpu_server"] == 0
    assert set(res["workloads"]) == {"pp14", "conn"}
    for name, wl in res["workloads"].items():
        for key, m in wl["metrics"].items():
            assert "unix" not in m, (name, key)
            for t in ("tcp", "usmc"):
                assert len(m[t]["samples"]) == 2, (name, key, t)
                assert all(finite_pos(x) for x in m[t]["samples"]), (name, key, t)
        assert wl["usmc_check"]["ok"] is True, wl["usmc_check"]


# --------------------------------------------------------------------------
# bench/programs.py
# --------------------------------------------------------------------------

PROGRAM_WORKLOADS = ["pp14", "tp64k", "redis-c50", "nginx-ka"]


def missing(names):
    return [p for p in names if not shutil.which(p)]


def stray_processes(root):
    """Processes whose working directory is under root (programs.py runs
    every server and client in a scratch directory below its TMPDIR)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % d)
        except OSError:
            continue
        if cwd.startswith(str(root)):
            try:
                cmd = Path("/proc/%s/cmdline" % d).read_bytes().replace(b"\0", b" ")
            except OSError:
                cmd = b"?"
            out.append("%s %s" % (d, cmd.decode(errors="replace")))
    return out


def prog_rundirs():
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("usmc-prog-")}
    except OSError:
        return set()


@pytest.mark.timeout(150, method="signal")
def test_programs_smoke(tmp_path):
    need = missing(["taskset", "sockperf", "redis-server", "redis-benchmark", "nginx", "wrk"])
    if need:
        pytest.skip("not installed: " + ", ".join(need))
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs (client and server pinned apart)")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out_json, png = tmp_path / "programs.json", tmp_path / "programs.png"
    plot = have_matplotlib()
    before = prog_rundirs()
    argv = [h.PY, PROGRAMS, "--build", h.BUILD, "--reps", "1", "--duration", "1",
            "--redis-requests", "3000", "--workloads", ",".join(PROGRAM_WORKLOADS),
            "--json", out_json]
    if plot:
        argv += ["--plot", png]
    env = clean_env()
    env["TMPDIR"] = str(scratch)
    try:
        rc, out, err = run_group(argv, timeout=120, env=env)
    finally:
        stray = stray_processes(scratch)
        for line in stray:
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert not stray, "programs.py left processes behind:\n" + "\n".join(stray)
    assert prog_rundirs() - before == set(), "runtime directories left in /dev/shm"
    assert rc == 0, "programs.py failed (rc %d):\n%s\n%s" % (rc, out[-3000:], err[-4000:])
    res = json.loads(out_json.read_text())
    assert res["ok"] is True and res["failures"] == []
    pl = res["placements"]["apart"]
    assert pl["cpus"] == [0, 1]
    assert list(pl["workloads"]) == PROGRAM_WORKLOADS
    for name, wl in pl["workloads"].items():
        assert wl["metrics"], name
        for key, m in wl["metrics"].items():
            for t in ("tcp", "usmc"):
                assert finite_pos(m[t]["median"]), (name, key, t, m[t])
            assert finite_pos(m["ratio"]["median"]), (name, key)
        assert wl["usmc_check"] == {"ok": True, "runs": 1, "accelerated": 1}, name
        for run in wl["runs"]:
            assert run["ok"], run
            if run["transport"] == "usmc":
                st = run["usmc_stat"]
                assert st["smc_conns"] > 0 and st["tcp_conns"] == 0, (name, st)
                assert st["tcp_fallback"] == {}, (name, st)
            else:
                assert "usmc_stat" not in run, name
            # usmc runs go through `usmc run`, TCP runs do not
            via = any("usmc run --" in c for _, c in run["commands"])
            assert via == (run["transport"] == "usmc"), run["commands"]
        assert set(wl["commands"]) == {"tcp", "usmc"}
    # The terminal table names every workload.
    for name in PROGRAM_WORKLOADS:
        assert name + ":" in out, out
    if plot:
        assert is_png(png)

    # The document generator works from this JSON without measuring.
    bench = tmp_path / "bench.json"
    rc, bout, berr = run_group([h.USMC, "bench", "--json", "--reps", "1", "--duration", "0.05",
                                "--warmup", "0.01", "--workloads", "pp14,conn,floor"],
                               timeout=45)
    assert rc == 0, berr[-3000:]
    bench.write_text(bout)
    docdir = tmp_path / "docs"
    rc, dout, derr = run_group([h.PY, PROGRAMS, "--doc", "--load", out_json, "--bench-json",
                                bench, "--doc-dir", docdir], timeout=60, env=env)
    assert rc == 0, derr[-3000:]
    md = (docdir / "performance.md").read_text()
    assert "PRELIMINARY" in md
    for name in PROGRAM_WORKLOADS:
        assert name in md
    assert "14 B ping-pong latency" in md and "connection setup rate" in md
    assert json.loads((docdir / "perf" / "programs.json").read_text())["placements"]
    assert "apart" in json.loads((docdir / "perf" / "usmc-bench.json").read_text())


@pytest.mark.timeout(30, method="signal")
def test_programs_usage_errors(tmp_path):
    rc, out, err = run_group([h.PY, PROGRAMS, "--workloads", "nosuch"], timeout=20)
    assert rc == 2 and "unknown workload" in err, err
    rc, out, err = run_group([h.PY, PROGRAMS, "--build", tmp_path, "--workloads", "pp14"],
                             timeout=20)
    assert rc == 2 and "no usmc" in err, err
