"""SIGKILL at random moments, a short version of bench/killloop.py.

Every victim (client, server, forked worker) at every moment (handshake,
transfer, close) a few times with a fixed seed, then a loop with a random
seed (printed; rerun it with `bench/killloop.py --seed S`).  Each
iteration: the survivor gets what TCP gives (EOF/ECONNRESET receiving,
EPIPE/ECONNRESET sending), exactly a prefix of the stream, and nothing
hangs (a 10 s guard; the detection time is measured and printed, the 1 s
bound of the issue is judged by bench/killloop.py, not here: no timing
thresholds in tests).  Afterwards the shared runtime directory holds only
the live listeners once `usmc stat` collected the dead, nothing stray is in
/dev/shm, and a normal run in the same directory is accelerated.

The loop's own code (processes, iterations, checks) is bench/killloop.py;
the peers are relkit.py's kpeer.py.
"""
import itertools
import random
import sys

import pytest

from . import helpers as h

sys.path.insert(0, str(h.REPO / "bench"))
import killloop  # noqa: E402

COMBOS = list(itertools.product(killloop.VICTIMS, killloop.MOMENTS))


@pytest.fixture
def loop(tmp_path):
    build = killloop.Build("plain", h.BUILD)
    lp = killloop.Loop(build, tmp_path / "killloop", seed=0, bound_s=None)
    try:
        yield lp
    finally:
        lp.cleanup(keep_logs=True)     # kills every process it started
        build.cleanup()


def describe(results):
    return "\n".join(
        "iter %d %s/%s server=%s c2s=%d s2c=%d ring=%s delay=%dus: %s %s" % (
            r["iter"], r["victim"], r["moment"], r["server"], r["c2s"], r["s2c"], r["ring"],
            r["delay_us"], r.get("outcomes"), r["failures"]) for r in results)


def run_loop(lp, seed, plan):
    lp.rng = random.Random(seed)
    lp.seed = seed
    for i, (victim, moment) in enumerate(plan):
        lp.iteration(i, victim, moment)
    bad = [r for r in lp.results if not r["ok"]]
    assert not bad, "seed %d: %d of %d iterations failed:\n%s\nlogs: %s" % (
        seed, len(bad), len(lp.results), describe(bad), lp.work)
    killed = sum(1 for r in lp.results if r.get("killed"))
    lats = [r["latency_s"] for r in lp.results if r.get("latency_s") is not None]
    print("seed %d: %d iterations, %d kills, detection max %.3f s" % (
        seed, len(lp.results), killed, max(lats) if lats else 0))
    # Every trigger point is reached by construction (sizes >= 2 for transfer).
    assert killed == len(lp.results), describe(r for r in lp.results if not r.get("killed"))

    c = lp.leak_check()
    assert not c["problems"], "%s\n%s" % (c["problems"], c["notes"])
    lp.stop_persist()
    c = lp.leak_check(final=True)
    assert not c["problems"], "%s\n%s" % (c["problems"], c["notes"])
    final = lp.next_run_works()
    assert final["ok"], "the next run after the kills: %s" % final
    c = lp.leak_check(final=True)
    assert not c["problems"], "%s\n%s" % (c["problems"], c["notes"])


@pytest.mark.timeout(300, method="signal")
def test_kill_every_victim_every_moment(loop):
    """Each victim x moment 4 times (36 iterations), fixed seed."""
    run_loop(loop, 20240611, COMBOS * 4)


@pytest.mark.timeout(300, method="signal")
def test_kill_random(loop):
    """30 random iterations, random seed (printed in the failure message)."""
    seed = random.SystemRandom().randrange(1 << 31)
    print("kill loop seed %d" % seed)
    run_loop(loop, seed, [(None, None)] * 30)


@pytest.mark.timeout(300, method="signal")
def test_long_lived_fork_server_releases_link_groups(loop):
    """The long-lived forking server of the loop: kills of clients and of
    workers; its descriptors and link group mappings must not grow with
    the number of clients it has seen (a forking server's parent used to
    keep every client's link group: docs/reliability/README.md)."""
    loop.rng = random.Random(5)
    loop.pick = lambda i, v, m, _p=loop.pick: dict(_p(i, v, m), server="persist-fork")
    for i in range(4):                     # warm up, then the baseline
        loop.iteration(i, "client", "transfer")
    c0 = loop.leak_check()
    for i in range(4, 40):
        loop.iteration(i, random.Random(i).choice(["client", "worker"]), None)
    assert all(r["ok"] for r in loop.results), describe(r for r in loop.results if not r["ok"])
    c = loop.leak_check()
    assert not c["server_leaks"], "%s\nat the start: %s" % (c["server_leaks"],
                                                             c0.get("server_fork"))
