"""Every paste states only what its own evidence shows: its headline, Actual and verdict agree;
the policy report speaks of the policy only where f compiled, and names a change where one ran;
a capture judged alone says what it does not know. From recorded children and captures: no torch."""
import copy

import pytest

from conftest import data, judge, recorded, REVERTED_CSV, SCRIPT
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
    assert render.rerun_command(report, None, ["--markdown"]) == \
        "CXX=/opt/gcc/bin/g++ PYTHONWARNINGS=error python3 -m sac_repro --markdown"


def test_error_logs_of_a_build_that_raised_say_what_it_raised():
    """'None: nothing raised; the torch under test raised ...' said both."""
    raw = recorded(FIXED)
    raw.update(status="torch_error", reason="BackendCompilerFailed: backend='inductor' raised")
    report = verdict.report_from_child(raw, "regression", False)
    logs = render.error_logs(report)
    assert "None" not in logs[0] and "BackendCompilerFailed: backend='inductor' raised" in logs


def test_a_capture_judged_alone_asks_for_the_run_not_an_upgrade():
    rc, stdout, _ = judge("--from-nsys", REVERTED_CSV, "--markdown")
    step = next(l for l in stdout.splitlines() if l.startswith("- **Next step:**"))
    assert "2.10.0 or later" not in step and "python3 -m sac_repro" in step
