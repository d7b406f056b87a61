"""What bisecting costs the user: one nightly in one command, local indexes of both layouts, the
wheel checked before the work, free space checked before an install, uv's shared store or pip's
shared wheel cache, and a cache that can be listed and pruned. Stub wheels (see test_bisect.py)
stand in for torch builds; each loads this environment's real torch."""
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from hypothesis import example, given, HealthCheck, settings, strategies as st

from sac_repro.bisecting import builds, caches, envs
from sac_repro import exits
from wheels import (BISECT, bisect, build_stub_wheel, children_of, make_index, nightly_repo, PYTAG,  # noqa: F401
                    quick_venvs, serve_index, sha256_of, slow_venv)


@pytest.mark.parametrize("layout, installer", [("flat", "uv"), ("pep503", "pip")])
def test_one_nightly_in_one_command_from_either_layout(tmp_path, layout, installer):
    if installer == "uv" and not shutil.which("uv") and not os.access(os.path.join(os.path.dirname(sys.executable), "uv"), os.X_OK):
        pytest.skip("uv is not installed here")
    index = make_index(tmp_path / "index", layout)
    cache = tmp_path / "cache"
    rc, out = bisect("nightly", "2025-09-06", "--index", str(index), "--installer", installer, "--markdown", cache=cache)
    assert rc == 1, out
    assert "with %s into" % installer in out
    assert "2025-09-06" in out and "reproduced" in out
    assert "| 2025-09-06 | aaaaaaaaaaaa | `reproduced` | 1 |" in out
    rc, out = bisect("nightly", "latest", "--index", str(index), "--installer", installer, cache=cache)
    assert rc == 0 and "torch 2025-09-08 " in out and "not_reproduced" in out, out  # the newest date
    if installer == "uv":
        assert os.path.isdir(cache / "uv")  # the shared store, inside the cache


def test_releases_and_nightlies_in_one_table_from_a_local_index(tmp_path):
    index = make_index(tmp_path / "index", "pep503")
    rc, out = bisect("matrix", "2.9.1", "2.12.0", "2025-09-07", "--index", str(index), "--markdown",
                     cache=tmp_path / "cache")
    assert rc == 0, out
    assert "| 2.9.1 | dddddddddddd | `reproduced` | 1 |" in out
    assert "| 2.12.0 | eeeeeeeeeeee | `not_reproduced` | 0 |" in out
    assert "| 2025-09-07 | bbbbbbbbbbbb | `not_reproduced` | 0 |" in out


def test_a_wheel_of_another_commit_is_rejected_before_it_is_installed(tmp_path):
    index = make_index(tmp_path / "index", "flat")
    repo = tmp_path / "pytorch"
    nightly_repo(repo, [("08", "f" * 40)])  # the 08 wheel says it was built from c...c
    cache = tmp_path / "cache"
    started = time.time()
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(index), "--cache", str(cache)],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "git cccccccccccc" in proc.stdout and "is not the nightly under test" in proc.stdout
    assert not (cache / "venvs").exists() or os.listdir(cache / "venvs") == []  # nothing installed
    assert "installing" not in proc.stdout  # not even for a while: a CUDA build is GBs and minutes
    assert time.time() - started < 60


def test_a_wheel_of_another_commit_from_a_url_is_removed_after_install(tmp_path):
    flat = make_index(tmp_path / "wheels", "flat")
    repo = tmp_path / "pytorch"
    nightly_repo(repo, [("08", "f" * 40)])
    cache = tmp_path / "cache"
    with serve_index(flat) as url:
        proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", url, "--cache", str(cache)],
                              cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "is not the nightly under test" in proc.stdout and "installing" in proc.stdout
    assert os.listdir(cache / "venvs") == []  # the rejected environment is gone


def test_too_little_free_space_aborts_before_any_install(tmp_path, monkeypatch, capsys):
    from sac_repro.bisecting import bisect_torch
    from sac_repro.bisecting import caches, envs
    index = make_index(tmp_path / "index", "flat")
    monkeypatch.setattr(caches, "free_bytes", lambda path: int(0.05 * caches.GB))
    rc = bisect_torch.main(["nightly", "2025-09-07", "--index", str(index), "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 128, err
    assert "needs about 0.3 GB free under" in err and "and 0.1 GB are free" in err
    assert not (tmp_path / "cache" / "venvs").exists() or os.listdir(tmp_path / "cache" / "venvs") == []
    assert envs.needed_bytes(None, "cpu") == envs.NEEDS["cpu"] and envs.needed_bytes() == envs.NEEDS["cuda"]


def test_the_cache_lists_and_prunes_only_its_own_environments(tmp_path):
    index = make_index(tmp_path / "index", "flat")
    cache = tmp_path / "cache"
    for day in ("2025-09-06", "2025-09-07"):
        assert bisect("nightly", day, "--index", str(index), cache=cache)[0] in (0, 1)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the cache's")
    os.symlink(outside, cache / "venvs" / "a-link-out")
    mine = cache / "venvs" / "my-venv"  # a user's own environment, put there by hand: no build record
    (mine / "bin").mkdir(parents=True)
    (mine / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (old,) = (cache / "venvs").glob("torch-2.10.0.dev20250906+cpu-*")
    (new,) = (cache / "venvs").glob("torch-2.10.0.dev20250907+cpu-*")
    os.utime(old / ".last-used", (time.time() - 10 * 86400,) * 2)
    rc, out = bisect("cache", cache=cache)
    assert rc == 0, out
    assert "torch-2.10.0.dev20250906+cpu" in out and "aaaaaaaaaaaa" in out and "bbbbbbbbbbbb" in out
    assert "total on disk:" in out
    rc, out = bisect("cache", "--prune", "--older-than", "5", cache=cache)
    assert rc == 0 and "removed 1 environment: torch-2.10.0.dev20250906" in out, out
    assert not old.exists() and new.exists()
    rc, out = bisect("cache", "--prune", "--keep", "0", cache=cache)
    assert rc == 0 and "removed 1 environment" in out, out
    # the store that its installs made is its own: what no environment links any more goes, named
    assert "removed 2 packages that no environment links from bisect_torch.py's uv store %s (sacstubdep, torch)" % (
        cache / "uv") in out, out
    assert (outside / "keep.txt").read_text() == "not the cache's"  # never followed out
    assert (mine / "pyvenv.cfg").exists(), out  # only what the tool built and recorded is pruned
    assert "keeping my-venv: not built by bisect_torch.py" in out, out
    # the store stays whole: a build removed can be installed again
    assert bisect("nightly", "2025-09-07", "--index", str(index), cache=cache)[0] == 0
    assert bisect("cache", "--prune", cache=cache)[0] == 128


def test_release_indexes_for_variants():
    from sac_repro.bisecting import indexes
    assert indexes.release_index(None, None) is None
    assert indexes.release_index("cpu", None) == "https://download.pytorch.org/whl/cpu"
    assert indexes.release_index("cu128", "/my/index") == "/my/index"
    assert indexes.nightly_index(None, None) == "https://download.pytorch.org/whl/nightly/cpu"
    assert indexes.nightly_index("cu128", None) == "https://download.pytorch.org/whl/nightly/cu128"


# ----------------------------------------------------------- a build is known by its content
def judged(out):
    """(verdict, git hash) of a build's line: `torch VERSION VERDICT (git HASH) exit N; ...`."""
    m = re.search(r"^torch \S+ +(\w+) +\(git (\w+)\)", out, re.M)
    return m.groups() if m else None


def test_one_release_from_two_folders_of_one_name_is_two_builds(tmp_path):
    """`--index wheels` from two folders whose 2.9.1 wheels differ: each gets its own environment
    and its own verdict, and the listing says which wheel and which index each holds."""
    cache = tmp_path / "cache"
    wheels = {}
    for where, behaviour, sha in (("a", "broken", "d" * 40), ("b", "fixed", "e" * 40)):
        folder = tmp_path / where / "wheels"
        folder.mkdir(parents=True)
        wheels[where] = folder / build_stub_wheel(str(folder), None, behaviour, sha, version="2.9.1+cpu")
    rc, out = bisect("matrix", "2.9.1", "--index", "wheels", cache=cache, cwd=tmp_path / "a")
    assert rc < 128 and judged(out) == ("reproduced", "dddddddddddd"), out
    rc, out = bisect("matrix", "2.9.1", "--index", "wheels", cache=cache, cwd=tmp_path / "b")
    assert rc < 128 and judged(out) == ("not_reproduced", "eeeeeeeeeeee"), out
    rc, out = bisect("cache", cache=cache)
    assert rc == 0, out
    for where, sha in (("a", "d" * 40), ("b", "e" * 40)):
        line = next((l for l in out.splitlines() if sha256_of(wheels[where]) in l), "")
        assert sha in line and str(wheels[where].parent) in line and wheels[where].name in line, out


def test_same_named_nightlies_of_two_commits_from_two_indexes_are_two_builds(tmp_path):
    """One wheel name in a folder and on an index over HTTP, of two commits that behave apart:
    two verdicts. The first wheel again, from an index that gives no hashes (so it is downloaded
    and hashed), is the first build: reused, and the download is not kept."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    name = build_stub_wheel(str(one), "07", "fixed", "b" * 40)
    assert build_stub_wheel(str(two), "07", "broken", "9" * 40) == name
    cache = tmp_path / "cache"
    rc, out = bisect("nightly", "2025-09-07", "--index", str(one), cache=cache)
    assert rc == 0 and judged(out) == ("not_reproduced", "bbbbbbbbbbbb"), out
    with serve_index(two) as url:
        rc, out = bisect("nightly", "2025-09-07", "--index", url, cache=cache)
    assert rc == 1 and judged(out) == ("reproduced", "999999999999"), out
    with serve_index(one, hashes=False) as url:
        rc, out = bisect("nightly", "2025-09-07", "--index", url, cache=cache)
    assert rc == 0 and judged(out) == ("not_reproduced", "bbbbbbbbbbbb") and "installing" not in out, out
    assert len(list((cache / "venvs").iterdir())) == 2
    assert not [f for _, _, files in os.walk(cache / "downloads") for f in files]


def test_a_wheel_rebuilt_under_its_name_and_commit_is_installed_again(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    build_stub_wheel(str(index), "07", "fixed", "b" * 40)
    cache = tmp_path / "cache"
    rc, out = bisect("nightly", "2025-09-07", "--index", str(index), cache=cache)
    assert rc == 0, out
    build_stub_wheel(str(index), "07", "broken", "b" * 40, extra="\n# rebuilt\n")
    rc, out = bisect("nightly", "2025-09-07", "--index", str(index), cache=cache)
    assert rc == 1 and "installing" in out and judged(out) == ("reproduced", "bbbbbbbbbbbb"), out


@pytest.mark.unit
def test_a_folder_wheels_hash_is_read_once_until_the_file_changes(tmp_path, monkeypatch):
    """A cached step must not read a multi-GB wheel again: its hash is kept by path, size and times."""
    from sac_repro.bisecting import builds
    wheel, cache = tmp_path / "w.whl", str(tmp_path / "cache")
    wheel.write_bytes(b"one")
    assert builds.file_sha256(str(wheel), cache) == hashlib.sha256(b"one").hexdigest()
    reads, real = [], builds.sha256_of
    monkeypatch.setattr(builds, "sha256_of", lambda path: reads.append(path) or real(path))
    assert builds.file_sha256(str(wheel), cache) == hashlib.sha256(b"one").hexdigest() and reads == []
    wheel.write_bytes(b"two!")
    assert builds.file_sha256(str(wheel), cache) == hashlib.sha256(b"two!").hexdigest() and len(reads) == 1


# ----------------------------------------------------------- interruptions and concurrency
def test_a_prune_never_counts_or_keeps_a_half_built_environment(tmp_path):
    index = make_index(tmp_path / "index", "flat")
    cache = tmp_path / "cache"
    assert bisect("nightly", "2025-09-07", "--index", str(index), cache=cache)[0] == 0
    venvs = cache / "venvs"
    (complete,) = list(venvs.iterdir())
    os.utime(complete / ".last-used", (time.time() - 3600,) * 2)
    # what a killed install and a killed prune leave, both newer than the complete one, marked
    for leftover in ("torch-2.10.0.dev20250906+cpu-0123456789abcdef.partial", complete.name + ".removing"):
        (venvs / leftover / "bin").mkdir(parents=True)
        caches.mark(str(venvs / leftover))
    rc, out = bisect("cache", cache=cache)
    assert rc == 0 and ".partial" not in out and ".removing" not in out, out
    rc, out = bisect("cache", "--prune", "--keep", "1", cache=cache)
    assert rc == 0 and "removed 0 environments" in out, out
    assert [p.name for p in venvs.iterdir()] == [complete.name]  # the stale ones went, the complete one stayed


def test_a_prune_waits_for_an_install_and_leaves_an_environment_in_use(tmp_path):
    """A prune while another process installs (its download held open): the prune says it waits,
    the install ends and its repro runs, and the prune keeps the environment that is in use."""
    wheels = make_index(tmp_path / "wheels", "flat")
    cache = tmp_path / "cache"
    hold, asked = threading.Event(), threading.Event()
    with serve_index(wheels, hold=hold, asked=asked, refuse=False) as url:
        install = subprocess.Popen([sys.executable, BISECT, "nightly", "2025-09-06", "--installer", "pip", "--index",
                                    url, "--cache", str(cache)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        prune = None
        try:
            assert asked.wait(300), "pip never asked for the wheel"
            prune = subprocess.Popen([sys.executable, BISECT, "cache", "--prune", "--keep", "0", "--cache", str(cache)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            said = []
            threading.Thread(target=lambda: said.extend(prune.stdout), daemon=True).start()
            deadline = time.time() + 60
            while not said and time.time() < deadline:
                time.sleep(0.2)
            assert said and "waiting" in said[0] and prune.poll() is None, said
            hold.set()
            out, _ = install.communicate(timeout=600)
            prune.wait(600)
            time.sleep(0.5)
        finally:
            for p in (install, prune):
                if p is not None and p.poll() is None:
                    p.kill()
    assert install.returncode == 1 and judged(out) == ("reproduced", "aaaaaaaaaaaa"), out
    assert prune.returncode == 0 and "in use" in "".join(said) and "removed 0 environments" in "".join(said), said
    (env,) = list((cache / "venvs").iterdir())
    assert (env / "pyvenv.cfg").exists() and os.access(env / "bin" / "python", os.X_OK)


def test_an_incomplete_environment_is_built_again_and_judged(tmp_path):
    """No pyvenv.cfg, then a bin/python that points at a Python since removed: each is found out,
    removed and built again, and the build's verdict is the right one."""
    index = make_index(tmp_path / "index", "flat")
    cache = tmp_path / "cache"
    rc, out = bisect("nightly", "2025-09-06", "--index", str(index), cache=cache)
    assert rc == 1, out
    (env,) = list((cache / "venvs").iterdir())
    (env / "pyvenv.cfg").unlink()
    rc, out = bisect("nightly", "2025-09-06", "--index", str(index), cache=cache)
    assert rc == 1 and "no pyvenv.cfg" in out and "installing" in out and judged(out) == ("reproduced", "aaaaaaaaaaaa"), out
    (env / "bin" / "python").unlink()
    os.symlink(tmp_path / "a-python-since-removed" / "python3", env / "bin" / "python")
    rc, out = bisect("nightly", "2025-09-06", "--index", str(index), cache=cache)
    assert rc == 1 and "does not run" in out and "installing" in out and judged(out) == ("reproduced", "aaaaaaaaaaaa"), out
    assert [p.name for p in (cache / "venvs").iterdir()] == [env.name]


def fake_env(path, sha256, git_version):
    """An environment as an install leaves it, without installing: pyvenv.cfg, a bin/python that
    runs (this one), torch's version.py in its site-packages, and its build record."""
    (path / "bin").mkdir(parents=True)
    os.symlink(sys.executable, path / "bin" / "python")
    (path / "pyvenv.cfg").write_text("home = %s\n" % os.path.dirname(os.path.realpath(sys.executable)))
    torch = path / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages" / "torch"
    torch.mkdir(parents=True)
    (torch / "version.py").write_text("__version__ = '2.9.1'\ngit_version = '%s'\n" % git_version)
    (path / envs.RECORD).write_text(json.dumps({"sha256": sha256, "git_version": git_version}))
    return torch / "version.py"


@pytest.mark.unit
def test_an_environment_whose_torch_or_record_changed_is_not_taken(tmp_path):
    """Another torch installed into a cached environment since (pip install torch in it), or its
    record gone: not the build it was made for, so it is built again, never judged as that build."""
    build = builds.Build("w.whl", "2.9.1", "f" * 64, "w.whl", None, None)
    version = fake_env(tmp_path / "env", build.sha256, "a" * 40)
    assert envs.unusable(str(tmp_path / "env"), build) is None
    version.write_text("__version__ = '2.9.1'\ngit_version = '%s'\n" % ("b" * 40))
    assert envs.unusable(str(tmp_path / "env"), build) == "holds torch of commit %s, not the recorded %s" % (
        "b" * 40, "a" * 40)
    (tmp_path / "env" / envs.RECORD).unlink()
    assert envs.unusable(str(tmp_path / "env"), build) == "has no build record (%s)" % envs.RECORD


@pytest.mark.unit
def test_a_prune_keeps_the_most_recently_used_and_the_downloads_under_way(tmp_path):
    """--keep 1 keeps the environment used last, whatever the order of the names; the downloads of
    a process that runs (this one) stay, those of a process that is gone go."""
    cache = tmp_path / "cache"
    for name, days_ago in (("torch-a-new", 0), ("torch-b-old", 10)):
        (cache / "venvs" / name).mkdir(parents=True)
        (cache / "venvs" / name / envs.LAST_USED).write_text("")
        (cache / "venvs" / name / envs.RECORD).write_text('{"sha256": "%s"}' % name)  # the tool built it
        os.utime(cache / "venvs" / name / envs.LAST_USED, (time.time() - days_ago * 86400,) * 2)
    running = builds.download_folder(str(cache))
    cut_short_download(cache)
    an_install_ran(cache, "torch-a-new", "torch-b-old")
    assert envs.prune(str(cache), keep=1) == ["torch-b-old"]
    assert os.listdir(cache / "venvs") == ["torch-a-new"]
    assert os.listdir(cache / "downloads") == [os.path.basename(running)]


@pytest.mark.unit
def test_installer_uv_without_uv_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))  # no uv beside it either
    with pytest.raises(exits.UsageError, match="--installer uv: uv is not on PATH"):
        envs.choose_installer("uv")
    assert envs.choose_installer("auto") == ("pip", None)
    (tmp_path / "uv").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "uv", 0o755)
    assert envs.choose_installer("auto") == ("uv", str(tmp_path / "uv"))


def test_sigterm_while_the_venv_is_made_leaves_no_process_and_no_partial(tmp_path):
    index = make_index(tmp_path / "index", "flat")
    cache, started = tmp_path / "cache", tmp_path / "venv-started"
    env = dict(os.environ, PYTHONPATH=slow_venv(tmp_path / "fake"), SLOW_VENV_STARTED=str(started))
    proc = subprocess.Popen([sys.executable, BISECT, "nightly", "2025-09-07", "--index", str(index), "--cache", str(cache)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.time() + 120
        while not (started.exists() and started.read_text()) and time.time() < deadline:
            time.sleep(0.1)
        makers = [int(p) for p in started.read_text().split()]
        assert set(makers) <= set(children_of(proc.pid))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and "interrupted by SIGTERM" in out, out
    time.sleep(4)  # past the moment the venv's own child would write into the environment
    assert not [p for p in makers if os.path.exists("/proc/%d" % p)], "the venv's processes still run"
    assert list((cache / "venvs").iterdir()) == []


def test_a_file_url_index_installs_as_its_folder(tmp_path):
    import urllib.parse
    index = make_index(tmp_path / "my wheels", "pep503")
    rc, out = bisect("nightly", "2025-09-07", "--index", "file://" + urllib.parse.quote(str(index)), cache=tmp_path / "cache")
    assert rc == 0 and "not_reproduced" in out, out
    assert "from %s with" % index in out


@pytest.mark.unit
def test_an_environment_whose_python_changed_version_is_not_taken(tmp_path):
    """Its Python was upgraded under it (3.x to 3.y): torch sits in the old version's site-packages,
    and the environment's Python finds no torch there."""
    venv = tmp_path / "torch-x"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    ours = "python%d.%d" % sys.version_info[:2]
    for version in ("python3.9", ours):
        (venv / "lib" / version / "site-packages" / "torch").mkdir(parents=True)
    (venv / "lib" / "python3.9" / "site-packages" / "torch" / "version.py").write_text("__version__ = '2.9.1'\n")
    assert not envs.runs_its_python(str(venv))
    (venv / "lib" / ours / "site-packages" / "torch" / "version.py").write_text("__version__ = '2.9.1'\n")
    assert envs.runs_its_python(str(venv))


@pytest.mark.unit
@pytest.mark.parametrize("index, kind", [
    ("https://download.pytorch.org/whl/cpu", "cpu"), ("https://download.pytorch.org/whl/cpu/", "cpu"),
    ("https://download.pytorch.org/whl/nightly/cpu", "cpu"), ("https://download.pytorch.org/whl/cu128", "cuda"),
    ("https://download.pytorch.org/whl/cpu-cxx11-abi-not-cpu/cu128", "cuda"), ("https://pypi.org/simple", "cuda"),
])
def test_the_free_space_asked_for_follows_the_index(index, kind):
    """A CPU index needs a CPU build's space; any other, a CUDA build's (PyPI's Linux torch)."""
    assert envs.needed_bytes(None, None, index) == envs.NEEDS[kind]


@pytest.mark.unit
def test_a_wheel_is_known_by_all_of_its_bytes(tmp_path):
    """Two wheels that differ only in their last byte, past the first MiB read, are two builds."""
    body = os.urandom(3 * (1 << 20) + 17)
    a, b = tmp_path / "a.whl", tmp_path / "b.whl"
    a.write_bytes(body)
    b.write_bytes(body[:-1] + bytes([body[-1] ^ 1]))
    assert builds.sha256_of(str(a)) == hashlib.sha256(body).hexdigest()
    assert builds.file_sha256(str(a), str(tmp_path)) != builds.file_sha256(str(b), str(tmp_path))


@pytest.mark.unit
def test_a_prune_of_a_cache_named_on_a_users_folder_removes_only_its_own(tmp_path):
    """`--cache ~` with a ~/downloads of the user's: folders there not marked by this tool, and
    .partial folders not named as this tool names its environments, are the user's."""
    cache = tmp_path / "home"
    for folder in ("downloads/my_photos", "downloads/2024-taxes", "venvs/proj.partial"):
        (cache / folder).mkdir(parents=True)
        (cache / folder / "keep.txt").write_text("mine")
    theirs = cache / ("uv.%d.new" % dead_pid())  # the user's, named as a store under way
    theirs.mkdir()
    (theirs / "keep.txt").write_text("mine")
    # what this tool left, cut short: a download, an environment, a store before its rename
    cut_short_download(cache)
    caches.make_own(str(cache / "venvs" / "torch-2.9.1-0123456789abcdef.partial"))
    store = caches.make_own(str(cache / ("uv.%d.new" % dead_pid())))
    an_install_ran(cache)
    envs.prune(str(cache), keep=0)
    assert sorted(os.listdir(cache / "downloads")) == ["2024-taxes", "my_photos"]
    assert os.listdir(cache / "venvs") == ["proj.partial"]
    assert (theirs / "keep.txt").read_text() == "mine" and not os.path.exists(store)


@pytest.mark.unit
@pytest.mark.parametrize("args", [["--prune"], ["--prune", "--keep", "0"]], ids=["usage-error", "no-install-ran"])
def test_a_prune_of_a_folder_no_install_used_makes_no_file_there(tmp_path, args):
    """`cache --prune --cache DIR` made DIR/lock (and DIR/locks/NAME), and left them, even where it
    then stopped on "--prune needs --keep". The usage is checked first; and where no install ever
    ran (no lock file of its own), a prune makes nothing and removes nothing. An absent DIR stays so."""
    mine = tmp_path / "mine"
    (mine / "venvs" / "torch-x").mkdir(parents=True)
    (mine / "venvs" / "torch-x" / envs.RECORD).write_text('{"sha256": "x"}')  # recorded as the tool's, by hand
    before = snapshot(mine)
    for cache in (mine, tmp_path / "absent"):
        rc, out = bisect("cache", *args, cache=cache)
        assert rc == (128 if args == ["--prune"] else 0), out
        assert ("--prune needs --keep" in out) == (rc == 128), out
        assert ("nothing to prune in %s: no install of bisect_torch.py ran there" % cache in out) == (rc == 0), out
    assert snapshot(mine) == before and not (tmp_path / "absent").exists()


@pytest.mark.unit
def test_a_prune_keeps_an_environment_whose_lock_file_is_gone_and_makes_none(tmp_path, capsys):
    """An environment of the tool's (its record) whose lock file went: whether a process uses it
    cannot be told, so it is kept, and no lock file is made in its stead."""
    cache = tmp_path / "cache"
    caches.cache_dir(str(cache), make=True)  # an install ran here: the cache's lock file
    (cache / "venvs" / "torch-x").mkdir(parents=True)
    (cache / "venvs" / "torch-x" / envs.RECORD).write_text('{"sha256": "x"}')
    assert envs.prune(str(cache), keep=0) == []
    assert "keeping torch-x: its lock file %s is gone, so whether a process uses it cannot be told" % (
        cache / "locks" / "torch-x") in capsys.readouterr().out
    assert (cache / "venvs" / "torch-x").exists() and not (cache / "locks").exists()


# ----------------------------------------------------------- what is the bundle's own in its cache
def snapshot(root):
    """{path under root: its bytes, or "dir"} of everything under root, links not followed."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in files:
            path = os.path.join(dirpath, f)
            out[os.path.relpath(path, root)] = os.readlink(path) if os.path.islink(path) else open(path, "rb").read()
    return out


def an_install_ran(cache, *environments):
    """The lock files that installs make first, as an install of each environment leaves them: a
    prune takes only these (where there are none, no install ran, and it makes none)."""
    caches.cache_dir(str(cache), make=True)
    for name in environments:
        os.makedirs(os.path.dirname(caches.env_lock(str(cache), name)), exist_ok=True)
        open(caches.env_lock(str(cache), name), "a").close()


def dead_pid():
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def cut_short_download(cache):
    """The folder a download of the bundle makes, left as a process that died mid-download leaves
    it: made by that process (a fork of this one), which is gone."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            folder = builds.download_folder(str(cache))
            with open(os.path.join(folder, "torch-2.9.1-cp312-cp312-linux_x86_64.whl"), "wb") as fh:
                fh.write(b"half a wheel")
            os.write(write, folder.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as fh:
        return fh.read()


@pytest.mark.unit
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.one_of(
    st.integers(0, 2 ** 22).map(str),  # a process id's name, as downloads were named before the mark
    st.tuples(st.integers(0, 99999), st.sampled_from("-._ x"), st.integers(0, 999)).map(lambda t: "%d%s%d" % t),
    st.sampled_from(["torch-2.9.1-0123456789abcdef.partial", "torch-x.removing", ".sac-repro-own", "uv"])),
    min_size=1, max_size=6, unique=True))
@example(names=["2024"])
@example(names=[str(os.getpid())])
def test_a_prune_keeps_every_folder_it_did_not_mark_byte_for_byte(names):
    """`--cache ~`: the user's ~/downloads/2024 (a number, no pid alive) and any folder under
    downloads/ or venvs/ named as the bundle names its own, but without its mark, survive a prune,
    every byte; a download the bundle marked, whose process is gone, goes."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "home")
        for top in ("downloads", "venvs"):
            for name in names:
                os.makedirs(os.path.join(cache, top, name))
                with open(os.path.join(cache, top, name, "taxes.pdf"), "wb") as fh:
                    fh.write(b"the user's %s\x00\xff" % name.encode())
        an_install_ran(cache)
        before = snapshot(cache)
        ours = cut_short_download(cache)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert envs.prune(cache, keep=0) == []
        assert not os.path.exists(ours), out.getvalue()
        assert [l for l in out.getvalue().splitlines() if l.startswith("removing")] == [
            "removing %s: a download whose process is gone" % ours]
        after = snapshot(cache)
        assert after == before


@pytest.mark.unit
def test_a_prune_lists_what_an_older_version_left_unmarked_with_a_command_that_removes_it(tmp_path):
    """A download folder named by a dead pid holding a wheel, and a torch-...partial environment,
    as versions before the mark left them: kept, each named on one line whose command removes it
    and nothing else."""
    cache = tmp_path / "cache"
    old_download = cache / "downloads" / str(dead_pid())
    old_download.mkdir(parents=True)
    (old_download / "torch-2.9.1+cpu-cp312-cp312-linux_x86_64.whl").write_bytes(b"half")
    old_partial = cache / "venvs" / "torch-2.9.1+cpu-0123456789abcdef.partial"
    (old_partial / "bin").mkdir(parents=True)
    (cache / "downloads" / "2024").mkdir()
    (cache / "downloads" / "2024" / "taxes.pdf").write_bytes(b"mine")
    an_install_ran(cache)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        envs.prune(str(cache), keep=0)
    said = out.getvalue().splitlines()
    for leftover in (old_download, old_partial):
        assert leftover.exists()
        (line,) = [l for l in said if str(leftover) in l]
        assert "keeping" in line and "rm -r" in line, line
        command = line[line.index("rm -r"):]
        subprocess.run(command, shell=True, check=True, cwd="/")
        assert not leftover.exists(), command
    assert not [l for l in said if "2024" in l], said  # a folder of the user's files is not even named
    assert (cache / "downloads" / "2024" / "taxes.pdf").read_bytes() == b"mine"


def test_a_prune_never_breaks_an_environment_that_a_users_uv_link_mode_would_symlink(tmp_path):
    """UV_LINK_MODE=symlink, set by the user for their own uv: the environments' files would be
    symlinks into the store, which a prune counts as linked by nothing (one link each) and empties,
    and the kept environment's torch no longer imports (a wrong 125 at every later step). The
    bundle's installs link as uv does by default, whatever UV_LINK_MODE says."""
    index = make_index(tmp_path / "index", "flat")
    cache = tmp_path / "cache"
    symlink = {"UV_LINK_MODE": "symlink"}
    assert bisect("nightly", "2025-09-07", "--index", str(index), cache=cache, env=symlink)[0] in (0, 1)
    (venv,) = (cache / "venvs").glob("torch-2.10.0.dev20250907+cpu-*")
    rc, out = bisect("cache", "--prune", "--keep", "1", cache=cache, env=symlink)
    assert rc == 0 and "removed 0 environments" in out, out
    # the stub torch imports only in the repro's child: its files, and its version as pip reads it
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, importlib.util as u; "
                           "print(m.version('torch'), open(u.find_spec('torch').origin).read(10))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("2.10.0.dev20250907"), (out, proc.stderr[-1000:])


def uv_exe():
    return os.path.join(os.path.dirname(sys.executable), "uv")


def store_with_a_package(store, tmp_path):
    """A uv store holding one package that nothing links any more: installed from it with uv, and
    the installed copy since removed."""
    from wheels import dependency_wheel
    (tmp_path / "wheels").mkdir(exist_ok=True)
    dependency_wheel(str(tmp_path / "wheels"))
    target = tmp_path / "target"
    subprocess.run([uv_exe(), "pip", "install", "-q", "--target", str(target), "--no-index", "--find-links",
                    str(tmp_path / "wheels"), "sacstubdep", "--cache-dir", str(store)], check=True)
    shutil.rmtree(target)
    assert [f for f in snapshot(store) if "sacstubdep/__init__.py" in f]


@pytest.mark.unit
def test_a_prune_leaves_a_uv_store_it_did_not_make_byte_for_byte(tmp_path, monkeypatch):
    """`--cache ~/.cache`: CACHE/uv is the user's own uv cache. A prune leaves it whole, says so and
    how to empty it, and never says that it removed packages from it."""
    monkeypatch.setenv("PATH", os.path.dirname(uv_exe()) + os.pathsep + os.environ["PATH"])
    cache = tmp_path / "dot-cache"
    store_with_a_package(cache / "uv", tmp_path)
    an_install_ran(cache)  # an install that used pip, say
    before = snapshot(cache / "uv")
    rc, out = bisect("cache", "--prune", "--keep", "0", cache=cache)
    assert rc == 0, out
    assert snapshot(cache / "uv") == before, out
    (line,) = [l for l in out.splitlines() if str(cache / "uv") in l and "keeping" in l]
    assert "not made by bisect_torch.py" in line and "uv cache clean --cache-dir %s" % (cache / "uv") in line, line
    assert "removed 0 environments" in out and "removed" not in out.replace("removed 0 environments", ""), out
    assert "uv store %s: 0.00 GB that no environment links (cache --prune keeps it: not made by" % (cache / "uv") in out


@pytest.mark.unit
def test_a_prune_empties_its_own_uv_store_of_what_no_environment_links_and_says_what_went(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(uv_exe()) + os.pathsep + os.environ["PATH"])
    cache = tmp_path / "cache"
    store = caches.own_store(str(cache), "uv")
    store_with_a_package(cache / "uv", tmp_path)
    an_install_ran(cache)
    rc, out = bisect("cache", "--prune", "--keep", "0", cache=cache)
    assert rc == 0, out
    assert not [f for f in snapshot(store) if "sacstubdep" in f], out
    assert caches.is_own(store)  # still the bundle's store: the next install goes on using it
    (line,) = [l for l in out.splitlines() if "from bisect_torch.py's uv store" in l]
    assert "removed 1 package" in line and "sacstubdep" in line, line
    assert "uv store %s: 0.00 GB that no environment links (cache --prune removes them, through uv)" % store in out


@pytest.mark.unit
def test_a_users_own_file_named_as_the_hash_memo_is_read_never_written(tmp_path, capsys):
    """`--cache ~` with a ~/hashes.json of the user's: the wheel's hash is read from the wheel, and
    their file stays as it was, every byte; this tool's own memo, or one an older version wrote
    (unmarked, entries of its shape only), is kept up."""
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"a wheel")
    theirs = b'{"/not/a/file/here": [1, 2], "notes": "mine"}'
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "hashes.json").write_bytes(theirs)
    assert builds.file_sha256(str(wheel), str(tmp_path / "home")) == hashlib.sha256(b"a wheel").hexdigest()
    assert (tmp_path / "home" / "hashes.json").read_bytes() == theirs
    assert "not bisect_torch.py's" in capsys.readouterr().out
    older = {str(tmp_path / "elsewhere.whl"): [1, 2, 3, 4, "0" * 64]}
    (tmp_path / "older").mkdir()
    (tmp_path / "older" / "hashes.json").write_text(json.dumps(older))
    builds.file_sha256(str(wheel), str(tmp_path / "older"))
    memo = json.loads((tmp_path / "older" / "hashes.json").read_text())
    assert memo[str(wheel)][-1] == hashlib.sha256(b"a wheel").hexdigest() and memo[""] == caches.MARK_TEXT
    # a hashes.json that is a symlink (to a memo of this tool's shape, kept elsewhere): the user's
    # link, left as it is, not replaced by a file of ours
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "hashes.json").symlink_to(tmp_path / "older" / "hashes.json")
    kept = (tmp_path / "older" / "hashes.json").read_bytes()
    (tmp_path / "v.whl").write_bytes(b"another wheel")  # one the memo has no entry for
    assert builds.file_sha256(str(tmp_path / "v.whl"), str(tmp_path / "linked")) == hashlib.sha256(
        b"another wheel").hexdigest()
    assert (tmp_path / "linked" / "hashes.json").is_symlink() and (tmp_path / "older" / "hashes.json").read_bytes() == kept


@pytest.mark.unit
def test_a_folder_at_an_environments_name_that_this_tool_did_not_make_is_kept(tmp_path):
    """Only an environment with its build record (or a marked one under way) is removed to be
    built again; anything else at its name is in the way, named, and left whole."""
    build = builds.Build("w.whl", "2.9.1", "0123456789abcdef" * 4, "w.whl", None, None)
    theirs = tmp_path / "venvs" / envs.env_name(build)
    (theirs / "bin").mkdir(parents=True)
    (theirs / "pyvenv.cfg").write_text("mine")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(exits.UsageError, match="in the way, and not bisect_torch.py's"):
        envs.ensure_venv(build, str(tmp_path), "auto", 0)
    assert "removing" not in out.getvalue()  # nothing said that did not happen
    with pytest.raises(exits.UsageError, match="in the way, and not bisect_torch.py's"):
        envs.discard(str(theirs))
    assert (theirs / "pyvenv.cfg").read_text() == "mine"
    (theirs / envs.RECORD).write_text("{}")
    envs.discard(str(theirs))
    assert os.listdir(tmp_path / "venvs") == []


@pytest.mark.unit
def test_only_a_marked_folder_is_removed_as_its_own(tmp_path):
    """The last guard of every removal: a folder without the mark, or a symlink to a marked one,
    is left as it is, whoever asks."""
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    (theirs / "sub" / "keep.txt").write_text("mine")
    ours = caches.make_own(str(tmp_path / "ours"))
    os.symlink(ours, tmp_path / "link")
    for path in (theirs, tmp_path / "link"):
        caches.remove_own(str(path))
    assert (theirs / "sub" / "keep.txt").read_text() == "mine" and os.path.islink(tmp_path / "link")
    caches.remove_own(ours)
    assert sorted(os.listdir(tmp_path)) == ["link", "theirs"]


@pytest.mark.unit
def test_without_uv_its_own_store_is_kept_and_it_says_so(tmp_path, monkeypatch, capsys):
    """Only uv cleans uv's store: without uv, a prune removes nothing from it, and neither the
    prune nor the listing says that it does."""
    from sac_repro.bisecting import bisect_torch
    cache = tmp_path / "cache"
    caches.own_store(str(cache), "uv")
    store_with_a_package(cache / "uv", tmp_path)
    before = snapshot(cache / "uv")
    monkeypatch.setattr(envs, "find_uv", lambda: None)
    an_install_ran(cache)
    envs.prune(str(cache), keep=0)
    assert snapshot(cache / "uv") == before
    assert "kept 1 package that no environment links (sacstubdep): uv is not on PATH" in capsys.readouterr().out
    assert bisect_torch.store_fate(str(cache), "uv") == "cache --prune keeps them: uv is not on PATH"
