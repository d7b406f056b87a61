"""Ctrl-C (SIGINT), Ctrl-\\ (SIGQUIT) or SIGTERM to an entry point ends everything it started,
removes its temp files, and exits 128+n: a bisect aborts, and no hung torch is left running."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import JUDGED
from wheels import BISECT, git, make_index, nightly_world, slow_venv, tagged  # noqa: F401  (a fixture)

HANG_IN_CHILD = """
import os, sys, time
if "--_child" in sys.argv:
    with open(os.environ["SAC_TEST_PIDFILE"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(600)
"""


def hanging_child_env(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(HANG_IN_CHILD)
    (tmp_path / "tmp").mkdir()
    return dict(os.environ, PYTHONPATH=str(tmp_path / "site"), TMPDIR=str(tmp_path / "tmp"),
                SAC_TEST_PIDFILE=str(tmp_path / "child.pid"))


def wait_for(path, seconds=300):
    deadline = time.time() + seconds
    while not (os.path.exists(path) and os.path.getsize(path)):
        assert time.time() < deadline, "the measured child never started"
        time.sleep(0.2)
    return int(open(path).read())


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead; only its parent can reap it
    with open("/proc/%d/stat" % pid) as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def gone(pid, seconds=30):
    deadline = time.time() + seconds
    while alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    return not alive(pid)


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGQUIT, 131)])
def test_a_signal_to_the_script_ends_its_child_and_its_temp_files(tmp_path, sig, rc):
    err = signal_mid_run([sys.executable, JUDGED, "--device", "cpu"], tmp_path, sig, rc)
    assert "interrupted" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGQUIT, 131)])
def test_a_signal_to_a_bisect_step_ends_the_repro_it_runs(nightly_world, tmp_path, sig, rc):  # noqa: F811
    git(nightly_world["repo"], "checkout", "-q", nightly_world["commits"]["06"])
    signal_mid_run([sys.executable, BISECT, "nightly-step", "--index", str(nightly_world["wheels"]),
                    "--cache", str(nightly_world["cache"])], tmp_path, sig, rc, cwd=nightly_world["repo"])


def signal_mid_run(cmd, tmp_path, sig, rc, cwd=None):
    """Runs cmd until its measured child hangs, sends sig, and checks that it exits rc, and that
    neither the child nor a temp file is left. Returns its stderr."""
    proc = subprocess.Popen(cmd, env=hanging_child_env(tmp_path), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        child = wait_for(tmp_path / "child.pid", 600)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == rc, (out, err)
    assert gone(child), "the measured child still runs"
    assert os.listdir(tmp_path / "tmp") == []
    return err


def test_a_sigkill_to_the_judged_run_leaves_no_child(tmp_path):
    """SIGKILL (the OOM killer, `timeout -s KILL`) reaches no handler: the measured child, in a
    session of its own, was left running until it ended by itself. Now it dies with its parent."""
    proc = subprocess.Popen([sys.executable, JUDGED, "--device", "cpu"], env=hanging_child_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child = wait_for(tmp_path / "child.pid", 600)
        proc.kill()
        proc.wait(timeout=30)
        assert gone(child, 5), "the measured child outlived its parent's SIGKILL by 5 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        if os.path.exists(tmp_path / "child.pid"):
            try:
                os.kill(int(open(tmp_path / "child.pid").read()), signal.SIGKILL)
            except ProcessLookupError:
                pass


FAKE_UV = """#!/bin/sh
# an installer that works for a long while through a child of its own, as uv's workers and pip's builds do
sleep 300 &
echo "$$ $!" > "$SLOW_VENV_STARTED"
wait
"""


@pytest.mark.parametrize("stage", ["venv", "install", "repro"])
def test_a_sigkill_to_a_bisect_leaves_no_process_of_its_tree(tmp_path, quick_venv, stage):
    """SIGKILL (the OOM killer, `timeout -s KILL`) to bisect_torch.py while it makes an environment:
    `python -m venv` and the child venv starts (ensurepip's pip), or the installer and the child it
    started, die with it within seconds, wherever they were reparented; so do the repro it runs
    and the repro's measured child. Every process of its tree carries a tag in its environment, so
    none escapes the count."""
    index = make_index(tmp_path / "index", "flat")
    tag, started = uuid.uuid4().hex, tmp_path / "started"
    env = dict(os.environ, SAC_TEST_TREE=tag, SLOW_VENV_STARTED=str(started))
    args = []
    if stage == "venv":
        env["PYTHONPATH"] = slow_venv(tmp_path / "fake")
    elif stage == "repro":
        env.update(hanging_child_env(tmp_path), SAC_TEST_TREE=tag, SAC_TEST_PIDFILE=str(started))
        env.update(QUICK_VENV_TEMPLATE=quick_venv["QUICK_VENV_TEMPLATE"],
                   PYTHONPATH=quick_venv["PYTHONPATH"] + os.pathsep + env["PYTHONPATH"])
    else:
        env.update(quick_venv)
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "uv").write_text(FAKE_UV)
        os.chmod(tmp_path / "bin" / "uv", 0o755)
        env["PATH"] = str(tmp_path / "bin") + os.pathsep + env["PATH"]
        args = ["--installer", "uv"]
    proc = subprocess.Popen([sys.executable, BISECT, "nightly", "2025-09-07", "--index", str(index),
                             "--cache", str(tmp_path / "cache")] + args, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_text(started, proc)
        tree = tagged(tag)
        assert proc.pid in tree and len(tree) >= 3, tree  # itself, the maker and the maker's child
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.time() + 5
        while tagged(tag) and time.time() < deadline:
            time.sleep(0.1)
        left = {pid: open("/proc/%d/cmdline" % pid, "rb").read().replace(b"\0", b" ") for pid in tagged(tag)}
        assert left == {}, "outlived bisect_torch.py's SIGKILL by 5 s: %s" % left
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in tagged(tag):
            os.kill(pid, signal.SIGKILL)


def wait_for_text(path, proc, seconds=120):
    deadline = time.time() + seconds
    while not (os.path.exists(path) and os.path.getsize(path)):
        assert proc.poll() is None and time.time() < deadline, "the environment's maker never started"
        time.sleep(0.05)


@pytest.mark.unit
@pytest.mark.parametrize("script, rc", [("sleep 30 & echo made", 0),  # a child left in its group
                                        ("setsid sleep 30 & sleep 0.3; echo made; exit 3", 3),  # one that left it
                                        ("echo made; kill -9 $$", 137)])
def test_a_guarded_command_leaves_nothing_running_when_it_ends(monkeypatch, script, rc):
    """What venv, uv or pip leave running when they end, in their group or out of it, is ended
    with them and reaped (nothing is left to PID 1, which may never reap it); the command's own
    exit code and output come back."""
    from sac_repro.bisecting import children
    tag = uuid.uuid4().hex
    monkeypatch.setenv("SAC_TEST_TREE", tag)
    started = time.time()
    assert children.run(["sh", "-c", script]) == (rc, "made\n")
    assert time.time() - started < 10 and tagged(tag) == []


@pytest.mark.unit
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the group is read from /proc")
def test_a_groups_members_are_read_whole_grandchildren_included():
    """What end_own_group kills: every process of the group, the leader's grandchildren too (a
    compiler that an Inductor worker started), not only the processes whose parent is the leader."""
    from sac_repro import exits
    leader = subprocess.Popen(["sh", "-c", "sh -c 'sleep 60 & wait' & wait"], start_new_session=True)
    try:
        deadline = time.time() + 30
        while True:
            members = {int(p) for p in os.listdir("/proc") if p.isdigit() and pgid_of(int(p)) == leader.pid}
            if len(members) >= 3 or time.time() > deadline:
                break
            time.sleep(0.05)
        assert len(members) == 3, members  # sh, its sh, and that one's sleep
        assert set(exits.group_members(leader.pid)) == members
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def pgid_of(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None



@pytest.mark.unit
@pytest.mark.parametrize("how, said", [
    ("raise KeyboardInterrupt", "interrupted: KeyboardInterrupt, which this bundle's signal handler did not see: "
                                "stopped what it had started, no verdict"),
    ("os.kill(os.getpid(), signal.SIGINT); time.sleep(30)", "interrupted by SIGINT: stopped what it had started, "
                                                            "no verdict"),
], ids=["raised", "sent"])
def test_an_interrupt_is_named_as_it_came(how, said):
    """A KeyboardInterrupt raised by code (a torch build's import, a user's sitecustomize), with no
    signal sent, was reported as "interrupted by SIGINT". A signal sent arrives as the handler's
    Interrupted and is named by its signal; the other is not said to be a signal or not (code that
    put back Python's own SIGINT handler turns a signal into one); both exit 130."""
    code = ("import os, signal, sys, time\nfrom sac_repro import exits\n"
            "def body():\n    %s\nsys.exit(exits.guarded(body, 'this bundle'))\n" % how)
    proc = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(JUDGED), capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines()) == (130, [said]), proc.stderr
