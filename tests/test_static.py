"""Static analysis of the library and the CLI: clang-tidy (checks and the
reasons for the ones left out are in .clang-tidy) and cppcheck must report
nothing.  `make lint` is the same run by hand.  The local includes of src/
form no cycle, and EXPORT is defined in one place."""
import re
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


def _include_cycles():
    """Cycles in the graph of src/'s files and the local headers they
    include (#include "x.h")."""
    graph = {}
    for f in sorted((REPO / "src").glob("*.[ch]")):
        graph[f.name] = re.findall(r'^#include "([^"]+)"', f.read_text(), re.M)
    cycles, state, stack = [], {}, []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in graph.get(u, []):
            if state.get(v) == "open":
                cycles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for u in graph:
        if u not in state:
            visit(u)
    return cycles, graph


def test_include_graph_has_no_cycle():
    cycles, graph = _include_cycles()
    assert cycles == [], "include cycles: %s" % cycles
    # The check sees the tree: every header is somebody's include.
    assert "sock.h" in graph and any("sock.h" in incs for incs in graph.values())


def test_one_export_definition():
    """EXPORT (the interposed entry points' visibility) is defined once."""
    defs = [f.name for f in (REPO / "src").glob("*.[ch]")
            if re.search(r"^#define EXPORT\b", f.read_text(), re.M)]
    assert defs == ["export.h"], defs
