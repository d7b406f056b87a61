"""Every paste states only what its own evidence shows: its headline, Actual and verdict agree;
the policy report speaks of the policy only where f compiled, and names a change where one ran;
a capture judged alone says what it does not know. From recorded children and captures: no torch."""
import copy
import os
import re
import subprocess
import sys

import pytest

from conftest import data, judge, recorded, REVERTED_CSV, ROOT, SCRIPT
from sac_repro.judge import cli, render, verdict

from sac_repro.policy import policy_report
pytestmark = pytest.mark.unit

FIXED = data("cpu-torch2.13", "child_fixed.json")
REVERTED = data("cpu-torch2.13", "child_fix_reverted.json")


def markdown(raw, strict=False, policy=False, command="python3 -m sac_repro --markdown"):
    report = verdict.report_from_child(copy.deepcopy(raw), "regression", strict)
    if policy:
        return report, policy_report.render_policy_markdown(report, command, None)
    return report, render.render_markdown(report, command, SCRIPT, None)


def test_strict_policy_headline_agrees_with_its_verdict():
    """`--markdown --strict-policy` on a fixed torch: 'This run does not reproduce' stood above
    'Verdict: reproduced (exit 1)', with no reason."""
    report, md = markdown(recorded(FIXED), strict=True)
    assert report["verdict"] == "reproduced"
    headline = md.splitlines()[6]
    assert "reproduces" in headline and "does not reproduce" not in headline
    assert "--strict-policy" in headline and "MUST_SAVE" in headline


def test_the_policy_report_of_a_build_where_nothing_compiled_gives_no_version_advice():
    """TORCHDYNAMO_DISABLE=1 on 2.13: it said 'that is pytorch/pytorch#161889 itself ... Run it on
    torch 2.10 or later', on a torch that is 2.10 or later."""
    raw = recorded(FIXED)
    raw.update(status="cannot_test", reason="the control did not run compiled code")
    _, md = markdown(raw, policy=True)
    assert "2.10 or later" not in md and "#161889 itself" not in md
    assert "this build could not be tested: the control did not run compiled code" in md


def test_the_policy_report_under_the_revert_says_to_drop_the_revert():
    report, md = markdown(recorded(REVERTED), policy=True)
    assert report["torch_changes"] and report["scenarios"][verdict.CASE]["eager_calls"]
    assert "2.10 or later" not in md
    assert "without the in-process revert" in md and "tools/revert_fix" in md  # as the recording names it


def test_the_policy_report_where_the_matmul_was_saved_does_not_claim_the_finding():
    """Under sac_repro/policy/fix_candidate the table showed the matmul saved while the text claimed the policy
    never sees it and that nothing says so."""
    raw = recorded(FIXED)
    case = raw["scenarios"][verdict.CASE]
    case["backward_matmuls"] = raw["scenarios"][verdict.NO_CHECKPOINT]["backward_matmuls"]  # saved
    case["policy_saw"] = [["aten.mm.default", "MUST_SAVE", 1]]
    raw["env"]["changes"] = [{"label": "the candidate fix (fix mode)", "file": "/x/sitecustomize.py",
                              "pythonpath": "/x", "env": {}}]
    _, md = markdown(raw, policy=True)
    assert "**This run does not show it**" in md and "the candidate fix (fix mode)" in md
    assert "What stays open" not in md and "never matches" not in md


def test_a_capture_judged_alone_says_what_it_does_not_know():
    """`run_nsys.sh --report CAP --markdown`: pasted as 'This run reproduces', naming no torch."""
    rc, stdout, _ = judge("--from-nsys", REVERTED_CSV, "--markdown")
    assert rc == 1
    line = stdout.splitlines()[8]
    assert "the torch that made it, and any in-process change of it, are unknown" in line, line


def test_markdown_with_policy_report_says_which_it_printed(monkeypatch):
    monkeypatch.setattr(cli, "run_child", lambda *a: (recorded(FIXED), ""))
    monkeypatch.setattr(cli, "collect_env", lambda: None)
    rc, stdout, stderr = judge("--markdown", "--policy-report")
    assert stdout.startswith("### Selective activation checkpointing around")
    assert "--policy-report prints the policy report alone" in stderr


@pytest.mark.parametrize("option", [["--json", "out.json"], ["--plot", "p.png"], ["--markdown"], ["--hunt-fix"],
                                    ["--strict-policy"], ["--policy-report"]])
def test_loops_only_refuses_the_judges_options(option, monkeypatch):
    """--loops-only gives no verdict: these were silently ignored."""
    monkeypatch.setattr(cli, "run_child", lambda *a: pytest.fail("ran before its options were checked"))
    rc, stdout, stderr = judge("--loops-only", *option)
    assert rc == 128 and "--loops-only" in stderr and option[0] in stderr, stderr


@pytest.mark.parametrize("child", [REVERTED, data("cpu-torch2.9.1", "child.json")], ids=["2.13-reverted", "2.9.1"])
def test_a_reproducing_paste_has_one_finding(child):
    """Where f ran eagerly (or nothing) under SAC, the policy saw f's own ops: no policy heading."""
    report, md = markdown(recorded(child))
    assert report["verdict"] == "reproduced" and report["policy"]
    assert "#### " not in md and "second finding" not in md


def test_the_command_carries_pythons_warnings_filter_and_the_compiler():
    """PYTHONWARNINGS=error made the run 125; the printed Command, without it, answered 0."""
    environ = {"PYTHONWARNINGS": "error", "CXX": "/opt/gcc/bin/g++", "HOME": "/root"}
    report = {"rerun_env": render.rerun_env(environ), "torch_changes": []}
    assert render.rerun_command(report, None, ["--markdown"], python="/usr/bin/python3") == \
        "CXX=/opt/gcc/bin/g++ PYTHONWARNINGS=error /usr/bin/python3 %s --markdown" % render.shell_path(ROOT + "/sac_repro")


def test_error_logs_of_a_build_that_raised_say_what_it_raised():
    """'None: nothing raised; the torch under test raised ...' said both."""
    raw = recorded(FIXED)
    raw.update(status="torch_error", reason="BackendCompilerFailed: backend='inductor' raised")
    report = verdict.report_from_child(raw, "regression", False)
    logs = render.error_logs(report)
    assert "None" not in logs[0] and "BackendCompilerFailed: backend='inductor' raised" in logs


def test_a_capture_judged_alone_asks_for_the_run_not_an_upgrade(tmp_path):
    """It asked for `python3 -m sac_repro`, which anywhere but the bundle's folder is Python's "No
    module named sac_repro", exit 1: the command it names runs where it is pasted."""
    rc, stdout, _ = judge("--from-nsys", REVERTED_CSV, "--markdown")
    step = next(l for l in stdout.splitlines() if l.startswith("- **Next step:**"))
    assert "2.10.0 or later" not in step and " -m " not in step
    command = re.search(r"run `(python3 [^`]+ --markdown)` with the Python of the torch that made this capture", step)
    assert command, step
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(["bash", "-c", command.group(1) + " --help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "--markdown" in proc.stdout, (proc.returncode, proc.stderr[-500:])


# ----------------------------------------------------------------- the next step's revert check
OTHER_CHANGE = {"label": "torch changed in-process by /x/patch.py (checkpoint)", "file": "/x/patch.py",
                "pythonpath": None, "env": {}}
# that a fixed torch gives 0 without the revert, the paste says once: where it tells the reader to run it
UNDID = "none for torch: the 2.10 fix was undone on purpose."


def with_changes(raw, changes):
    raw = copy.deepcopy(raw)
    raw["env"]["changes"] = changes
    return raw


def step(raw, strict=False):
    return render.next_step(verdict.report_from_child(copy.deepcopy(raw), "regression", strict))


def test_the_next_step_of_a_reverted_run_is_none_for_torch():
    reverted = recorded(REVERTED)
    assert step(reverted) == UNDID
    # the revert named second, after another change: still the revert's run (the headline names both)
    both = with_changes(reverted, [OTHER_CHANGE] + reverted["env"]["changes"])
    assert step(both) == UNDID


def test_the_next_step_of_another_change_is_not_the_reverts():
    """Eager calls under a change that is not the revert: no 'this run undid the fix'."""
    other = with_changes(recorded(REVERTED), [OTHER_CHANGE])
    assert not step(other).startswith("none for torch")
    assert not step(with_changes(recorded(REVERTED), [])).startswith("none for torch")


def test_to_run_it_says_torch_as_installed_only_where_something_changed_it():
    """The script saved from the paste runs on the reader's torch as installed: the paste says so
    where an in-process change ran here (not the revert, whose own words say more), and only there."""
    def run_it(raw):
        return render.run_it(verdict.report_from_child(copy.deepcopy(raw), "regression", False))
    assert run_it(recorded(FIXED)).endswith("125: cannot tell).")
    assert run_it(with_changes(recorded(FIXED), [OTHER_CHANGE])).endswith(
        "125: cannot tell; on torch as installed, without what changed it here).")


def test_the_next_step_of_a_strict_policy_run_under_the_revert_is_the_policys():
    """Compiled under SAC, the revert listed (it reverted nothing the case used): --strict-policy's
    reading, not the revert's."""
    raw = with_changes(recorded(FIXED), recorded(REVERTED)["env"]["changes"])
    report = verdict.report_from_child(raw, "regression", True)
    assert report["verdict"] == "reproduced" and not report["scenarios"][verdict.CASE]["eager_calls"]
    assert render.next_step(report).startswith("read the second finding below")


# ------------------------------------------------- a call that ran f eagerly, then raised (issue 45)
RAN_THEN_RAISED = [["aten::add", 4], ["aten::mm", 2], ["aten::mul", 4], ["aten::detach", 1]]


def ran_then_raised(raw):
    raw = copy.deepcopy(raw)
    for s in (verdict.CASE, verdict.AFTER_SAC, verdict.WRAPPED):
        raw["scenarios"][s]["calls"] = [{"names": RAN_THEN_RAISED, "refused": "RuntimeError: torch.compile with "
                                         "fullgraph=True found no compiled frames."}] * 3
    return raw


def test_every_output_says_a_call_ran_eagerly_then_raised():
    """Issue 45: the table said 'none: Dynamo raised', the headline 'ran no compiled code', the
    policy report that f ran nothing for SAC to see, where each call ran f eagerly first."""
    report, md = markdown(ran_then_raised(recorded(REVERTED)))
    text = render.render_text(report)
    for out in (md, text):
        assert "none: Dynamo raised" not in out and "nothing ran" not in out and "ran no compiled code" not in out
    assert md.splitlines()[6].endswith(": the compiled f ran eagerly under SAC in 3 of 3 calls, then raised.")
    row = next(l for l in md.splitlines() if l.startswith("| with_context |"))
    assert row.startswith("| with_context | 0/3 | aten::add x12, aten::mul x12, then raised |"), row
    assert "VERDICT: reproduced (exit 1): 3 of 3 calls under SAC ran eagerly, then raised" in text
    _, policy = markdown(ran_then_raised(recorded(REVERTED)), policy=True)
    assert ("the compiled f ran eagerly under SAC in 3 of 3 calls, then raised: that is pytorch/pytorch#161889 "
            "itself") in policy
    assert "SAC then sees f's own ops, and the policy applies to them" in policy


def test_a_raised_call_with_no_record_of_f_says_what_was_seen():
    report, md = markdown(recorded(REVERTED))  # recorded before issue 45: no events of the raising calls
    row = next(l for l in md.splitlines() if l.startswith("| with_context |"))
    assert "| none seen: Dynamo raised |" in row and "nothing ran" not in md


def test_the_ablation_table_says_what_each_backends_call_did():
    report = verdict.report_from_child(copy.deepcopy(recorded(FIXED)), "regression", False)
    report["ablation"] = {"reading": "x", "rows": [
        {"backend": "eager", "frame_compiled": False, "refused": True, "eager_ops": ["aten::add", "aten::mul"]},
        {"backend": "aot_eager", "frame_compiled": False, "refused": True, "eager_ops": []},
        {"backend": "inductor", "frame_compiled": False, "error": "BackendCompilerFailed: boom"},
        {"backend": "inductor + x", "frame_compiled": True, "policy_saw": ["aten.mm.out"], "backward_matmuls": 3}]}
    assert [r[1] for r in render.ablation_rows(report)] == [
        "no: ran eagerly, then raised (fullgraph=True)", "no: raised, f's ops not seen (fullgraph=True)",
        "error: BackendCompilerFailed: boom", "yes"]


def test_inductors_extern_matmul_is_named_only_where_the_policy_met_it():
    """Under the candidate fix the case's policy saw aten.mm.default, while Inductor's output code
    (of another compile of f) still calls extern_kernels.mm: 'the op SAC's mode meets' was false."""
    raw = copy.deepcopy(recorded(FIXED))
    raw["inductor_extern_mm"] = "extern_kernels.mm(buf0, buf1, out=buf2)"
    report, md = markdown(raw)
    assert "that is the op SAC's mode meets at run time" in md
    assert "inductor's output code calls: extern_kernels.mm(" in render.render_text(report)
    raw["scenarios"][verdict.CASE]["policy_saw"] = [["aten.mm.default", "MUST_SAVE", 2]]
    report, md = markdown(raw)
    assert "extern_kernels" not in md and "extern_kernels" not in render.render_text(report)


# ------------------------------------------- what the run's process said (issue 45, said.py)
WARNED = {"where": "the report's loops", "kind": "warning",
          "file": ROOT + "/sac_repro/policy/fix_candidate/sac_fix_regions.py",
          "text": "UserWarning: torch.utils.checkpoint: a selective activation checkpointing policy was asked "
                  "about aten.mm.out, the out= call that Inductor's compiled code makes"}


def said(raw, what):
    raw = copy.deepcopy(raw)
    if what is not None:
        raw["said"] = what
    return raw


def test_the_policy_report_says_nothing_said_so_only_when_nothing_was_said():
    """Issue 45: in the candidate's warn mode the run warned, and --policy-report said 'Nothing says so'."""
    _, md = markdown(said(recorded(FIXED), [WARNED]), policy=True)
    stays = next(l for l in md.splitlines() if l.startswith("**What stays open:**"))
    assert "Nothing said" not in stays and "Nothing says so" not in stays and "does not check" not in stays
    assert ("What this run's process printed or warned, besides the bundle: `said (the report's loops; warning from "
            "sac_repro/policy/fix_candidate/sac_fix_regions.py): UserWarning: torch.utils.checkpoint: a selective") in stays
    _, md = markdown(said(recorded(FIXED), []), policy=True)
    assert "Nothing said so in this run: no warning was shown, and nothing but logs was printed. SAC answers every op" in md
    _, md = markdown(said(recorded(FIXED), None), policy=True)  # recorded before anything was caught
    assert "Nothing said" not in md and "Nothing says so" not in md and "SAC answers every op" in md


def test_what_the_run_said_is_in_the_text_and_the_pastes_error_logs():
    report, md = markdown(said(recorded(FIXED), [WARNED]))
    line = "said (the report's loops; warning from sac_repro/policy/fix_candidate/sac_fix_regions.py): " + WARNED["text"]
    assert line in render.render_text(report).splitlines()
    logs = md.split("### Error logs")[1].split("### Versions")[0]
    assert line in logs.splitlines() and "None:" not in logs
    _, md = markdown(said(recorded(FIXED), []))
    assert "None: nothing raised, Dynamo logged no skip of f, no warning was shown, and nothing was printed but log " \
           "records and the bundle's progress lines." in md
    _, md = markdown(said(recorded(FIXED), None))
    assert "None: nothing raised, Dynamo logged no skip of f.\n" in md  # not recorded: no claim


def test_what_the_run_said_names_paths_as_a_paste_does(monkeypatch):
    """The candidate names its own file when it declines ('the 2.10 fix is reverted in-process (by
    /home/.../sitecustomize.py)'): quoted as said, a machine path would go into a public paste."""
    monkeypatch.setenv("HOME", "/home/someone")
    entry = dict(WARNED, text="sac fix candidate: not loaded: reverted (by %s/sac_repro/revert_fix/sitecustomize.py); "
                              "see /home/someone/patches/sitecustomize.py" % ROOT)
    report, md = markdown(said(recorded(FIXED), [entry]))
    (line,) = [l for l in render.render_text(report).splitlines() if l.startswith("said (")]
    assert line.endswith("not loaded: reverted (by sac_repro/revert_fix/sitecustomize.py); see "
                         "~/patches/sitecustomize.py")
    assert ROOT not in md and "/home/someone" not in md.split("### Versions")[0]


def test_a_policy_subject_that_was_not_counted_says_why():
    """Issue 46: 'with_context not measured (on CPU only matmuls inside compiled code can be
    counted)' was said of calls that raised; the CPU counts every matmul since."""
    report = verdict.report_from_child(recorded(REVERTED), "regression", False)
    (line,) = [l for l in render.render_text(report).splitlines() if l.startswith("policy (MUST_SAVE aten.mm), ")]
    assert "with_context not measured (its calls raised);" in line and "on CPU only" not in line
    raw = recorded(FIXED)
    raw["scenarios"][verdict.CASE].pop("backward_matmuls")
    raw["scenarios"][verdict.CASE]["backward_error"] = "RuntimeError: boom"
    report = verdict.report_from_child(raw, "regression", False)
    assert "with_context not measured (its backward raised);" in render.render_text(report)


def test_a_count_missing_on_a_gpu_is_not_put_down_to_the_cpu():
    """A backward recorded without its count ('backward_matmuls': null) is put down to the CPU, which
    counted only matmuls inside compiled code in runs recorded before it told them apart, only on the
    CPU: on a GPU it is 'not measured', no more."""
    raw = recorded(FIXED)
    raw["scenarios"][verdict.CASE]["backward_matmuls"] = None
    for device, why in (("cpu", " (on CPU only matmuls inside compiled code can be counted)"), ("cuda", "")):
        raw["env"]["device"] = device
        text = render.render_text(verdict.report_from_child(copy.deepcopy(raw), "regression", False))
        (line,) = [l for l in text.splitlines() if l.startswith("policy (MUST_SAVE aten.mm), ")]
        assert "; with_context not measured%s;" % why in line, line


def test_a_run_that_cannot_test_offers_no_ablation():
    """The ablation runs the case under each backend: where this build cannot be tested (the control
    did not compile) the plain text does not offer it as the next thing to run; a judged run does."""
    raw = recorded(FIXED)
    offer = "ablation: not run (it compiles f once per backend); --ablation or --markdown runs it"
    assert offer in render.render_text(verdict.report_from_child(copy.deepcopy(raw), "regression", False))
    raw["scenarios"]["without_context"]["calls"][0]["names"] = raw["scenarios"]["eager_sac"]["calls"][0]["names"]
    report = verdict.report_from_child(raw, "regression", False)
    assert report["verdict"] == "cannot_test" and "ablation" not in render.render_text(report)


# ------------------------------------------------------- the attached picture and the trace (issue 46)
def test_the_attached_picture_has_its_caption_in_the_paste():
    report, md = markdown(recorded(FIXED))
    assert "The picture" not in md
    report["plot"] = "/somewhere/evidence.png"
    md = render.render_markdown(report, "python3 -m sac_repro --markdown", SCRIPT, None)
    block = md.split("<details><summary>The picture, <code>evidence.png</code></summary>")[1].split("</details>")[0]
    assert "green: compiled code; orange: f's eager ops and kernels; blue: matmuls" in block
    assert "matmuls computed in one backward per scenario" in block and "/somewhere" not in md


def test_the_trace_note_points_to_dynamos_lines_only_where_there_are_some():
    """'a skip is only in its debug log (the `dynamo` lines)' ended a paste that had none."""
    trace = {"path": "/somewhere/trace.tar.gz", "logs": ["a.log", "b.log"]}
    for raw, where in ((recorded(FIXED), "this run caught none"), (recorded(REVERTED), "under Error logs")):
        report = verdict.report_from_child(copy.deepcopy(raw), "regression", False)
        report["trace"] = trace
        md = render.render_markdown(report, "python3 -m sac_repro --markdown", SCRIPT, None)
        note = md.split("<details><summary>The TORCH_TRACE logs, <code>trace.tar.gz</code></summary>")[1]
        assert "a skip is only in Dynamo's debug log (%s)." % where in note.split("</details>")[0]
        assert "`dynamo` lines" not in md and md.count("The TORCH_TRACE logs") == 1


def test_a_capture_judged_alone_is_named_as_a_paste_names_paths(monkeypatch):
    """The capture's file was named by the absolute path it was given: a machine path in a paste."""
    monkeypatch.setenv("HOME", os.path.dirname(ROOT))
    rc, stdout, _ = judge("--from-nsys", REVERTED_CSV, "--markdown")
    line = stdout.splitlines()[8]
    assert line.startswith("nsys tests/data/h200-torch2.11-fix-reverted/nvtx_kern_sum.csv (the torch that made it"), line
    assert os.path.dirname(ROOT) + os.sep not in stdout.split("### Versions")[0]


# ------------------------------------------------ every sentence names the home folder as ~ (issue 45)
def test_every_sentence_names_the_home_folder_as_tilde(monkeypatch, tmp_path):
    """HOME='/tmp/h o#me%' with Inductor's cache under it: g++ broke on the space (125, right), and
    the headline, Actual, Error logs (and the text, and --policy-report) quoted the home folder whole,
    where only the Command wrote it as ~. Both spellings count: $HOME, and where it is a link, its target."""
    real = tmp_path / "h o#me%"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    home, target = str(tmp_path / "link"), str(real)
    monkeypatch.setenv("HOME", home)
    raw = copy.deepcopy(recorded(FIXED))
    raw.update(status="torch_error", reason="InductorError: CppCompileError: C++ compile error Command: g++ "
                                            "%s/ic/gh/x.main.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -O3 (in %s)" % (home, target),
               loops_error="RuntimeError: %s/ic/x.so: cannot open ('%s/ic')" % (target, home),
               dynamo_skips=[{"frame": "f (%s/model.py:3)" % target, "reason": "see \"%s/log.txt\"" % home,
                              "where": "the report's loops"}],
               said=[{"where": "the report's loops", "kind": "stderr", "file": target + "/patch.py",
                      "text": "W1206 01:33:11.593000 4650 x.py:1] read %s/ic/a.txt, %s." % (target, home)}])
    report = verdict.report_from_child(raw, "regression", False)
    assert report["verdict"] == "cannot_test" and home in report["reason"]
    md = render.render_markdown(report, "python3 -m sac_repro --markdown", SCRIPT, "collect_env: in %s/x" % home)
    text = render.render_text(report)
    policy = policy_report.render_policy_markdown(report, "python3 -m sac_repro --policy-report", None)
    for out in (md, text, policy):
        assert home not in out and target not in out, [l for l in out.splitlines() if home in l or target in l]
    assert "g++ ~/ic/gh/x.main.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -O3 (in ~)" in md.splitlines()[6]
    assert "RuntimeError: ~/ic/x.so: cannot open ('~/ic')" in md and "skipping: f (~/model.py:3)" in text
    assert "read ~/ic/a.txt, ~." in text and "collect_env: in ~/x" in md
    assert "this build could not be tested: InductorError" in policy and "g++ ~/ic/gh/" in policy


# -------------------------------------------------- the next step follows the policy's section (issue 45)
F_SAW = [["aten.add.Tensor", "PREFER_RECOMPUTE", 4], ["aten.mm.default", "MUST_SAVE", 2],
         ["aten.mul.Tensor", "PREFER_RECOMPUTE", 4]]
COMPILED = {"calls": ["compiled"] * 3, "compiled_calls": 3, "eager_calls": 0, "refused_calls": 0}
# The report of `PYTHONPATH=sac_repro/policy/fix_candidate python sac_repro --markdown --device cpu` on
# torch 2.13.0+cpu (its --json, the keys the next step and the policy's section read)
CANDIDATES = {
    "verdict": "not_reproduced", "exit_code": 0,
    "reason": "all 3 calls under SAC ran compiled code, as did all 3 of the control",
    "env": {"torch": "2.13.0+cpu", "device": "cpu"},
    "torch_changes": [{"label": "candidate fix for the SAC policy under sac(compile(f)) loaded in-process (mode: fix)",
                       "file": ROOT + "/sac_repro/policy/fix_candidate/sitecustomize.py",
                       "pythonpath": ROOT + "/sac_repro/policy/fix_candidate", "reloaded_by": "PYTHONPATH", "env": {}}],
    "scenarios": {"without_context": COMPILED, "with_context": dict(COMPILED, policy_saw=F_SAW),
                  "workaround": dict(COMPILED, policy_saw=F_SAW), "without_context_after_sac": COMPILED,
                  "eager_sac": {"calls": ["eager"] * 3, "compiled_calls": 0, "eager_calls": 3, "refused_calls": 0},
                  "compiled_no_checkpoint": COMPILED},
    "policy": {"backward_matmuls": {"without_context": 3, "with_context": 2, "workaround": 2, "eager_sac": 2,
                                    "compiled_no_checkpoint": 2},
               "trusted": True, "baseline": 2, "device": "cpu", "with_context_matmul_recomputed_in_backward": False,
               "workaround_matmul_recomputed_in_backward": False,
               "ops_seen": {"with_context": F_SAW, "workaround": F_SAW, "eager_sac": F_SAW}, "backward_errors": {}},
    "inductor_extern_mm": "extern_kernels.mm(buf0, buf1, out=buf2)"}


def test_the_next_step_where_the_policy_applied_files_no_second_finding(monkeypatch):
    """Under the candidate's fix mode the Next step said to file 'the second finding below' as an
    issue of its own, while the policy's section below it said the policy saw aten.mm.default and
    backward computed no extra matmul: one paste, two answers."""
    monkeypatch.delenv(render.URL_VARIABLE, raising=False)
    report = copy.deepcopy(CANDIDATES)
    section = " ".join(render.second_finding(report))
    assert render.SECOND_FINDING not in section and "no more matmuls than where the forward matmul is saved" in section
    said = render.next_step(report)
    assert "second finding below" not in said and "an issue of its own" not in said, said
    assert said == ("keep #161889 closed; under `sac(compile(f))` the policy applied in this run (the forward matmul "
                    "was saved): no second finding to track.")
    # where the policy's MUST_SAVE was ignored, the section states the finding, and the next step files it
    report["policy"].update(with_context_matmul_recomputed_in_backward=True, ops_seen={"with_context": [
        ["aten.mm.out", "PREFER_RECOMPUTE", 2]]})
    report["policy"]["backward_matmuls"]["with_context"] = 3
    assert render.SECOND_FINDING in " ".join(render.second_finding(report))
    assert render.next_step(report) == "keep #161889 closed; track the second finding below in an issue of its own."
    # not measured: the next step claims neither
    report["policy"].update(with_context_matmul_recomputed_in_backward=None)
    assert render.next_step(report) == "keep #161889 closed."


def test_the_strict_policy_step_names_the_section_the_paste_has():
    """--strict-policy reads a recomputed matmul as the bug: its step points to the second finding
    only where the paste states one (not where the policy was asked about aten.mm.default)."""
    report = copy.deepcopy(CANDIDATES)
    report.update(verdict="reproduced", exit_code=1)
    report["policy"]["with_context_matmul_recomputed_in_backward"] = True
    assert render.next_step(report).startswith("read the SAC policy's section below: backward ran the forward matmul again")
    report["policy"]["ops_seen"]["with_context"] = [["aten.mm.out", "PREFER_RECOMPUTE", 2]]
    assert render.next_step(report).startswith("read the second finding below")


# ------------------------------------------------ a torch log line with nothing after its prefix (issue 45)
LOGGED = "W1206 01:33:11.593000 4650 torch/_logging/_internal.py:1407] [2/0]"


@pytest.mark.parametrize("empty", [LOGGED, LOGGED + " ", "I1206 01:33:11.593000 4650 torch/x.py:12]",
                                   "[rank0]:W1206 01:33:11.593000 4650 torch/x.py:12] [0/1_1]"])
def test_a_log_line_that_holds_only_its_prefix_is_not_quoted(empty):
    """Torch 2.15 with the revert: Error logs quoted 'W1206 ... [2/0]', nothing after the prefix
    (torch logs a warning's first line empty); what comes after it on the next line is kept."""
    entry = {"where": "workaround, first call", "kind": "stderr", "file": "/t/torch/_logging/_internal.py"}
    kept = LOGGED + " Detected that context_fn is passed to torch.utils.checkpoint under torch.compile."
    report = {"said": [dict(entry, text=empty), dict(entry, text=kept)]}
    assert [l.split("): ", 1)[1] for l in render.said_lines(report)] == [kept]
    assert render.said_lines({"said": [dict(entry, text=empty)]}) == []
