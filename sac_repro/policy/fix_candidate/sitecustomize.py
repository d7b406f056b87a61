"""A candidate PyTorch change for what the 2.10 fix of pytorch/pytorch#161889 leaves open: under
sac(compile(f)) a per-op SAC policy never sees f's ops (aten.mm.default), so backward recomputes
what the policy says to save. Loaded in any Python started with this folder on PYTHONPATH, as
sac_repro/revert_fix is; for torch 2.10 to 2.15.

    PYTHONPATH=sac_repro/policy/fix_candidate python3 -m sac_repro
    SAC_FIX_CANDIDATE=warn PYTHONPATH=sac_repro/policy/fix_candidate python3 -m sac_repro bench

SAC_FIX_CANDIDATE picks the mode:

- fix (the default): `checkpoint(compiled_f, *args, use_reentrant=False, context_fn=...)` runs as
  compile(sac(f)): the checkpoint moves inside the compiled function, with the same torch.compile
  options and the user's own context_fn, which Dynamo calls on every trace. One region per
  context_fn object and compiled function (or module forward, shared by the modules that run it):
  the identity the user gave, no guess.
  Where it cannot be right it declines, keeps today's behaviour and says so once, naming why: a
  context_fn that is not a function or functools.partial, a new context_fn on every call, a
  checkpoint nested in another or inside f, f changing a tensor in place, checkpoint options
  compile(sac(f)) does not take, a compile(sac(f)) that does not compile (a graph break raises).
- warn: changes no result; the warning alone (below).

Each part stands for one file of PyTorch (docs/fix.md has the design, its risks and the numbers):

1. torch/utils/checkpoint.py: `checkpoint` itself (fix mode); and the warning: once, where a
   policy is asked, inside Inductor's compiled code, about an out= overload (aten.mm.out), the call
   Inductor's code makes for the compiled function's own op, which a per-op policy does not name.
2. torch/_inductor/output_code.py: CompiledFxGraph.__call__ marks that Inductor's code runs, so
   the warning is never given for aot_eager (the policy sees aten ops there), eager SAC, a plain
   checkpoint or compile(sac(f)).

Nothing here imports torch: the change is made once `import torch` has run, all of it or nothing.
A torch that lacks a hook gets one line on stderr, and nothing of it is changed.
"""
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types



def load_regions(name="sac_fix_regions"):
    """Part 1's choice of region, from the file beside this one, found by path: this file may
    itself be loaded by path, its folder not on sys.path. None where this file was copied alone."""
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
        if not os.path.isfile(path):
            return None
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


REGIONS = load_regions()
_said, bind, compiled_parts, decline, nested_codes, once, say, region_for = (getattr(REGIONS, name, None) for name in (
    "_said", "bind", "compiled_parts", "decline", "nested_codes", "once", "say", "region_for"))

ENV = "SAC_FIX_CANDIDATE"
MODES = ("fix", "warn")
MODE = os.environ.get(ENV, "fix")
RERUN_ENV = (ENV,)
WHAT = "candidate fix for the SAC policy under sac(compile(f))"
# Read by the bundle's report (the environment line, markdown, JSON, plot): what this process runs
CHANGE_LABEL = "%s (not loaded: torch was not imported)" % WHAT
# "module:qualname" of each torch function replaced, once the change is made (docs/fix.md lists them)
REPLACED = []
ORIGINAL = {}  # the same names -> the functions they were

# per thread: .inductor, depth of Inductor's compiled code running; .running, the region this call
# runs; .veto, why its trace stopped; .trace_depth, checkpoints its trace runs; .quiet, calls left as
# they are, where the warning is not given
_tls = threading.local()


# --------------------------------------------------------------- 1. torch/utils/checkpoint.py
class Veto(Exception):
    """Raised inside the region's trace where compile(sac(f)) would not give eager SAC's answer."""


def veto(why):
    _tls.veto = why
    raise Veto(why)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, **kwargs):
    """torch.utils.checkpoint.checkpoint: a torch.compile'd function under a SAC context_fn runs as
    compile(sac(f)); everything else as before."""
    if context_fn is None:
        context_fn = CKPT.noop_context_fn
    running = getattr(_tls, "running", None)
    if running is not None and TORCH._guards.TracingContext.try_get() is not None:
        return traced_checkpoint(function, args, use_reentrant, context_fn, kwargs)
    if running is not None and function is running[0]:
        # Dynamo ran the region without compiling it, graph breaks raising there: its stance says
        # eager (force_eager) or the region reached recompile_limit. So would f: eager SAC it is
        return ORIGINAL["checkpoint"](function, *args, use_reentrant=use_reentrant, context_fn=context_fn, **kwargs)
    found = None
    if use_reentrant is False and context_fn is not CKPT.noop_context_fn:
        found = region_for(function, context_fn, kwargs)
    if found is None:
        # a compiled function left as it is: declined (said), or not the candidate's to change
        quiet = compiled_parts(function) is not None
        _tls.quiet = getattr(_tls, "quiet", 0) + quiet
        try:
            return ORIGINAL["checkpoint"](function, *args, use_reentrant=use_reentrant, context_fn=context_fn, **kwargs)
        finally:
            _tls.quiet -= quiet
    region, f = found
    this = region._sac_fix
    before, _tls.running, _tls.veto = running, (f, function), None
    try:
        with ERROR_ON_GRAPH_BREAK(True):  # a graph break raises in the region, never runs f eagerly
            out = region(f, *args, **kwargs)
    except Exception as e:
        if not compile_error(e):
            raise
        _tls.running = before
        if recompile_limit_hit(e):
            # where f itself would run eagerly too, past its own limit: eager SAC, no decline
            return ORIGINAL["checkpoint"](f, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
        why = _tls.veto or "compile(sac(f)) did not compile (%s)" % (
            (str(e).strip().splitlines() or [type(e).__name__])[0][:200])
        # today's path, with this call: where it raises too, the error is the call's own (a wrong
        # shape, say), and it is raised as today raises it, the candidate still on
        _tls.quiet = getattr(_tls, "quiet", 0) + 1
        try:
            out = ORIGINAL["checkpoint"](function, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
        except Exception:
            # the error is the call's own; where this region failed to compile before too, it
            # would be traced again on every call: stop that
            this["failures"] = this.get("failures", 0) + 1
            if this["failures"] >= 2:
                this["declined"] = True
                decline("compile(sac(f)) did not compile twice, and today's path raised too, the "
                        "call's own error")
            raise
        finally:
            _tls.quiet -= 1
        this["declined"] = True  # this region only: another context_fn may compile
        decline(why)
        return out
    finally:
        _tls.running = before
    return out


def traced_checkpoint(function, args, use_reentrant, context_fn, kwargs):
    """A checkpoint that the region's trace runs (tag_activation_checkpoint's): the region's own,
    or one inside f, which compile(sac(f)) nests and eager SAC runs flat."""
    depth = getattr(_tls, "trace_depth", 0)
    if depth:
        veto("f calls checkpoint itself, and compile(sac(f)) nests that checkpoint in the outer one, "
             "which eager SAC does not")
    _tls.trace_depth = depth + 1
    try:
        return ORIGINAL["checkpoint"](function, *args, use_reentrant=use_reentrant, context_fn=context_fn, **kwargs)
    finally:
        _tls.trace_depth = depth


def compile_error(e):
    """An error of Dynamo's or Inductor's compile, as opposed to one the function itself raised."""
    return isinstance(e, Veto) or type(e).__module__.startswith(("torch._dynamo", "torch._inductor"))


def recompile_limit_hit(e):
    first = str(e).split("\n", 1)[0]
    return type(e).__name__ == "FailOnRecompileLimitHit" or "recompile_limit" in first or "recompile limit" in first


def caching_dispatch(self, func, types_, args=(), kwargs=None):
    """_CachingTorchDispatchMode.__torch_dispatch__: the warning, where the policy is asked, inside
    Inductor's compiled code, about an out= overload."""
    if (getattr(_tls, "running", None) is not None and getattr(func, "_schema", None) is not None
            and func._schema.is_mutable and func not in CKPT.SAC_IGNORED_OPS
            and TORCH._guards.TracingContext.try_get() is not None):
        veto("f changes a tensor in place (%s): eager SAC, recomputing f in backward, may change it "
             "again, compile(sac(f)) changes it once, so the candidate cannot promise eager SAC's "
             "answer" % func)
    if getattr(_tls, "inductor", 0) and not getattr(_tls, "quiet", 0) and is_out_overload(func) and WARNING not in _said:
        _said.add(WARNING)
        once("torch.utils.checkpoint: a selective activation checkpointing policy was asked about %s, "
             "the out= call that Inductor's compiled code makes for the compiled function's own op "
             "(the policy is not asked about the op itself under checkpoint(torch.compile(f), ..., "
             "context_fn=...)). To apply a per-op policy to f's ops, checkpoint inside the compiled "
             "function, compile(sac(f)): torch.compile(lambda *a: checkpoint(f, *a, use_reentrant=False, "
             "context_fn=context_fn)); or set torch._inductor.config.wrap_inductor_compiled_regions = True "
             "to have the policy asked about the compiled region as one op (pytorch/pytorch#161889)%s" % (
                 func, FIX_MODE_NOTE if MODE == "fix" else ""))
    return ORIGINAL["caching_dispatch"](self, func, types_, args, kwargs)


# in fix mode the warning marks a call the candidate left alone: say so, as a decline does
FIX_MODE_NOTE = (". This call runs as it does without the candidate fix: the candidate applies only where "
                 "checkpoint is given the torch.compile'd function or module itself (not a function that "
                 "calls it), and only where it does not decline, which it says")


WARNING = "the warning"  # once, whichever out= call is asked first


def is_out_overload(func):
    name = getattr(func, "_overloadname", "")
    return name == "out" or name.endswith("_out")


# -------------------------------------------------------- 2. torch/_inductor/output_code.py
def inductor_call(self, inputs):
    """CompiledFxGraph.__call__: Inductor's compiled code runs."""
    _tls.inductor = getattr(_tls, "inductor", 0) + 1
    try:
        return ORIGINAL["inductor_call"](self, inputs)
    finally:
        _tls.inductor -= 1


# --------------------------------------------------------------------------- making the change
def targets(torch):
    """(key, owner, attribute, replacement) for the mode, or the one hook this torch lacks."""
    import torch._dynamo.eval_frame as eval_frame
    import torch._inductor.output_code as output_code
    import torch.utils.checkpoint as ckpt
    wanted = [("caching_dispatch", ckpt._CachingTorchDispatchMode, "__torch_dispatch__", caching_dispatch),
              ("inductor_call", getattr(output_code, "CompiledFxGraph", None), "__call__", inductor_call)]
    if MODE == "fix":
        wanted.append(("checkpoint", ckpt, "checkpoint", functools.wraps(ckpt.checkpoint)(checkpoint)))
    for key, owner, attr, _ in wanted:
        if owner is None or not callable(vars(owner).get(attr)):
            return None, "%s.%s is missing" % (getattr(owner, "__qualname__", getattr(owner, "__name__", "?")), attr)
    import torch._dynamo.decorators as decorators
    if not hasattr(decorators, "error_on_graph_break"):
        return None, "torch._dynamo.error_on_graph_break is missing"
    for needed in ("_TorchDynamoContext", "DisableContext", "OptimizedModule"):
        if not hasattr(eval_frame, needed):
            return None, "torch._dynamo.eval_frame.%s is missing" % needed
    if not hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks"):
        return None, "torch._C._autograd._top_saved_tensors_default_hooks is missing"
    if not (nested_codes(ckpt._checkpoint_hook, "pack_hook") and nested_codes(ckpt._recomputation_hook, "pack_hook")):
        return None, "the pack hooks of torch.utils.checkpoint's _checkpoint_hook and _recomputation_hook are missing"
    if not ckpt._CachingTorchDispatchMode.ignore_compile_internals():
        answer = vars(ckpt._CachingTorchDispatchMode).get("ignore_compile_internals")
        code = getattr(getattr(answer, "__func__", answer), "__code__", None)
        if code is not None and os.path.realpath(code.co_filename) != os.path.realpath(ckpt.__file__):
            return None, ("the 2.10 fix is reverted in-process (by %s): f runs eagerly under SAC, and there is "
                          "no compiled region for the policy to see" % code.co_filename)
        return None, ("SAC's dispatch modes do not opt in with ignore_compile_internals() on this torch (before "
                      "2.10): f runs eagerly under SAC, and there is no compiled region for the policy to see")
    return [(key, owner, attr, replacement) for key, owner, attr, replacement in wanted], None


def install(torch):
    """Makes the whole change on an imported torch, or none of it (one line says why)."""
    global CHANGE_LABEL, TORCH, CKPT, ERROR_ON_GRAPH_BREAK
    if REPLACED:
        return True
    try:
        found, missing = targets(torch)
    except Exception as e:  # a torch too different to even look at
        found, missing = None, "%s: %s" % (type(e).__name__, e)
    if missing:
        CHANGE_LABEL = "%s (not loaded: %s)" % (WHAT, missing)
        say("not loaded on torch %s: %s; nothing changed" % (getattr(torch, "__version__", "?"), missing))
        return False
    import torch.utils.checkpoint as ckpt
    TORCH, CKPT = torch, ckpt
    ERROR_ON_GRAPH_BREAK = torch._dynamo.error_on_graph_break
    bind(torch)
    for key, owner, attr, replacement in found:
        ORIGINAL[key] = vars(owner)[attr]
        setattr(owner, attr, replacement)
        REPLACED.append("%s:%s" % (owner.__name__, attr) if isinstance(owner, types.ModuleType)
                        else "%s:%s.%s" % (owner.__module__, owner.__qualname__, attr))
    if "checkpoint" in ORIGINAL:
        # modules imported already that bound checkpoint by name (checkpoint_wrapper): Dynamo knows
        # checkpoint by the module's attribute, and would try to trace a stale copy
        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", {})
            for name, value in list(names.items()):
                if value is ORIGINAL["checkpoint"] and module is not ckpt:
                    setattr(module, name, ckpt.checkpoint)
    ckpt._sac_repro_fix_candidate = MODE
    CHANGE_LABEL = "%s loaded in-process (mode: %s)" % (WHAT, MODE)
    return True


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if FINDER in sys.meta_path:
            sys.meta_path.remove(FINDER)
        install(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


FINDER = _Finder()
TORCH = CKPT = ERROR_ON_GRAPH_BREAK = None
if REGIONS is None:
    CHANGE_LABEL = "%s (not loaded: sac_fix_regions.py is not beside its sitecustomize.py)" % WHAT
    print("sac fix candidate: sac_fix_regions.py is not beside %s: copy the whole folder, not sitecustomize.py "
          "alone; nothing changed" % os.path.abspath(__file__), file=sys.stderr, flush=True)
elif MODE not in MODES:
    CHANGE_LABEL = "%s (not loaded: %s=%r is not one of %s)" % (WHAT, ENV, MODE, ", ".join(MODES))
    say("%s=%r is not one of %s; nothing changed" % (ENV, MODE, ", ".join(MODES)))
elif "torch" in sys.modules:
    install(sys.modules["torch"])
else:
    sys.meta_path.insert(0, FINDER)
