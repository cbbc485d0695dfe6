"""Run each libFuzzer target (tests/fuzz/fuzz_*.c) for a short, bounded time.

Builds nothing: it runs what `make fuzz` left in build/fuzz/ (or in
$USMC_FUZZ_BUILD; a target that is not built is skipped, with the reason).  Each target starts from a copy
of its seed corpus (tests/fuzz/corpus/<name>/: known-interesting inputs and
regressions, all replayed first) in a temporary directory, with its private
runtime directories under the same temporary directory, and must exit 0
without leaving a crash, timeout or out-of-memory file.

Options passed to the fuzzer, and why:
  -max_total_time=10   a smoke run per commit; longer runs: tests/fuzz/README.md
  -timeout=5           one input taking longer is a hang (libFuzzer writes
                       a timeout-* file and fails)
  -rss_limit_mb=2048   likewise for memory
  -detect_leaks=0      the library keeps process-lifetime objects (socket
                       pool, link group cache) that LeakSanitizer reports
The whole run is under `timeout` and pytest-timeout as well.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# USMC_FUZZ_BUILD: another build's fuzz directory (make O=DIR fuzz -> DIR/fuzz).
BUILD = Path(os.environ.get("USMC_FUZZ_BUILD") or ROOT / "build" / "fuzz")
SEEDS = ROOT / "tests" / "fuzz" / "corpus"
SOURCES = sorted(p.stem for p in (ROOT / "tests" / "fuzz").glob("fuzz_*.c"))
SECONDS = 10
LIMIT = SECONDS + 60


@pytest.mark.timeout(LIMIT + 30)
@pytest.mark.parametrize("target", SOURCES)
def test_fuzz_target(target, tmp_path):
    binary = BUILD / target
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.skip(f"{binary} not built (make fuzz; needs clang, see tests/fuzz/README.md)")
    name = target[len("fuzz_"):]
    corpus = tmp_path / "corpus"
    if (SEEDS / name).is_dir():
        shutil.copytree(SEEDS / name, corpus)
    else:
        corpus.mkdir()
    seeds = len(list(corpus.iterdir()))
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "USMC_DEBUG", "USMC_DISABLE", "USMC_FAULT", "USMC_RUNDIR"):
        env.pop(k, None)
    env["USMC_FUZZ_TMP"] = str(tmp_path)
    cmd = ["timeout", "-k", "5", str(LIMIT), str(binary), f"-max_total_time={SECONDS}",
           "-timeout=5", "-rss_limit_mb=2048", "-detect_leaks=0", "-print_final_stats=1",
           f"-artifact_prefix={artifacts}/", str(corpus)]
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace", cwd=str(tmp_path))
    found = sorted(p.name for p in artifacts.iterdir())
    runs = [l for l in r.stdout.splitlines() if l.startswith("stat::number_of_executed_units")]
    what = (f"{target}: exit {r.returncode}, artifacts {found}, "
            f"{runs[0] if runs else 'no final stats'} (corpus of {seeds} seeds)\n"
            f"reproduce: {binary} <artifact>  (fuzz_cdc: FUZZ_TRACE=1 prints each step)\n"
            f"--- output (tail) ---\n{r.stdout[-6000:]}")
    if r.returncode in (124, 137):
        pytest.fail(f"timed out\n{what}")
    assert r.returncode == 0 and not found, what
    assert runs and int(runs[0].split()[-1]) > seeds, f"the fuzzer did not run\n{what}"
