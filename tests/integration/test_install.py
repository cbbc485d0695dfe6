"""A real install (issue 20): `make install PREFIX= DESTDIR=` lays out a
tree whose usmc finds its library and accelerates; `make deb` builds a
Debian package that dpkg installs into an empty root, with the files, man
pages and completion it must hold, and the installed copy works."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from . import helpers as h

ROOT = Path(__file__).resolve().parents[2]
FILES = {"bin/usmc", "lib/usmc/libusmc.so", "share/man/man1/usmc.1", "share/man/man7/usmc.7",
         "share/bash-completion/completions/usmc", "share/usmc/plot.py",
         "share/doc/usmc/README.md", "share/doc/usmc/containers.md"}


def run(argv, timeout=300, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, timeout=timeout, **kw)
    assert r.returncode == 0, "%s: rc %d\n%s" % (argv, r.returncode,
                                                 r.stderr.decode(errors="replace")[-3000:])
    return r


def accelerated_with(usmc, rundir, procs, scripts):
    """An echo exchange between two programs started by this usmc binary."""
    env = rundir.env(debug=True)
    port = h.free_port()
    server = procs.start("server", [usmc, "run", "--", h.PY, scripts["async_echo_server"],
                                    "127.0.0.1", port], env, usmc=False)
    assert h.wait_listen(server, port), server.diag()
    procs.run("client", [usmc, "run", "--", h.PY, scripts["async_echo_client"], "127.0.0.1",
                         port, 2, 20, 65536, 3], env, usmc=False, timeout=60)
    st = json.loads(run([usmc, "stat", "--json"], env=rundir.env()).stdout)
    h.assert_accelerated(st, clients=2, diag=server.diag())
    server.stop()


@pytest.mark.timeout(300, method="signal")
def test_make_install_prefix_destdir(rundir, procs, scripts, tmp_path):
    dest = tmp_path / "dest"
    run(["make", "-s", "-C", ROOT, "install", "PREFIX=/opt/usmc", "DESTDIR=%s" % dest])
    top = dest / "opt" / "usmc"
    got = {str(p.relative_to(top)) for p in top.rglob("*") if p.is_file()}
    assert FILES <= got, sorted(FILES - got)
    assert os.access(top / "bin" / "usmc", os.X_OK)
    # `usmc run` preloads the library installed beside it.
    out = run([top / "bin" / "usmc", "run", "--", "sh", "-c", 'echo "$LD_PRELOAD"'],
              env=rundir.env()).stdout.decode().strip()
    assert out == str(top / "lib" / "usmc" / "libusmc.so"), out
    accelerated_with(top / "bin" / "usmc", rundir, procs, scripts)
    run(["make", "-s", "-C", ROOT, "uninstall", "PREFIX=/opt/usmc", "DESTDIR=%s" % dest])
    assert not [p for p in top.rglob("*") if p.is_file()]


@pytest.mark.timeout(300, method="signal")
def test_debian_package_installs_and_runs(rundir, procs, scripts, tmp_path):
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb not available")
    deb = Path(run(["make", "-s", "-C", ROOT, "deb"]).stdout.decode().strip().splitlines()[-1])
    deb = deb if deb.is_absolute() else ROOT / deb
    assert re.match(r"usmc_\d+\.\d+\.\d+_\w+\.deb$", deb.name), deb
    info = run(["dpkg-deb", "-f", deb]).stdout.decode()
    assert re.search(r"^Package: usmc$", info, re.M) and re.search(r"^Depends: libc6", info, re.M)
    listing = run(["dpkg-deb", "-c", deb]).stdout.decode()
    paths = {ln.split()[-1].lstrip(".") for ln in listing.splitlines()}
    want = {"/usr/" + f for f in FILES}
    want = {p + ".gz" if "/man/" in p else p for p in want}
    assert want <= paths, sorted(want - paths)
    assert all(ln.split()[1] == "root/root" for ln in listing.splitlines()), listing

    # dpkg itself installs it into an empty root (its own database there).
    root = tmp_path / "root"
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates"):
        (root / d).mkdir(parents=True)
    (root / "var/lib/dpkg/status").touch()
    run(["dpkg", "--root=%s" % root, "--force-depends", "--force-script-chrootless",
         "--log=/dev/null", "-i", deb])
    st = run(["dpkg", "--root=%s" % root, "-s", "usmc"]).stdout.decode()
    assert "Status: install ok installed" in st, st
    usmc = root / "usr" / "bin" / "usmc"
    assert run([usmc, "version"]).stdout.startswith(b"usmc ")
    # The man pages read, the completion parses.
    for page in ("man1/usmc.1.gz", "man7/usmc.7.gz"):
        text = run(["sh", "-c", "zcat %s | head -3" % (root / "usr/share/man" / page)]).stdout
        assert text.startswith(b".TH USMC"), text
    run(["bash", "-n", root / "usr/share/bash-completion/completions/usmc"])
    accelerated_with(usmc, rundir, procs, scripts)
    run(["dpkg", "--root=%s" % root, "--force-script-chrootless", "--log=/dev/null", "-r",
         "usmc"])
    assert not usmc.exists()


@pytest.mark.timeout(60, method="signal")
def test_bash_completion(tmp_path):
    if not Path("/usr/share/bash-completion/bash_completion").exists():
        pytest.skip("bash-completion not installed")
    script = r'''
source /usr/share/bash-completion/bash_completion
source %s
complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1));
    COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _usmc; echo "${COMPREPLY[*]}"; }
complete_words usmc s
complete_words usmc stat su
complete_words usmc ctl ring
complete_words usmc lg --
''' % (ROOT / "completion" / "usmc.bash")
    env = dict(os.environ, PATH="%s:%s" % (h.USMC.parent, os.environ["PATH"]))
    out = run(["bash", "-c", script], env=env).stdout.decode().splitlines()
    assert out[0].split() == ["stat"], out
    assert out[1].split() == ["summary"], out
    assert out[2].split() == ["ring_size="], out
    assert sorted(out[3].split()) == ["--all", "--help", "--json"], out
