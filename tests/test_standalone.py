"""The script alone, as a maintainer copies it out of an issue: saved into an empty folder and run
from another one, with nothing of the bundle beside it. It answers by itself, by the exit codes
of `git bisect run`: 0 compiled under SAC, 1 eager or refused under SAC, 125 cannot tell."""
import ast
import difflib
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import data, ROOT, SCRIPT

ANSWER = re.compile(r"^f_compiled under SAC: (ran compiled code|ran eagerly|ran no compiled code|cannot tell)")


def run_alone(tmp_path, *python, env=None):
    """(exit code, the answer line, stdout, stderr) of the script copied alone into tmp_path/alone,
    run from tmp_path/elsewhere."""
    alone, elsewhere = tmp_path / "alone", tmp_path / "elsewhere"
    alone.mkdir()
    elsewhere.mkdir()
    shutil.copy(SCRIPT, alone / "repro.py")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "PYTHON"))}
    proc = subprocess.run(list(python or [sys.executable]) + [str(alone / "repro.py")], cwd=elsewhere,
                          env=dict(clean, **(env or {})), capture_output=True, text=True, timeout=600)
    answers = [l for l in proc.stdout.splitlines() if ANSWER.match(l)]
    assert len(answers) == 1, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    return proc.returncode, answers[0], proc.stdout, proc.stderr


# ------------------------------------------------------------------ its answer, on torch 2.13
@pytest.mark.release  # the fast tier runs the same script saved from the paste (test_paste_screen)
def test_alone_on_a_fixed_torch_it_answers_0(tmp_path):
    rc, line, _, _ = run_alone(tmp_path)
    assert rc == 0, line
    assert line.startswith("f_compiled under SAC: ran compiled code (pytorch/pytorch#161889 does not reproduce; torch 2.")
    assert re.fullmatch(r".*; torch [^;]*, git [0-9a-f]{8}\)", line) and "reverted" not in line, line


@pytest.mark.release  # the fast tier runs the same script saved from the paste (test_paste_screen)
def test_alone_with_the_fix_reverted_it_answers_1_in_dynamos_words(tmp_path):
    """2.12 and later: Dynamo refuses f under SAC and, with fullgraph=True, raises in the report's
    loop. That error is the answer, 1, never 125; its reason is quoted. The call profiled again ran
    f's ops eagerly and then raised, and the line says so, and that the fix that torch's own
    checkpoint.py defines is reverted in this process (it said "ran no compiled code", and named
    no revert)."""
    rc, line, _, _ = run_alone(tmp_path, env={"PYTHONPATH": os.path.join(ROOT, "sac_repro", "revert_fix")})
    assert rc == 1, line
    assert re.fullmatch(r"f_compiled under SAC: ran eagerly: aten::mul, aten::add, then raised \(pytorch/pytorch"
                        r"#161889 reproduces; torch [^;]*, git [0-9a-f]{8}; the 2\.10 fix reverted in-process\); "
                        r"Dynamo skipped f: non-infra torch dispatch mode present, this is not supported today in "
                        r"torch\.compile", line), line


@pytest.mark.parametrize("switch, why", [
    ("TORCHDYNAMO_DISABLE", "the control, without SAC, did not run compiled code alone"),
    # raised by the control's first call; the same class as the first, so the release tier's (5 s)
    pytest.param("TORCH_COMPILE_DISABLE", "found no compiled frames", marks=pytest.mark.release),
])
def test_alone_with_compile_switched_off_it_cannot_tell(tmp_path, switch, why):
    """Nothing compiles anywhere, the control included: that says nothing of SAC (125)."""
    rc, line, _, _ = run_alone(tmp_path, env={switch: "1"})
    assert rc == 125, line
    assert line.startswith("f_compiled under SAC: cannot tell (") and why in line


def test_alone_in_a_python_without_torch_it_cannot_tell(tmp_path):
    """-S: this Python without its site-packages, so without torch."""
    rc, line, _, stderr = run_alone(tmp_path, sys.executable, "-S")
    assert rc == 125, line
    assert "ModuleNotFoundError: No module named 'torch'" in line and "torch did not import" in line
    assert "Traceback" in stderr  # Python's own report of the error stays


def test_alone_with_stdout_closed_an_error_is_still_125(tmp_path):
    """The answer's line cannot be written: the exit code stands. It was 1 ('Error in
    sys.excepthook'), read as "reproduces"."""
    (tmp_path / "repro.py").write_bytes(open(SCRIPT, "rb").read())
    for stdout in (None, "/dev/full"):
        with open(stdout or os.devnull, "w") as sink:
            cmd = [sys.executable, "-S", str(tmp_path / "repro.py")]
            proc = subprocess.run(["bash", "-c", '"$@" >&-', "-"] + cmd, capture_output=True, timeout=120) if stdout is None \
                else subprocess.run(cmd, stdout=sink, stderr=subprocess.PIPE, timeout=120)
        assert proc.returncode == 125, (stdout, proc.stderr[-500:])


def test_alone_beside_a_broken_torch_folder_it_cannot_tell(tmp_path):
    """A torch/ folder without __init__.py beside the script (a leftover) imports as an empty
    namespace: no version to read. It crashed the answer twice, exit 1."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "repro.py").write_bytes(open(SCRIPT, "rb").read())
    proc = subprocess.run([sys.executable, "-S", str(tmp_path / "repro.py")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 125, proc.stderr[-1000:]
    assert proc.stdout.startswith("f_compiled under SAC: cannot tell (ModuleNotFoundError") and "torch ?, git ?" in proc.stdout


def test_alone_it_refuses_options(tmp_path):
    """Options are the judged run's; a script that ignored them would answer another question."""
    (tmp_path / "repro.py").write_bytes(open(SCRIPT, "rb").read())
    proc = subprocess.run([sys.executable, str(tmp_path / "repro.py"), "--markdown"], capture_output=True, text=True)
    assert proc.returncode == 128 and proc.stdout == ""
    assert "takes no options" in proc.stderr and "in the bundle's folder: python3 -m sac_repro --help" in proc.stderr


# ------------------------------------------------------------------------------ its form
def script_text():
    with open(SCRIPT) as fh:
        return fh.read()


def test_it_imports_nothing_of_the_bundle():
    tree = ast.parse(script_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"atexit", "builtins", "contextlib", "functools", "inspect", "io", "logging", "os", "re", "sys", "traceback", "types",
                        "torch"}, imported
    assert "sys.path" not in script_text()


def test_it_is_short_with_one_main_block():
    text = script_text()
    assert len(text.splitlines()) <= 120
    assert text.count('if __name__ == "__main__":') == 1
    assert text.rstrip().splitlines()[-3] == 'if __name__ == "__main__":'
    assert text.rstrip().splitlines()[-1].endswith(" else sys.exit(code)")


def test_the_reports_code_is_there_and_the_additions_are_fewer_lines():
    """The report's lines (tests/data/report/report_code.py, as filed) in order between the
    script's two markers, but for those marked [changed]; the lines added there are fewer than
    the report's own (the answer comes before and after the block, not inside it)."""
    report = open(data("report", "report_code.py")).read().splitlines()
    text = script_text()
    block = text[text.index("# ==== the report's code"):text.index("# ==== end of the report's code")].splitlines()[1:]
    matcher = difflib.SequenceMatcher(None, report, block, autojunk=False)
    kept = sum(b.size for b in matcher.get_matching_blocks())
    dropped = [report[i] for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("replace", "delete")
               for i in range(i1, i2)]
    changed = [l for l in block if "[changed]" in l]
    assert len(dropped) == len(changed) == 6, (dropped, changed)  # device="cuda" twice, torch.cuda.nvtx four times
    added = len(block) - kept - len(changed)
    assert added < len(report) and added <= 15, added


# Another function than f refused by Dynamo under a mode, inside the SAC checkpoint: not #161889.
OTHER_REFUSED = """import torch, torch.utils.checkpoint as c
from torch.utils._python_dispatch import TorchDispatchMode
class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
helper = torch.compile(lambda t: t + 1, fullgraph=True)
real = c.checkpoint
def checkpoint(fn, *args, context_fn=None, **kwargs):
    if context_fn is not None:
        with Mode():
            helper(args[0])
        return real(fn, *args, context_fn=context_fn, **kwargs)
    return real(fn, *args, **kwargs)
c.checkpoint = checkpoint
"""
# Ctrl-C while the answer is formed after an error: 130, never Python's 1.
INTERRUPTED_ANSWER = """import runpy, traceback
runpy.run_path(%r)  # the revert: the loop raises Dynamo's refusal, and the answer starts
def walk_tb(tb):
    raise KeyboardInterrupt
traceback.walk_tb = walk_tb
"""


@pytest.mark.release
@pytest.mark.parametrize("site, rc, says", [
    (OTHER_REFUSED, 125, "cannot tell (RuntimeError: torch.compile with fullgraph=True found no compiled frames"),
    (INTERRUPTED_ANSWER % os.path.join(ROOT, "sac_repro", "revert_fix", "sitecustomize.py"), 130, None),
], ids=["another-function-refused", "ctrl-c-in-the-answer"])
def test_alone_what_is_not_f_refused_is_not_an_answer(tmp_path, site, rc, says):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(site)
    alone = tmp_path / "repro.py"
    alone.write_bytes(open(SCRIPT, "rb").read())
    proc = subprocess.run([sys.executable, str(alone)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert proc.returncode == rc, (proc.stdout, proc.stderr[-2000:])
    if says:
        assert says in proc.stdout and "- <lambda> (" in proc.stdout


# Stands in for a crash of the torch under test in the report's SAC loop: never Python's exit 1.
CRASH_UNDER_SAC = """import torch.utils.checkpoint as c
real = c.checkpoint
def checkpoint(fn, *args, context_fn=None, **kwargs):
    if context_fn is not None:
        raise ValueError("a stand-in crash of the torch under test")
    return real(fn, *args, **kwargs)
c.checkpoint = checkpoint
"""


@pytest.mark.release  # real torch, 7 s; the fast tier answers a crash on a stand-in (test_script_as_program)
def test_alone_a_crash_under_sac_is_cannot_tell(tmp_path):
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "sitecustomize.py").write_text(CRASH_UNDER_SAC)
    rc, line, _, stderr = run_alone(tmp_path, env={"PYTHONPATH": str(tmp_path / "crash")})
    assert rc == 125, line
    assert "cannot tell (ValueError: a stand-in crash of the torch under test" in line
    assert "Traceback" in stderr


@pytest.mark.release
@pytest.mark.parametrize("version, rc, says", [
    ("2.9.1", 1, "ran eagerly: aten::mul, aten::add (pytorch/pytorch#161889 reproduces; torch 2.9.1"),
    ("2.15.0", 0, "ran compiled code (pytorch/pytorch#161889 does not reproduce; torch 2.15.0"),
    ("2.4.1", 125, "cannot tell (ImportError: cannot import name 'CheckpointPolicy'"),
])
def test_alone_on_a_release(release_python, tmp_path, version, rc, says):
    code, line, _, _ = run_alone(tmp_path, release_python(version), env={"CUDA_VISIBLE_DEVICES": ""})
    assert code == rc and says in line and "reverted" not in line, line  # 2.9.1: no fix on disk to revert
    if version == "2.9.1":  # Dynamo logs its reason at debug level; the script keeps it, and prints no log
        assert line.endswith("; Dynamo skipped f: non-infra torch dispatch mode present, this is not supported today in torch.compile")
