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


@pytest.mark.release  # a whole run of the child (6 s), rarely broken
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


@pytest.mark.release  # a whole run, 9 s; the fast tier judges such a control in test_judge's unit tests
def test_a_control_that_compiled_in_only_some_calls_cannot_test(tmp_path):
    env = write_sitecustomize(tmp_path, SOME_CALLS_EAGER.format(under_sac=False))
    rc, stdout, _ = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 125, stdout
    assert re.search(r"VERDICT: cannot_test \(exit 125\): the control .*[12] of 3 calls", stdout), stdout


@pytest.mark.release  # a whole run of the child (6 s), rarely broken
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
    profiled call under SAC runs f eagerly, then raises Dynamo's real fullgraph error; that is the
    bug, made loud, never a torch that crashed. The profile of each such call is kept (issue 45:
    every output said that nothing ran)."""
    rc, report, text, _, markdown = reverted_run
    if tuple(int(v) for v in report["torch_version"].split(".")[:2]) < (2, 12):
        pytest.skip("fullgraph raises where Dynamo skips from 2.12; this is %s" % report["torch_version"])
    case = report["scenarios"]["with_context"]
    assert rc == 1 and (case["eager_calls"], case["refused_calls"], case["eager_then_raised_calls"]) == (3, 3, 3), case
    assert "found no compiled frames" in case["refused"]
    assert set(case["eager_pointwise"]) == {"aten::add", "aten::mul"}  # recorded before the error
    assert {op for op, _, _ in case["policy_saw"]} == {"aten.add.Tensor", "aten.mm.default", "aten.mul.Tensor"}
    assert "VERDICT: reproduced (exit 1): 3 of 3 calls under SAC ran eagerly, then raised (no compiled code, eager " \
           "aten::add, aten::mul; Dynamo skipped f_compiled, and with fullgraph=True torch.compile raised once f " \
           "had run: RuntimeError: torch.compile with fullgraph=True found no compiled frames.)" in text
    row = next(l for l in text.splitlines() if l.split()[:1] == ["with_context"])
    assert row.split()[1] == "0/3" and "aten::mul x" in row and row.rstrip().split("  ")[-1].strip() != "none: Dynamo raised"
    assert ", then raised" in row
    assert "the compiled f ran eagerly under SAC in 3 of 3 calls, then raised" in markdown.splitlines()[6]
    for r in report["ablation"]["rows"]:  # each backend's call ran f eagerly too, then raised
        assert r["refused"] and r["eager_ops"] == ["aten::add", "aten::mul"] and not r["frame_compiled"], r
    assert "| inductor | no: ran eagerly, then raised (fullgraph=True) |" in markdown


def test_the_ablation_keeps_each_backends_compiled_f_to_its_end(monkeypatch):
    """Issue 45: under sac_repro/policy/fix_candidate the ablation dropped each backend's compiled
    f before making the next, and the candidate, counting such drops, declined the fifth: the
    inductor row ran without it while the case ran with it. Each is kept, as the case keeps its own."""
    import collections
    import weakref
    from sac_repro.judge import measure
    made, alive = [], []

    class Compiled:
        pass

    def compile_(fn, **kw):
        c = Compiled()
        made.append(weakref.ref(c))
        return c

    monkeypatch.setattr(measure.torch, "compile", compile_)
    monkeypatch.setattr(measure, "profile_call", lambda step, device, *a: step() or {"names": []})
    monkeypatch.setattr(measure, "backward_matmuls", lambda forward, device: None)
    namespace = {"f": lambda x, y: x, "x": 1, "y": 2,
                 "checkpoint_fn_with_context": lambda fn, x, y: alive.append(sum(r() is not None for r in made))}
    rows = measure.ablation(namespace, "cpu", collections.Counter())
    assert len(made) == len(rows) >= 4
    assert alive[-1] == len(made), alive  # every backend's compiled f alive at the last call


FULLGRAPH_REFUSAL = ("torch.compile with fullgraph=True found no compiled frames. Skipped frames:\n"
                     "  - f (x.py:3): non-infra torch dispatch mode present")


def test_a_profiled_call_that_raised_fullgraphs_refusal_keeps_what_ran_before_it():
    """Issue 45: the profile of a call that raised was thrown away, and every output said that
    nothing ran; 2.12+ runs f eagerly before it raises."""
    import torch
    from sac_repro.judge import measure
    refusals = []

    def step():
        torch.ones(2) * 3 + 1
        raise RuntimeError(FULLGRAPH_REFUSAL)
    call = measure.profile_call(step, "cpu", True, refusals.append)
    names = dict(call["names"])
    assert names.get("aten::mul") == 1 and names.get("aten::add") == 1, names
    assert call["refused"] == "RuntimeError: torch.compile with fullgraph=True found no compiled frames."
    assert [str(e) for e in refusals] == [FULLGRAPH_REFUSAL]
    assert {n for n, _, _, _ in call["timeline"]} >= {"aten::mul", "aten::add"}


def test_a_profiled_call_that_raised_anything_else_raises():
    from sac_repro.judge import measure
    with pytest.raises(KeyError):
        measure.profile_call(lambda: {}["a torch error"], "cpu")
    with pytest.raises(RuntimeError):  # another function refused: not f's skip
        measure.profile_call(lambda: (_ for _ in ()).throw(RuntimeError(FULLGRAPH_REFUSAL.replace("- f (", "- g ("))), "cpu")


SAID = r"""
import sys, warnings
sys.path.insert(0, %r)
from sac_repro.judge.said import Said
said = Said().install()
print("a line from the code", "in two parts")
said.where = "a scenario, first call"
sys.stderr.write("sac-repro: a progress line, the bundle's own\n")
warnings.warn("a warning, shown")
warnings.filterwarnings("ignore", "filtered")
warnings.warn("filtered out")
print("printed ", end="", file=sys.stderr)
print("in two writes", file=sys.stderr)
warnings.warn("a warning, shown")  # once: the same again is not a second entry
import logging
logging.basicConfig()
logging.getLogger("x").warning("a log line")
print("no newline at the end", end="")
import json
sys.__stdout__.write("\n" + json.dumps(said.finish()) + "\n")
"""


def test_what_the_child_says_is_caught_with_who_said_it_and_where(tmp_path):
    """Issue 45: the candidate's warnings and lines reached no one. What Python code of the measured
    process prints or warns (not the bundle's progress, not logs) is recorded, and still written."""
    import json
    import subprocess
    (tmp_path / "speaker.py").write_text(SAID % ROOT)
    proc = subprocess.run([sys.executable, str(tmp_path / "speaker.py")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    here = str((tmp_path / "speaker.py").resolve())
    assert seen == [
        {"where": "before the report's code", "kind": "stdout", "file": here, "text": "a line from the code in two parts"},
        {"where": "a scenario, first call", "kind": "warning", "file": here, "text": "UserWarning: a warning, shown"},
        {"where": "a scenario, first call", "kind": "stderr", "file": here, "text": "printed in two writes"},
        {"where": "a scenario, first call", "kind": "stdout", "file": here, "text": "no newline at the end"}]
    # written through as before: the parent still has the child's whole output
    assert "a line from the code in two parts" in proc.stdout and "UserWarning: a warning, shown" in proc.stderr
    assert "a log line" in proc.stderr and "sac-repro: a progress line" in proc.stderr


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


# ------------------------------------------------ whole runs under in-process changes (release tier)
CANDIDATE = "sac_repro/policy/fix_candidate"


@pytest.mark.release  # a whole run, nothing compiled: seconds, but the fast tier has none to spare
@pytest.mark.parametrize("variable", ["TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE"])
def test_with_compile_disabled_nothing_is_blamed_on_161889(tmp_path, variable):
    """Issue 45: nothing compiles, with SAC or without; the exit (125) was right, and the ablation
    said that #161889 is Dynamo's."""
    rc, report, stdout, stderr = run_json(sys.executable, tmp_path, "--device", "cpu", "--ablation",
                                          env={variable: "1"}, timeout=600)
    assert rc == 125 and report["verdict"] == "cannot_test", (rc, stdout, stderr[-2000:])
    assert "#161889 is Dynamo's" not in stdout
    if "ablation" in report:  # 2.13: TORCH_COMPILE_DISABLE makes the control's fullgraph call raise first
        assert not any(r["frame_compiled"] for r in report["ablation"]["rows"])
        assert report["ablation"]["reading"].startswith("nothing to place: the control")


@pytest.mark.release  # a whole run under the candidate fix, --markdown (the ablation, collect_env)
def test_under_the_candidate_the_paste_has_one_answer(tmp_path):
    """Issue 45: the policy section said the matmul was saved; the ablation below said the second
    finding is Inductor's, with aten.mm.out and 3 matmuls: the candidate had declined the fifth
    compiled f that the ablation made and dropped. Its rows now run as the case does."""
    rc, report, markdown, stderr = run_json(sys.executable, tmp_path, "--device", "cpu", "--markdown",
                                            env={"PYTHONPATH": "%s/%s" % (ROOT, CANDIDATE)}, timeout=900)
    assert rc == 0, stderr[-2000:]
    assert report["policy"]["with_context_matmul_recomputed_in_backward"] is False
    rows = {r["backend"]: r for r in report["ablation"]["rows"]}
    assert "aten.mm.default" in rows["inductor"]["policy_saw"] and rows["inductor"]["backward_matmuls"] == 2
    assert report["ablation"]["reading"] == "no finding to place: under every backend the policy was asked about " \
                                            "`aten.mm.default`"
    assert "second finding is Inductor's" not in markdown and "that is the op SAC's mode meets" not in markdown
    assert not [s for s in report["said"] if "runs as it does without the candidate fix" in s["text"]], report["said"]


SPEAKS_AT_IMPORT = """
import importlib.util, os, sys
# the revert, then the candidate: the candidate sees the fix reverted when torch imports, and says it
# is not loaded, as it does on 2.8 and 2.9.1 (torch lacks what it changes)
for name, folder in (("_revert", %r), ("_candidate", %r)):
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "sitecustomize.py"))
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
"""


@pytest.mark.release  # imports torch twice over
def test_what_a_change_says_while_torch_imports_is_caught_where_said_is_installed_first(tmp_path):
    """Issue 45: on 2.8 and 2.9.1 the candidate's 'not loaded' line, said while torch imports,
    never reached the user. said.py catches it where installed before torch is imported."""
    import json
    import subprocess
    (tmp_path / "sitecustomize.py").write_text(SPEAKS_AT_IMPORT % (
        "%s/sac_repro/revert_fix" % ROOT, "%s/%s" % (ROOT, CANDIDATE)))
    code = ("import sys, json; sys.path.insert(0, %r)\nfrom sac_repro.judge.said import Said\n"
            "said = Said().install()\nsaid.where = 'importing torch'\nimport torch\n"
            "sys.__stdout__.write(json.dumps(said.finish()))" % ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(__import__("os").environ, PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [s for s in json.loads(proc.stdout) if "not loaded" in s["text"]]
    assert line["where"] == "importing torch" and line["kind"] == "stderr"
    assert line["text"].startswith("sac fix candidate: not loaded on torch ") and "the 2.10 fix is reverted" in line["text"]


@pytest.mark.release  # a whole run under the revert and the candidate at once
def test_the_candidates_not_loaded_line_reaches_the_report(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(SPEAKS_AT_IMPORT % (
        "%s/sac_repro/revert_fix" % ROOT, "%s/%s" % (ROOT, CANDIDATE)))
    rc, report, stdout, stderr = run_json(sys.executable, tmp_path, "--device", "cpu",
                                          env={"PYTHONPATH": str(tmp_path)}, timeout=900)
    assert rc == 1, stderr[-2000:]
    assert any("sac fix candidate: not loaded" in line for line in stdout.splitlines() if line.startswith("said ("))


def test_a_process_that_says_much_fills_no_paste(tmp_path):
    import json
    import subprocess
    code = ("import sys; sys.path.insert(0, %r)\nfrom sac_repro.judge import said as s\nsaid = s.Said().install()\n"
            "[print('line', i) for i in range(s.KEPT + 5)]\nprint('line', 0)\n"
            "sys.__stdout__.write('\\n' + __import__('json').dumps(said.finish()))" % ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert [e["text"] for e in seen[:2]] == ["line 0", "line 1"] and len(seen) == 41
    assert seen[-1]["kind"] == "more" and seen[-1]["text"] == "5 more lines and warnings, not kept"
    proc = subprocess.run([sys.executable, "-c", code.replace("said = s.Said().install()", "sys.stdout = None\n"
                                                              "said = s.Said().install()")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr  # no stdout: nothing wrapped, nothing broken
