"""Static analysis of the library and the CLI: clang-tidy (checks and the
reasons for the ones left out are in .clang-tidy) and cppcheck must report
nothing.  `make lint` is the same run by hand."""
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted(str(p.relative_to(REPO)) for d in ("src", "cli") for p in (REPO / d).glob("*.c"))


def _need(tool):
    if not shutil.which(tool):
        pytest.skip(f"{tool} is not installed (apt-get install {tool})")


@pytest.mark.timeout(900)
def test_clang_tidy_clean():
    _need("clang-tidy")
    failures = []
    for src in SOURCES:
        r = subprocess.run(["clang-tidy", "-quiet", src, "--", "-std=gnu11", "-D_GNU_SOURCE",
                            "-pthread", "-iquote", "src"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
        found = [line for line in r.stdout.splitlines() if ": warning:" in line or ": error:" in line]
        if r.returncode != 0 or found:
            failures.append(f"{src} (exit {r.returncode}):\n" + "\n".join(found or [r.stdout[-2000:]]))
    assert not failures, "\n\n".join(failures)


@pytest.mark.timeout(600)
def test_cppcheck_clean():
    _need("cppcheck")
    r = subprocess.run(["cppcheck", "--enable=warning,performance,portability", "--std=c11",
                        "-D_GNU_SOURCE", "-iquote", "src", "--inline-suppr", "--quiet",
                        "--error-exitcode=1", "--template={file}:{line}: {severity}: {message} [{id}]",
                        "src/", "cli/"],
                       cwd=REPO, capture_output=True, text=True, timeout=550)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
