"""The verdict, from what ran, call by call: the kernel classifier, the judging of each call and
of each capture's ranges, and the policy check. Exit codes live in exits.py. Stdlib only: it never
imports torch.

Every path (torch.profiler in the child, nsys, ncu) hands over the same thing: per scenario, the
names of what ran in each call (ops, profiler labels, kernels). Each call is judged on its own.
"""
import collections
import functools
import re

from ..exits import TERMS

# ----------------------------------------------------------------------------- the scenarios
# The one table of scenarios, in the order they run and print: name -> what it shows. The main
# script gives each its call under the same name; the judge and the reports read the roles below.
SCENARIOS = {
    "without_context": "control: f compiled as reported, under a plain checkpoint",
    "with_context": "the report's case: the report's own f_compiled under SAC",
    "workaround": "the checkpoint inside the compiled region: PyTorch's supported arrangement",
    "without_context_after_sac": "the report's f_compiled again without SAC: did the skip stick?",
    "eager_sac": "policy control: SAC around the eager f saves the matmul",
    "compiled_no_checkpoint": "policy control: no checkpoint, nothing recomputed",
    "with_context_wrapped": "f compiled with wrap_inductor_compiled_regions, under SAC (2.10 and later)",
}
CONTROL, CASE, WORKAROUND, AFTER_SAC, EAGER_SAC, NO_CHECKPOINT, WRAPPED = SCENARIOS
# The bench's arrangements of a block, by the names its table and JSON use: sac_repro/bench/bench.py
# builds them, the policy report and the picture read them. -> what each is.
ARRANGEMENTS = {
    "eager": "no compile, no checkpoint",
    "eager SAC": "checkpoint_wrapper with the SAC policy around the eager block",
    "compiled, no checkpoint": "the block compiled, nothing checkpointed",
    "sac(compile(block)) [reported]": "the reported pattern: SAC around the compiled block",
    "compile(sac(block)) [workaround]": "the checkpoint inside the compiled region: the baseline",
    "sac(compile(block, wrap_inductor_compiled_regions))": "SAC around the block compiled with "
    "wrap_inductor_compiled_regions, the policy also saving the region (2.10 and later)",
}
(B_EAGER, B_EAGER_SAC, B_NO_CHECKPOINT, B_REPORTED, B_WORKAROUND, B_WRAPPED) = ARRANGEMENTS
# The report's NVTX ranges, "f_compiled_with_context 17": which scenario each loop is.
LOOPS = {"f_compiled_without_context": CONTROL, "f_compiled_with_context": CASE}
LOOP_CALLS = 50
# Policy check: scenarios that save the forward matmul, and the one that recomputes it.
POLICY_SAVES = (EAGER_SAC, NO_CHECKPOINT)
POLICY_RECOMPUTES = (CONTROL,)
# The arrangements the policy check judges; the last is measured only for --policy-report.
POLICY_SUBJECTS = (CASE, WORKAROUND, WRAPPED)
POLICY_REPORT_ONLY = (WRAPPED,)
# A call of f after SAC, judged only for the table: its backward would repeat the control's.
NO_POLICY_CHECK = (AFTER_SAC,)

# ----------------------------------------------------------------------------- the classifier
# Profiler labels that exist only when compiled code runs: Dynamo's frame, AOTAutograd's
# autograd.Function, Inductor's graph call (emitted only while profiling).
COMPILED_REGION_LABELS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
# The report's f is two multiplies and two adds; run eagerly they show up one op (and kernel) each.
EAGER_POINTWISE_OPS = ("aten::mul", "aten::add")
EAGER_POINTWISE_KERNELS = re.compile(r"MulFunctor|AddFunctor|CUDAFunctorOnSelf_add|CUDAFunctor_add")
CPU_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
# Who made a kernel, the first that matches. Inductor names its kernels in torch/_inductor/codegen
# (triton_{poi,red,per,tem}_fused_*, `triton_` with unique names off, cpp_fused_* on CPU). Matmul
# library names vary with GPU and cuBLAS version: families, never exact names. nsys and
# torch.profiler print at::native::..., ncu shortens it to at::...
FAMILIES = (("inductor", re.compile(r"^(?:triton_|(?:graph_\d+_)?cpp_fused_)")),
            ("cublas", re.compile(r"gemm|gemv|xmma|cutlass|nvjet|cublas", re.IGNORECASE)),
            ("eager_aten", re.compile(r"\bat::|^aten::")))
# What the verdict makes of a name, in this order (the pictures draw them so).
CLASSES = ("compiled", "eager", "matmul", "other")
Kind = collections.namedtuple("Kind", "family cls kernel")
DYNAMO_HINT = ("Dynamo's own reason for the skip: run the script itself (%s); its report quotes Dynamo's "
               "'skipping: f (reason: ...)'.")  # the command: command.script_command


@functools.lru_cache(maxsize=None)
def classify(name):
    """The one classifier, for torch.profiler, nsys and ncu names alike: Kind(family, cls, kernel).

    family: inductor | cublas | eager_aten | other (who made it; the kernel tables print it).
    cls: compiled (a compiled region or an Inductor kernel), eager (f's eager mul/add, as ops or
    their CUDA kernels), matmul, or other: what a call is judged from, and what --plot colours.
    kernel: a kernel, as opposed to a CPU op or a profiler label."""
    family = next((f for f, pattern in FAMILIES if pattern.search(name)), "other")
    if family == "inductor" or name.startswith(COMPILED_REGION_LABELS):
        cls = "compiled"
    elif name.split(".")[0] in EAGER_POINTWISE_OPS or (
            family == "eager_aten" and EAGER_POINTWISE_KERNELS.search(name)):
        cls = "eager"
    elif family == "cublas" or name in CPU_MATMUL_OPS:
        cls = "matmul"
    else:
        cls = "other"
    return Kind(family, cls, family == "inductor" or (family != "other" and not name.startswith("aten::")))


def judge_call(names):
    """compiled | eager | unknown, from the names of what ran in one call (or one NVTX range).

    Compiled: a compiled region or an Inductor kernel ran, and none of f's eager ops. Eager: f's
    eager ops ran, and no compiled code. Anything else settles nothing."""
    classes = {classify(n).cls for n in names}
    compiled, eager = "compiled" in classes, "eager" in classes
    if compiled != eager:
        return "compiled" if compiled else "eager"
    return "unknown"


def class_counts(names):
    """{class: how many} of one call's Counter of names: what a picture of that call must draw."""
    out = collections.Counter()
    for name, n in (names or {}).items():
        out[classify(name).cls] += n
    return {c: out[c] for c in CLASSES if out[c]}


def refused_to_run_eagerly(e, frame="f"):
    """From 2.12 on, a fullgraph=True function that Dynamo skips raises instead of running eagerly:
    the same skip, made loud, with the frames it skipped listed ("- f (FILE:LINE): reason"), or none
    where the skip stuck from an earlier call. A list without `frame` (the report's f; the bench's
    block's forward) is another function refused: that, and any other exception, is the torch
    under test failing."""
    text = str(e)
    if "found no compiled frames" not in text:
        return False
    listed = re.findall(r"^\s*- (\S+) \(", text, re.M)  # none where the skip stuck from an earlier call
    return not listed or frame in listed


def eager_label(name):
    """aten::mul as is; a CUDA kernel by its functor (MulFunctor, CUDAFunctorOnSelf_add, ...)."""
    functors = [] if name.startswith("aten::") else [
        f for f in re.findall(r"\w*Functor\w*", name) if f not in ("AUnaryFunctor", "BUnaryFunctor")]
    return functors[0] + " kernel" if functors else abridge(name, 28)


def abridge(name, width=48):
    """Kernel names for a table: namespaces and template casts dropped, the functor kept."""
    name = re.sub(r"^void |\bat::native::|\bat::|\((?:int|unsigned long|bool)\)", "", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def by_family(kernels):
    out = collections.defaultdict(list)
    for k in kernels:
        out[classify(k).family].append(k)
    return dict(out)


# ----------------------------------------------------------------------------- per scenario
def summarize(calls, shows=None, refused=None):
    """A scenario's evidence from its calls: each a Counter of the names that ran in it. `refused`
    marks the calls that raised fullgraph's "found no compiled frames" (2.12+): each counts as
    eager, the skip made loud, and what ran before it is still in its names."""
    refused = list(refused or [False] * len(calls))
    kinds = ["eager" if r else judge_call(c) for c, r in zip(calls, refused)]
    total = collections.Counter()
    for c in calls:
        total.update(c)
    kernels = sorted(n for n in total if classify(n).kernel)
    return {"shows": shows, "calls": kinds, "call_classes": [class_counts(c) for c in calls],
            "compiled_calls": kinds.count("compiled"), "eager_calls": kinds.count("eager"),
            "refused_calls": sum(refused), "calls_refused": refused,
            "eager_then_raised_calls": sum(r and judge_call(c) == "eager" for c, r in zip(calls, refused)),
            "mixed_calls": sum(not r and {"compiled", "eager"} <= {classify(n).cls for n in c}
                               for c, r in zip(calls, refused)),
            "eager_pointwise": {n: total[n] for n in sorted(total) if classify(n).cls == "eager"},
            "kernels": kernels, "kernels_by_class": by_family(kernels)}


def from_child(entry):
    """A scenario as the child measured it (measure.py) -> its summary."""
    calls = [collections.Counter(dict(c["names"])) for c in entry.get("calls", [])]
    s = summarize(calls, entry.get("shows"), ["refused" in c for c in entry.get("calls", [])])
    if any("timeline" in c for c in entry.get("calls", [])):  # recorded for --plot only
        s["timelines"] = [c.get("timeline") for c in entry["calls"]]
    for key in ("forward_us", "error", "backward_matmuls", "backward_error"):
        if key in entry:
            s[key] = entry[key]
    refused = [c["refused"] for c in entry.get("calls", []) if "refused" in c]
    if refused:
        s["refused"] = refused[0]
    s["policy_saw"] = entry.get("policy_saw", [])
    return s


RAN_THEN_RAISED = "ran eagerly, then raised"


def not_compiled(s):
    """How the calls that ran no compiled code ran, as their profiles show it: eagerly; or (from
    2.12, where a fullgraph=True function that Dynamo skipped raises once it has run) eagerly, then
    raised; or, where a raising call's profile holds none of f's ops, no compiled code."""
    raised, ran_first = s.get("refused_calls", 0), s.get("eager_then_raised_calls", 0)
    if not raised:
        return "ran eagerly"
    if ran_first < raised:
        return "ran no compiled code"
    if raised == s.get("eager_calls"):
        return RAN_THEN_RAISED
    return "ran eagerly, %d of them then raising" % raised


# ----------------------------------------------------------------------------- the verdict
def decide(scenarios, policy, strict_policy):
    """(verdict, reason) from the calls of the control and of the case under SAC."""
    control, case = scenarios.get(CONTROL), scenarios.get(CASE)
    if not control or not control["calls"]:
        return "cannot_test", "no calls of the control (%s) were seen" % CONTROL
    n = len(control["calls"])
    if control["compiled_calls"] < n:
        return "cannot_test", ("the control (the compiled f under a plain checkpoint) ran compiled "
                               "code in only %d of %d calls, so this build cannot show the bug here"
                               % (control["compiled_calls"], n))
    if not case or not case["calls"]:
        return "cannot_test", "no calls under SAC (%s) were seen" % CASE
    m = len(case["calls"])
    if case["eager_calls"]:
        what = "%d of %d calls under SAC %s" % (case["eager_calls"], m, not_compiled(case))
        eager = "no compiled code, eager " + ", ".join(eager_label(k) for k in case["eager_pointwise"])
        if case.get("refused") and not_compiled(case) == "ran no compiled code":
            how = "Dynamo skipped f_compiled and, with fullgraph=True, raised: " + case["refused"]
        elif case.get("refused"):
            how = "%s; Dynamo skipped f_compiled, and with fullgraph=True torch.compile raised once f had run: %s" % (
                eager, case["refused"])
        else:
            how = eager
        return "reproduced", "%s (%s), while all %d calls of the control ran compiled code" % (what, how, n)
    if case["compiled_calls"] < m:
        return "cannot_test", ("%d of %d calls under SAC showed %s" % (
            m - case["compiled_calls"], m, "both compiled code and f's eager ops" if case.get("mixed_calls")
            else "neither compiled code nor f's eager ops"))
    if strict_policy:
        ignored = policy.get("with_context_matmul_recomputed_in_backward")
        if ignored is None:
            return "cannot_test", "--strict-policy: the policy check was not measured (%s)" % policy.get("reason", "?")
        if ignored:
            return "reproduced", ("--strict-policy: compiled code ran under SAC, but the policy's "
                                  "MUST_SAVE on aten.mm was ignored: backward ran the forward matmul again")
    return "not_reproduced", "all %d calls under SAC ran compiled code, as did all %d of the control" % (m, n)


def judge_policy(scenarios, device):
    """Was MUST_SAVE(aten.mm) ignored, i.e. did backward compute the forward matmul again?

    Trusted only when the controls separate: those that save the matmul (eager SAC, compiled f
    with no checkpoint) agree on a baseline, and the one that recomputes it (plain checkpoint
    around the compiled f) counts more. A subject is "recomputed" when it counts more than that."""
    counts = {k: v.get("backward_matmuls") for k, v in scenarios.items() if "backward_matmuls" in v}
    saves = {counts.get(k) for k in POLICY_SAVES} - {None}
    recomputes = [counts[k] for k in POLICY_RECOMPUTES if counts.get(k) is not None]
    policy = {"backward_matmuls": counts, "trusted": False, "baseline": None, "device": device,
              "with_context_matmul_recomputed_in_backward": None,
              "workaround_matmul_recomputed_in_backward": None,
              "ops_seen": {k: v["policy_saw"] for k, v in scenarios.items() if v.get("policy_saw")},
              "backward_errors": {k: v["backward_error"] for k, v in scenarios.items() if v.get("backward_error")}}
    if len(saves) != 1 or not recomputes or min(recomputes) <= min(saves):
        policy["reason"] = ("not measured: the controls do not separate on this device and torch "
                            "(matmuls in backward: %s)" % ", ".join(
                                "%s %s" % (k, counts.get(k, "-")) for k in POLICY_SAVES + POLICY_RECOMPUTES))
        return policy
    policy["trusted"], policy["baseline"] = True, saves.pop()
    for name in POLICY_SUBJECTS:
        n = counts.get(name)
        if name in scenarios or name not in POLICY_REPORT_ONLY:
            policy["%s_matmul_recomputed_in_backward" % name] = None if n is None else n > policy["baseline"]
    return policy


SCHEMA = 2  # of --json: raised whenever a key changes meaning or goes; 1 was the unversioned layout


def new_report(source, env):
    """The keys every report has, in --json and on screen, whatever the evidence."""
    return {"schema": SCHEMA, "verdict": None, "exit_code": None, "reason": None, "source": source,
            "torch_version": env.get("torch"), "torch_git_version": env.get("torch_git"),
            "device": env.get("device"), "env": env, "torch_changes": env.get("changes", []),
            "dynamo_skips": [], "scenarios": {}, "policy": {}, "errors": {}}


def settle(report, verdict, reason, terms):
    report["verdict"], report["reason"] = verdict, reason
    report["exit_code"] = TERMS[terms][verdict]
    return report


def report_from_child(raw, terms, strict_policy):
    """The verdict of a torch.profiler run (the child's JSON, see measure.py)."""
    env = raw.get("env") or {}
    # a child that judged no call has no evidence, though it was to be torch.profiler's
    source = "torch.profiler, %s" % env.get("device", "?") if raw["status"] == "ok" else "none, no call was judged"
    report = new_report(source, env)
    for key in ("loops_error", "traceback"):
        if raw.get(key):
            report["errors"][key] = raw[key]
    report["dynamo_skips"] = raw.get("dynamo_skips", [])
    if "said" in raw:  # recorded since issue 45: absent, nobody knows what was said
        report["said"] = raw["said"]
    if raw["status"] != "ok":
        return settle(report, "cannot_test", raw["reason"], terms)
    for name, entry in raw["scenarios"].items():
        report["scenarios"][name] = from_child(entry)
    report["policy"] = judge_policy(report["scenarios"], report["device"])
    report["inductor_extern_mm"] = raw.get("inductor_extern_mm")
    if raw.get("ablation"):
        control, case = report["scenarios"].get(CONTROL) or {}, report["scenarios"].get(CASE) or {}
        report["ablation"] = {"rows": raw["ablation"], "reading": ablation_reading(
            raw["ablation"], control_compiled=bool(control.get("calls")) and control["compiled_calls"] == len(control["calls"]),
            case_saw=[op for op, _, _ in case.get("policy_saw") or ()] if case.get("calls") else None)}
    return settle(report, *decide(report["scenarios"], report["policy"], strict_policy), terms)


# The reading that places the second finding in Inductor (the paste words it from the rows: render.ablation_said)
INDUCTOR_READING = ("Inductor: only with inductor does the policy see `aten.mm.out` instead of `aten.mm.default` "
                    "(the second finding is Inductor's)")


def ablation_reading(rows, control_compiled=True, case_saw=None):
    """The one line the ablation reads to: whose module a finding is. Each claim needs its rows:
    Dynamo's only where f compiles without SAC (the control) and no backend ran it compiled with
    SAC; Inductor's only where the ablation's inductor row ran as the case itself did (case_saw:
    the ops the case's policy was asked about, where it was measured)."""
    if not control_compiled:
        return ("nothing to place: the control (f compiled under a plain checkpoint) did not run compiled code "
                "either, so no backend's row tells what SAC changes")
    errors = [r["backend"] for r in rows if r.get("error")]
    if errors:
        return "no reading: the case raised an error under %s (the table says which)" % ", ".join(errors)
    ran = {r["backend"]: set(r.get("policy_saw") or ()) for r in rows if r.get("frame_compiled")}
    if not ran:
        return "Dynamo: it skipped f under SAC whatever the backend (#161889 is Dynamo's)"
    inductor = ran.get("inductor")
    if inductor is not None and case_saw is not None and inductor != set(case_saw):
        return ("no reading: the ablation's `inductor` row (the case's own arrangement) had the policy asked about "
                "%s, the case above about %s: the ablation did not run as the case did" % (
                    ops_list(inductor), ops_list(case_saw)))
    others = [ops for name, ops in ran.items() if not name.startswith("inductor")]
    if inductor is not None and "aten.mm.out" in inductor and "aten.mm.default" not in inductor \
            and others and all("aten.mm.default" in ops for ops in others):
        return INDUCTOR_READING
    plain = [ops for name, ops in ran.items() if not name.startswith("inductor +")]
    if len(plain) == len([r for r in rows if not r["backend"].startswith("inductor +")]) and \
            all("aten.mm.default" in ops for ops in plain):
        return "no finding to place: under every backend the policy was asked about `aten.mm.default`"
    return "no single backend: Dynamo ran f under SAC with %s" % ", ".join(sorted(ran))


def ops_list(ops):
    return ", ".join("`%s`" % op for op in sorted(ops)) or "nothing"


# The report's ranges, exactly as its loops name them, with nsys's optional "DOMAIN:" prefix.
LOOP_RANGE = re.compile(r"(?:[^:]*:)?(%s) (0|[1-9][0-9]*)" % "|".join(LOOPS))


def calls_of_loops(ranges):
    """The report's calls in a capture: per scenario, index -> kernels, plus what keeps the
    capture from being the report's 2 x 50 calls (missing, doubled or stray indices) and how many
    other ranges were ignored. A range in which no kernel ran holds no evidence: it is missing."""
    seen = {loop: collections.defaultdict(list) for loop in LOOPS}  # index -> each range's kernels
    other = 0
    for name, r in ranges.items():
        m = LOOP_RANGE.fullmatch(name)
        if m:
            seen[m.group(1)][int(m.group(2))] += [r["kernels"]] * max(r["instances"], 1)
        else:
            other += r["instances"]
    calls = {s: {} for s in LOOPS.values()}
    problems = {loop: {} for loop in LOOPS}
    for loop, by_index in seen.items():
        problems[loop]["stray"] = sorted(i for i in by_index if i >= LOOP_CALLS)
        problems[loop]["doubled"] = sorted(i for i, rs in by_index.items() if i < LOOP_CALLS and len(rs) > 1)
        calls[LOOPS[loop]] = {i: rs[0] for i, rs in by_index.items()
                              if i < LOOP_CALLS and len(rs) == 1 and sum(rs[0].values())}
        problems[loop]["missing"] = sorted(set(range(LOOP_CALLS)) - set(calls[LOOPS[loop]]) - set(problems[loop]["doubled"]))
    return calls, problems, other


def describe_problems(problems):
    """'f_compiled_with_context: missing 49; stray 50' for each loop that is not its 50 calls."""
    out = []
    for loop, kinds in problems.items():
        parts = ["%s %s" % (kind, index_list(kinds[kind])) for kind in ("missing", "doubled", "stray") if kinds[kind]]
        if parts:
            out.append("%s: %s" % (loop, "; ".join(parts)))
    return " | ".join(out)


def index_list(indices):
    """[0, 1, 2, 5] -> '0-2, 5'"""
    out, run = [], []
    for i in sorted(set(indices)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ", ".join(out)


def report_from_loops(ranges, source, terms, strict_policy, capture_run=None):
    """The verdict of a profiler capture of the report's loops (captures.py): one NVTX range per
    call, each judged on its own, and only when the capture holds exactly the report's calls.
    capture_run is what the capture run itself wrote (cli.py's --_env, run_nsys.sh passes it): the
    torch it ran, what changed that torch in-process, and Dynamo's words during the loops."""
    calls, problems, other = calls_of_loops(ranges)
    capture_run = capture_run or {}
    report = new_report(source, dict(capture_run.get("env") or {}, device="cuda"))
    report["dynamo_skips"] = capture_run.get("dynamo_skips", [])
    report["policy"] = {"with_context_matmul_recomputed_in_backward": None,
                        "workaround_matmul_recomputed_in_backward": None,
                        "reason": "not measured: the report's loops run forward only"}
    report["other_ranges"] = other
    for scenario, by_index in calls.items():
        s = report["scenarios"][scenario] = summarize([by_index[i] for i in sorted(by_index)])
        s["ranges"] = sorted(by_index)
        s["kernel_counts"] = dict(sum(by_index.values(), collections.Counter()))
    wrong = describe_problems(problems)
    if wrong:
        return settle(report, "cannot_test", "incomplete evidence in %s: not the report's %d calls per "
                      "loop, each one range with kernels (%s)" % (source, LOOP_CALLS, wrong), terms)
    return settle(report, *decide(report["scenarios"], report["policy"], strict_policy), terms)
