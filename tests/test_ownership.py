"""What the judged run touches and leaves: outputs never written through a symlink onto a file
elsewhere, internal options that take only the bundle's own temporary files, no process left
behind by a SIGKILL, a `nohup` run that keeps running, and a stdout that cannot encode the paste.
None of them runs torch: a stand-in torch package, or a recorded child, plays its part."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import FIXED_CSV, JUDGED, one_line_error, REVERTED_CSV, ROOT, data, judge
from sac_repro import outputs

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------- symlinks out of the folder
def test_json_onto_a_symlink_to_a_file_elsewhere_is_refused(tmp_path):
    """`--json link` wrote the report through the link, onto a file in another folder."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "notes.txt"
    target.write_text("the user's notes\n")
    link = tmp_path / "here" / "report.json"
    link.symlink_to(target)
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", link)
    one_line_error(rc, stdout, stderr, "--json %s" % link, "symlink", str(target))
    assert target.read_text() == "the user's notes\n" and os.readlink(link) == str(target)


def test_a_dangling_symlink_out_of_the_folder_is_refused(tmp_path):
    """A link to a file not there yet would create that file in the other folder."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "here" / "plot.png"
    link.symlink_to(tmp_path / "elsewhere" / "new.png")
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", link)
    one_line_error(rc, stdout, stderr, "--json %s" % link, "symlink")
    assert os.listdir(tmp_path / "elsewhere") == []


def test_json_to_stderr_appended_to_a_file_keeps_what_it_held(tmp_path):
    """`--json /dev/stderr 2>> log`: stderr's file is written through the stream, after its earlier
    lines, as stdout's is; replaced, the log lost them."""
    log = tmp_path / "log.txt"
    log.write_text("an earlier line\n")
    proc = subprocess.run(["bash", "-c", '"$0" "$1" --from-nsys "$2" --json /dev/stderr 2>> "$3"',
                           sys.executable, JUDGED, REVERTED_CSV, str(log)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + log.read_text()
    text = log.read_text()
    assert text.startswith("an earlier line\n{") and json.loads(text.split("\n", 1)[1])["verdict"] == "reproduced"
    assert "VERDICT: reproduced (exit 1)" in proc.stdout and os.listdir(tmp_path) == ["log.txt"]


# ------------------------------------------------------------- internal options: ours alone
def run_judged(*args, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, JUDGED] + [str(a) for a in args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("which", ["a file of the bundle", "a file of the user's", "a new name"])
def test_the_child_option_writes_no_file_but_its_own_temporary_one(tmp_path, kept, which):
    """`--_child PATH` wrote the child's result over any file (README.md included) and exited 0."""
    path = {"a file of the bundle": kept(os.path.join(ROOT, "README.md")),
            "a file of the user's": str(tmp_path / "mine.json"), "a new name": str(tmp_path / "new.json")}[which]
    if which == "a file of the user's":
        open(path, "w").close()  # empty, as the child's own is
    before = open(path, "rb").read() if os.path.exists(path) else None
    proc = run_judged("--_child", path, "--device", "cpu")
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "usage error", "--_child", "internal")
    assert (open(path, "rb").read() if os.path.exists(path) else None) == before


def test_the_childs_own_result_file_is_taken_and_no_other():
    """What run_child hands the child: /dev/fd/N of a file with no name left, private and empty, so
    that a SIGKILL leaves none behind. Not a file that has a name (anyone's), through its descriptor
    or by its path, nor one written to."""
    fd, path = tempfile.mkstemp(prefix="sac_repro_", suffix=".json")
    try:
        assert "no name left" in outputs.not_our_result_file("/dev/fd/%d" % fd)  # named: it could be anyone's
        assert "/dev/fd/N" in outputs.not_our_result_file(path)
        os.unlink(path)
        assert outputs.not_our_result_file("/dev/fd/%d" % fd) is None
        os.write(fd, b"{}")
        assert "not empty" in outputs.not_our_result_file("/dev/fd/%d" % fd)
    finally:
        os.close(fd)
    with open(os.path.join(ROOT, "README.md")) as fh:
        assert "no name left" in outputs.not_our_result_file("/dev/fd/%d" % fh.fileno())
    assert outputs.not_our_result_file("/dev/fd/%d" % fd) == "no such descriptor"


def test_the_child_option_takes_no_named_file_by_its_descriptor(tmp_path):
    """A file of the user's handed over as /dev/fd/N, empty and private as the child's own: refused."""
    mine = tmp_path / "mine.json"
    mine.write_text("")
    mine.chmod(0o600)
    with open(mine, "r+") as fh:
        proc = subprocess.run([sys.executable, JUDGED, "--_child", "/dev/fd/%d" % fh.fileno(), "--device", "cpu"],
                              capture_output=True, text=True, timeout=120, pass_fds=(fh.fileno(),))
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "usage error", "--_child", "internal", "no name left")
    assert mine.read_text() == ""


def test_the_hand_off_is_written_only_into_run_nsys_shs_temporary_file(tmp_path):
    """--loops-only --_env FILE wrote the hand-off over any file of the user's."""
    mine = tmp_path / "mine.json"
    mine.write_text("")
    proc = run_judged("--loops-only", "--device", "cpu", "--_env", mine, env={"PYTHONPATH": "/nonexistent"})
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "--_env", "internal")
    assert mine.read_text() == ""
    fd, handoff = tempfile.mkstemp(prefix="run_nsys_run.")
    os.close(fd)
    try:
        assert outputs.not_our_hand_off(handoff) is None
    finally:
        os.unlink(handoff)


def test_a_hand_off_elsewhere_or_already_written_is_refused_and_left(tmp_path):
    """Named as run_nsys.sh's mktemp names it, private and ours, yet in a folder of the user's, or in
    the temporary folder with something in it already (another capture run's hand-off): neither is
    this run's to write. --loops-only --_env refuses it before any work, and leaves it as it was."""
    elsewhere = tmp_path / "run_nsys_run.a1b2c3"
    elsewhere.write_text("")
    elsewhere.chmod(0o600)
    fd, written = tempfile.mkstemp(prefix="run_nsys_run.")
    os.write(fd, b'{"env": {}, "dynamo_skips": []}')
    os.close(fd)
    try:
        for path, says in ((str(elsewhere), "not in the temporary folder"), (written, "not empty")):
            rc, stdout, stderr = judge("--loops-only", "--device", "cpu", "--_env", path)
            one_line_error(rc, stdout, stderr, "--_env %s: %s" % (path, says), "internal option")
        assert elsewhere.read_text() == "" and open(written).read() == '{"env": {}, "dynamo_skips": []}'
    finally:
        os.unlink(written)


def test_the_hand_off_is_no_hard_link_to_a_users_file(tmp_path):
    """A file of the user's, empty and private, hard-linked into the temporary folder under the
    hand-off's name: the same file, so refused, and left as it was."""
    mine = tmp_path / "mine.json"
    mine.write_text("")
    mine.chmod(0o600)
    fd, link = tempfile.mkstemp(prefix="run_nsys_run.")
    os.close(fd)
    os.unlink(link)
    try:
        os.link(mine, link)
    except OSError as e:  # another filesystem than the temporary folder's
        pytest.skip("no hard link from %s to %s: %s" % (tmp_path, link, e))
    try:
        assert "one link" in outputs.not_our_hand_off(link)
        proc = run_judged("--loops-only", "--device", "cpu", "--_env", link, env={"PYTHONPATH": "/nonexistent"})
        one_line_error(proc.returncode, proc.stdout, proc.stderr, "--_env", "internal", "one link")
    finally:
        os.unlink(link)
    assert mine.read_text() == ""


# ------------------------------------------------------------------------------- no orphans
STAND_IN_TORCH = {
    "torch/__init__.py": """import os, subprocess, sys, time
mode = os.environ.get("STAND_IN_TORCH")
if mode == "speaks":  # as the candidate says "not loaded" while torch imports
    print("a stand-in torch speaking as it imports")
if mode in ("fails", "speaks"):
    raise ImportError("a stand-in torch that cannot be imported")
if mode == "sleeps" and "--_child" in sys.argv:  # the measured child, importing torch, starts one of its own
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.environ["STAND_IN_MARK"]])
    with open(os.environ["STAND_IN_PIDS"], "w") as fh:
        fh.write("%d %d" % (os.getpid(), grandchild.pid))
    time.sleep(600)
""",
    "torch/utils/__init__.py": "",
    "sitecustomize.py": """import os
if os.environ.get("STAND_IN_TORCH") == "speaks":  # before any code of the bundle's runs
    print("a sitecustomize speaking at start-up")
""",
    "torch/utils/collect_env.py": """import os, subprocess, sys, time
# as collect_env runs pip and nvidia-smi: a process of its own, here one that hangs
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.environ["STAND_IN_MARK"]])
with open(os.environ["STAND_IN_PIDS"], "w") as fh:
    fh.write("%d %d" % (os.getpid(), grandchild.pid))
time.sleep(600)
""",
}


@pytest.fixture
def stand_in_torch(tmp_path):
    """PYTHONPATH with a torch package that plays the part asked (STAND_IN_TORCH), and what it marks."""
    for name, text in STAND_IN_TORCH.items():
        path = tmp_path / "site" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"PYTHONPATH": str(tmp_path / "site"), "STAND_IN_MARK": "stand-in-%s" % tmp_path.name,
            "STAND_IN_PIDS": str(tmp_path / "pids")}


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie is dead, only not reaped
    except FileNotFoundError:
        return False


def marked(mark):
    """The pids of the live processes whose command line holds mark."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                if mark.encode() in fh.read() and alive(int(pid)):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def sigkill_once_started(cmd, env, pids_file):
    """Starts cmd, waits for the stand-in to write its pids, SIGKILLs cmd; the pids written."""
    proc = subprocess.Popen(cmd, env=dict(os.environ, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not (os.path.exists(pids_file) and os.path.getsize(pids_file)):
            assert time.time() < deadline and proc.poll() is None, "the stand-in never started"
            time.sleep(0.1)
        time.sleep(0.2)
        proc.kill()
        proc.wait(timeout=30)
        return [int(p) for p in open(pids_file).read().split()]
    finally:
        if proc.poll() is None:
            proc.kill()


def left_running(pids, mark, seconds=5):
    deadline = time.time() + seconds
    while time.time() < deadline and (any(alive(p) for p in pids) or marked(mark)):
        time.sleep(0.1)
    left = sorted(set([p for p in pids if alive(p)] + marked(mark)))
    for pid in left:  # no test leaves them either
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child dies with its parent on Linux")
def test_a_sigkill_during_collect_env_leaves_nothing_running(tmp_path, stand_in_torch):
    """--markdown runs collect_env, which runs pip and nvidia-smi; a SIGKILL to the judged run left
    collect_env, and what it started, running under PID 1."""
    handoff = tmp_path / "handoff.json"  # a capture run's torch: the paste asks collect_env for its versions
    handoff.write_text(json.dumps({"env": {"torch": "2.13.0+cpu", "device": "cpu"}, "dynamo_skips": []}))
    env = dict(stand_in_torch, STAND_IN_TORCH="collect_env")
    pids = sigkill_once_started([sys.executable, JUDGED, "--from-nsys", REVERTED_CSV, "--markdown", "--_env", handoff],
                                env, stand_in_torch["STAND_IN_PIDS"])
    assert left_running(pids, stand_in_torch["STAND_IN_MARK"]) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child dies with its parent on Linux")
def test_a_sigkill_leaves_nothing_of_the_measured_childs_own(tmp_path, stand_in_torch):
    """The measured child dies with its parent; what it started (Inductor's compile workers, a
    compiler) must go with it. Nor is its result file left in the temporary folder (one was left per
    SIGKILL: the judged run removed it only as it ended)."""
    env = dict(stand_in_torch, STAND_IN_TORCH="sleeps", TMPDIR=str(tmp_path))
    pids = sigkill_once_started([sys.executable, JUDGED, "--device", "cpu"], env, stand_in_torch["STAND_IN_PIDS"])
    assert left_running(pids, stand_in_torch["STAND_IN_MARK"]) == []
    assert [n for n in os.listdir(tmp_path) if n.startswith("sac_repro")] == []


# ------------------------------------------------------------------------------------ nohup
SLOW_CHILD = """import os, shutil, sys, time
open(os.environ["SLOW_CHILD_STARTED"], "w").close()
time.sleep(1.5)
shutil.copy(%r, sys.argv[sys.argv.index("--_child") + 1])
"""


def test_a_nohup_run_keeps_running_through_a_hang_up(tmp_path):
    """nohup ignores SIGHUP; the judged run installed its handler anyway and ended 129 on a hang-up."""
    recorded = tmp_path / "child.json"
    recorded.write_text(open(data("cpu-torch2.13", "child_fixed.json")).read().replace("<repo>", ROOT))
    child = tmp_path / "child.py"
    child.write_text(SLOW_CHILD % str(recorded))
    started = tmp_path / "started"
    code = ("import sys; sys.path.insert(0, %r)\nfrom sac_repro.judge import cli\ncli.ENTRY = %r\n"
            "sys.exit(cli.main(cli.SCRIPT, ['--device', 'cpu']))" % (ROOT, str(child)))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, SLOW_CHILD_STARTED=str(started)),
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        deadline = time.time() + 60
        while not started.exists():
            assert time.time() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "VERDICT: not_reproduced (exit 0)" in out


# ------------------------------------------------------------------------- any stdout
@pytest.mark.parametrize("args, rc", [(["--from-nsys", REVERTED_CSV, "--markdown"], 1),
                                      (["--from-nsys", FIXED_CSV], 0)], ids=["markdown", "text"])
def test_a_stdout_that_cannot_encode_the_paste_still_gets_it(args, rc):
    """PYTHONIOENCODING=latin-1 (a latin-1 locale, a Windows console): the heading's bug emoji ended
    the run 'internal error: UnicodeEncodeError', 128, and no paste."""
    proc = subprocess.run([sys.executable, JUDGED] + args, capture_output=True, timeout=120,
                          env=dict(os.environ, PYTHONIOENCODING="latin-1"))
    assert proc.returncode == rc, proc.stderr
    out = proc.stdout.decode("latin-1")
    if "--markdown" in args:
        assert out.startswith("### ? Describe the bug\n") and "- **Verdict:** `reproduced` (exit 1)" in out
    else:
        assert "VERDICT: not_reproduced (exit 0)" in out


# ------------------------------------------------------------------------------- what was said
def test_what_start_up_and_torchs_import_printed_reaches_the_report(stand_in_torch, tmp_path):
    """Issue 45: the candidate's 'not loaded' line, printed at start-up or as torch imports (2.8,
    2.9.1), never reached the user: the parent kept the child's output for a crash report only."""
    out = tmp_path / "r.json"
    proc = run_judged("--device", "cpu", "--json", out, env=dict(stand_in_torch, STAND_IN_TORCH="speaks"))
    assert proc.returncode == 125, proc.stderr
    said = [(s["where"], s["text"]) for s in json.loads(out.read_text())["said"]]
    assert said == [("at Python's start-up", "a sitecustomize speaking at start-up"),
                    ("while torch imported", "a stand-in torch speaking as it imports")], said
    assert "the measured child started" not in proc.stderr  # the child's marker is not passed on


def test_a_torch_that_imports_but_is_not_whole_cannot_be_tested(stand_in_torch):
    """A torch package that imports but lacks what every release has (a stand-in, a broken
    install): the build cannot be tested (125), not a bug of the bundle (it was 128, 'module
    'torch' has no attribute 'cuda'' raised in the bundle's own code)."""
    proc = run_judged("--device", "cpu", env=dict(stand_in_torch, STAND_IN_TORCH="bare"))
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr
    assert "torch imported, but lacks torch.__version__, torch.version, torch.compile, torch.cuda, torch.profiler, " \
        "torch.utils" in proc.stdout, proc.stdout
    # nothing was judged: the text names no evidence (it said 'evidence: torch.profiler, ?')
    assert proc.stdout.splitlines()[0] == "evidence: none, no call was judged", proc.stdout
    proc = run_judged("--device", "cpu", "--json", "-", env=dict(stand_in_torch, STAND_IN_TORCH="bare"))
    assert json.loads(proc.stdout)["source"] == "none, no call was judged", proc.stdout  # as the text says


WHOLE_BUT = """import types
__version__, version, compile = "2.13.0", types.SimpleNamespace(git_version="0" * 40, cuda=None), lambda f, **k: f
profiler = utils = types.SimpleNamespace()
class cuda:
    @staticmethod
    def is_available():
        raise RuntimeError("CUDA driver broken (a stand-in)")
%s
"""


@pytest.mark.parametrize("shape, device, said", [
    ("", "auto", "RuntimeError: CUDA driver broken (a stand-in)"),  # is_available() raises
    ("del utils\ndef __getattr__(name):\n    raise RuntimeError('a torch that raises on ' + name)", "cpu",
     "RuntimeError: a torch that raises on utils"),  # hasattr() lets all but AttributeError through
    ("del version", "cpu", "lacks torch.version"),
    ("__version__ = 213", "cpu", "lacks torch.__version__"),  # not a version string
    ("", "cpu", "No module named 'torch.utils'"),  # no torch/utils/checkpoint.py to import
])
def test_a_torch_that_breaks_as_it_is_read_cannot_be_tested(tmp_path, shape, device, said):
    """Attack of 11aac2f: a torch whose CUDA check raises (a broken driver, a busy GPU), that lacks
    torch.version or a module of its own was said to be a bug of this bundle (128): it is a build
    that cannot be tested."""
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(WHOLE_BUT % shape)
    proc = run_judged("--device", device, env={"PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr and said in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------- provenance
def test_a_run_whose_torch_failed_to_import_says_so_naming_the_interpreter(stand_in_torch):
    """It was pasted as 'judged from the file alone', as if no torch had been run."""
    from sac_repro.judge.changes import home_path
    proc = run_judged("--device", "cpu", "--markdown", env=dict(stand_in_torch, STAND_IN_TORCH="fails"))
    assert proc.returncode == 125, proc.stderr
    line = proc.stdout.splitlines()[8]
    assert line.startswith("torch failed to import in %s (ImportError: a stand-in torch that cannot be imported). "
                           "Command: `" % home_path(sys.executable)), line
    assert "file alone" not in proc.stdout
