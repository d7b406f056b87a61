"""The verdict, from what ran, call by call: the kernel classifier, the judging of each call and
of each capture's ranges, and the policy check. Exit codes live in exits.py. Stdlib only: it never
imports torch.

Every path (torch.profiler in the child, nsys, ncu) hands over the same thing: per scenario, the
names of what ran in each call (ops, profiler labels, kernels). Each call is judged on its own.
"""
import collections
import re

from .exits import TERMS

# ----------------------------------------------------------------------------- what ran
CONTROL, CASE = "without_context", "with_context"
# The report's NVTX ranges, "f_compiled_with_context 17": which scenario each loop is.
LOOPS = {"f_compiled_without_context": CONTROL, "f_compiled_with_context": CASE}
LOOP_CALLS = 50
# Policy check: scenarios that save the forward matmul, and the one that recomputes it.
POLICY_SAVES = ("eager_sac", "compiled_no_checkpoint")
POLICY_RECOMPUTES = (CONTROL,)
# The arrangements the policy check judges; the last is measured only for --policy-report (2.10+).
WRAPPED = "with_context_wrapped"
POLICY_SUBJECTS = (CASE, "workaround", WRAPPED)
POLICY_REPORT_ONLY = (WRAPPED,)

# Profiler labels that exist only when compiled code runs: Dynamo's frame, AOTAutograd's
# autograd.Function, Inductor's graph call (emitted only while profiling).
COMPILED_REGION_LABELS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
# The report's f is two multiplies and two adds; run eagerly they show up one op (and kernel) each.
EAGER_POINTWISE_OPS = ("aten::mul", "aten::add")
CPU_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
DYNAMO_HINT = ("Dynamo's own reason for the skip: rerun with TORCH_LOGS=+dynamo and look for "
               "'skipping: f (reason: non-infra torch dispatch mode present ...)'.")


def classify_kernel(name):
    """One classifier for torch.profiler, nsys and ncu names: inductor | cublas | eager_aten | other.

    Inductor's kernels are named by torch/_inductor/codegen (triton_{poi,red,per,tem}_fused_*,
    `triton_` with unique names off, cpp_fused_* on CPU). Matmul library names vary with GPU and
    cuBLAS version, so they are matched by family, never by exact name."""
    if re.match(r"triton_|(graph_\d+_)?cpp_fused_", name):
        return "inductor"
    if re.search(r"gemm|gemv|xmma|cutlass|nvjet|cublas", name, re.IGNORECASE):
        return "cublas"
    # nsys and torch.profiler print at::native::..., ncu shortens it to at::...
    if re.search(r"\bat::", name) or name.startswith("aten::"):
        return "eager_aten"
    return "other"


def is_eager_pointwise(name):
    """The eager ops of f, as CPU ops (aten::mul) or as their CUDA kernels (MulFunctor, add)."""
    if name.split(".")[0] in EAGER_POINTWISE_OPS:
        return True
    return classify_kernel(name) == "eager_aten" and bool(
        re.search(r"MulFunctor|AddFunctor|CUDAFunctorOnSelf_add|CUDAFunctor_add", name))


def is_kernel(name):
    """A kernel (Inductor's, cuBLAS's or eager ATen's), as opposed to a CPU op or a label."""
    kind = classify_kernel(name)
    return kind == "inductor" or (kind != "other" and not name.startswith("aten::"))


def ran_compiled_code(name):
    return name.startswith(COMPILED_REGION_LABELS) or classify_kernel(name) == "inductor"


def classify_call(names):
    """compiled | eager | unknown, from the names of what ran in one call (or one NVTX range).

    Compiled: a compiled region or an Inductor kernel ran, and none of f's eager ops. Eager: f's
    eager ops ran, and no compiled code. Anything else settles nothing."""
    compiled = any(ran_compiled_code(n) for n in names)
    eager = any(is_eager_pointwise(n) for n in names)
    if compiled != eager:
        return "compiled" if compiled else "eager"
    return "unknown"


# What the verdict makes of each name, for the pictures (--plot): the same tests, in this order.
CLASSES = ("compiled", "eager", "matmul", "other")


def class_of(name):
    """compiled code (a compiled region, an Inductor kernel), f's eager ops, a matmul, or other."""
    if ran_compiled_code(name):
        return "compiled"
    if is_eager_pointwise(name):
        return "eager"
    if classify_kernel(name) == "cublas" or name in CPU_MATMUL_OPS:
        return "matmul"
    return "other"


def class_counts(names):
    """{class: how many} of one call's Counter of names: what a picture of that call must draw."""
    out = collections.Counter()
    for name, n in (names or {}).items():
        out[class_of(name)] += n
    return {c: out[c] for c in CLASSES if out[c]}


def refused_to_run_eagerly(e):
    """From 2.12 on, a fullgraph=True function that Dynamo skips raises instead of running eagerly:
    the same skip, made loud. Any other exception is the torch under test failing."""
    return "found no compiled frames" in str(e)


def eager_label(name):
    """aten::mul as is; a CUDA kernel by its functor (MulFunctor, CUDAFunctorOnSelf_add, ...)."""
    functors = [] if name.startswith("aten::") else [
        f for f in re.findall(r"\w*Functor\w*", name) if f not in ("AUnaryFunctor", "BUnaryFunctor")]
    return functors[0] + " kernel" if functors else abridge(name, 28)


def abridge(name, width=48):
    """Kernel names for a table: namespaces and template casts dropped, the functor kept."""
    name = re.sub(r"^void |\bat::native::|\bat::|\((?:int|unsigned long|bool)\)", "", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def by_class(kernels):
    out = collections.defaultdict(list)
    for k in kernels:
        out[classify_kernel(k)].append(k)
    return dict(out)


# ----------------------------------------------------------------------------- per scenario
def summarize(calls, shows=None):
    """A scenario's evidence from its calls: each a Counter of the names that ran in it. Calls
    that raised fullgraph's "found no compiled frames" come as None: eager, made loud."""
    kinds = ["eager" if c is None else classify_call(c) for c in calls]
    total = collections.Counter()
    for c in calls:
        total.update(c or {})
    kernels = sorted(n for n in total if is_kernel(n))
    return {"shows": shows, "calls": kinds, "call_classes": [class_counts(c) for c in calls],
            "compiled_calls": kinds.count("compiled"), "eager_calls": kinds.count("eager"),
            "eager_pointwise": {n: total[n] for n in sorted(total) if is_eager_pointwise(n)},
            "kernels": kernels, "kernels_by_class": by_class(kernels)}


def from_child(entry):
    """A scenario as the child measured it (measure.py) -> its summary."""
    calls = [None if "refused" in c else collections.Counter(dict(c["names"])) for c in entry.get("calls", [])]
    s = summarize(calls, entry.get("shows"))
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
        what = "%d of %d calls under SAC ran eagerly" % (case["eager_calls"], m)
        if case.get("refused"):
            how = "Dynamo skipped f_compiled and, with fullgraph=True, raised: " + case["refused"]
        else:
            how = "no compiled code, eager " + ", ".join(eager_label(k) for k in case["eager_pointwise"])
        return "reproduced", "%s (%s), while all %d calls of the control ran compiled code" % (what, how, n)
    if case["compiled_calls"] < m:
        return "cannot_test", ("%d of %d calls under SAC showed neither compiled code nor f's eager ops"
                               % (m - case["compiled_calls"], m))
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
            "device": env.get("device"), "env": env, "scenarios": {}, "policy": {}, "errors": {}}


def settle(report, verdict, reason, terms):
    report["verdict"], report["reason"] = verdict, reason
    report["exit_code"] = TERMS[terms][verdict]
    return report


def report_from_child(raw, terms, strict_policy):
    """The verdict of a torch.profiler run (the child's JSON, see measure.py)."""
    env = raw.get("env") or {}
    report = new_report("torch.profiler, %s" % env.get("device", "?"), env)
    for key in ("loops_error", "traceback"):
        if raw.get(key):
            report["errors"][key] = raw[key]
    if raw["status"] != "ok":
        return settle(report, "cannot_test", raw["reason"], terms)
    for name, entry in raw["scenarios"].items():
        report["scenarios"][name] = from_child(entry)
    report["policy"] = judge_policy(report["scenarios"], report["device"])
    return settle(report, *decide(report["scenarios"], report["policy"], strict_policy), terms)


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


def report_from_loops(ranges, source, terms, strict_policy):
    """The verdict of a profiler capture of the report's loops (captures.py): one NVTX range per
    call, each judged on its own, and only when the capture holds exactly the report's calls."""
    calls, problems, other = calls_of_loops(ranges)
    report = new_report(source, {"device": "cuda"})
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
