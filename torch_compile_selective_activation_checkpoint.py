#!/usr/bin/env python3
"""A torch.compile'd function called inside selective activation checkpointing (SAC) runs
eagerly: no Inductor kernels run (pytorch/pytorch#161889).

    python torch_compile_selective_activation_checkpoint.py [--device auto|cuda|cpu]
        [--json PATH] [--markdown] [--strict-policy] [--hunt-fix] [--timeout S]
    python torch_compile_selective_activation_checkpoint.py --from-nsys REPORT.nsys-rep|.sqlite|.csv
    python torch_compile_selective_activation_checkpoint.py --from-ncu NCU_PER_NVTX.txt

Exit codes (the `git bisect run` contract):
    0    not reproduced: compiled code ran under SAC
    1    reproduced: the control ran compiled code, the SAC call did not
    125  cannot test this build (no SAC API, no such device, torch crashed, hung or failed to import)
    128  usage error or a bug in this script: aborts a bisect, never passes as a verdict
"""


# ---------------------------------------------------------------------------------------------
# The report's code, as filed. Two changes: NVTX goes through the `nvtx` package (torch.cuda.nvtx
# raises on CPU-only builds) and the device is a parameter. It is cut in two (set-up, loops) so
# that a loop that raises still leaves the set-up to measure. Lines marked [added] compile outside
# the capture range and open it, so that the report's `nsys --capture-range=cudaProfilerApi`
# records the two loops; as filed, the script never calls cudaProfilerStart and nsys captures
# nothing.
# ---------------------------------------------------------------------------------------------
def report_setup(device):
    import functools

    import torch
    from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

    # Define which operations to save during checkpointing
    ops_to_save = [
        torch.ops.aten.mm.default,
    ]

    # Define the policy for checkpointing
    def policy_fn(ctx, op, *args, **kwargs):
        if op in ops_to_save:
            return CheckpointPolicy.MUST_SAVE
        else:
            return CheckpointPolicy.PREFER_RECOMPUTE

    # Create the context function for selective checkpointing
    context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)

    # Define a checkpointing function with the context
    def checkpoint_fn_with_context(fn, *args, **kwargs):
        return checkpoint(fn, *args, **kwargs, use_reentrant=False, context_fn=context_fn)

    # Define a checkpointing function without the context
    def checkpoint_fn_without_context(fn, *args, **kwargs):
        return checkpoint(fn, *args, **kwargs, use_reentrant=False)

    # Define the function to be compiled
    def f(x, y):
        x = 3 * x + 1
        y = 2 * y + 1
        return x @ y

    # Create the input tensors
    x = torch.ones(10, 12, device=device, requires_grad=True)
    y = torch.ones(12, 10, device=device, requires_grad=True)

    # Compile the function
    f_compiled = torch.compile(f, fullgraph=True, dynamic=True)
    return types.SimpleNamespace(**locals())


def report_loops(ns, nvtx):
    torch, device, f_compiled, x, y = ns.torch, ns.device, ns.f_compiled, ns.x, ns.y
    checkpoint_fn_with_context = ns.checkpoint_fn_with_context
    checkpoint_fn_without_context = ns.checkpoint_fn_without_context

    # [added] Compile before the capture range opens, without SAC only: on affected torch, once f
    # has been called under SAC, Dynamo skips it for good, with or without SAC.
    checkpoint_fn_without_context(f_compiled, x, y)
    capture_range(torch, device, start=True)

    # Profile the function calls
    for i in range(50):
        nvtx.push_range(f"f_compiled_without_context {i}")
        checkpoint_fn_without_context(f_compiled, x, y)
        nvtx.pop_range()

    for i in range(50):
        nvtx.push_range(f"f_compiled_with_context {i}")
        checkpoint_fn_with_context(f_compiled, x, y)
        nvtx.pop_range()

    capture_range(torch, device, start=False)  # [added]


# ---------------------------------------------------------------------------------------------
# Evidence and verdict. Everything below judges from what ran (profiler events, kernel names),
# never from the version number. The measured part runs in a child process so that a crash or
# hang of the torch under test becomes "cannot test" (125) instead of taking the verdict with it.
# ---------------------------------------------------------------------------------------------
import argparse
import collections
import csv
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import types

EXIT_NOT_REPRODUCED, EXIT_REPRODUCED, EXIT_CANNOT_TEST, EXIT_ABORT = 0, 1, 125, 128
SCENARIOS = ("without_context", "with_context", "workaround", "without_context_after_sac")
LOOP_RANGES = {"f_compiled_without_context": "without_context", "f_compiled_with_context": "with_context"}
LOOP_COUNT = 50
FORWARD_PROFILE_STEPS = 3
TIMED_STEPS = 20
DYNAMO_HINT = ("Dynamo's own reason for the skip: rerun with TORCH_LOGS=+dynamo and look for "
               "'skipping: f (reason: non-infra torch dispatch mode present ...)'.")

# Profiler labels that exist only when compiled code runs: Dynamo's frame, AOTAutograd's
# autograd.Function, Inductor's graph call (emitted only while profiling).
COMPILED_REGION_LABELS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
# The report's f is two multiplies and two adds; run eagerly they show up one op each.
EAGER_POINTWISE_OPS = ("aten::mul", "aten::add")
CPU_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
# Policy-check controls. Plain checkpoint around an eager f is no positive control: its recompute
# stops early, before the matmul, whose output backward never needs (seen on the H200). Around the
# compiled f the region re-runs whole, matmul included.
POLICY_SAVES = ("eager_sac", "compiled_no_checkpoint")
POLICY_RECOMPUTES = ("without_context",)


class UsageError(Exception):
    """Bad input from the user: abort (EXIT_ABORT) with one line, never a verdict."""


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


def eager_label(name):
    """aten::mul as is; a CUDA kernel by its functor (MulFunctor, CUDAFunctorOnSelf_add, ...)."""
    functors = [] if name.startswith("aten::") else [
        f for f in re.findall(r"\w*Functor\w*", name) if f not in ("AUnaryFunctor", "BUnaryFunctor")]
    return functors[0] + " kernel" if functors else abridge(name, 28)


def abridge(name, width=48):
    """Kernel names for a table: namespaces and template casts dropped, the functor kept."""
    name = re.sub(r"^void |\bat::native::|\bat::|\((?:int|unsigned long|bool)\)", "", name)
    return name if len(name) <= width else name[: width - 3] + "..."


# --------------------------------------------------------------------------- the child process
def nvtx_ranges(torch, device):
    """(NVTX calls for the report's loops, where they go). On CUDA through torch.cuda.nvtx: nsys
    2023.4.4 on an H200 recorded its ranges and none of the nvtx package's. Where torch has no
    CUDA, torch.cuda.nvtx raises: the nvtx package then, if installed. The verdict needs none."""
    if device == "cuda":
        return types.SimpleNamespace(push_range=torch.cuda.nvtx.range_push,
                                     pop_range=torch.cuda.nvtx.range_pop), "torch.cuda.nvtx"
    try:
        import nvtx
        return nvtx, "nvtx package"
    except ImportError:
        noop = lambda *args, **kwargs: None  # noqa: E731
        return types.SimpleNamespace(push_range=noop, pop_range=noop), "off (pip install nvtx)"


def capture_range(torch, device, start):
    if device != "cuda":
        return
    torch.cuda.synchronize()
    (torch.cuda.profiler.start if start else torch.cuda.profiler.stop)()


def describe_environment(torch, device):
    env = {"python": platform.python_version(), "platform": platform.platform(),
           "torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", None),
           "cuda_runtime": torch.version.cuda, "triton": None, "gpu": None, "driver": None,
           "device": device}
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception:
        pass
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:
            env["driver"] = None
    return env


def profiler_activities(torch, device):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def synchronize(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def profiled_names(torch, device, fn):
    """Counter of (name, 'cpu'|'gpu') for every op and kernel that ran during fn()."""
    with torch.profiler.profile(activities=profiler_activities(torch, device)) as prof:
        fn()
        synchronize(torch, device)
    names = collections.Counter()
    for e in prof.events():
        where = "cpu" if str(e.device_type).endswith("CPU") else "gpu"
        names[(e.name, where)] += 1
    return names


def time_forward_us(torch, device, step):
    times = []
    for _ in range(TIMED_STEPS):
        synchronize(torch, device)
        t0 = time.perf_counter()
        step()
        synchronize(torch, device)
        times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[len(times) // 2]


def backward_matmuls(torch, device, step):
    """Matmuls computed in one backward pass of step(); None where this device cannot tell.

    The forward runs outside the profile, so a forward matmul counted here was recomputed. On
    CUDA a matmul served from SAC's cache launches no kernel, so gemm kernels count exactly. On CPU
    a cached matmul still shows up as an aten::mm op, indistinguishable from a computed one, except
    inside Inductor's graphs, where no dispatch mode stands between the op and its computation."""
    step().sum().backward()  # backward graphs compile lazily: keep compilation out of the profile
    loss = step().sum()
    with torch.profiler.profile(activities=profiler_activities(torch, device)) as prof:
        loss.backward()
        synchronize(torch, device)
    events = prof.events()
    if device == "cuda":
        return sum(1 for e in events
                   if not str(e.device_type).endswith("CPU") and classify_kernel(e.name) == "cublas")
    computed = 0
    for e in events:
        if e.name not in CPU_MATMUL_OPS:
            continue
        children = {c.name for c in e.cpu_children}
        if children & (set(CPU_MATMUL_OPS) | {"PythonDispatchMode"}):
            continue  # a dispatch mode intercepted it; the computing op, if any, is nested inside
        if not any(a.startswith("## Call CompiledFxGraph") for a in ancestor_names(e)):
            return None
        computed += 1
    return computed


def ancestor_names(e):
    while e.cpu_parent is not None:
        e = e.cpu_parent
        yield e.name


def fresh_code(fn):
    """A copy of fn with its own code object. Dynamo caches per code object and, on affected
    torch, once a call under SAC is skipped every later call of that code object runs eagerly,
    SAC or not. Controls measured on the report's f after its loops would be poisoned by that."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def measure(device_arg, loops_only):
    """Runs in the child: the report's block, then the evidence. Returns a JSON-able dict."""
    try:
        import torch
    except BaseException as e:
        return {"status": "cannot_test", "reason": "torch failed to import: %s" % one_line(e)}
    device = device_arg
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        env = dict(describe_environment(torch, "cpu"), device="cuda (not available)")
        return {"status": "cannot_test", "env": env,
                "reason": "--device cuda was asked for, but this torch sees no CUDA device "
                          "(torch.cuda.is_available() is False); use --device cpu or auto"}
    env = describe_environment(torch, device)
    nvtx, env["nvtx"] = nvtx_ranges(torch, device)
    try:
        ns = report_setup(device)
    except ImportError as e:
        if "CheckpointPolicy" in str(e) or "create_selective_checkpoint_contexts" in str(e):
            return {"status": "cannot_test", "env": env,
                    "reason": "torch %s lacks the public SAC API the report imports "
                              "(CheckpointPolicy, create_selective_checkpoint_contexts ship from "
                              "2.5.0): %s" % (torch.__version__, re.sub(r" \(\S*\)$", "", one_line(e)))}
        raise
    result = {"status": "ok", "env": env, "scenarios": {}}
    try:
        report_loops(ns, nvtx)
    except Exception as e:
        if not refused_to_run_eagerly(e):
            raise
        result["loops_error"] = one_line(e)
    if loops_only:
        return result

    def compile_as_reported(fn):
        return torch.compile(fn, fullgraph=True, dynamic=True)

    def sac_of_f(x, y):
        return ns.checkpoint_fn_with_context(ns.f, x, y)

    f_control = compile_as_reported(fresh_code(ns.f))  # never called under SAC
    workaround = compile_as_reported(sac_of_f)
    x, y = ns.x, ns.y
    steps = {
        # The control: f compiled as reported, first called without SAC.
        "without_context": lambda: ns.checkpoint_fn_without_context(f_control, x, y),
        # The reported case: the report's own f_compiled, as its loops left it.
        "with_context": lambda: ns.checkpoint_fn_with_context(ns.f_compiled, x, y),
        # PyTorch's supported arrangement: the SAC checkpoint traced inside the compiled region.
        "workaround": lambda: workaround(x, y),
        # The report's f_compiled again without SAC: shows whether the skip stuck to f.
        "without_context_after_sac": lambda: ns.checkpoint_fn_without_context(ns.f_compiled, x, y),
        # Policy controls that save the matmul; without_context is the one that recomputes it.
        "eager_sac": lambda: sac_of_f(x, y),
        "compiled_no_checkpoint": lambda: f_control(x, y),
    }
    for name, step in steps.items():
        entry = result["scenarios"][name] = {}
        try:
            step()
            entry["names"] = sorted([n, w, c] for (n, w), c in profiled_names(
                torch, device, lambda: [step() for _ in range(FORWARD_PROFILE_STEPS)]).items())
            entry["forward_us"] = time_forward_us(torch, device, step)
        except Exception as e:
            if name == "without_context" or (name == "with_context" and not refused_to_run_eagerly(e)):
                raise
            entry["error"] = one_line(e)  # a failing side scenario must not hide the verdict
            if refused_to_run_eagerly(e):
                entry["names"] = []
    for name, step in steps.items():
        entry = result["scenarios"][name]
        if "error" in entry or name == "without_context_after_sac":
            continue
        try:
            entry["backward_matmuls"] = backward_matmuls(torch, device, step)
        except Exception as e:
            # e.g. 2.9: backward through checkpoint(compiled f) raises in Dynamo
            entry["backward_error"] = one_line(e)
    return result


def refused_to_run_eagerly(e):
    """From 2.12 on, a fullgraph=True function that Dynamo skips raises instead of running eagerly:
    the same skip, made loud. Any other exception is the torch under test failing."""
    return "found no compiled frames" in str(e)


def one_line(e):
    text = "%s: %s" % (type(e).__name__, e)
    return " ".join(text.split())[:400]


OUR_BUG_TYPES = (NameError, TypeError, KeyError, IndexError, AttributeError, ValueError,
                 AssertionError, ZeroDivisionError)


def raised_by_this_script(e):
    """Ours (abort the bisect) or the torch under test's (cannot test this build)? Anything that
    passed through torch's or triton's Python code is theirs; so is a RuntimeError (how torch's
    C++ reports failures). A plain Python error that never entered torch is a bug here."""
    packages = [os.path.dirname(m.__file__) + os.sep for m in
                (sys.modules.get("torch"), sys.modules.get("triton")) if m and getattr(m, "__file__", None)]
    for frame in traceback.extract_tb(e.__traceback__):
        if any(os.path.abspath(frame.filename).startswith(p) for p in packages):
            return False
    return isinstance(e, OUR_BUG_TYPES)


def child_main(args):
    try:
        result = measure(args.device, args.loops_only)
    except BaseException as e:
        status = "our_bug" if raised_by_this_script(e) else "torch_error"
        result = {"status": status, "reason": one_line(e), "traceback": traceback.format_exc()}
    with open(args.child_out, "w") as fh:
        json.dump(result, fh)
    return 0


# --------------------------------------------------------------------------- the parent process
def child_command(args, out_path):
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", out_path, "--device", args.device]
    if args.loops_only:
        cmd.append("--loops-only")
    return cmd


def run_child(args):
    """Runs the measured part; returns (result dict, log text). Crashes and hangs -> cannot_test."""
    env = dict(os.environ)
    # Names Inductor's C++ kernels (cpp_fused_*) in the CPU profile; CUDA kernels are named anyway.
    env.setdefault("TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE", "1")
    fd, out_path = tempfile.mkstemp(prefix="sac_repro_", suffix=".json")
    os.close(fd)
    log = tempfile.TemporaryFile(mode="w+")
    try:
        proc = subprocess.Popen(child_command(args, out_path), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "hung: no result within --timeout %gs (raise it if compilation is slow here)"
                    % args.timeout}, read_log(log)
        except BaseException:
            kill_group(proc)
            raise
        text = read_log(log)
        if rc < 0:
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "crashed: killed by %s" % signal_name(-rc)}, text
        with open(out_path) as fh:
            content = fh.read()
        if not content:
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "exited with code %d before giving a result" % rc}, text
        return json.loads(content), text
    finally:
        log.close()
        os.unlink(out_path)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def read_log(fh):
    fh.seek(0)
    return fh.read()


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


def summarize_scenario(names):
    """From one scenario's profiled (name, where, count) rows: did compiled code run, which eager
    pointwise ops ran, which kernels ran."""
    labels = sorted({n for n, _, _ in names if n.startswith(COMPILED_REGION_LABELS)})
    kernels = collections.Counter()
    for n, where, c in names:
        if where == "gpu" or classify_kernel(n) == "inductor":
            kernels[n] += c
    inductor = sorted(k for k in kernels if classify_kernel(k) == "inductor")
    eager = collections.Counter()
    for n, where, c in names:
        if is_eager_pointwise(n):
            eager[n] += c
    return {"compiled_region_ran": bool(labels or inductor), "compiled_region_labels": labels,
            "inductor_kernels": inductor, "eager_pointwise": dict(sorted(eager.items())),
            "kernels": sorted(kernels)}


def judge_policy(raw):
    """Was MUST_SAVE(aten.mm) ignored, i.e. did backward compute the forward matmul again?

    Trusted only when the controls separate: those that save the matmul (eager SAC, compiled f
    with no checkpoint) agree on a baseline, and the one that recomputes it (plain checkpoint
    around the compiled f) counts more. A subject is "recomputed" when it counts more than that baseline."""
    counts = {k: v.get("backward_matmuls") for k, v in raw.items() if "backward_matmuls" in v}
    saves = {counts.get(k) for k in POLICY_SAVES} - {None}
    recomputes = [counts[k] for k in POLICY_RECOMPUTES if counts.get(k) is not None]
    policy = {"backward_matmuls": counts, "trusted": False, "baseline": None,
              "with_context_matmul_recomputed_in_backward": None,
              "workaround_matmul_recomputed_in_backward": None}
    if len(saves) != 1 or not recomputes or min(recomputes) <= min(saves):
        policy["reason"] = ("not measured: the controls do not separate on this device and torch "
                            "(matmuls in backward: %s)" % ", ".join(
                                "%s %s" % (k, counts.get(k, "-"))
                                for k in POLICY_SAVES + POLICY_RECOMPUTES))
        return policy
    policy["trusted"], policy["baseline"] = True, saves.pop()
    for name in ("with_context", "workaround"):
        n = counts.get(name)
        policy["%s_matmul_recomputed_in_backward" % name] = None if n is None else n > policy["baseline"]
    return policy


def decide(scenarios, policy, strict_policy):
    """(verdict, exit code, reason) from what ran. The contract with `git bisect run`."""
    control, case = scenarios["without_context"], scenarios["with_context"]
    if not control["compiled_region_ran"]:
        return "cannot_test", EXIT_CANNOT_TEST, ("the control (compiled f under plain checkpoint) "
                                                 "ran no compiled code, so this build cannot show "
                                                 "the bug")
    if not case["compiled_region_ran"]:
        if case.get("error"):
            why = "Dynamo skipped f_compiled under SAC and, with fullgraph=True, raised: " + case["error"]
        elif case["eager_pointwise"]:
            why = "f_compiled ran eagerly under SAC: no compiled region, eager " + ", ".join(
                eager_label(k) for k in case["eager_pointwise"])
        else:
            why = "f_compiled ran no compiled code under SAC"
        return "reproduced", EXIT_REPRODUCED, why
    if strict_policy:
        ignored = policy.get("with_context_matmul_recomputed_in_backward")
        if ignored is None:
            return "cannot_test", EXIT_CANNOT_TEST, ("--strict-policy: the policy check was not "
                                                     "measured (%s)" % policy.get("reason", "?"))
        if ignored:
            return "reproduced", EXIT_REPRODUCED, ("--strict-policy: compiled code ran under SAC, "
                                                   "but the policy's MUST_SAVE on aten.mm was "
                                                   "ignored: backward ran the forward matmul again")
    return "not_reproduced", EXIT_NOT_REPRODUCED, "compiled code ran under SAC"


def hunt_fix_exit(code):
    """For `git bisect start --term-old broken --term-new fixed`: 0 while broken, 1 once fixed."""
    return {EXIT_NOT_REPRODUCED: EXIT_REPRODUCED, EXIT_REPRODUCED: EXIT_NOT_REPRODUCED}.get(code, code)


def build_report(raw, args, source):
    """The verdict and its evidence, as written to --json and printed."""
    env = raw.get("env") or {}
    report = new_report(source, env, env.get("device"))
    if raw["status"] != "ok":
        return settle(report, ("cannot_test", EXIT_CANNOT_TEST, raw["reason"]), args)
    for name in SCENARIOS:
        entry = raw["scenarios"].get(name, {})
        s = summarize_scenario(entry.get("names", [])) if "names" in entry else \
            {"compiled_region_ran": None, "kernels": [], "eager_pointwise": {}}
        s["forward_us"] = entry.get("forward_us")
        s["kernels_by_class"] = by_class(s.get("kernels", []))
        if "error" in entry:
            s["error"] = entry["error"]
        report["scenarios"][name] = s
    report["policy"] = judge_policy(raw["scenarios"])
    report["policy"]["device"] = report["device"]
    return settle(report, decide(report["scenarios"], report["policy"], args.strict_policy), args)


def new_report(source, env, device):
    """The keys every report has, in --json and on screen, whatever the evidence."""
    return {"verdict": None, "exit_code": None, "reason": None, "source": source,
            "torch_version": env.get("torch"), "torch_git_version": env.get("torch_git"),
            "device": device, "env": env, "scenarios": {}, "policy": {}}


def settle(report, outcome, args):
    report["verdict"], report["exit_code"], report["reason"] = outcome
    if args.hunt_fix:
        report["exit_code"] = hunt_fix_exit(report["exit_code"])
    return report


def by_class(kernels):
    out = collections.defaultdict(list)
    for k in kernels:
        out[classify_kernel(k)].append(k)
    return dict(out)


# --------------------------------------------------------------------------- nsys / ncu evidence
def rows_from_csv_text(text):
    """(range, kernel, instances) rows from `nsys stats -r nvtx_kern_sum -f csv`."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("NVTX Range")), None)
    if start is None:
        raise UsageError("not an nvtx_kern_sum CSV: no 'NVTX Range' header line")
    rows = []
    for r in csv.DictReader(lines[start:]):
        rows.append((r["NVTX Range"], r["Kernel Name"], int(r.get("Kern Inst") or 1)))
    return rows


def rows_from_sqlite(path):
    """The nvtx_kern_sum join done on an nsys SQLite export with the stdlib: a kernel belongs to
    a push/pop range when its launch call began inside that range on the same thread."""
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    if "NVTX_EVENTS" not in tables:
        raise UsageError("%s is an SQLite file but not an nsys export (no NVTX_EVENTS table)" % path)
    if not {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
        return []
    # nsys stores the kernel's demangled name id in demangledName (shortName on some versions).
    query = """
        select coalesce(n.text, ns.value), coalesce(kd.value, ks.value), count(*)
        from NVTX_EVENTS n
        left join StringIds ns on ns.id = n.textId
        join CUPTI_ACTIVITY_KIND_RUNTIME r
          on r.globalTid = n.globalTid and r.start >= n.start and r.start <= n.end
        join CUPTI_ACTIVITY_KIND_KERNEL k on k.correlationId = r.correlationId
        left join StringIds kd on kd.id = k.demangledName
        left join StringIds ks on ks.id = k.shortName
        where n.end is not null and n.eventType = 59
        group by 1, 2"""
    return [(a or "", b or "", c) for a, b, c in db.execute(query)]


def rows_from_ncu_text(text):
    """(range, kernel, 1) rows from `ncu --nvtx --print-summary per-nvtx` output."""
    rows, current = [], None
    kernel_line = re.compile(r"^\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), .*Invocations (\d+)")
    for line in text.splitlines():
        m = re.match(r"^\s{2}<(.*)>\s*$", line)
        if m:
            current = m.group(1)
            continue
        m = kernel_line.match(line)
        if m and current is not None:
            rows.append((current, m.group(1), int(m.group(2))))
    if not rows and "NVTX" not in text:
        raise UsageError("not an ncu per-NVTX summary (run ncu --nvtx --print-summary per-nvtx)")
    return rows


def nsys_stats_csv(path):
    nsys = shutil.which("nsys")
    if not nsys:
        raise UsageError("%s is an .nsys-rep; reading it needs nsys on PATH (or pass the CSV of "
                         "`nsys stats -r nvtx_kern_sum -f csv`, or its .sqlite export)" % path)
    proc = subprocess.run([nsys, "stats", "-q", "-r", "nvtx_kern_sum", "-f", "csv", "-o", "-",
                           "--force-export=true", path], capture_output=True, text=True)
    if "NVTX Range" not in proc.stdout:
        # Ranges with no kernels give an empty report, not an error: say so, don't crash.
        if proc.returncode == 0:
            return "NVTX Range,Kern Inst,Kernel Name\n"
        raise UsageError("nsys stats could not read %s: %s" % (path, one_line(
            RuntimeError(proc.stderr.strip() or proc.stdout.strip()))))
    return proc.stdout


def load_profile_rows(path, kind):
    if not os.path.isfile(path):
        raise UsageError("report file not found: %s" % path)
    if not os.access(path, os.R_OK):
        raise UsageError("report file not readable: %s" % path)
    with open(path, "rb") as fh:
        head = fh.read(16)
    if kind == "ncu":
        return rows_from_ncu_text(open(path, errors="replace").read())
    if head.startswith(b"SQLite format 3"):
        return rows_from_sqlite(path)
    if path.endswith(".nsys-rep") or path.endswith(".qdrep"):
        return rows_from_csv_text(nsys_stats_csv(path))
    try:
        text = open(path, encoding="utf-8").read()
    except UnicodeDecodeError:
        raise UsageError("%s is not an nsys report: expected .nsys-rep, .sqlite or an "
                         "nvtx_kern_sum CSV" % path)
    return rows_from_csv_text(text)


def loop_evidence(rows):
    """Folds the loop index out of the range names ('f_compiled_with_context 17') and summarizes
    each loop: which ranges ran Inductor kernels, and all kernel names with counts."""
    loops = {s: {"ranges": collections.defaultdict(collections.Counter)} for s in LOOP_RANGES.values()}
    for rng, kernel, n in rows:
        m = re.search(r"(f_compiled_with(?:out)?_context) (\d+)\s*$", rng)
        if m:
            loops[LOOP_RANGES[m.group(1)]]["ranges"][int(m.group(2))][kernel] += n
    out = {}
    for scenario, loop in loops.items():
        ranges = loop["ranges"]
        kernels = collections.Counter()
        for c in ranges.values():
            kernels.update(c)
        compiled = [i for i, c in ranges.items() if any(classify_kernel(k) == "inductor" for k in c)]
        out[scenario] = {"ranges_seen": len(ranges), "ranges_with_inductor_kernels": len(compiled),
                         "kernel_counts": dict(kernels), "kernels": sorted(kernels),
                         "kernels_by_class": by_class(sorted(kernels)),
                         "eager_pointwise": {k: v for k, v in kernels.items() if is_eager_pointwise(k)}}
    return out


def report_from_rows(rows, args, source):
    loops = loop_evidence(rows)
    report = new_report(source, {}, "cuda")
    report["policy"] = {"with_context_matmul_recomputed_in_backward": None,
                        "workaround_matmul_recomputed_in_backward": None,
                        "reason": "not measured: the report's loops run forward only"}
    missing = ["%s (%d of %d ranges with kernels)" % (name, loops[s]["ranges_seen"], LOOP_COUNT)
               for name, s in LOOP_RANGES.items() if loops[s]["ranges_seen"] < LOOP_COUNT]
    for s, ev in loops.items():
        ev["compiled_region_ran"] = ev["ranges_with_inductor_kernels"] > 0
        report["scenarios"][s] = ev
    report["scenarios"]["workaround"] = {"compiled_region_ran": None, "kernels": [],
                                         "note": "not in the report's loops"}
    if missing:
        return settle(report, ("cannot_test", EXIT_CANNOT_TEST, "incomplete evidence in %s: missing "
                               "ranges for %s" % (source, "; ".join(missing))), args)
    return settle(report, decide(report["scenarios"], report["policy"], args.strict_policy), args)


# --------------------------------------------------------------------------- output
def environment_line(env):
    keys = (("python", "python"), ("torch", "torch"), ("torch_git", "git"), ("triton", "triton"),
            ("cuda_runtime", "CUDA runtime"), ("gpu", "GPU"), ("driver", "driver"),
            ("device", "device"), ("nvtx", "nvtx"))
    return " | ".join("%s %s" % (label, env[k]) for k, label in keys if env.get(k))


def scenario_rows(report):
    rows = []
    for name in SCENARIOS:
        s = report["scenarios"].get(name)
        if not s:
            continue
        ran = {True: "yes", False: "no", None: "-"}[s.get("compiled_region_ran")]
        if "ranges_seen" in s:
            ran += " (%d/%d ranges)" % (s["ranges_with_inductor_kernels"], s["ranges_seen"])
        eager = ", ".join("%s x%d" % (eager_label(k), v) for k, v in s.get("eager_pointwise", {}).items()) or "-"
        kernels = ", ".join(abridge(k, 34) for k in s.get("kernels", [])[:4]) or "-"
        if len(s.get("kernels", [])) > 4:
            kernels += ", +%d more" % (len(s["kernels"]) - 4)
        fwd = "%.0f us" % s["forward_us"] if s.get("forward_us") else "-"
        if s.get("error"):
            kernels = "error: " + s["error"][:60]
        rows.append((name, ran, eager, kernels, fwd))
    return rows


def loop_kernel_lines(report):
    """Kernels per NVTX range, the loop index folded: one block per loop of the report."""
    out = []
    for range_name, scenario in LOOP_RANGES.items():
        s = report["scenarios"].get(scenario, {})
        if "kernel_counts" not in s:
            continue
        out.append("%s <0..%d>: %d ranges with kernels, %d ran Inductor kernels" % (
            range_name, LOOP_COUNT - 1, s["ranges_seen"], s["ranges_with_inductor_kernels"]))
        for k, n in sorted(s["kernel_counts"].items(), key=lambda kv: (-kv[1], kv[0])):
            out.append("  %5d x %-12s %s" % (n, classify_kernel(k), abridge(k, 100)))
    return out


def policy_line(policy):
    if not policy:
        return None
    if not policy.get("trusted"):
        return "policy (MUST_SAVE aten.mm): %s" % policy.get("reason", "not measured")
    c = policy["backward_matmuls"]
    word = {True: "RECOMPUTED (policy ignored)", False: "saved", None: "not measured"}
    if policy.get("device") == "cpu":
        word[None] += " (on CPU only matmuls inside compiled code can be counted)"
    parts = []
    for name in ("with_context", "workaround"):
        n = c.get(name)
        verdict = word[policy["%s_matmul_recomputed_in_backward" % name]]
        parts.append("%s %s" % (name, verdict) if n is None else "%s %s -> %s" % (name, n, verdict))
    return ("policy (MUST_SAVE aten.mm), matmuls computed in one backward: %d where the forward "
            "matmul is saved; %s" % (policy["baseline"], "; ".join(parts)))


def verdict_line(report):
    return "VERDICT: %s (exit %d): %s" % (report["verdict"], report["exit_code"], report["reason"])


def render_text(report):
    out = []
    if report["env"]:
        out.append("environment: " + environment_line(report["env"]))
    out.append("evidence: " + report["source"])
    rows = scenario_rows(report)
    if rows:
        header = ("scenario", "compiled region ran", "eager pointwise ops", "kernels", "fwd/step")
        widths = [max(len(r[i]) for r in rows + [header]) for i in range(5)]
        for r in [header] + rows:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    out += loop_kernel_lines(report)
    line = policy_line(report["policy"])
    if line:
        out.append(line)
    out.append(verdict_line(report))
    if report["verdict"] == "reproduced" and not report["scenarios"]["with_context"].get(
            "compiled_region_ran"):
        out.append("hint: " + DYNAMO_HINT)
    return "\n".join(out)


def render_markdown(report, command):
    out = ["### torch.compile'd function inside selective activation checkpointing runs eagerly",
           "", "Repro bundle for pytorch/pytorch#161889. Command:", "", "```", command, "```", "",
           "**%s** (exit %d): %s" % (report["verdict"], report["exit_code"], report["reason"]), ""]
    rows = scenario_rows(report)
    if rows:
        out.append("| scenario | compiled region ran | eager pointwise ops | kernels | fwd/step |")
        out.append("|---|---|---|---|---|")
        out += ["| %s |" % " | ".join(c.replace("|", "\\|") for c in r) for r in rows]
        out.append("")
    line = policy_line(report["policy"])
    if line:
        out += [line, ""]
    out += ["<details><summary>Environment</summary>", "", "```"]
    out += ["%s: %s" % kv for kv in report["env"].items() if kv[1] is not None and kv[0] != "collect_env"]
    if report["env"].get("collect_env"):
        out += ["", report["env"]["collect_env"]]
    out += ["```", "", "</details>"]
    return "\n".join(out)


# --------------------------------------------------------------------------- command line
class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError("%s (see --help)" % message)


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0, got %r" % text)
    return value


def parse_args(argv):
    p = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: cuda when available, else cpu")
    p.add_argument("--json", metavar="PATH", help="also write the verdict and evidence as JSON")
    p.add_argument("--markdown", action="store_true",
                   help="print a report to paste into PyTorch's bug template")
    p.add_argument("--strict-policy", action="store_true",
                   help="also exit 1 when compiled code runs under SAC but the policy's MUST_SAVE "
                        "on aten.mm is ignored (torch 2.10 and later)")
    p.add_argument("--hunt-fix", action="store_true",
                   help="swap exits 0 and 1, for `git bisect start --term-old broken --term-new fixed`")
    p.add_argument("--timeout", type=positive_float, default=900.0, metavar="S",
                   help="seconds before a hung torch counts as cannot-test (default 900)")
    p.add_argument("--loops-only", action="store_true",
                   help="run only the report's two NVTX loops (for nsys/ncu); no verdict")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from-nsys", metavar="FILE",
                     help="judge from an nsys report (.nsys-rep, .sqlite, or nvtx_kern_sum CSV)")
    src.add_argument("--from-ncu", metavar="FILE",
                     help="judge from `ncu --nvtx --print-summary per-nvtx` output")
    p.add_argument("--_child", metavar="OUT", dest="child_out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def guarded(body, whose, interrupted="interrupted"):
    """Runs a command line's body; usage errors, Ctrl-C and our own bugs exit EXIT_ABORT with one
    line, so they abort a bisect instead of passing as a verdict."""
    try:
        return body()
    except UsageError as e:
        print("usage error: %s" % e, file=sys.stderr)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
    except Exception as e:
        print("internal error (a bug in %s, not a verdict): %s" % (whose, one_line(e)), file=sys.stderr)
    return EXIT_ABORT


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return guarded(lambda: run(argv), "this script")


def run(argv):
    args = parse_args(argv)
    if args.child_out:
        return child_main(args)
    if args.json:
        check_writable(args.json)
    if args.from_nsys or args.from_ncu:
        path = args.from_nsys or args.from_ncu
        rows = load_profile_rows(path, "ncu" if args.from_ncu else "nsys")
        report = report_from_rows(rows, args, "%s %s" % ("ncu" if args.from_ncu else "nsys", path))
    else:
        raw, log = run_child(args)
        if raw["status"] == "our_bug":
            raise RuntimeError("in the measured part: %s" % raw["reason"])
        if raw["status"] == "torch_error":
            raw = {"status": "cannot_test", "env": raw.get("env") or {}, "show_log": True,
                   "reason": "the torch under test raised %s" % raw["reason"]}
        if raw.get("show_log") and log.strip():
            sys.stderr.write("--- the torch under test printed (last lines):\n%s\n---\n" % log[-3000:])
        if args.loops_only:
            if raw["status"] != "ok":
                print("cannot_test: " + raw["reason"])
                return EXIT_CANNOT_TEST
            print("ran the report's two loops on %s (torch %s); judge them with --from-nsys "
                  "or --from-ncu" % (raw["env"]["device"], raw["env"]["torch"]))
            return 0
        if args.markdown and raw.get("env"):
            raw["env"]["collect_env"] = collect_env_text()
        report = build_report(raw, args, "torch.profiler, %s" % (raw.get("env") or {}).get("device", "?"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2, sort_keys=True)
    if args.markdown:
        print(render_markdown(report, "python " + " ".join(
            [os.path.basename(__file__)] + argv)))
    else:
        print(render_text(report))
    return report["exit_code"]


def check_writable(path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UsageError("--json %s: folder %s does not exist or is not writable" % (path, folder))


def collect_env_text():
    """PyTorch's bug template asks for `python -m torch.utils.collect_env`."""
    try:
        return subprocess.run([sys.executable, "-m", "torch.utils.collect_env"], capture_output=True,
                              text=True, timeout=120).stdout.strip()
    except Exception as e:
        return "collect_env failed: %s" % one_line(e)


if __name__ == "__main__":
    sys.exit(main())
