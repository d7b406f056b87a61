"""The judge, in this process, on what real measured children wrote (tests/data/*/child*.json:
torch 2.13 on the CPU, fixed and with the fix reverted in-process, torch 2.9.1 on the CPU, and the
H200 runs), then on that evidence changed one call at a time: the one classifier, each call judged
on its own, every boundary of the verdict and of the policy check."""
import copy
import json
import sys

import pytest

from conftest import data, recorded, SCRIPT
from sac_repro.judge import command, render, verdict

pytestmark = pytest.mark.unit  # no torch: the inner loop, `pytest -m unit tests`


FIXED = recorded(data("cpu-torch2.13", "child_fixed.json"))


REVERTED = recorded(data("cpu-torch2.13", "child_fix_reverted.json"))


AFFECTED = recorded(data("cpu-torch2.9.1", "child.json"))


H200_FIXED = recorded(data("h200-torch2.11", "child_fixed.json"))


H200_REVERTED = recorded(data("h200-torch2.11-fix-reverted", "child.json"))


def judged(raw, terms="regression", strict=False):
    return verdict.report_from_child(copy.deepcopy(raw), terms, strict)


def with_call(raw, scenario, index, names):
    """raw, with one call of one scenario showing these names instead."""
    raw = copy.deepcopy(raw)
    raw["scenarios"][scenario]["calls"][index] = {"names": names}
    return raw


EAGER_NAMES = FIXED["scenarios"]["eager_sac"]["calls"][0]["names"]


COMPILED_NAMES = FIXED["scenarios"]["with_context"]["calls"][0]["names"]


def test_the_fixed_run_is_not_reproduced_and_its_policy_ignored():
    r = judged(FIXED)
    assert (r["verdict"], r["exit_code"]) == ("not_reproduced", 0)
    assert r["reason"] == "all 3 calls under SAC ran compiled code, as did all 3 of the control"
    assert r["scenarios"]["with_context"]["calls"] == ["compiled"] * 3
    assert r["scenarios"]["eager_sac"]["calls"] == ["eager"] * 3
    p = r["policy"]
    assert (p["trusted"], p["baseline"]) == (True, 2)
    assert p["with_context_matmul_recomputed_in_backward"] is True
    assert p["workaround_matmul_recomputed_in_backward"] is False
    assert r["schema"] == 2


# 2.13 with the fix reverted: Dynamo raises under SAC (fullgraph=True), so those calls ran nothing
@pytest.mark.parametrize("raw, ran", [(REVERTED, "ran no compiled code"), (AFFECTED, "ran eagerly")],
                         ids=["2.13-fix-reverted", "2.9.1"])
def test_the_affected_runs_reproduce(raw, ran):
    r = judged(raw)
    assert (r["verdict"], r["exit_code"]) == ("reproduced", 1)
    assert r["reason"].startswith("3 of 3 calls under SAC " + ran)
    assert r["reason"].endswith("while all 3 calls of the control ran compiled code")
    assert judged(raw, terms="fix")["exit_code"] == 0


def test_the_reverted_run_names_fullgraphs_refusal():
    r = judged(REVERTED)
    assert "found no compiled frames" in r["reason"] and r["scenarios"]["with_context"]["refused"]


def test_the_2_9_run_names_the_eager_ops():
    r = judged(AFFECTED)
    assert "(no compiled code, eager aten::add, aten::mul)" in r["reason"]
    assert r["scenarios"]["with_context"]["eager_pointwise"] == {"aten::add": 6, "aten::mul": 6}
    assert r["policy"]["with_context_matmul_recomputed_in_backward"] is None  # eager on CPU: not countable


@pytest.mark.parametrize("index", [0, 1, 2])
def test_one_eager_call_under_sac_reproduces(index):
    r = judged(with_call(FIXED, "with_context", index, EAGER_NAMES))
    assert (r["verdict"], r["exit_code"]) == ("reproduced", 1)
    assert r["reason"].startswith("1 of 3 calls under SAC ran eagerly")


@pytest.mark.parametrize("index", [0, 2])
def test_one_eager_call_of_the_control_cannot_test(index):
    r = judged(with_call(FIXED, "without_context", index, EAGER_NAMES))
    assert (r["verdict"], r["exit_code"]) == ("cannot_test", 125)
    assert "ran compiled code in only 2 of 3 calls" in r["reason"]


@pytest.mark.parametrize("names", [[], [["aten::mm", 1]], COMPILED_NAMES + EAGER_NAMES],
                         ids=["nothing", "matmul-only", "both"])
def test_one_call_under_sac_that_settles_nothing_cannot_test(names):
    r = judged(with_call(FIXED, "with_context", 1, names))
    assert (r["verdict"], r["exit_code"]) == ("cannot_test", 125)
    shown = "both compiled code and f's eager ops" if COMPILED_NAMES[0] in names else "neither compiled code nor f's eager ops"
    assert r["reason"] == "1 of 3 calls under SAC showed " + shown
    assert judged(with_call(FIXED, "with_context", 1, names), terms="fix")["exit_code"] == 125


def test_an_eager_call_beside_one_that_settles_nothing_still_reproduces():
    raw = with_call(with_call(FIXED, "with_context", 0, EAGER_NAMES), "with_context", 1, [])
    assert judged(raw)["exit_code"] == 1


def test_no_calls_of_the_control_or_the_case_cannot_test():
    for scenario, says in (("without_context", "no calls of the control"), ("with_context", "no calls under SAC")):
        raw = copy.deepcopy(FIXED)
        raw["scenarios"][scenario]["calls"] = []
        r = judged(raw)
        assert r["exit_code"] == 125 and says in r["reason"]


def test_strict_policy_turns_the_ignored_policy_into_reproduced():
    r = judged(FIXED, strict=True)
    assert (r["verdict"], r["exit_code"]) == ("reproduced", 1)
    assert r["reason"].startswith("--strict-policy: compiled code ran under SAC")
    assert judged(FIXED, terms="fix", strict=True)["exit_code"] == 0


def with_matmuls(**counts):
    raw = copy.deepcopy(FIXED)
    for name, n in counts.items():
        if n is None:
            raw["scenarios"][name].pop("backward_matmuls", None)
        else:
            raw["scenarios"][name]["backward_matmuls"] = n
    return raw


@pytest.mark.parametrize("counts, why", [
    ({"without_context": 2}, "the recomputing control counts no more than the baseline"),
    ({"without_context": None}, "the recomputing control was not measured"),
    ({"compiled_no_checkpoint": None}, "no saving control was measured"),
    ({"eager_sac": 3}, "the saving controls disagree"),
])
def test_the_policy_is_not_judged_when_its_controls_do_not_separate(counts, why):
    r = judged(with_matmuls(**counts))
    assert r["policy"]["trusted"] is False, why
    assert r["policy"]["with_context_matmul_recomputed_in_backward"] is None, why
    assert r["policy"]["reason"].startswith("not measured: the controls do not separate")
    assert r["exit_code"] == 0  # the verdict does not rest on the policy
    assert judged(with_matmuls(**counts), strict=True)["exit_code"] == 125


@pytest.mark.parametrize("case, recomputed", [(2, False), (3, True), (4, True)])
def test_the_policy_subject_is_recomputed_only_above_the_baseline(case, recomputed):
    r = judged(with_matmuls(with_context=case, eager_sac=2))
    assert r["policy"]["trusted"] is True
    assert r["policy"]["with_context_matmul_recomputed_in_backward"] is recomputed
    assert judged(with_matmuls(with_context=case), strict=True)["exit_code"] == (1 if recomputed else 0)


def test_a_failed_run_keeps_its_reason_and_traceback():
    raw = {"status": "cannot_test", "reason": "the torch under test crashed: killed by SIGSEGV",
           "env": FIXED["env"], "traceback": "Traceback ..."}
    r = judged(raw)
    assert (r["verdict"], r["exit_code"]) == ("cannot_test", 125)
    assert r["errors"]["traceback"] == "Traceback ..." and r["torch_version"] == "2.13.0+cpu"


def test_the_text_shows_each_scenario_and_the_verdict():
    text = render.render_text(judged(AFFECTED))
    lines = text.splitlines()
    assert lines[0].startswith("environment: python") and "torch 2.9.1" in lines[0]
    assert any(l.split()[:2] == ["with_context", "0/3"] for l in lines)
    assert "with_context" in text and lines[-1].startswith("VERDICT: reproduced (exit 1): 3 of 3")
    # Dynamo's own words for f, recorded by the child, and so no hint where to find them
    assert "dynamo (the report's loops): skipping: f (reason: non-infra torch dispatch mode present, this is not " \
           "supported today in torch.compile)" in lines
    assert not any(l.startswith("hint: ") for l in lines)


def test_the_hint_runs_the_script_as_the_command_runs_the_bundle():
    """Where the child caught no Dynamo line, the hint names the script as the Command names the
    bundle: the interpreter that ran, the script's path from any folder, and the PYTHONPATH of each
    in-process change. It said `python3 torch_compile_selective_activation_checkpoint.py`: from
    another folder "can't open file", and, without the revert, a fixed torch's 0."""
    raw = copy.deepcopy(AFFECTED)
    raw["dynamo_skips"] = []
    report = judged(raw)
    report["rerun_env"] = {"TORCH_LOGS": "+dynamo"}
    report["torch_changes"] = [{"label": "the 2.10 fix undone", "pythonpath": "/opt/revert fix"}]
    hints = [line for line in render.render_text(report).splitlines() if line.startswith("hint: ")]
    assert hints == ["hint: Dynamo's own reason for the skip: run the script itself (PYTHONPATH='/opt/revert fix' "
                     "TORCH_LOGS=+dynamo %s %s); its report quotes Dynamo's 'skipping: f (reason: ...)'." % (
                         command.shell_path(sys.executable), command.shell_path(SCRIPT))], hints
    # a capture judged alone: this machine's interpreter is not the one whose torch made it
    report["env"] = {"device": "cuda"}
    hints = [line for line in render.render_text(report).splitlines() if line.startswith("hint: ")]
    assert hints == ["hint: Dynamo's own reason for the skip: run the script itself (python3 %s, under the torch "
                     "that made the capture, with any in-process change it had); its report quotes Dynamo's "
                     "'skipping: f (reason: ...)'." % (
                         command.shell_path(SCRIPT))], hints


def test_the_h200_runs_count_matmul_kernels_and_see_the_eager_kernels():
    """CUDA: the policy check counts cuBLAS kernels, so eager SAC's saved matmul counts too."""
    fixed = judged(H200_FIXED)
    assert fixed["exit_code"] == 0 and fixed["device"] == "cuda"
    assert fixed["policy"]["backward_matmuls"] == {"without_context": 3, "with_context": 3, "workaround": 2,
                                                   "eager_sac": 2, "compiled_no_checkpoint": 2,
                                                   "with_context_wrapped": 3}
    assert fixed["policy"]["with_context_wrapped_matmul_recomputed_in_backward"] is True
    assert any(k.startswith("triton_poi_fused_add_mul") for k in fixed["scenarios"]["with_context"]["kernels"])
    reverted = judged(H200_REVERTED)
    assert reverted["exit_code"] == 1
    assert "MulFunctor kernel, CUDAFunctorOnSelf_add kernel" in reverted["reason"]
    assert reverted["policy"]["with_context_matmul_recomputed_in_backward"] is False  # eager f: SAC saved it


@pytest.mark.parametrize("name, family, cls, kernel", [
    ("triton_poi_fused_add_mul_0", "inductor", "compiled", True), ("triton_", "inductor", "compiled", True),
    ("graph_3_cpp_fused_add_mul_0", "inductor", "compiled", True), ("cpp_fused_mul_1", "inductor", "compiled", True),
    ("Torch-Compiled Region: 0/0", "other", "compiled", False), ("CompiledFunction", "other", "compiled", False),
    ("## Call CompiledFxGraph fabc123 ##", "other", "compiled", False),
    ("void gemmSN_NN_kernel<float>", "cublas", "matmul", True), ("sm80_xmma_gemm_f32f32", "cublas", "matmul", True),
    ("nvjet_tst_64x8", "cublas", "matmul", True), ("void CUTLASS_Gemm_Kernel<float>", "cublas", "matmul", True),
    ("Kernel2<cutlass_80_tensorop>", "cublas", "matmul", True), ("cublasLt::splitKreduce", "cublas", "matmul", True),
    ("aten::mm", "eager_aten", "matmul", False), ("aten::addmm", "eager_aten", "matmul", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>>", "eager_aten", "eager", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "eager_aten", "eager", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float>>>", "eager_aten", "eager", True),
    ("void at::vectorized_elementwise_kernel<4, at::MulFunctor<float>>", "eager_aten", "eager", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sin_kernel<float>>", "eager_aten", "other", True),
    ("aten::mul", "eager_aten", "eager", False), ("aten::add", "eager_aten", "eager", False),
    ("aten::mul.Tensor", "eager_aten", "eager", False), ("aten::add.Scalar", "eager_aten", "eager", False),
    ("aten::multiply_", "eager_aten", "other", False), ("MulFunctor_but_not_aten", "other", "other", False),
    ("memcpy32_post", "other", "other", False), ("cudaLaunchKernel", "other", "other", False),
])
def test_the_one_classifier(name, family, cls, kernel):
    """Who made each name, what the verdict makes of it, and whether it is a kernel: one table."""
    assert verdict.classify(name) == (family, cls, kernel)


def test_only_fullgraphs_refusal_of_f_reads_as_eager():
    """A refusal that lists the frames it skipped counts only where f is among them; one that lists
    none (the skip stuck from an earlier call) is f's. Another function refused is not #161889."""
    first = "torch.compile with fullgraph=True found no compiled frames. Skipped frames:\n  - %s (x.py:3): non-infra"
    assert verdict.refused_to_run_eagerly(RuntimeError(first % "f"))
    assert verdict.refused_to_run_eagerly(RuntimeError("torch.compile with fullgraph=True found no compiled frames. "
                                                       "Compilation was not attempted and no cached compiled code was found."))
    assert not verdict.refused_to_run_eagerly(RuntimeError(first % "<lambda>"))
    assert not verdict.refused_to_run_eagerly(RuntimeError("CUDA error: an illegal memory access"))


def test_one_refused_call_among_compiled_ones_reproduces():
    raw = copy.deepcopy(FIXED)
    raw["scenarios"]["with_context"]["calls"][0] = {"names": [], "refused": "RuntimeError: found no compiled frames"}
    r = verdict.report_from_child(raw, "regression", False)
    assert r["exit_code"] == 1 and r["reason"].startswith("1 of 3 calls under SAC ran no compiled code (Dynamo skipped")


def test_the_report_carries_the_torch_a_bisect_checks():
    """nightly-step compares torch_git_version with the commit under test: it must be the child's."""
    r = verdict.report_from_child(copy.deepcopy(FIXED), "regression", False)
    assert r["torch_git_version"] == FIXED["env"]["torch_git"] == "cf30153c4c131c8164ee7798e5022d810682e2cb"
    assert r["torch_version"] == "2.13.0+cpu" and r["device"] == "cpu"


# ------------------------------------------- a call that ran f eagerly, then raised (2.12+, reverted)
# What torch 2.13's profiler recorded of one call of the report's f_compiled under SAC with the fix
# reverted and fullgraph=True: f's eager ops, then "found no compiled frames" (FACTS, 2026-12-05).
RAN_THEN_RAISED_NAMES = [["PythonDispatchMode", 5], ["TorchDynamo Cache Lookup", 1], ["aten::_to_copy", 4],
                         ["aten::add", 4], ["aten::copy_", 4], ["aten::detach", 1], ["aten::empty_strided", 4],
                         ["aten::matmul", 1], ["aten::mm", 2], ["aten::mul", 4], ["aten::resolve_conj", 3],
                         ["aten::to", 4]]
REFUSAL = "RuntimeError: torch.compile with fullgraph=True found no compiled frames."


def ran_then_raised(raw, scenario="with_context", names=RAN_THEN_RAISED_NAMES, calls=(0, 1, 2)):
    """raw, with these calls of one scenario recorded as the child records a call that raised."""
    raw = copy.deepcopy(raw)
    for i in calls:
        raw["scenarios"][scenario]["calls"][i] = {"names": names, "refused": REFUSAL}
    return raw


def test_a_call_that_ran_f_eagerly_and_then_raised_says_so():
    """Issue 45: 'ran no compiled code' and 'nothing ran' where the profile of the call shows f's
    eager ops: it ran eagerly, then raised."""
    r = judged(ran_then_raised(REVERTED))
    case = r["scenarios"]["with_context"]
    assert (r["verdict"], r["exit_code"]) == ("reproduced", 1)
    assert (case["eager_calls"], case["refused_calls"], case["eager_then_raised_calls"]) == (3, 3, 3)
    assert case["calls_refused"] == [True] * 3
    assert case["eager_pointwise"] == {"aten::add": 12, "aten::mul": 12}
    assert verdict.not_compiled(case) == "ran eagerly, then raised"
    assert r["reason"].startswith("3 of 3 calls under SAC ran eagerly, then raised (no compiled code, eager "
                                  "aten::add, aten::mul; Dynamo skipped f_compiled, and with fullgraph=True "
                                  "torch.compile raised once f had run: " + REFUSAL)


def test_a_call_that_raised_with_no_record_of_f_is_not_said_to_have_run_eagerly():
    """A recording that kept no events of the raising call (before issue 45) says no more than it holds."""
    r = judged(REVERTED)
    case = r["scenarios"]["with_context"]
    assert (case["refused_calls"], case["eager_then_raised_calls"]) == (3, 0)
    assert verdict.not_compiled(case) == "ran no compiled code"
    one = judged(ran_then_raised(REVERTED, calls=(0,), names=[["aten::detach", 1]]))["scenarios"]["with_context"]
    assert (one["refused_calls"], one["eager_then_raised_calls"]) == (3, 0)
    assert verdict.not_compiled(one) == "ran no compiled code"


def test_calls_that_ran_eagerly_some_raising_say_how_many_raised():
    raw = ran_then_raised(REVERTED, calls=(0,))
    raw["scenarios"]["with_context"]["calls"][1:] = [{"names": EAGER_NAMES}] * 2
    case = judged(raw)["scenarios"]["with_context"]
    assert verdict.not_compiled(case) == "ran eagerly, 1 of them then raising"


# ------------------------------------------------------------------ the ablation's one line
def row(backend, saw=(), compiled=True, **kw):
    return dict({"backend": backend, "frame_compiled": compiled, "policy_saw": sorted(saw),
                 "backward_matmuls": None}, **kw)


F_OPS = ("aten.add.Tensor", "aten.mm.default", "aten.mul.Tensor")
WRAP = "inductor + wrap_inductor_compiled_regions"
AS_SHIPPED = [row("eager", F_OPS), row("aot_eager", F_OPS), row("aot_eager_decomp_partition", F_OPS),
              row("inductor", ["aten.mm.out"], backward_matmuls=3), row(WRAP, ["inductor_compiled_code"])]
INDUCTORS = "Inductor: only with inductor does the policy see `aten.mm.out` instead of `aten.mm.default` " \
            "(the second finding is Inductor's)"
DYNAMOS = "Dynamo: it skipped f under SAC whatever the backend (#161889 is Dynamo's)"


def reading(rows, **kw):
    return verdict.ablation_reading(copy.deepcopy(rows), **kw)


def test_the_ablation_reads_inductor_where_only_inductor_shows_the_extern_matmul():
    assert reading(AS_SHIPPED) == INDUCTORS
    assert reading(AS_SHIPPED, case_saw=["aten.mm.out"]) == INDUCTORS
    assert reading(AS_SHIPPED[:4]) == INDUCTORS  # before 2.10's wrap option


NO_SINGLE = "no single backend: Dynamo ran f under SAC with "
NO_FINDING = "no finding to place: under every backend the policy was asked about `aten.mm.default`"


@pytest.mark.parametrize("change, expected", [
    (lambda rows: rows[3].update(policy_saw=["aten.mm.default", "aten.mm.out"]), NO_FINDING),
    (lambda rows: rows[3].update(policy_saw=["aten.add.Tensor"]), NO_SINGLE + "aot_eager, aot_eager_decomp_partition, "
                                                                  "eager, inductor, " + WRAP),
    (lambda rows: rows[3].update(frame_compiled=False), NO_SINGLE + "aot_eager, aot_eager_decomp_partition, eager, " + WRAP),
    (lambda rows: rows[1].update(policy_saw=["aten.mm.out"]), NO_SINGLE + "aot_eager, aot_eager_decomp_partition, "
                                                               "eager, inductor, " + WRAP),
    (lambda rows: [r.update(frame_compiled=False) for r in rows[:3]], NO_SINGLE + "inductor, " + WRAP),
    (lambda rows: rows[4].update(policy_saw=["aten.mm.default"]), INDUCTORS),
], ids=["both", "no-out", "inductor-eager", "other-out", "no-others", "wrap-is-inductors"])
def test_each_condition_of_inductors_reading(change, expected):
    """Each part of the one test that places the finding in Inductor, broken alone: no row that
    did not run compiled counts, the wrap row is inductor's own."""
    rows = copy.deepcopy(AS_SHIPPED)
    change(rows)
    assert reading(rows) == expected


def test_the_ablation_reads_dynamo_only_where_every_backend_ran_f_eagerly_under_sac():
    refused = [row(r["backend"], F_OPS, compiled=False, refused=True, eager_ops=["aten::add", "aten::mul"])
               for r in AS_SHIPPED]
    assert reading(refused) == DYNAMOS
    assert reading([row(r["backend"], compiled=False) for r in AS_SHIPPED]) == DYNAMOS


def test_the_ablation_blames_nothing_on_dynamo_where_the_control_did_not_compile_either():
    """Issue 45: TORCHDYNAMO_DISABLE=1 (or TORCH_COMPILE_DISABLE=1): nothing compiles, with SAC or
    without; the ablation said #161889 is Dynamo's."""
    nothing = [row(r["backend"], F_OPS, compiled=False) for r in AS_SHIPPED]
    got = reading(nothing, control_compiled=False)
    assert "#161889" not in got and "Dynamo:" not in got
    assert got.startswith("nothing to place: the control (f compiled under a plain checkpoint) did not run compiled code")
    # and from a whole report: the control of the recorded run made eager
    raw = copy.deepcopy(FIXED)
    raw["scenarios"]["without_context"]["calls"] = [{"names": EAGER_NAMES}] * 3
    raw["ablation"] = nothing
    r = judged(raw)
    assert r["exit_code"] == 125 and r["ablation"]["reading"] == got


def test_the_ablation_that_ran_otherwise_than_the_case_says_so():
    """Issue 45: under sac_repro/policy/fix_candidate the case saw aten.mm.default (the matmul
    saved) while the ablation's inductor row, where the candidate had declined, saw aten.mm.out: the
    paste gave two answers."""
    got = reading(AS_SHIPPED, case_saw=list(F_OPS))
    assert "Inductor's" not in got and "second finding" not in got
    assert got == ("no reading: the ablation's `inductor` row (the case's own arrangement) had the policy asked "
                   "about `aten.mm.out`, the case above about `aten.add.Tensor`, `aten.mm.default`, "
                   "`aten.mul.Tensor`: the ablation did not run as the case did")
    raw = copy.deepcopy(FIXED)
    raw["scenarios"]["with_context"]["policy_saw"] = [[op, "MUST_SAVE", 2] for op in F_OPS]
    raw["ablation"] = AS_SHIPPED
    assert judged(raw)["ablation"]["reading"] == got


def test_the_ablation_where_every_backend_saw_the_matmul_places_no_finding():
    """The candidate fix (measured, torch 2.13 CPU): every backend's policy saw aten.mm.default,
    the wrap row saw the region, which the candidate leaves to that option."""
    rows = [row(r["backend"], F_OPS, backward_matmuls=2) for r in AS_SHIPPED[:4]] + [AS_SHIPPED[4]]
    assert reading(rows, case_saw=list(F_OPS)) == NO_FINDING
    rows[3]["frame_compiled"] = False
    assert reading(rows, case_saw=list(F_OPS)).startswith(NO_SINGLE)  # inductor's row not compiled


def test_the_ablation_of_a_case_that_ran_eagerly_is_held_to_it_too():
    """A case whose calls ran eagerly while the ablation's inductor row compiled: not the same run."""
    raw = copy.deepcopy(AFFECTED)
    raw["ablation"] = AS_SHIPPED
    got = judged(raw)["ablation"]["reading"]
    assert got.startswith("no reading: the ablation's `inductor` row") and "Inductor's" not in got


def test_the_ablation_where_a_backend_raised_reads_nothing_into_it():
    rows = copy.deepcopy(AS_SHIPPED)
    rows[1] = row("aot_eager", compiled=False, error="BackendCompilerFailed: boom")
    got = reading(rows)
    assert got == "no reading: the case raised an error under aot_eager (the table says which)"
    rows = [row(r["backend"], compiled=False, error="ImportError: x") for r in AS_SHIPPED]
    assert "#161889" not in reading(rows)


def test_a_control_that_compiled_in_only_some_calls_does_not_count_as_compiled():
    """The ablation reads what SAC changes against the control: a control that ran compiled code in
    only some of its calls is no control (the verdict is 125), and the reading places nothing."""
    raw = copy.deepcopy(FIXED)
    raw["scenarios"]["without_context"]["calls"][0] = {"names": EAGER_NAMES}
    raw["ablation"] = [row(r["backend"], F_OPS, compiled=False) for r in AS_SHIPPED]
    r = judged(raw)
    assert r["scenarios"]["without_context"]["compiled_calls"] == 2 and r["exit_code"] == 125
    assert r["ablation"]["reading"].startswith("nothing to place: the control")
