"""The command lines' edges: usage errors, paths, output that cannot be delivered, --json, an
entry point copied without its package. Each ends in a judged verdict or in 128 with one line
saying what was wrong, never in a 0 or 1 that nothing judged."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import (data, FIXED_CSV, judge, one_line_error,
                      JUDGED, REVERTED_CSV, ROOT, run, SCRIPT)
from sac_repro.judge import cli

from sac_repro import exits, outputs
pytestmark = pytest.mark.unit  # no torch: the inner loop, `pytest -m unit tests`


# ----------------------------------------------------------------- 1: an empty path is no input
@pytest.mark.parametrize("option", ["--from-nsys", "--from-ncu", "--json"])
def test_an_empty_path_is_a_usage_error(option):
    """`--from-nsys "$UNSET"` once measured the local torch instead of reading a capture."""
    rc, stdout, stderr = judge(option, "")
    one_line_error(rc, stdout, stderr, "usage error", option, "empty")


# ------------------------------------------------- 4: failures outside the verdict are not "bad"
def test_the_engine_copied_without_its_package_aborts(tmp_path):
    """The package's entry point alone, without the modules beside it: 128 (a bisect aborts)."""
    (tmp_path / "sac_repro").mkdir()
    shutil.copy(os.path.join(JUDGED, "__main__.py"), tmp_path / "sac_repro")
    proc = subprocess.run([sys.executable, str(tmp_path / "sac_repro"), "--from-nsys", FIXED_CSV],
                          capture_output=True, text=True)
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "sac_repro")


def closed_pipes(args, **kw):
    """Runs the script with stdout and stderr on pipes whose readers have gone."""
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    os.close(r_out)
    os.close(r_err)
    try:
        proc = subprocess.run([sys.executable, JUDGED] + args, stdout=w_out, stderr=w_err, **kw)
    finally:
        os.close(w_out)
        os.close(w_err)
    return proc.returncode


@pytest.mark.parametrize("args", [["--from-nsys", REVERTED_CSV], ["--from-nsys", FIXED_CSV],
                                  ["--from-nsys", "/no/such/file.csv"]])
def test_output_on_a_closed_pipe_is_no_verdict(args):
    """The verdict was judged but could not be delivered: 128, whatever it was."""
    assert closed_pipes(args) == 128


# --------------------------------------------------------------------- bad input accepted
@pytest.mark.parametrize("args, words", [
    (["--timeout", "nan"], ["--timeout", "finite"]),
    (["--timeout", "inf"], ["--timeout", "finite"]),
    (["--_c", "x.json"], ["unrecognized arguments: --_c"]),
    (["--from-n", FIXED_CSV], ["unrecognized arguments: --from-n"]),
    (["--from-ncu", FIXED_CSV], ["expected the output of `ncu", "NVTX State"]),
    (["--from-ncu", data("nsys-2023.4.4-profile-help.txt")], ["NVTX State"]),
])
def test_bad_input_is_refused(args, words):
    rc, stdout, stderr = judge(*args)
    one_line_error(rc, stdout, stderr, *words)


# -------------------------------------------------------------------------- misworded errors
def stand_in_child(tmp_path, body):
    """PYTHONPATH for a measured child whose start-up runs body (its sitecustomize): no torch runs."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nif '--_child' in sys.argv:\n" + "".join(
        "    %s\n" % line for line in body.splitlines()))
    return {"PYTHONPATH": str(tmp_path)}


def test_a_child_with_no_result_within_the_timeout_is_not_said_to_hang(tmp_path):
    """--timeout 0.5: it said the torch under test "hung"; it may only be slower than that."""
    env = stand_in_child(tmp_path, "import time\ntime.sleep(60)")
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", "--timeout", "0.5", env=env, timeout=60)
    assert rc == 125, stdout + stderr
    assert "the torch under test gave no result within --timeout 0.5s: it hung, or needs longer here" in stdout
    assert "the torch under test hung" not in stdout + stderr


def test_the_crash_log_holds_what_the_child_printed_and_not_our_marker(tmp_path):
    """The log shown after a crash listed "sac-repro: the measured child started", our own line."""
    env = stand_in_child(tmp_path, "pass")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import os, signal\nprint('a stand-in torch, crashing', flush=True)\n"
                                                    "os.kill(os.getpid(), signal.SIGSEGV)\n")
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", env=env, timeout=60)
    assert rc == 125 and "crashed: killed by SIGSEGV" in stdout, stdout + stderr
    log = stderr.split("--- the torch under test printed (last lines):\n", 1)[1]
    assert log.startswith("a stand-in torch, crashing\n"), stderr
    assert cli.STARTED not in stderr, stderr
    # the child's progress lines, passed on as they came, are ours too (a real torch's timeout showed them again)
    assert cli.printed_by_torch(cli.STARTED + "\n%scompiling f\nboom\n" % cli.PROGRESS) == "boom\n"


def test_json_onto_a_closed_stdout_says_stdout_is_closed():
    """`--json /dev/stdout >&-`: it said /dev/stdout was a symlink outside the folder named."""
    proc = subprocess.run(["bash", "-c", 'exec "$0" "$1" --from-nsys "$2" --json /dev/stdout >&-', sys.executable,
                           JUDGED, FIXED_CSV], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 and proc.stderr == "usage error: --json /dev/stdout: names stdout, which is " \
                                                     "closed; name a file\n", proc.stderr


def test_json_into_a_folder_says_so(tmp_path):
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", str(tmp_path))
    line = one_line_error(rc, stdout, stderr, "--json", "is a folder")
    assert "bug" not in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_json_onto_a_full_disk_says_so():
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", "/dev/full")
    line = one_line_error(rc, stdout, stderr, "cannot write --json /dev/full")
    assert "bug" not in line


# ------------------------------------------------------------------------------------ --json
def test_json_has_a_schema_version_and_dash_is_stdout():
    rc, stdout, stderr = judge("--from-nsys", REVERTED_CSV, "--json", "-")
    assert rc == 1, stderr
    report = json.loads(stdout)
    assert report["schema"] == 2 and report["verdict"] == "reproduced"


def test_json_writes_the_home_folder_as_tilde_and_no_secret(monkeypatch):
    """--json held every rerun variable and the interpreter's path as they were (the home folder,
    TORCHINDUCTOR_AUTH_HDR's value): it holds them as the paste shows them, a secret's as null.
    A live run, its child replayed from torch 2.13's recording."""
    from conftest import recorded
    from sac_repro.judge import command
    for k in [k for k in os.environ if command.RERUN_VARIABLES.fullmatch(k)]:  # this shell's own switches
        monkeypatch.delenv(k)
    home = os.path.dirname(os.path.dirname(sys.executable))  # the interpreter's under it
    for k, v in {"HOME": home, "PYTHONPATH": os.pathsep.join([home + "/site", "/opt" + home]),
                 "TORCHINDUCTOR_CACHE_DIR": home, "CXX": "ccache %s/bin/g++" % home, "TORCHINDUCTOR_AUTH_HDR": "sekrit",
                 "TORCHINDUCTOR_REDIS_URL": "redis://cache:6379/0?password=hunter2"}.items():
        monkeypatch.setenv(k, v)
    child = recorded(data("cpu-torch2.13", "child_fixed.json"))
    child["said"] = [{"where": "importing torch", "kind": "warning", "file": home + "/site/sitecustomize.py",
                      "text": "UserWarning: a cache under %s/ic is old" % home}]
    monkeypatch.setattr(cli, "run_child", lambda *a: (child, ""))
    rc, stdout, stderr = judge("--device", "cpu", "--json", "-")
    assert home + "/" not in stdout, "the home folder, whole, in --json"  # every string, the quoted lines' too
    report = json.loads(stdout)
    assert report["said"][0]["file"] == "~/site/sitecustomize.py" and report["said"][0]["text"].endswith("~/ic is old")
    assert rc == 0 and report["python_executable"] == "~/" + os.path.relpath(sys.executable, home), stderr
    assert report["rerun_env"] == {"PYTHONPATH": "~/site:/opt" + home, "TORCHINDUCTOR_CACHE_DIR": "~",
                                   "CXX": "ccache ~/bin/g++", "TORCHINDUCTOR_AUTH_HDR": None,
                                   "TORCHINDUCTOR_REDIS_URL": None}, report["rerun_env"]


def test_json_onto_the_capture_being_judged_is_refused(tmp_path):
    path = tmp_path / "k.csv"
    shutil.copy(FIXED_CSV, path)
    before = path.read_bytes()
    rc, stdout, stderr = judge("--from-nsys", str(path), "--json", str(path))
    one_line_error(rc, stdout, stderr, "--json", "capture")
    assert path.read_bytes() == before


@pytest.mark.parametrize("cmd", [
    ["sac_repro/bisecting/bisect_torch.py", "releases", "2.12.0", "2.8.0"],
    ["sac_repro/bisecting/bisect_torch.py", "--help"],
    ["run_nsys.sh", "--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv")],
    ["run_nsys.sh", "--help"],
], ids=["bisect-usage-error", "bisect-help", "wrapper-verdict", "wrapper-help"])
def test_the_other_entry_points_on_closed_pipes(cmd):
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    os.close(r_out)
    os.close(r_err)
    runner = ["bash"] if cmd[0].endswith(".sh") else [sys.executable]
    try:
        proc = subprocess.run(runner + [os.path.join(ROOT, cmd[0])] + cmd[1:], stdout=w_out, stderr=w_err,
                              env=dict(os.environ, PYTHON=sys.executable), timeout=120)
    finally:
        os.close(w_out)
        os.close(w_err)
    assert proc.returncode == 128


@pytest.mark.parametrize("entry", ["sac_repro/bisecting/bisect_torch.py", "run_nsys.sh"])
def test_the_other_entry_points_copied_alone_abort(tmp_path, entry):
    alone = tmp_path / os.path.basename(entry)
    shutil.copy(os.path.join(ROOT, entry), alone)
    runner = ["bash"] if entry.endswith(".sh") else [sys.executable]
    proc = subprocess.run(runner + [str(alone), "--help"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHON=sys.executable))
    if entry.endswith(".sh"):
        proc = subprocess.run(runner + [str(alone), "--report", "x.csv"], capture_output=True, text=True,
                              env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 128 and "copy the bundle's whole folder" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--device", "gpu"], "invalid choice: 'gpu'"),
    (["--timeout", "0"], "must be a finite number > 0"),
    (["--json", "/nonexistent-dir/report.json"], "does not exist or is not writable"),
    (["--from-nsys", "/nonexistent.nsys-rep"], "report file not found"),
])
def test_usage_errors_abort_a_bisect(args, message):
    rc, stdout, stderr = run(sys.executable, *args)
    assert rc >= 128 and rc != 125, (rc, stdout, stderr)
    assert stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and message in stderr


def test_a_bug_in_this_bundle_aborts_with_one_line(monkeypatch, capsys, tmp_path):
    csv = tmp_path / "k.csv"
    csv.write_text("NVTX Range,Kern Inst,Kernel Name\nf_compiled_with_context 0,1,triton_poi_fused_add_mul_0\n")

    def broken(*args):
        return {}["no such key"]
    monkeypatch.setattr(cli, "report_from_loops", broken)
    rc = cli.main(SCRIPT, ["--from-nsys", str(csv)])
    err = capsys.readouterr().err
    assert rc == exits.EXIT_ABORT
    assert len(err.strip().splitlines()) == 1 and "internal error" in err


# ------------------------------------------------- outputs never overwrite inputs or the bundle
@pytest.mark.parametrize("spelling", [
    "torch_compile_selective_activation_checkpoint.py", "./run_nsys.sh", "sac_repro/../README.md",
    "tests/data/h200-torch2.11/bench.json", ".gitignore"])
def test_json_onto_a_file_of_the_bundle_is_refused(monkeypatch, kept, spelling):
    monkeypatch.chdir(ROOT)
    before = open(kept(os.path.join(ROOT, spelling)), "rb").read()
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", spelling)
    one_line_error(rc, stdout, stderr, "--json %s" % spelling, "a file of this bundle")
    assert open(os.path.join(ROOT, spelling), "rb").read() == before


def test_a_symlink_onto_a_file_of_the_bundle_is_refused(tmp_path, kept):
    link = tmp_path / "report.json"
    link.symlink_to(kept(os.path.join(ROOT, "README.md")))
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", link)
    one_line_error(rc, stdout, stderr, "--json", "README.md, a file of this bundle")


def test_the_bundle_is_known_without_git(monkeypatch, kept):
    """A copy of the bundle that git does not track: its parts still say what is the bundle's."""
    monkeypatch.setattr(outputs, "tracked_by_git", lambda rel: None)  # git cannot tell
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--plot", kept(os.path.join(ROOT, "tests", "data", "figures",
                                                                                   "h200_bench.png")))
    one_line_error(rc, stdout, stderr, "--plot", "a file of this bundle")


def test_two_outputs_onto_one_file_are_refused(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "x.png"
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--plot", path, "--json", path)
    one_line_error(rc, stdout, stderr, "--plot %s is --json %s, another output" % (path, path))
    assert not path.exists()


def test_json_onto_the_capture_under_another_spelling_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(FIXED_CSV, "k.csv")
    os.symlink("k.csv", "link.csv")
    before = (tmp_path / "k.csv").read_bytes()
    for spelling in ("./k.csv", "link.csv", str(tmp_path / "k.csv")):
        rc, stdout, stderr = judge("--from-nsys", "k.csv", "--json", spelling)
        one_line_error(rc, stdout, stderr, "--json %s is --from-nsys k.csv" % spelling)
    assert (tmp_path / "k.csv").read_bytes() == before


def test_json_onto_the_bench_json_is_refused_before_any_measurement(tmp_path, monkeypatch):
    bench = tmp_path / "b.json"
    shutil.copy(data("h200-torch2.11", "bench.json"), bench)
    before = bench.read_bytes()
    monkeypatch.setattr(cli, "run_child", lambda *a: pytest.fail("measured before the outputs were checked"))
    rc, stdout, stderr = judge("--policy-report", "--bench-json", bench, "--json", bench)
    one_line_error(rc, stdout, stderr, "--json %s is --bench-json %s" % (bench, bench))
    assert bench.read_bytes() == before


@pytest.mark.parametrize("nested", ["[" * 100000 + "]" * 100000, '{"rows": ' * 5000 + "{}" + "}" * 5000])
def test_a_bench_json_nested_thousands_deep_is_a_usage_error(tmp_path, monkeypatch, nested):
    """Once a RecursionError from json.load, called a bug of the bundle."""
    (tmp_path / "deep.json").write_text(nested)
    monkeypatch.setattr(cli, "run_child", lambda *a: pytest.fail("measured before --bench-json was checked"))
    rc, stdout, stderr = judge("--policy-report", "--bench-json", tmp_path / "deep.json")
    one_line_error(rc, stdout, stderr, "usage error: --bench-json %s" % (tmp_path / "deep.json"), "nested",
                   "bench_sac_compile.py --json")


@pytest.mark.parametrize("path, says", [("/proc/self/mem", "cannot read it"),  # a regular file that reading fails
                                         ("FOLDER", "is a folder, not the bench's JSON")])
def test_a_bench_json_that_cannot_be_read_is_a_usage_error(tmp_path, monkeypatch, path, says):
    """/proc/self/mem passes every check of a file and fails its read: that was an internal error."""
    path = str(tmp_path) if path == "FOLDER" else path
    monkeypatch.setattr(cli, "run_child", lambda *a: pytest.fail("measured before --bench-json was checked"))
    rc, stdout, stderr = judge("--policy-report", "--bench-json", path)
    line = one_line_error(rc, stdout, stderr, "usage error: --bench-json %s" % path, says)
    assert "capture" not in line


def test_with_stderr_closed_stdout_holds_only_the_json():
    """An error line written where stderr is closed went to stdout, after the JSON."""
    proc = subprocess.run(["bash", "-c", '"$0" "$1" --from-nsys "$2" --json - 2>&-', sys.executable, JUDGED, FIXED_CSV],
                          capture_output=True, text=True, timeout=300)
    assert json.loads(proc.stdout)["verdict"] == "not_reproduced", proc.stdout[-500:]


def test_in_a_git_checkout_only_what_git_tracks_is_the_bundles(tmp_path, monkeypatch):
    """An output the user wrote into tests/data once was, when written again, 'a file of this
    bundle': the list of the bundle's parts is only for a copy that git does not know."""
    (tmp_path / "tests" / "data").mkdir(parents=True)
    for name in ("kept.csv", "mine.json"):
        (tmp_path / "tests" / "data" / name).write_text("x")
    monkeypatch.setattr(outputs, "ROOT", str(tmp_path))
    assert outputs.bundle_file(str(tmp_path / "tests" / "data" / "mine.json")) == "tests/data/mine.json, a file of this bundle"
    (tmp_path / "sac_repro").mkdir()
    (tmp_path / "sac_repro" / "outputs.py").write_text("x")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "tests/data/kept.csv"], check=True)
    # a repository that does not track the bundle itself (it lies in someone's checkout) cannot tell
    assert outputs.bundle_file(str(tmp_path / "tests" / "data" / "mine.json")) == "tests/data/mine.json, a file of this bundle"
    subprocess.run(["git", "-C", str(tmp_path), "add", "sac_repro/outputs.py"], check=True)
    assert outputs.bundle_file(str(tmp_path / "tests" / "data" / "mine.json")) is None
    assert outputs.bundle_file(str(tmp_path / "tests" / "data" / "kept.csv")) == "tests/data/kept.csv, a file of this bundle"


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_an_output_path_that_ends_in_a_slash_names_a_folder(tmp_path, option):
    """`--json out/` once wrote a file named `out`."""
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, option, str(tmp_path / "new") + "/")
    one_line_error(rc, stdout, stderr, "ends in /", "name a file")
    assert not (tmp_path / "new").exists()


def test_json_on_stdout_or_beside_the_bundle_is_fine(tmp_path):
    rc, stdout, _ = judge("--from-nsys", FIXED_CSV, "--json", "-")
    assert rc == 0 and json.loads(stdout)["verdict"] == "not_reproduced"
    rc, _, stderr = judge("--from-nsys", FIXED_CSV, "--json", tmp_path / "README.md")
    assert rc == 0, stderr


@pytest.fixture
def clone(tmp_path):
    """The bundle as a user has it: a git clone (its .git folder, its files tracked), a virtual
    environment in it for the tests whose bin/python is a symlink out of the folder, as venv makes
    it, and a report that an earlier run wrote there. Returns (its folder, the file the venv's
    python names)."""
    root = tmp_path / "bundle"
    root.mkdir()
    shutil.copy(SCRIPT, root)
    shutil.copytree(os.path.join(ROOT, "sac_repro"), root / "sac_repro", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, ".gitignore"), root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.email=u@e", "-c", "user.name=u", "commit", "-q", "-m", "c"]):
        subprocess.run(["git", "-C", str(root)] + cmd, check=True, env=env, capture_output=True)
    base = tmp_path / "base-python" / "python3"  # the Python the environment was made from: never to be written
    base.parent.mkdir()
    base.write_text("a Python")
    (root / ".venv-test" / "bin").mkdir(parents=True)
    (root / ".venv-test" / "pyvenv.cfg").write_text("home = %s\n" % base.parent)
    os.symlink(base, root / ".venv-test" / "bin" / "python")
    (root / "env" / "bin").mkdir(parents=True)  # a venv under another name: its pyvenv.cfg says what it is
    (root / "env" / "pyvenv.cfg").write_text("home = %s\n" % base.parent)
    (root / ".venv" / "bin").mkdir(parents=True)  # one that venv is still making: no pyvenv.cfg yet
    (root / "evidence.json").write_text("an earlier report")
    (root / "vendor" / "lib" / ".git").mkdir(parents=True)  # a repository of the user's inside the bundle's
    (root / "vendor" / "lib" / ".git" / "config").write_text("[core]\n")
    return root, base


def judge_in(root, *args):
    proc = subprocess.run([sys.executable, str(root / "sac_repro"), "--from-nsys", FIXED_CSV] + list(args),
                          cwd=root, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("option, path, says", [
    ("--json", ".git/config", "inside .git, git's own files"),
    ("--json", ".git/HEAD", "inside .git, git's own files"),
    ("--json", ".git/new.json", "inside .git, git's own files"),
    ("--plot", ".git/evidence.png", "inside .git, git's own files"),
    ("--json", ".venv-test/bin/python", "inside .venv-test, a virtual environment"),
    ("--json", ".venv-test/new.json", "inside .venv-test, a virtual environment"),
    ("--json", "env/bin/activate.json", "inside env, a virtual environment"),
    ("--json", ".venv/bin/python", "inside .venv, a virtual environment"),
    ("--json", "sac_repro/exits.py", "sac_repro/exits.py, a file of this bundle"),
    ("--json", "vendor/lib/.git/config", "inside vendor/lib/.git, git's own files"),  # a nested repository
    ("--json", "vendor/lib/.git/new.json", "inside vendor/lib/.git, git's own files"),
])
def test_outputs_never_go_into_git_or_a_virtual_environment_of_the_bundle(clone, option, path, says):
    """Once only the files git tracks were refused: --json .git/config, .git/HEAD and
    .venv-test/bin/python (through its symlink, the Python it was made from) were written over."""
    root, base = clone
    before = {p: (root / p).read_bytes() for p in (".git/config", ".git/HEAD", "sac_repro/exits.py", "vendor/lib/.git/config")}
    rc, stdout, stderr = judge_in(root, option, path)
    one_line_error(rc, stdout, stderr, "%s %s is %s" % (option, path, says), "name a new file")
    assert {p: (root / p).read_bytes() for p in before} == before and base.read_text() == "a Python"
    assert not (root / path).exists() or path in before or path.endswith("bin/python")


def test_a_worktrees_git_file_is_refused(clone):
    root, _ = clone
    shutil.rmtree(root / ".git")
    (root / ".git").write_text("gitdir: /elsewhere/.git/worktrees/bundle\n")  # as `git worktree add` leaves it
    rc, stdout, stderr = judge_in(root, "--json", ".git")
    one_line_error(rc, stdout, stderr, "--json .git is inside .git, git's own files")
    assert (root / ".git").read_text().startswith("gitdir:")


def test_a_new_file_or_an_earlier_report_in_the_bundles_folder_is_written(clone):
    root, _ = clone
    (root / "results").mkdir()
    for path in ("evidence.json", "new.json", "results/new.json", ".venv-notes.json"):
        rc, _, stderr = judge_in(root, "--json", path)
        assert rc == 0, (path, stderr)
        assert json.loads((root / path).read_text())["verdict"] == "not_reproduced"


# ------------------------------------------------------ an interrupted write leaves the old file
def limited_to(nbytes):
    """For a child process: no file it writes may grow past nbytes, so a write fails midway (EFBIG;
    Python ignores SIGXFSZ)."""
    import resource
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, resource.RLIM_INFINITY))


@pytest.mark.parametrize("option, name", [("--json", "report.json"), ("--plot", "evidence.png")])
def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path, option, name, request):
    env = dict(os.environ)
    if option == "--plot":
        pytest.importorskip("matplotlib")
        env.update(request.getfixturevalue("matplotlib_config"))
    out = tmp_path / name
    out.write_bytes(b"the old report\n")
    proc = subprocess.run([sys.executable, JUDGED, "--from-nsys", FIXED_CSV, option, str(out)], capture_output=True,
                          text=True, preexec_fn=limited_to(4000), timeout=120, env=env)
    assert proc.returncode == 128, proc.stdout + proc.stderr
    assert "cannot" in proc.stderr and option in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert out.read_bytes() == b"the old report\n"
    assert os.listdir(tmp_path) == [name]  # no half-written file left beside it


def test_an_interrupted_write_leaves_the_old_file(tmp_path):
    from sac_repro import outputs
    out = tmp_path / "report.json"
    out.write_text("old")

    def half_then_a_signal(target):
        with open(target, "w") as fh:
            fh.write("{\"half\": ")
        raise exits.Interrupted(15)
    with pytest.raises(exits.Interrupted):
        outputs.replace_atomically(str(out), half_then_a_signal)
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["report.json"]
    outputs.write_text(str(out), "new", "--json")
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["report.json"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_output_gets_the_permissions_open_would_give(tmp_path, umask, mode):
    """As open() gives under the umask: a shared group's 664, a private 600 (not 644 whatever it is)."""
    from sac_repro import outputs
    umask = os.umask(umask)
    try:
        outputs.write_text(str(tmp_path / "new.json"), "{}", "--json")
    finally:
        os.umask(umask)
    assert oct(os.stat(tmp_path / "new.json").st_mode & 0o777) == oct(mode)
    os.chmod(tmp_path / "new.json", 0o600)
    outputs.write_text(str(tmp_path / "new.json"), "{}", "--json")
    assert oct(os.stat(tmp_path / "new.json").st_mode & 0o777) == oct(0o600)  # an old file's are kept


def test_an_output_through_a_symlink_replaces_the_file_it_names(tmp_path):
    from sac_repro import outputs
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    outputs.write_text(str(tmp_path / "link.json"), "new", "--json")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"


def test_the_childs_own_abort_is_ours_not_a_skip(tmp_path, monkeypatch):
    """The measured child ends with 128 and no result only through this bundle's own guard (a
    bug of ours, or a write of its result that failed, as on a full TMPDIR): that aborts a bisect
    (128). It was read as "the torch under test exited with code 128", a 125 that skips."""
    child = tmp_path / "child.py"
    child.write_text("import sys\nprint('internal error (a bug in this bundle, not a verdict): OSError: "
                     "[Errno 28] No space left on device', file=sys.stderr)\nsys.exit(128)\n")
    monkeypatch.setattr(cli, "ENTRY", str(child))
    rc, stdout, stderr = judge("--device", "cpu")
    assert rc == 128 and stdout == "", (rc, stdout, stderr)
    assert "internal error" in stderr and "No space left on device" in stderr


def test_loops_only_where_the_loops_raised_is_no_capture_to_judge(tmp_path, monkeypatch):
    """--loops-only, run_nsys.sh's capture run, where the report's loops raised fullgraph's error (the
    recorded 2.13 child with the fix reverted, handed over by a stand-in child): 125 and Dynamo's words,
    never the 0 after which run_nsys.sh judges a capture of loops that did not run through."""
    child = tmp_path / "child.py"
    child.write_text("import shutil, sys\nshutil.copyfile(%r, sys.argv[sys.argv.index('--_child') + 1])\n"
                     % data("cpu-torch2.13", "child_fix_reverted.json"))
    monkeypatch.setattr(cli, "ENTRY", str(child))
    rc, stdout, stderr = judge("--device", "cpu", "--loops-only")
    assert rc == 125, (rc, stdout, stderr)
    said, dynamo = stdout.splitlines()
    assert said.startswith("cannot_test: the report's loops raised RuntimeError: torch.compile with fullgraph=True "
                           "found no compiled frames. (torch 2.13.0+cpu; changed: the 2.10 fix reverted in-process")
    assert dynamo.startswith("dynamo (the report's loops): skipping: f (reason: non-infra torch dispatch mode present")


def test_a_child_that_exits_otherwise_without_a_result_is_cannot_test(tmp_path, monkeypatch):
    child = tmp_path / "child.py"
    child.write_text("import os\nos._exit(3)\n")  # as torch's native code might
    monkeypatch.setattr(cli, "ENTRY", str(child))
    rc, stdout, _ = judge("--device", "cpu")
    assert rc == 125 and "exited with code 3 before giving a result" in stdout, stdout


@pytest.mark.parametrize("redirect", [">", ">>"])
def test_json_to_stdout_redirected_to_a_file_keeps_the_text_and_the_file(tmp_path, redirect):
    """`--json /dev/stdout > out.txt`: /dev/stdout is out.txt, which was replaced by a new file of
    the JSON alone (the text verdict lost; with >>, the earlier lines too)."""
    out = tmp_path / "out.txt"
    out.write_text("an earlier line\n")
    proc = subprocess.run(["bash", "-c", '"$0" "$1" --from-nsys "$2" --json /dev/stdout %s "$3"' % redirect,
                           sys.executable, JUDGED, FIXED_CSV, str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("an earlier line\n") == (redirect == ">>"), text[:200]
    assert '"verdict": "not_reproduced"' in text and "\nVERDICT: not_reproduced (exit 0)" in text, text[-500:]
    assert os.listdir(tmp_path) == ["out.txt"]


def test_json_to_stdout_into_a_pipe_exits_with_the_verdict():
    """`--json /dev/stdout | jq`: refused with 128, 'No such file or directory'."""
    proc = subprocess.run(["bash", "-c", '"$0" "$1" --from-nsys "$2" --json /dev/stdout | cat; exit ${PIPESTATUS[0]}',
                           sys.executable, JUDGED, REVERTED_CSV], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert '"verdict": "reproduced"' in proc.stdout and "VERDICT: reproduced (exit 1)" in proc.stdout


@pytest.mark.parametrize("option, ext", [("--json", ".json"), ("--plot", ".png")])
def test_an_output_under_the_longest_legal_name_is_written(tmp_path, option, ext, request, monkeypatch):
    """A name of 255 characters is legal; the temporary file it was written through was longer,
    and the write failed after the work."""
    if option == "--plot":
        pytest.importorskip("matplotlib")
        for k, v in request.getfixturevalue("matplotlib_config").items():
            monkeypatch.setenv(k, v)
    out = tmp_path / ("r" * (255 - len(ext)) + ext)
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, option, str(out))
    assert rc == 0, stderr
    assert out.stat().st_size > 0 and os.listdir(tmp_path) == [out.name]


@pytest.mark.unit
def test_the_trace_archive_names_the_home_folder_as_tilde(tmp_path, monkeypatch):
    """--trace's archive is made to attach to a public issue, and TORCH_TRACE's logs quote every
    file's path whole, the home folder's too (seen 130 times in one run's archive)."""
    import tarfile
    from sac_repro import outputs
    from sac_repro.judge.phrases import home_hidden
    home = str(tmp_path / "home" / "al")
    monkeypatch.setenv("HOME", home)
    folder = tmp_path / "trace"
    folder.mkdir()
    (folder / "dedicated_log_torch_trace_1.log").write_text(
        'V1206 {"dynamo_start": {"stack": [{"filename": "%s/repro.py"}]}}\n%s2/x.py\n' % (home, home))
    held = outputs.write_trace(str(folder), str(tmp_path / "t.tar.gz"), home_hidden)
    assert held["logs"] == ["dedicated_log_torch_trace_1.log"] and not folder.exists()
    with tarfile.open(tmp_path / "t.tar.gz") as tar:
        text = tar.extractfile("torch_trace/dedicated_log_torch_trace_1.log").read().decode()
    assert text == 'V1206 {"dynamo_start": {"stack": [{"filename": "~/repro.py"}]}}\n%s2/x.py\n' % home, text


@pytest.mark.release  # a whole run and tlparse (7 s); its usage errors stay fast
def test_trace_writes_an_archive_that_tlparse_reads(tmp_path):
    """--trace: this run's TORCH_TRACE log as one .tar.gz to attach, as PyTorch's bug template asks."""
    import shutil as sh
    import tarfile
    archive = tmp_path / "trace.tar.gz"
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", "--trace", str(archive),
                             env={"PYTHONPATH": os.path.join(ROOT, "sac_repro", "revert_fix")})
    assert rc == 1, stdout + stderr
    assert "trace: %s, to attach: 1 TORCH_TRACE log" % archive in stdout and "a skip is only in Dynamo's debug log" in stdout
    with tarfile.open(archive) as tar:
        (log,) = [m.name for m in tar.getmembers() if m.isfile()]
        tar.extractall(tmp_path / "x")
    assert log.startswith("torch_trace/dedicated_log_torch_trace_") and log.endswith(".log")
    text = (tmp_path / "x" / log).read_text()
    assert "inductor_output_code" in text and "non-infra torch dispatch mode" not in text  # what it holds, and not
    tlparse = sh.which("tlparse", path=os.path.dirname(sys.executable)) or sh.which("tlparse")
    if tlparse:  # PyTorch's own reader of these logs, where it installs
        proc = subprocess.run([tlparse, str(tmp_path / "x" / log), "-o", str(tmp_path / "parsed"), "--no-browser"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and (tmp_path / "parsed" / "index.html").exists(), proc.stderr


@pytest.mark.parametrize("args, says", [(["--trace", "t.zip"], "name a .tar.gz"),
                                        (["--from-nsys", FIXED_CSV, "--trace", "t.tar.gz"], "--trace needs a run of torch")])
def test_trace_usage_errors(args, says):
    rc, stdout, stderr = judge(*args)
    one_line_error(rc, stdout, stderr, says)


def test_two_sitecustomize_folders_on_pythonpath_are_named(tmp_path):
    """sac_repro/revert_fix and sac_repro/policy/fix_candidate at once: only the first loads, which was silent."""
    revert, candidate = os.path.join(ROOT, "sac_repro", "revert_fix"), os.path.join(ROOT, "sac_repro", "policy", "fix_candidate")
    assert cli.shadowed_sitecustomize(os.pathsep.join([revert, str(tmp_path), candidate])) == [(revert, candidate)]
    assert cli.shadowed_sitecustomize(revert) == [] and cli.shadowed_sitecustomize("") == []
