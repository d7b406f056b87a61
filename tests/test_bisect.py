"""bisect_torch.py: the nightly step under a real `git bisect run`, and the release search.

The nightly tests use stub wheels (tests/wheels.py, the only place stubs are used). One nightly, 12,
loads this environment's real torch and reverts the fix in-process (SAC's dispatch modes stop
opting in with ignore_compile_internals), so that the whole repro runs on its step (release tier);
the others replay a child's result recorded with real torch, which the script's parent judges.
"""
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from wheels import (BISECT, children_of, git, main_sha, nightly_repo, nightly_world, OTHER_COMMIT, PYTAG,  # noqa: F401
                    quick_venvs, serve_index)


def step(world, day, *extra):
    git(world["repo"], "checkout", "-q", world["commits"][day])
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(world["wheels"]),
                           "--cache", str(world["cache"])] + list(extra),
                          cwd=world["repo"], capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def test_git_bisect_run_finds_the_fixing_nightly(nightly_world):
    w = nightly_world
    repo, c = w["repo"], w["commits"]
    git(repo, "checkout", "-q", "nightly")
    git(repo, "bisect", "start", "--term-old", "broken", "--term-new", "fixed", c["10"], c["01"])
    try:
        proc = subprocess.run(["git", "bisect", "run", sys.executable, BISECT, "nightly-step", "--hunt-fix",
                               "--index", str(w["wheels"]), "--cache", str(w["cache"])],
                              cwd=repo, capture_output=True, text=True, timeout=1800)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert "%s is the first fixed commit" % c["07"] in out
        # one line per step: date, wheel, torch git hash, verdict
        assert "2025-09-07  torch-2.10.0.dev20250907+cpu-" in out and "not_reproduced -> exit 1" in out
        rng = subprocess.run([sys.executable, BISECT, "nightly-range"], cwd=repo, capture_output=True,
                             text=True).stdout
        assert "git log --oneline %s..%s" % (main_sha("06"), main_sha("07")) in rng
    finally:
        git(repo, "bisect", "reset")


@pytest.mark.parametrize("day, rc, says", [
    ("06", 1, "reproduced -> exit 1"),
    ("09", 0, "not_reproduced -> exit 0"),
    # the whole repro on real torch: in the release tier, whose real releases bisect the same way
    pytest.param("12", 1, "reproduced -> exit 1", marks=pytest.mark.release),
    ("04", 125, "no torch wheel for 2025-09-04"),
    ("08", 125, "could not install"),
    ("05", 125, "crashed: killed by SIGSEGV"),
])
def test_each_kind_of_nightly_maps_to_its_exit_code(nightly_world, day, rc, says):
    got, out = step(nightly_world, day)
    assert got == rc, out
    assert says in out


def test_a_wheel_of_another_commit_is_skipped_naming_both(nightly_world):
    got, out = step(nightly_world, "11")
    assert got == 125, out
    assert "is not the nightly under test" in out
    assert OTHER_COMMIT in out and nightly_world["commits"]["11"] in out and main_sha("11") in out


def dists(env):
    return {p.name.split("-")[0] for p in env.glob("lib/python*/site-packages/*.dist-info")}


@pytest.mark.real_venv
@pytest.mark.release  # ensurepip's seconds: in the fast tier the quick copy refuses any other venv command
def test_each_torch_gets_a_standard_virtual_environment(nightly_world, tmp_path, quick_venv):
    """As `python3 -m venv` makes one (the tests' template of quick copies is one): with pip, and
    with whatever else the Python's venv puts in (setuptools on 3.11, which torch 2.5's Inductor
    imports: without it 2.5.1 cannot compile)."""
    git(nightly_world["repo"], "checkout", "-q", nightly_world["commits"]["03"])
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(nightly_world["wheels"]),
                           "--cache", str(cache)], cwd=nightly_world["repo"], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (env,) = (cache / "venvs").iterdir()
    want = dists(pathlib.Path(quick_venv["QUICK_VENV_TEMPLATE"]))
    assert "pip" in want and want <= dists(env), (want, dists(env))


def test_the_quick_venv_of_the_tests_makes_what_venv_makes(quick_venv, tmp_path):
    """The stand-in that the plumbing tests take: the files of a real environment, its own path
    wherever venv wrote the template's, a Python that runs in it and a pip that installs into it."""
    real, quick = pathlib.Path(quick_venv["QUICK_VENV_TEMPLATE"]), tmp_path / "quick"
    subprocess.run([sys.executable, "-m", "venv", str(quick)], check=True, env=dict(os.environ, **quick_venv))

    def files(root):
        return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                      if "__pycache__" not in d)
    assert files(quick) == files(real)
    for path in ["pyvenv.cfg"] + ["bin/" + n for n in os.listdir(real / "bin") if not (real / "bin" / n).is_symlink()]:
        text = (quick / path).read_text()
        assert str(real) not in text and text.replace(str(quick), str(real)) == (real / path).read_text(), path
    where = subprocess.run([str(quick / "bin" / "python"), "-c", "import sys, pip; print(sys.prefix, pip.__file__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert where[0] == str(quick) and where[1].startswith(str(quick)), where


def test_hunt_fix_swaps_the_step(nightly_world):
    got, out = step(nightly_world, "03", "--hunt-fix")
    assert got == 0 and "reproduced -> exit 0" in out, out


def bisect_run(tmp_path, terms, *step_args):
    """`git bisect run` of nightly-step over a fresh nightly history of 8 days, 01 bad/broken and 08
    good/fixed: (exit code, output, the steps it ran)."""
    repo = tmp_path / "pytorch"
    c = nightly_repo(repo, [("%02d" % d, main_sha("%02d" % d)) for d in range(1, 9)])
    old, new = terms
    subprocess.run(["git", "-C", str(repo), "bisect", "start", "--term-old", old, "--term-new", new, c["08"], c["01"]],
                   check=True, capture_output=True)
    proc = subprocess.run(["git", "bisect", "run", sys.executable, BISECT, "nightly-step",
                           "--cache", str(tmp_path / "cache")] + list(step_args),
                          cwd=repo, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    return proc.returncode, out, len(re.findall(r"^running ", out, re.M))


def closed_port_url():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d/" % port


def test_an_unreachable_index_aborts_the_bisect_at_its_first_step(tmp_path):
    """Connection refused on every step: the bisect stops at once, naming why, instead of skipping
    every commit and ending with "could be any of" the whole range."""
    url = closed_port_url()
    rc, out, steps = bisect_run(tmp_path, ("good", "bad"), "--index", url)
    assert rc == 128 and steps == 1, out
    assert "cannot reach the index %storch/" % url in out and "Connection refused" in out
    assert "could be any of" not in out and "skip" not in out


def test_fix_terms_without_hunt_fix_abort_the_bisect_at_once(tmp_path):
    """An index that would serve every step: the terms alone stop it, before any wheel is read."""
    import zipfile
    (tmp_path / "wheels").mkdir()
    for day in range(1, 9):
        name = "torch-2.10.0.dev202509%02d+cpu-%s-%s-linux_x86_64.whl" % (day, PYTAG, PYTAG)
        with zipfile.ZipFile(str(tmp_path / "wheels" / name), "w") as z:
            z.writestr("torch/version.py", "git_version = %r\n" % main_sha("%02d" % day))
    rc, out, steps = bisect_run(tmp_path, ("broken", "fixed"), "--index", str(tmp_path / "wheels"))
    assert rc == 128 and steps == 1, out
    assert "the bisect's terms are broken/fixed" in out and "add --hunt-fix" in out
    assert not (tmp_path / "cache").exists()


def test_outside_a_nightly_checkout_the_step_aborts(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@e", "-c", "user.name=t",
                    "commit", "-q", "--allow-empty", "-m", "not a nightly"], check=True)
    proc = subprocess.run([sys.executable, BISECT, "nightly-step"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode >= 128 and "not a commit of pytorch's nightly branch" in proc.stderr


def test_bad_release_arguments_abort_before_asking_pypi():
    offline = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
    proc = subprocess.run([sys.executable, BISECT, "releases", "2.12.0", "2.8.0"], capture_output=True,
                          text=True, env=offline)
    assert proc.returncode == 128 and "must be older" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, BISECT, "releases", "two", "2.8.0"], capture_output=True,
                          text=True, env=offline)
    assert proc.returncode == 128 and "not a release version" in proc.stderr, proc.stderr


def test_a_python_without_venv_says_what_to_install(nightly_world, tmp_path):
    """Debian and Ubuntu ship `python3 -m venv` apart (python3-venv); without it the step says
    so in one line and aborts, instead of calling it a bug."""
    fake = tmp_path / "fake" / "venv"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "import sys\nprint('The virtual environment was not created successfully because ensurepip "
        "is not available.')\nsys.exit(1)\n")
    git(nightly_world["repo"], "checkout", "-q", nightly_world["commits"]["06"])
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(nightly_world["wheels"]),
                           "--cache", str(tmp_path / "cache")], cwd=nightly_world["repo"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(tmp_path / "fake")))
    assert proc.returncode == 128, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "install python3-venv" in proc.stderr
    assert "a bug" not in proc.stderr


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_install_leaves_no_half_built_environment(nightly_world, tmp_path, sig, rc):
    """Ctrl-C or SIGTERM while pip downloads a nightly: no .partial folder, no environment and no
    installer remain. The index is a local server that holds the wheel's download open until Ctrl-C has been sent, so
    nothing here depends on how fast pip is."""
    hold, asked = threading.Event(), threading.Event()
    git(nightly_world["repo"], "checkout", "-q", nightly_world["commits"]["06"])
    cache = tmp_path / "cache"
    with serve_index(nightly_world["wheels"], hold=hold, asked=asked) as url:
        # pip, whose requests this index (the wheel's download held open) was written for
        proc = subprocess.Popen([sys.executable, BISECT, "nightly-step", "--installer", "pip", "--index", url,
                                 "--cache", str(cache)],
                                cwd=nightly_world["repo"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert asked.wait(300), "pip never asked for the wheel"
            installers = children_of(proc.pid)
            assert installers, "no installer process was seen"
            proc.send_signal(sig)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == rc, out
    assert "interrupted" in out
    assert list((cache / "venvs").iterdir()) == [], out
    time.sleep(1)
    assert not [p for p in installers if os.path.exists("/proc/%d" % p)], "the installer still runs"


def test_wheels_are_read_from_a_pep503_index_over_http(tmp_path):
    """The index page as PyTorch's nightly index writes it: quoted '+', hashes, several versions
    of one date around a branch cut, other Pythons and platforms."""
    from sac_repro.bisecting import indexes
    names = ["torch-2.9.0.dev20250801%2Bcpu-{t}-{t}-manylinux_2_28_x86_64.whl",
             "torch-2.10.0.dev20250801%2Bcpu-{t}-{t}-manylinux_2_28_x86_64.whl",
             "torch-2.10.0.dev20250801%2Bcpu-{t}-{t}-manylinux_2_28_aarch64.whl",
             "torch-2.10.0.dev20250801%2Bcpu-cp39-cp39-manylinux_2_28_x86_64.whl",
             "torch-2.10.0.dev20250802%2Bcpu-{t}-{t}-manylinux_2_28_x86_64.whl"]
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<html><body>\n" + "\n".join(
        '<a href="/whl/nightly/cpu/%s#sha256=00ff">%s</a><br/>' % (n.format(t=PYTAG), n.format(t=PYTAG).replace("%2B", "+"))
        for n in names) + "\n</body></html>")
    with serve_index(tmp_path) as url:
        wheels = indexes.torch_wheel_files(url)
    found = indexes.wheels_for_date(wheels, "2025-08-01")
    assert [v for _, v in found] == ["2.10.0.dev20250801+cpu", "2.9.0.dev20250801+cpu"]
    assert found[0][0] == "torch-2.10.0.dev20250801+cpu-%s-%s-manylinux_2_28_x86_64.whl" % (PYTAG, PYTAG)
    assert indexes.wheels_for_date(wheels, "2025-08-03") == []
    assert wheels[found[0][0]] == url + "whl/nightly/cpu/" + names[1].format(t=PYTAG)


# ----------------------------------------------------------- edges: abort, never answer
def test_a_search_whose_new_end_cannot_be_tested_aborts(monkeypatch, capsys):
    """NEW could not be installed (a full disk, say): the search has nothing to compare with."""
    from sac_repro.bisecting import bisect_torch
    monkeypatch.setattr(bisect_torch.indexes, "release_versions", lambda index: ["2.8.0", "2.9.1", "2.10.0", "2.12.0"])
    verdicts = {"2.8.0": "reproduced", "2.12.0": "cannot_test"}
    monkeypatch.setattr(bisect_torch, "test_build", lambda v, *a: verdicts[v])
    rc = bisect_torch.main(["releases", "2.8.0", "2.12.0"])
    err = capsys.readouterr().err
    assert rc == 128, err
    assert "NEW 2.12.0 cannot be tested" in err


def test_a_search_that_cannot_pin_the_release_says_so(monkeypatch, capsys):
    from sac_repro.bisecting import bisect_torch
    monkeypatch.setattr(bisect_torch.indexes, "release_versions", lambda index: ["2.8.0", "2.9.1", "2.10.0", "2.12.0"])
    verdicts = {"2.8.0": "reproduced", "2.9.1": "cannot_test", "2.10.0": "cannot_test", "2.12.0": "not_reproduced"}
    monkeypatch.setattr(bisect_torch, "test_build", lambda v, *a: verdicts[v])
    rc = bisect_torch.main(["releases", "2.8.0", "2.12.0"])
    out = capsys.readouterr().out
    assert rc == 125, out
    assert "first release whose verdict differs" not in out
    assert "changes between 2.8.0 (reproduced) and 2.12.0" in out and "2.9.1, 2.10.0" in out


def nightly_step_in(world, day, *extra, env=None):
    git(world["repo"], "checkout", "-q", world["commits"][day])
    return subprocess.run([sys.executable, BISECT, "nightly-step", "--cache", str(world["cache"])] + list(extra),
                          cwd=world["repo"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize("index, says", [("/typo/wheels", "no such folder"), ("EMPTY", "no torch wheels"),
                                         ("FILE", "is a file, not a folder")])
def test_an_index_folder_that_is_not_there_aborts(nightly_world, tmp_path, index, says):
    if index == "EMPTY":
        index = str(tmp_path / "empty")
        os.mkdir(index)
    elif index == "FILE":
        index = str(tmp_path / "wheels.txt")
        open(index, "w").close()
    proc = nightly_step_in(nightly_world, "06", "--index", index)
    assert proc.returncode == 128, proc.stdout + proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_terms_in_the_environment_abort_before_any_install(nightly_world, tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(nightly_world["wheels"]),
                           "--cache", str(cache)], cwd=nightly_world["repo"], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, SAC_BISECT_TERMS="regression"))
    assert proc.returncode == 128, proc.stdout + proc.stderr
    assert "$SAC_BISECT_TERMS is no longer read: pass --hunt-fix" in proc.stderr and not cache.exists()


@pytest.mark.parametrize("args, says", [
    (["matrix", "2.9.1", "--timeout", "nan"], "finite"),
    (["matrix", "2.9.1", "--cache", "FILE"], "not a folder"),
    (["nightly-st"], "invalid choice"),
])
def test_bisect_bad_arguments_abort_in_one_line(tmp_path, args, says):
    (tmp_path / "FILE").write_text("a file, not a folder")
    args = [str(tmp_path / "FILE") if a == "FILE" else a for a in args]
    proc = subprocess.run([sys.executable, BISECT] + args, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PIP_NO_INDEX="1"))
    assert proc.returncode == 128, proc.stdout + proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "bug" not in proc.stderr
