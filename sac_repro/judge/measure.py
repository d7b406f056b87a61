"""The measured part, in the child process: runs the script file as written (the report's code and
its loops), then each scenario on the script's own f a few calls under torch.profiler, one profile
per call, and writes what ran as JSON.

The parent (cli.py) judges that JSON; nothing here decides a verdict. A crash or hang here is
the torch under test's, and the parent reads it as "cannot test".
"""
import collections
import functools
import gc
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
import traceback
import types

import torch

from .changes import torch_changes
from ..exits import EXIT_OK, Interrupted, one_line, raised_by_this_bundle
from .render import PROGRESS
from .said import Said
from .verdict import (AFTER_SAC, CASE, classify, CONTROL, CPU_MATMUL_OPS, EAGER_SAC, NO_CHECKPOINT, NO_POLICY_CHECK,
                      POLICY_REPORT_ONLY, refused_to_run_eagerly, SCENARIOS, WORKAROUND, WRAPPED)

PROFILED_CALLS = 3  # each judged on its own: one compiled call must not hide two eager ones
TIMED_CALLS = 20
# Dynamo's words when it skips a frame: the record it logs at debug level (2.5-2.8 compute the
# reason only then), and each frame that the fullgraph error lists (2.12 and later).
DYNAMO_LOGGER = "torch._dynamo.convert_frame"
SKIP_RECORD = re.compile(r"skipping: (?P<frame>\S+) \(reason: (?P<reason>.*), file: (?P<file>.*)\)$", re.S)
FULLGRAPH_FRAME = re.compile(r"^\s*- (?P<frame>\S+) \((?P<file>.*):\d+\): (?P<reason>.*)$", re.M)


def progress(msg):
    print(PROGRESS + msg, file=sys.stderr, flush=True)


def describe_environment(device):
    env = {"python": platform.python_version(), "platform": platform.platform(),
           "torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", None),
           "cuda_runtime": torch.version.cuda, "triton": None, "gpu": None, "driver": None,
           "device": device, "nvtx": "torch.cuda.nvtx" if torch.version.cuda else "off (CPU-only torch)"}
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
            pass
    return env


def fresh_code(fn):
    """A copy of fn with its own code object: Dynamo caches per code object, and on affected torch
    a skip under SAC sticks to it for good."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


class DynamoSkips(logging.Handler):
    """Dynamo's own reasons for skipping a frame of the report's script, where each came: the
    evidence a maintainer looks at first. Evidence only: the verdict comes from what ran."""

    def __init__(self, script, said=None):
        super().__init__(logging.DEBUG)
        self.said = said  # told where the run is too: what the process says there is placed so
        self.script, self.where, self.seen = os.path.realpath(script), None, []

    @property
    def where(self):
        return self._where

    @where.setter
    def where(self, where):
        self._where = where
        if self.said is not None:
            self.said.where = where or "outside the measured calls"

    def install(self):
        logger = logging.getLogger(DYNAMO_LOGGER)
        logger.addHandler(self)
        if logger.getEffectiveLevel() > logging.DEBUG:
            logger.setLevel(logging.DEBUG)
            # The debug records this turns on would reach torch's own log handler; unless
            # TORCH_LOGS asked for them, nobody wants them printed.
            logger.propagate = bool(os.environ.get("TORCH_LOGS"))
        return self

    def emit(self, record):
        try:
            m = SKIP_RECORD.match(record.getMessage())
        except Exception:  # a record that cannot be formatted is not one of these
            return
        if m:
            self.add(m, "log")

    def from_error(self, e):
        """The frames that fullgraph's "found no compiled frames" lists, with their reasons."""
        for m in FULLGRAPH_FRAME.finditer(str(e)):
            self.add(m, "fullgraph error")

    def add(self, m, source):
        if os.path.realpath(m["file"].strip()) != self.script:
            return  # torch's own frames, skipped as skipfiles: not the report's code
        entry = {"where": self.where, "frame": m["frame"], "reason": m["reason"].strip(), "source": source}
        if entry not in self.seen:
            self.seen.append(entry)


# ----------------------------------------------------------------------------- the report's code
SCRIPT_MODULE = "__sac_repro__"  # the script's name here: not __main__, so its own answer stays unasked
# What the scenarios read from the script's namespace: the script must keep defining them.
REPORT_NAMES = ("device", "x", "y", "f", "f_compiled", "policy_fn", "context_fn", "create_selective_checkpoint_contexts",
                "checkpoint_fn_with_context", "checkpoint_fn_without_context")


def run_script(path, result, skips):
    """Runs the script file as written, under a name other than __main__, so that its answer stays
    unasked: the report's code and its loops. Into a namespace of our own, so that a loop that
    raises (2.12+: fullgraph's "found no compiled frames") still leaves the set-up to measure.
    Returns the script's namespace."""
    # A module in sys.modules: Dynamo, inlining the script's functions into a frame of ours, imports
    # their globals' module by its __name__.
    module = sys.modules[SCRIPT_MODULE] = types.ModuleType(SCRIPT_MODULE)
    module.__file__ = path
    namespace = module.__dict__
    progress("compiling f and running the report's two loops of 50 calls")
    skips.where = "the report's loops"
    argv, sys.argv = sys.argv, [path]  # the script refuses options: ours are not its
    try:
        exec(compile(open(path).read(), path, "exec"), namespace)
    except ImportError as e:
        if "CheckpointPolicy" in str(e) or "create_selective_checkpoint_contexts" in str(e):
            raise NoSacApi(e)
        raise
    except Exception as e:
        if "f_compiled" not in namespace or not refused_to_run_eagerly(e):
            raise
        skips.from_error(e)
        result["loops_error"] = first_sentence(e)
        progress("a loop raised Dynamo's fullgraph error: " + first_sentence(e))
    finally:
        sys.argv, sys.excepthook = argv, sys.__excepthook__  # the script's answer to an error is not ours
        skips.where = None
    missing = [name for name in REPORT_NAMES if name not in namespace]
    if missing:  # an edit of the script lost what the scenarios read: ours, not torch's
        raise KeyError("the script no longer defines %s (sac_repro/judge/measure.py's REPORT_NAMES)" % ", ".join(missing))
    return namespace


def scenario_calls(ns):
    """One call per scenario of verdict.SCENARIOS, on the script's own f, inputs and checkpoints."""
    import torch._inductor.config
    f, x, y = ns["f"], ns["x"], ns["y"]
    with_context, without_context = ns["checkpoint_fn_with_context"], ns["checkpoint_fn_without_context"]

    def sac_of_f(x, y):
        return with_context(f, x, y)

    # Dynamo's cache, and on affected torch its sticky skip, live on f's code object: the control
    # gets a code object that was never called under SAC.
    f_control = torch.compile(fresh_code(f), fullgraph=True, dynamic=True)
    f_sac_compiled = torch.compile(sac_of_f, fullgraph=True)  # compile(sac(f)), as the README spells it
    calls = {
        CONTROL: lambda: without_context(f_control, x, y),
        CASE: lambda: with_context(ns["f_compiled"], x, y),
        WORKAROUND: lambda: f_sac_compiled(x, y),
        AFTER_SAC: lambda: without_context(ns["f_compiled"], x, y),
        EAGER_SAC: lambda: sac_of_f(x, y),
        NO_CHECKPOINT: lambda: f_control(x, y),
    }
    # For --policy-report only (2.10 and later): the option that shows SAC the compiled region as one op.
    if hasattr(torch._inductor.config, "wrap_inductor_compiled_regions"):
        f_wrapped = torch.compile(fresh_code(f), fullgraph=True, dynamic=True,
                                  options={"wrap_inductor_compiled_regions": True})
        calls[WRAPPED] = lambda: with_context(f_wrapped, x, y)
    return calls


class NoSacApi(Exception):
    """torch < 2.5: the report's import of the public SAC API fails."""


def record_policy_calls(namespace):
    """Swaps the report's context_fn for one whose policy is the report's policy_fn, recorded:
    which ops SAC asked it about, and what it answered. checkpoint_fn_with_context reads the
    global context_fn at each call, so every later SAC call goes through the recording."""
    seen = collections.Counter()

    def recording_policy(ctx, op, *args, **kwargs):
        decision = namespace["policy_fn"](ctx, op, *args, **kwargs)
        if not getattr(ctx, "is_recompute", False):
            seen[(str(op), getattr(decision, "name", str(decision)))] += 1
        return decision

    namespace["context_fn"] = functools.partial(
        namespace["create_selective_checkpoint_contexts"], recording_policy)
    return seen


# ----------------------------------------------------------------------------- the evidence
def activities(device):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def profile_call(step, device, timeline=False, on_refusal=None):
    """{"names": [name, count] of every op, label and kernel that ran during one call of step()},
    and with timeline, each of them as [name, start us, duration us, "cpu" | "gpu"] (for --plot).
    A call that raised fullgraph's "found no compiled frames" (2.12+: Dynamo skipped f, which ran
    eagerly first) keeps what ran before the error, and "refused": the error's first sentence;
    on_refusal is given the error. Any other error is raised."""
    refused = None
    with torch.profiler.profile(activities=activities(device)) as prof:
        try:
            step()
        except Exception as e:
            if not refused_to_run_eagerly(e):
                raise
            refused = e
        synchronize(device)
    events = prof.events()
    call = {"names": sorted([n, c] for n, c in collections.Counter(e.name for e in events).items())}
    if refused is not None:
        call["refused"] = first_sentence(refused)
        if on_refusal:
            on_refusal(refused)
    if timeline and events:
        t0 = min(e.time_range.start for e in events)
        call["timeline"] = [[e.name, round(e.time_range.start - t0, 3), round(e.time_range.elapsed_us(), 3),
                             "cpu" if str(e.device_type).endswith("CPU") else "gpu"] for e in events]
    return call


def time_forward_us(step, device):
    times = []
    for _ in range(TIMED_CALLS):
        synchronize(device)
        t0 = time.perf_counter()
        step()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[len(times) // 2]


def backward_matmuls(forward, device):
    """Matmuls computed in one backward of forward().

    The forward runs outside the profile, so a forward matmul counted here was recomputed. On
    CUDA a matmul served from SAC's cache launches no kernel, so gemm kernels count exactly. On the
    CPU every matmul is an op: one that a dispatch mode intercepts wraps the one that computes, and
    one that computes nothing (served from SAC's cache, or cut short by checkpoint's early stop) has
    only aten::detach under it (2.13 CPU, 1500x1500 matmuls: under 1 ms for such an op, 50 ms or more
    for one that computed), as the --policy-report snippet counts them."""
    forward().float().sum().backward()  # backward graphs compile lazily: keep that out of the profile
    loss = forward().float().sum()
    with torch.profiler.profile(activities=activities(device)) as prof:
        loss.backward()
        synchronize(device)
    events = prof.events()
    if device == "cuda":
        return sum(1 for e in events
                   if not str(e.device_type).endswith("CPU") and classify(e.name).family == "cublas")
    computed = 0
    for e in events:
        if e.name not in CPU_MATMUL_OPS:
            continue
        children = {c.name for c in e.cpu_children}
        if children & (set(CPU_MATMUL_OPS) | {"PythonDispatchMode"}):
            continue  # a dispatch mode intercepted it; the computing op, if any, is nested inside
        if children and children <= {"aten::detach"}:
            continue  # it computed nothing
        computed += 1
    return computed


def measure_scenario(name, step, device, policy_seen, timeline, skips):
    """One scenario: a first call (compiles), then each profiled call, then timing."""
    entry = {"calls": []}
    policy_seen.clear()
    skips.where = "%s, first call" % name
    try:
        step()
    except Exception as e:
        if not refused_to_run_eagerly(e):
            raise
        skips.from_error(e)
    for i in range(PROFILED_CALLS):
        skips.where = "%s, profiled call %d" % (name, i + 1)
        entry["calls"].append(profile_call(step, device, timeline, skips.from_error))
    skips.where = None
    if not any("refused" in c for c in entry["calls"]):
        entry["forward_us"] = time_forward_us(step, device)
    entry["policy_saw"] = sorted([op, decision, n] for (op, decision), n in policy_seen.items())
    return entry


# The ablation PyTorch's bug template asks for: the case under each backend, from Dynamo alone to
# Inductor, and Inductor with the option that shows SAC the compiled region as one op (2.10+).
ABLATION_BACKENDS = ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")
WRAP_OPTION = "wrap_inductor_compiled_regions"


def ablation(namespace, device, policy_seen):
    """Per backend: did Dynamo run f's frame compiled under SAC, which ops was the policy asked
    about, and how many matmuls did one backward compute (None where this device cannot tell);
    where the call raised fullgraph's error, the eager ops of f that ran before it."""
    import torch._inductor.config
    f, x, y, with_context = namespace["f"], namespace["x"], namespace["y"], namespace["checkpoint_fn_with_context"]
    configs = [(b, None) for b in ABLATION_BACKENDS]
    if hasattr(torch._inductor.config, WRAP_OPTION):
        configs.append(("inductor", {WRAP_OPTION: True}))
    rows, kept = [], []
    for backend, options in configs:
        row = {"backend": backend + (" + " + WRAP_OPTION if options else "")}
        fn = torch.compile(fresh_code(f), backend=backend, fullgraph=True, dynamic=True,
                           **({"options": options} if options else {}))
        # Each kept to the end, as the case keeps its f_compiled: an in-process change may tell a
        # compiled function made and dropped in turn from one made anew on every call, and treat
        # it otherwise (the candidate fix declined the fifth such, so the inductor row ran without it)
        kept.append(fn)
        policy_seen.clear()
        try:
            try:
                with_context(fn, x, y)  # compiles
            except Exception as e:
                if not refused_to_run_eagerly(e):
                    raise
            call = profile_call(lambda: with_context(fn, x, y), device)
            names = {n for n, _ in call["names"]}
            row["frame_compiled"] = any(n.startswith("Torch-Compiled Region") for n in names)
            row["policy_saw"] = sorted(op for op, _ in policy_seen)
            if "refused" in call:
                row.update(refused=True, eager_ops=sorted(n for n in names if classify(n).cls == "eager"))
            else:
                row["backward_matmuls"] = backward_matmuls(lambda: with_context(fn, x, y), device)
        except Exception as e:
            row.update(error=one_line(e), frame_compiled=False, policy_saw=sorted(op for op, _ in policy_seen))
        rows.append(row)
    return rows


def inductor_extern_mm():
    """The line of this run's Inductor output code that calls the extern matmul, as Inductor wrote
    it: what SAC's mode meets at run time instead of f's aten.mm.default."""
    try:
        from torch._inductor.codecache import PyCodeCache
    except Exception:
        return None
    modules = list(getattr(PyCodeCache, "modules", [])) + list(getattr(PyCodeCache, "cache", {}).values())
    for module in modules:
        try:
            with open(module.__file__) as fh:
                text = fh.read()
        except (AttributeError, OSError, TypeError):
            continue
        for line in text.splitlines():
            if "extern_kernels.mm(" in line:
                return line.strip()
    return None


def first_sentence(e):
    """'RuntimeError: torch.compile with fullgraph=True found no compiled frames.': the error's
    first sentence, whole; the frames it lists go to DynamoSkips, each on its own."""
    text = " ".join(str(e).split())
    end = text.find(". ")
    return "%s: %s" % (type(e).__name__, text if end < 0 else text[:end + 1])


def measure(path, device, loops_only, policy_report, timeline, result, with_ablation=False, said=None):
    skips = DynamoSkips(path, said).install()
    result["dynamo_skips"] = skips.seen  # filled as the report's code and the scenarios run
    try:
        namespace = run_script(path, result, skips)
    except NoSacApi as e:
        result.update(status="cannot_test", reason="torch %s lacks the public SAC API the report "
                      "imports (CheckpointPolicy, create_selective_checkpoint_contexts ship from "
                      "2.5.0): %s" % (torch.__version__, re.sub(r" \(\S*\)$", "", one_line(e.args[0]))))
        return
    result["env"]["device"] = namespace["device"]
    if loops_only:
        result["status"] = "ok"
        return
    # The scenarios are a few short calls each: the collector's passes over torch's many objects
    # would take a quarter of their time, and they free nothing that matters here.
    gc.disable()
    policy_seen = record_policy_calls(namespace)
    scenarios = result["scenarios"] = {}
    calls = scenario_calls(namespace)
    chosen = {name: calls[name] for name in SCENARIOS
              if name in calls and (policy_report or name not in POLICY_REPORT_ONLY)}
    for name, step in chosen.items():
        progress("scenario %s: %d profiled calls" % (name, PROFILED_CALLS))
        try:
            scenarios[name] = measure_scenario(name, step, device, policy_seen, timeline, skips)
        except Exception as e:
            if name in (CONTROL, CASE):
                raise
            scenarios[name] = {"calls": [], "error": one_line(e)}  # a side scenario must not hide the verdict
        scenarios[name]["shows"] = SCENARIOS[name]
    progress("policy check: one profiled backward per scenario")
    for name, step in chosen.items():
        entry = scenarios[name]
        if name in NO_POLICY_CHECK or "error" in entry or any("refused" in c for c in entry["calls"]):
            continue
        skips.where = "%s, backward" % name
        try:
            entry["backward_matmuls"] = backward_matmuls(step, device)
        except Exception as e:  # e.g. 2.9: backward through checkpoint(compiled f) raises in Dynamo
            entry["backward_error"] = one_line(e)
    result["inductor_extern_mm"] = inductor_extern_mm()
    if with_ablation:
        progress("ablation: the case under each backend")
        skips.where = "the ablation"
        result["ablation"] = ablation(namespace, device, policy_seen)
        skips.where = None
    result["status"] = "ok"


def child_main(path, out_path, device_arg, loops_only, policy_report, timeline, with_ablation=False, said=None):
    """Writes the result as JSON, whatever happens short of a crash. The environment is described
    first, so that an error later still reports which torch it was. `said`: what the process has
    printed and warned (said.py), installed before torch was imported, or from here on."""
    said = said or Said().install()
    result = {"status": None, "env": {"torch": torch.__version__, "device": device_arg}}
    try:  # a torch may raise as early as its CUDA check (a broken driver, a busy GPU)
        device = "cuda" if device_arg != "cpu" and torch.cuda.is_available() else "cpu"
        result["env"] = describe_environment(device)
        if device_arg == "cuda" and device != "cuda":
            result["env"]["device"] = "cuda (not available)"
            result.update(status="cannot_test", reason="--device cuda was asked for, but this torch "
                          "sees no CUDA device (torch.cuda.is_available() is False); use --device cpu or auto")
        else:
            measure(path, device, loops_only, policy_report, timeline, result, with_ablation, said)
    except Interrupted:
        raise  # a signal to the child: no result, which the parent reads as cannot_test
    except BaseException as e:
        result.update(status="our_bug" if raised_by_this_bundle(e) else "torch_error",
                      reason=one_line(e), traceback=traceback.format_exc())
    try:  # after the run, so that what the report's code imported (SAC, Dynamo) is there to be read
        result["env"]["changes"] = torch_changes(torch)
    except Exception as e:  # never "no changes" where they could not be read
        result.update(status="our_bug", reason="reading what changed torch in-process: " + one_line(e),
                      traceback=traceback.format_exc())
    result["said"] = said.finish()
    with open(out_path, "w") as fh:
        json.dump(result, fh)
    return EXIT_OK
