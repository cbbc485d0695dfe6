"""pytest fixtures for the usmc integration tests.

Run with Debian's interpreter:  /usr/bin/python3 -m pytest tests/integration

  rundir   a fresh runtime directory on tmpfs (/dev/shm/usmc-it-XXXX) for
           this test only; removed at the end
  procs    starts commands in their own process groups; every group is
           killed at the end of the test whatever happened
  scripts  the helper python programs, written into the test's tmp dir
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from integration import helpers  # noqa: E402


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("pytest-timeout is required (every test runs under a timeout)")


@pytest.fixture(scope="session", autouse=True)
def usmc_build():
    """The library and the CLI must exist; build them if they do not."""
    if not (helpers.USMC.exists() and helpers.LIB.exists()):
        if helpers.BUILD != (helpers.REPO / "build").resolve():
            pytest.exit("no usmc/libusmc.so in %s" % helpers.BUILD, returncode=1)
        r = subprocess.run(["make", "-C", str(helpers.REPO)], capture_output=True, timeout=600)
        if r.returncode != 0:
            pytest.exit("make failed:\n" + r.stderr.decode(errors="replace"), returncode=1)


@pytest.fixture
def rundir():
    path = tempfile.mkdtemp(prefix="usmc-it-", dir="/dev/shm")
    yield helpers.Rundir(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def procs(request, rundir, tmp_path):
    # Depends on rundir so that the processes stop before it is removed.
    p = helpers.Procs(tmp_path / "logs")
    request.node._usmc_procs = p
    yield p
    p.stop_all()


@pytest.fixture
def scripts(tmp_path):
    return helpers.write_scripts(tmp_path / "scripts")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    p = getattr(item, "_usmc_procs", None)
    if rep.failed and p is not None and p.procs:
        rep.sections.append(("usmc processes (%s)" % rep.when, p.diag()))
