"""What torch really ran: a run with the 2.10 fix reverted in-process says so in each of its outputs
(read from torch itself, sac_repro/judge/changes.py), and Dynamo's own reason for skipping f is in the
report, whole (measure.DynamoSkips). On torch 2.13 (this environment's), as shipped and reverted."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import FIXED_COMMAND, REVERTED_COMMAND, ROOT
from sac_repro.judge import changes, plot

REVERT = os.path.join(ROOT, "sac_repro", "revert_fix")
DYNAMO_REASON = "skipping: f (reason: non-infra torch dispatch mode present, this is not supported today in torch.compile)"


def command_of(markdown):
    return re.search(r"Command: `([^`]*)`", markdown).group(1)


def test_a_reverted_run_says_so_in_every_output(reverted_run):
    rc, report, text, _, markdown = reverted_run
    assert rc == 1 and report["verdict"] == "reproduced"
    assert [c["label"] for c in report["torch_changes"]] == [changes.REVERTED]          # --json
    assert report["torch_changes"][0]["file"] == os.path.join(REVERT, "sitecustomize.py")
    env_line = text.splitlines()[0]                                                     # the text
    assert env_line.endswith("| changed: the 2.10 fix reverted in-process (sac_repro/revert_fix/sitecustomize.py)")
    assert "torch 2.13" in markdown and "**the 2.10 fix reverted in-process" in markdown.splitlines()[8]
    assert changes.REVERTED in plot.title(report)                                       # --plot


def test_the_markdown_command_reruns_what_ran(reverted_run, fixed_run):
    """The fixtures ran these commands as typed; the paste must quote them back, not a bare python."""
    for run, typed in ((reverted_run, REVERTED_COMMAND), (fixed_run, FIXED_COMMAND)):
        assert re.fullmatch(re.escape(typed) + r" --json \S+report\.json", command_of(run[4])), command_of(run[4])


def test_the_shipped_torch_says_nothing_changed(fixed_run):
    _, report, text, _, markdown = fixed_run
    assert report["torch_changes"] == [] and "changed:" not in text and "in-process" not in markdown.splitlines()[8]


def run_python(code, pythonpath=None):
    env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r)\n" % ROOT + code],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return eval(proc.stdout.strip().splitlines()[-1])


READ = "import torch, torch.utils.checkpoint\nfrom sac_repro.judge.changes import torch_changes\n"


def test_the_revert_is_read_from_torch_not_from_the_environment():
    """Whoever undoes the fix, and however: the modes' answer on a torch that ships it tells."""
    by_hand = READ + ("for m in (torch.utils.checkpoint._CachingTorchDispatchMode, torch.utils.checkpoint._CachedTorchDispatchMode):\n"
                      "    m.ignore_compile_internals = classmethod(lambda cls: False)\n"
                      "print(repr([c['label'] for c in torch_changes(torch)]))")
    assert run_python(by_hand) == [changes.REVERTED]
    assert run_python(READ + "print(repr(torch_changes(torch)))") == []
    loaded = run_python(READ + "print(repr(torch_changes(torch)))", REVERT)
    assert [(c["label"], c["pythonpath"]) for c in loaded] == [(changes.REVERTED, REVERT)]


def test_another_change_of_torch_is_named_by_its_file():
    code = READ + ("torch.utils.checkpoint.create_selective_checkpoint_contexts = lambda *a: None\n"
                   "print(repr(torch_changes(torch)))")
    (found,) = run_python(code)
    assert found["label"].startswith("torch changed in-process by ") and "create_selective_checkpoint_contexts" in found["label"]


def test_dynamo_reason_is_in_the_report_whole(reverted_run):
    rc, report, text, stdout, markdown = reverted_run
    lines = text.splitlines()
    assert "dynamo (the report's loops): " + DYNAMO_REASON in lines
    assert not any(l.startswith("hint:") for l in lines)  # the line a hint would point to is there
    actual = next(l for l in markdown.splitlines() if l.startswith("- **Actual:**"))
    assert actual.startswith("- **Actual:** 3 of 3 calls under SAC ran no compiled code (Dynamo skipped f_compiled")
    assert "Dynamo said `%s`" % DYNAMO_REASON in actual
    raised = next(l for l in lines if l.startswith("the report's loops raised"))
    assert raised.endswith("RuntimeError: torch.compile with fullgraph=True found no compiled frames.")


def test_a_shipped_torch_shows_no_dynamo_skip(fixed_run):
    _, report, text, _, _ = fixed_run
    assert report["dynamo_skips"] == [] and not any(l.startswith("dynamo (") for l in text.splitlines())


def test_one_finding_per_heading(fixed_run, reverted_run):
    fixed = fixed_run[4].split("<details>")[0].splitlines()
    assert fixed[6] == ("**This run does not reproduce pytorch/pytorch#161889**, which is fixed from torch "
                        "2.10.0: the compiled f ran compiled code under SAC in all 3 calls.")
    heading = fixed.index("#### A second finding: the policy never sees the compiled matmul")
    before, after = "\n".join(fixed[:heading]), "\n".join(fixed[heading:])
    assert "MUST_SAVE" not in before and "aten.mm" not in before  # the bug, and only the bug, first
    assert "pytorch/pytorch#175229" in after and "docs/policy.md" in after and "policy (MUST_SAVE aten.mm)" in after
    reverted = reverted_run[4].split("<details>")[0]
    # from 2.12 Dynamo raises where it skips a fullgraph=True f: those calls ran nothing, not eagerly
    assert reverted.splitlines()[6] == ("**This run reproduces pytorch/pytorch#161889 with the 2.10 fix reverted "
                                        "in-process on torch 2.13.0+cpu**: the compiled f ran no "
                                        "compiled code under SAC in 3 of 3 calls (Dynamo skipped it and, with "
                                        "fullgraph=True, raised).")
    assert "second finding" not in reverted


def test_a_revert_of_one_mode_of_two_is_a_revert():
    """Either mode answering False brings the skip back: the fix is undone."""
    one = READ + ("torch.utils.checkpoint._CachedTorchDispatchMode.ignore_compile_internals = classmethod(lambda cls: False)\n"
                  "print(repr([c['label'] for c in torch_changes(torch)]))")
    assert run_python(one) == [changes.REVERTED]


def test_a_folder_named_like_torchs_is_not_torch(tmp_path):
    """A patch in site-packages/torch_patches/ is not torch's own code."""
    torch_dir = tmp_path / "site-packages" / "torch"
    (torch_dir / "utils").mkdir(parents=True)
    (tmp_path / "site-packages" / "torch_patches").mkdir()
    assert changes.inside(str(torch_dir / "utils" / "checkpoint.py"), str(torch_dir))
    assert not changes.inside(str(tmp_path / "site-packages" / "torch_patches" / "p.py"), str(torch_dir))


# ------------------------------------------------------------------ the Command that reruns it
def rerun(environ, changed=(), argv=("--markdown",)):
    from sac_repro.judge import render
    report = {"rerun_env": render.rerun_env(environ), "torch_changes": list(changed)}
    return render.rerun_command(report, None, list(argv)), render.command_line(report, "x")


def test_the_command_carries_the_switches_of_torch_and_the_candidate():
    """SAC_FIX_CANDIDATE=warn, TORCHDYNAMO_DISABLE=1, TORCH_COMPILE_DISABLE=1 were dropped: the
    Command, run as printed, gave another answer."""
    environ = {"SAC_FIX_CANDIDATE": "warn", "TORCHDYNAMO_DISABLE": "1", "TORCH_COMPILE_DISABLE": "1",
               "TORCH_LOGS": "+dynamo", "HOME": "/root", "PATH": "/usr/bin", "PYTHONPATH": os.path.join(ROOT, "sac_repro", "policy", "fix_candidate")}
    command, line = rerun(environ)
    assert command == ("PYTHONPATH=sac_repro/policy/fix_candidate SAC_FIX_CANDIDATE=warn TORCHDYNAMO_DISABLE=1 "
                       "TORCH_COMPILE_DISABLE=1 TORCH_LOGS=+dynamo python3 -m sac_repro --markdown")
    assert "does not rerun" not in line


def test_the_command_keeps_the_pythonpath_that_loaded_a_change_and_names_what_it_cannot_load(tmp_path):
    """A revert by a module that the user's own sitecustomize imports: PYTHONPATH carried whole; a
    change made by a file off PYTHONPATH (a .pth in site-packages) is said not to rerun."""
    mine = str(tmp_path / "my site")
    revert = {"label": changes.REVERTED, "file": os.path.join(mine, "undo.py"), "pythonpath": None, "env": {}}
    command, line = rerun({"PYTHONPATH": mine}, [revert])
    assert command == "PYTHONPATH=%s python3 -m sac_repro --markdown" % shlex.quote(mine)
    assert line.endswith("; it does not rerun: the 2.10 fix reverted in-process (made by %s, which the command "
                         "does not load)" % revert["file"])
    loaded = {"label": changes.REVERTED, "file": os.path.join(REVERT, "sitecustomize.py"), "pythonpath": REVERT, "env": {}}
    command, line = rerun({}, [loaded])  # PYTHONPATH gone from the environment, the change still read
    assert command == "PYTHONPATH=sac_repro/revert_fix python3 -m sac_repro --markdown" and "does not rerun" not in line


def run_in_bundle(command, env):
    proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout


@pytest.mark.parametrize("environ", [
    {"TORCHDYNAMO_DISABLE": "1"},
    pytest.param({"TORCH_COMPILE_DISABLE": "1"}, marks=pytest.mark.release),
    pytest.param({"SAC_FIX_CANDIDATE": "warn", "PYTHONPATH": "sac_repro/policy/fix_candidate"}, marks=pytest.mark.release),
    pytest.param({"PYTHONPATH": "sac_repro/revert_fix"}, marks=pytest.mark.release),
], ids=["dynamo-disabled", "compile-disabled", "candidate-warn", "reverted"])
def test_the_pastes_command_run_as_printed_gives_the_same_answer(environ):
    """From a shell with none of the run's variables: the Command alone must bring them back."""
    clean = {k: v for k, v in os.environ.items() if not re.fullmatch(r"TORCH.*|PYTORCH_.*|SAC_FIX_CANDIDATE|PYTHONPATH", k)}
    clean["PATH"] = os.path.dirname(sys.executable) + os.pathsep + clean["PATH"]
    rc, paste = run_in_bundle("python3 -m sac_repro --device cpu --markdown", dict(clean, **environ))
    command = command_of(paste)
    assert "does not rerun" not in paste.splitlines()[8]
    again, paste_again = run_in_bundle(command, clean)
    assert (again, command_of(paste_again)) == (rc, command)
    verdict = [l for l in paste.splitlines() if l.startswith(("- **Verdict:**", "policy (MUST_SAVE"))]
    assert verdict == [l for l in paste_again.splitlines() if l.startswith(("- **Verdict:**", "policy (MUST_SAVE"))]
