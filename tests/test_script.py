"""The main script end to end, on the torch of this environment (a fixed release) on the CPU: the
verdict, the policy check and the exit codes from a real run; stand-ins for crashes, hangs, torch
errors and eager calls come from a sitecustomize.py in the measured child."""
import re
import sys
import textwrap
import types

import pytest

from conftest import ROOT, run, run_json
from sac_repro.judge import verdict


REQUIRED_KEYS = {"verdict", "exit_code", "reason", "torch_version", "torch_git_version", "device",
                 "scenarios", "policy", "errors", "env", "source"}


def test_fixed_torch_runs_compiled_code_under_sac(fixed_run):
    rc, report, stdout, _, _ = fixed_run
    assert rc == 0, stdout
    assert report["verdict"] == "not_reproduced" and report["exit_code"] == 0
    assert REQUIRED_KEYS <= set(report)
    for name in ("without_context", "with_context", "workaround"):
        s = report["scenarios"][name]
        assert s["calls"] == ["compiled"] * 3, name
        # Inductor's C++ kernel for f's fused 3*x+1 / 2*y+1 ran, and no eager mul/add did
        assert any(k.endswith("cpp_fused_add_mul_0") for k in s["kernels"]), s["kernels"]
        assert s["eager_pointwise"] == {}
    assert report["scenarios"]["eager_sac"]["calls"] == ["eager"] * 3  # the one eager scenario
    assert "VERDICT: not_reproduced (exit 0): all 3 calls under SAC ran compiled code" in stdout


def test_fixed_torch_ignores_the_policy_under_sac_of_compile(fixed_run):
    """The fix's open end: the report's policy sees no aten.mm.default inside the compiled
    region, so backward runs the forward matmul again; the workaround saves it."""
    _, report, stdout, _, _ = fixed_run
    policy = report["policy"]
    assert policy["trusted"] is True, policy
    assert policy["with_context_matmul_recomputed_in_backward"] is True
    assert policy["workaround_matmul_recomputed_in_backward"] is False
    assert policy["backward_matmuls"]["with_context"] == policy["baseline"] + 1
    assert "with_context 3 -> RECOMPUTED (policy ignored); workaround 2 -> saved" in stdout


def test_the_policy_is_asked_about_inductors_extern_matmul_under_sac(fixed_run):
    """What the policy saw, recorded in the child: under sac(compile(f)) Inductor's aten.mm.out,
    never aten.mm.default; under eager SAC aten.mm.default, which it saves."""
    _, report, stdout, _, _ = fixed_run
    seen = {name: {op: decision for op, decision, _ in ops} for name, ops in report["policy"]["ops_seen"].items()}
    assert seen["with_context"] == {"aten.mm.out": "PREFER_RECOMPUTE"}
    assert seen["eager_sac"]["aten.mm.default"] == "MUST_SAVE"
    assert seen["eager_sac"]["aten.mul.Tensor"] == "PREFER_RECOMPUTE"
    assert "policy was asked about: with_context aten.mm.out -> PREFER_RECOMPUTE; eager_sac " \
           "aten.mm.default -> MUST_SAVE" in stdout


def test_progress_is_shown_while_it_runs(fixed_run):
    _, _, _, stderr, _ = fixed_run
    lines = [l for l in stderr.splitlines() if l.startswith("sac-repro: ")]
    assert lines[0] == "sac-repro: compiling f and running the report's two loops of 50 calls"
    assert "sac-repro: scenario with_context: 3 profiled calls" in lines
    assert lines[-2:] == ["sac-repro: policy check: one profiled backward per scenario",
                          "sac-repro: ablation: the case under each backend"]  # --markdown runs it


def test_hunting_the_fix_swaps_only_0_and_1(fixed_run):
    _, report, _, _, _ = fixed_run
    assert verdict.settle(dict(report), "not_reproduced", "r", "fix")["exit_code"] == 1
    assert verdict.settle(dict(report), "reproduced", "r", "fix")["exit_code"] == 0
    assert verdict.settle(dict(report), "cannot_test", "r", "fix")["exit_code"] == 125
    assert verdict.settle(dict(report), "reproduced", "r", "regression")["exit_code"] == 1


def test_strict_policy_counts_the_ignored_policy_as_reproduced(fixed_run):
    _, report, _, _, _ = fixed_run
    got, reason = verdict.decide(report["scenarios"], report["policy"], strict_policy=True)
    assert got == "reproduced" and reason.startswith("--strict-policy: compiled code ran under SAC")
    unmeasured = dict(report["policy"], with_context_matmul_recomputed_in_backward=None)
    assert verdict.decide(report["scenarios"], unmeasured, strict_policy=True)[0] == "cannot_test"


def test_missing_cuda_device_cannot_be_tested():
    rc, stdout, _ = run(sys.executable, "--device", "cuda", env={"CUDA_VISIBLE_DEVICES": ""})
    assert rc == 125
    assert "sees no CUDA device" in stdout


def write_sitecustomize(tmp_path, body):
    """Code that runs in the measured child only: stands in for a torch that crashes or hangs."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys
        if "--_child" in sys.argv:
        """) + textwrap.indent(textwrap.dedent(body), "    "))
    return {"PYTHONPATH": str(tmp_path)}


def test_child_killed_by_a_signal_cannot_be_tested(tmp_path):
    env = write_sitecustomize(tmp_path, """
        import os, signal
        os.kill(os.getpid(), signal.SIGSEGV)
        """)
    rc, stdout, _ = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 125, stdout
    assert "crashed: killed by SIGSEGV" in stdout


def test_hung_child_times_out_as_cannot_test(tmp_path):
    env = write_sitecustomize(tmp_path, """
        import time
        time.sleep(600)
        """)
    rc, stdout, _ = run(sys.executable, "--device", "cpu", "--timeout", "3", env=env, timeout=120)
    assert rc == 125, stdout
    assert "hung" in stdout


@pytest.mark.parametrize("code", [0, 1, 125])
def test_a_child_that_exits_before_its_result_is_no_verdict(tmp_path, code):
    """Its exit code is no verdict, whatever it is: only its result is."""
    env = write_sitecustomize(tmp_path, """
        import os
        os._exit(%d)
        """ % code)
    rc, stdout, _ = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 125, stdout
    assert "the torch under test exited with code %d before giving a result" % code in stdout


def test_a_child_that_exits_halfway_through_its_result_is_no_verdict(tmp_path):
    env = write_sitecustomize(tmp_path, """
        import os
        with open(sys.argv[sys.argv.index("--_child") + 1], "w") as fh:
            fh.write('{"status": "ok", "scenarios": {')
        os._exit(1)
        """)
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 128 and stdout == "" and len(stderr.strip().splitlines()) == 1, (rc, stdout, stderr)


def test_a_bug_in_the_measured_part_aborts(tmp_path):
    env = write_sitecustomize(tmp_path, """
        sys.path.insert(0, %r)
        from sac_repro.judge import measure
        measure.profile_call = lambda *args: {}["a bug"]
        """ % ROOT)
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 128, (rc, stdout, stderr)
    assert "internal error" in stderr and "KeyError" in stderr and "measure.py" not in stdout


def test_errors_are_told_apart_by_where_they_were_raised():
    import torch
    from sac_repro.judge import measure
    with pytest.raises(TypeError) as ours:
        verdict.classify(None)  # a bug here: never entered torch
    assert measure.raised_by_this_bundle(ours.value)
    with pytest.raises(RuntimeError) as theirs:
        torch.ones(2, 3) @ torch.ones(2, 3)  # torch's C++ failing
    assert not measure.raised_by_this_bundle(theirs.value)
    with pytest.raises(Exception) as inside:
        torch.compile(lambda t: t.no_such_method(), backend="eager", fullgraph=True)(torch.ones(1))
    assert not measure.raised_by_this_bundle(inside.value)  # raised while torch was compiling


def test_a_torch_error_keeps_the_environment_and_the_traceback(tmp_path):
    env = write_sitecustomize(tmp_path, """
        import torch.utils.checkpoint as _cp
        def _checkpoint(fn, *args, **kwargs):
            raise RuntimeError("stand-in for the torch under test failing")
        _cp.checkpoint = _checkpoint
        """)
    rc, report, stdout, stderr = run_json(sys.executable, tmp_path, "--device", "cpu", env=env)
    assert rc == 125, stdout
    assert report["verdict"] == "cannot_test" and report["torch_version"].startswith("2.")
    assert "stand-in for the torch under test failing" in report["reason"]
    assert "Traceback" in report["errors"]["traceback"] and "_checkpoint" in report["errors"]["traceback"]
    assert "VERDICT: cannot_test (exit 125): the torch under test raised RuntimeError" in stdout


# Stand-ins for a torch that runs some calls eagerly: in the measured child only, checkpoint()
# hands every other call the original, uncompiled f instead of the compiled one.
SOME_CALLS_EAGER = """
    import itertools
    import torch.utils.checkpoint as _cp
    _real_checkpoint, _calls = _cp.checkpoint, itertools.count()
    def _checkpoint(fn, *args, **kwargs):
        if {under_sac} == ("context_fn" in kwargs) and next(_calls) % 2 == 0:
            fn = getattr(fn, "_torchdynamo_orig_callable", fn)
        return _real_checkpoint(fn, *args, **kwargs)
    _cp.checkpoint = _checkpoint
    """


def test_some_eager_calls_under_sac_reproduce_in_the_profile(tmp_path):
    """One compiled call must not hide eager ones: each profiled call is judged on its own."""
    env = write_sitecustomize(tmp_path, SOME_CALLS_EAGER.format(under_sac=True))
    rc, stdout, _ = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 1, stdout
    assert re.search(r"VERDICT: reproduced \(exit 1\): [12] of 3 calls under SAC ran eagerly", stdout), stdout


def test_a_control_that_compiled_in_only_some_calls_cannot_test(tmp_path):
    env = write_sitecustomize(tmp_path, SOME_CALLS_EAGER.format(under_sac=False))
    rc, stdout, _ = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 125, stdout
    assert re.search(r"VERDICT: cannot_test \(exit 125\): the control .*[12] of 3 calls", stdout), stdout


def test_loops_only_does_not_pass_when_a_loop_raised(tmp_path):
    """2.12 and later raise instead of running a skipped fullgraph function eagerly: with
    --loops-only (no verdict) that must not look like a clean capture run."""
    env = write_sitecustomize(tmp_path, """
        import torch.utils.checkpoint as _cp
        _real_checkpoint = _cp.checkpoint
        def _checkpoint(fn, *args, **kwargs):
            if "context_fn" in kwargs:
                raise RuntimeError("torch.compile with fullgraph=True found no compiled frames (stand-in)")
            return _real_checkpoint(fn, *args, **kwargs)
        _cp.checkpoint = _checkpoint
        """)
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", "--loops-only", env=env)
    assert rc not in (0, 1), (rc, stdout, stderr)
    assert "found no compiled frames" in stdout + stderr


# --------------------------------------------------------- the child's own import failing
def test_a_failing_import_of_the_bundle_in_the_child_aborts(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "if '--_child' in sys.argv:\n"
        "    sys.modules['sac_repro.judge.measure'] = None\n")
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", env={"PYTHONPATH": str(tmp_path)}, timeout=300)
    assert rc == 128, (rc, stdout, stderr)
    assert "sac_repro.judge.measure" in stderr


# --------------------------------------------------------- what the measured part makes of errors
def test_calls_that_fullgraph_refuses_under_sac_reproduce(reverted_run):
    """2.12 and later with the fix reverted (sac_repro/revert_fix on this environment's torch): each
    profiled call under SAC raises Dynamo's real fullgraph error; that is the bug, made loud, never
    a torch that crashed."""
    rc, report, text, _, _ = reverted_run
    if tuple(int(v) for v in report["torch_version"].split(".")[:2]) < (2, 12):
        pytest.skip("fullgraph raises where Dynamo skips from 2.12; this is %s" % report["torch_version"])
    case = report["scenarios"]["with_context"]
    assert rc == 1 and (case["eager_calls"], case["refused_calls"]) == (3, 3), case
    assert "found no compiled frames" in case["refused"]
    assert "VERDICT: reproduced (exit 1): 3 of 3 calls under SAC ran no compiled code (Dynamo skipped f_compiled and, " \
           "with fullgraph=True, raised" in text


def test_a_torch_without_the_sac_api_cannot_test(tmp_path):
    """torch before 2.5 has no CheckpointPolicy: the report's import fails there, and that build
    cannot show the bug (125), never a bug here (128)."""
    env = write_sitecustomize(tmp_path, """
        import torch.utils.checkpoint as _cp
        del _cp.CheckpointPolicy
        """)
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 125, (stdout, stderr)
    assert "lacks the public SAC API the report imports" in stdout


def test_a_backward_that_raises_leaves_the_verdict_and_no_policy(tmp_path):
    """2.9: backward through checkpoint(compiled f) raises in Dynamo. The policy check is then
    not measured, which the verdict does not rest on, and which --strict-policy cannot judge."""
    env = write_sitecustomize(tmp_path, """
        import torch
        def _backward(self, *args, **kwargs):
            raise RuntimeError("stand-in for backward through checkpoint(compiled f) raising")
        torch.Tensor.backward = _backward
        """)
    rc, report, stdout, _ = run_json(sys.executable, tmp_path, "--device", "cpu", env=env)
    assert rc == 0, stdout
    assert report["policy"]["trusted"] is False
    assert "stand-in for backward" in report["policy"]["backward_errors"]["with_context"]
    # the same run judged with --strict-policy, as the parent judges it (one run: it compiles)
    strict = verdict.settle(dict(report), *verdict.decide(report["scenarios"], report["policy"], strict_policy=True),
                            "regression")
    assert strict["verdict"] == "cannot_test" and strict["exit_code"] == 125, strict


def test_the_recorded_policy_answers_as_the_reports_policy():
    """The recording stands between SAC and the report's policy_fn: it must hand on policy_fn's
    answer. Were it to answer PREFER_RECOMPUTE, eager SAC would recompute the matmul on CUDA, the
    controls would disagree, and --strict-policy could no longer judge (125)."""
    from torch.utils.checkpoint import CheckpointPolicy
    from sac_repro.judge import measure

    def policy_fn(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == "mm" else CheckpointPolicy.PREFER_RECOMPUTE
    namespace = {"policy_fn": policy_fn, "create_selective_checkpoint_contexts": lambda policy: policy}
    seen = measure.record_policy_calls(namespace)
    recording = namespace["context_fn"]()
    assert recording(types.SimpleNamespace(is_recompute=False), "mm") == CheckpointPolicy.MUST_SAVE
    assert recording(types.SimpleNamespace(is_recompute=True), "mul") == CheckpointPolicy.PREFER_RECOMPUTE
    assert seen == {("mm", "MUST_SAVE"): 1}  # what SAC asked in the forward only
