"""Static analysis of the library and the CLI: clang-tidy (checks and the
reasons for the ones left out are in .clang-tidy) and cppcheck must report
nothing.  `make lint` is the same run by hand.  The local includes of src/
form no cycle, and EXPORT is defined in one place.  The files' calls
(read from the built objects) form no cycle outside the socket layer's,
which may only shrink; every dlsym is in real.c."""
import concurrent.futures
import os
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

    def tidy(src):
        r = subprocess.run(["clang-tidy", "-quiet", src, "--", "-std=gnu11", "-D_GNU_SOURCE",
                            "-pthread", "-iquote", "src"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
        found = [line for line in r.stdout.splitlines() if ": warning:" in line or ": error:" in line]
        if r.returncode != 0 or found:
            return f"{src} (exit {r.returncode}):\n" + "\n".join(found or [r.stdout[-2000:]])
        return None

    # One file per CPU at a time: the suite runs nothing else meanwhile.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        failures = [f for f in pool.map(tidy, SOURCES) if f]
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


# The fields of the shared CDC lines (cdc.h: struct usmc_cdc_prod, _cons,
# _client, _server) and the names the code gives the lines.
CDC_FIELDS = ("prod", "skip_to", "flags", "space_armed", "cpu", "waiting", "mig_from",
              "data_rung", "data_rung_ns", "cons", "data_armed", "rcvbuf", "space_rung",
              "space_rung_ns", "state", "gen", "answer", "released_gen")
CDC_LINES = r"(?:tx_p|rx_c|rx_p|tx_c|c2s_p|s2c_p|c2s_c|s2c_c|my_p|my_c|peer_c|peer_p|->s|->c|\.s|\.c)"
CDC_STORE = re.compile(
    r"(?:STORE_[A-Z]+|atomic_(?:store|fetch_\w+|exchange|compare_exchange)\w*)\s*\(\s*&[\w>.-]*?"
    + CDC_LINES + r"(?:->|\.)(?:" + "|".join(CDC_FIELDS) + r")\b")


def cdc_stores(text):
    return [m.group(0) for m in CDC_STORE.finditer(text)]


def test_cdc_stores_only_in_cdc():
    """Every store into a shared CDC line is a cdc.h primitive (issue 17:
    a device the peer cannot map sends exactly those); none elsewhere."""
    where = {}
    for f in sorted((REPO / "src").glob("*.[ch]")):
        if f.name in ("cdc.h", "cdc.c"):
            continue
        found = cdc_stores(f.read_text())
        if found:
            where[f.name] = found
    assert where == {}, where
    # Each of them hands what it stored to a device without mapping
    # (CDC_MIRROR: dev.h publish, dev_copy.c), and so do cdc.c's stores.
    cdc_h = (REPO / "src" / "cdc.h").read_text()
    bodies = re.findall(r"^static inline \w+ \*?(cdc_\w+)\([^)]*\)\n\{\n(.*?)^\}", cdc_h,
                        re.M | re.S)
    storing = {n: b for n, b in bodies
               if re.search(r"STORE_|atomic_(?:fetch|compare|exchange)|^\t\w+->\w+ = ", b, re.M)}
    assert len(storing) >= 15, sorted(storing)
    assert [n for n, b in storing.items() if "CDC_MIRROR" not in b] == [], storing
    cdc_c = (REPO / "src" / "cdc.c").read_text()
    through = re.findall(r"(?:STORE_\w+|atomic_(?:store|compare_exchange)\w*)\((\w+),", cdc_c)
    assert sorted(through) == ["ns", "word"], through      # rung_publish
    assert all("CDC_MIRROR(%s)" % w in cdc_c for w in through), through
    # The check sees the stores the code used to make directly.
    for store in ("STORE_RELEASE(&sk->tx_p->prod, prod);",
                  "atomic_fetch_or_explicit(&sk->rx_c->flags, CDC_F_CLOSED, memory_order_release);",
                  "STORE_RELEASE(&c->s.answer, CDC_ANSWER(gen, CDC_ANS_DECLINE, 0));",
                  "atomic_compare_exchange_strong(&c->c.state, &st, SLOT_BUSY)",
                  "atomic_fetch_add_explicit(&sk->tx_p->space_armed, 1, memory_order_relaxed)"):
        assert cdc_stores(store), store


# No two files of the library call each other, directly or around a loop
# (issue 17 item 6): every file calls only files below it, as
# docs/design.md's layer table has them.  A lower layer tells an upper one
# through an operation the upper one gave it, as the kernel's do: a
# socket's release (sock.h struct usmc_sock_ops, close.c) and its
# watchers (struct usmc_sock_watcher, epoll.c).


def _call_graph(objdir):
    """File -> files whose functions or data it uses, from nm."""
    defs, uses = {}, {}
    for o in sorted(objdir.glob("*.o")):
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDBRG":
                defs[f[2]] = o.stem
            elif len(f) == 2 and f[0] == "U":
                uses.setdefault(o.stem, set()).add(f[1])
    return {n: {defs[s] for s in u if s in defs and defs[s] != n} for n, u in uses.items()}


def _cycles(graph):
    """The strongly connected components with more than one file."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_call_cycle():
    objdir = REPO / "build" / "obj" / "lib"
    if not any(objdir.glob("*.o")):
        pytest.skip("build/obj/lib is not built (make)")
    graph = _call_graph(objdir)
    cycles = _cycles(graph)
    assert cycles == [], "files that call each other: %s" % [sorted(c) for c in cycles]
    # The check sees calls, and data: the data path calls the device
    # layer, epoll the sockets it watches, the handshake the connection's
    # state, a socket's release the TCP side.
    assert "lgr" in graph["af_usmc"] and "cdc" in graph["tx"]
    assert "rx" in graph["epoll_ready"] and "epoll_list" in graph["epoll_bell"]
    assert "sock" in graph["conn"] and "conn" in graph["clc_proof"]
    assert "tcp" in graph["close"] and "fdtab" in graph["tcp"]


def test_one_libc_table():
    """libc past the wrappers is reached through real.c's table only."""
    found = [f.name for f in (REPO / "src").glob("*.c")
             if "dlsym(" in f.read_text() and f.name != "real.c"]
    assert found == [], found
