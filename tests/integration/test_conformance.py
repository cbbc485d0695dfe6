"""Real projects' own network test suites, plain and under usmc (quick subsets).

Each suite's quick subset (tests/conformance/suites.py) runs plain and under
`usmc run`; every test must have the same outcome both ways (a difference is
re-run alone, twice, before it counts), and at least 80 % of the usmc run's
TCP endpoints must have gone through shared memory (counters).  The whole
suites run with `make conformance` (docs/conformance.md).
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import suites  # noqa: E402


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(suites.SUITES))
def test_suite_quick(name, tmp_path):
    suite = suites.SUITES[name]
    if not suites.available(suite):
        pytest.skip("%s is not installed" % suite.project)
    r = suites.differential(suite, quick=True, workdir=tmp_path, log=lambda *a: None)
    assert r["tests"] > 0, "no test ran: %s" % r["logs"]
    # Both runs ran the same tests (a run that died early shows as missing ones).
    assert sum(r["plain"]["counts"].values()) == sum(r["usmc"]["counts"].values()), r
    assert not r["differences"], "outcomes differ plain -> usmc: %s (logs %s)" % (
        r["differences"], r["logs"])
    assert r["smc_endpoints"] > 0
    assert r["accelerated_share"] >= 0.80, (
        "only %d of %d endpoints on shared memory; TCP reasons %s" % (
            r["smc_endpoints"], r["smc_endpoints"] + r["tcp_endpoints"], r["tcp_fallback"]))
