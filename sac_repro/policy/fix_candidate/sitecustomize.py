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
import os
import sys
import threading
import types
import warnings
import weakref

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
# regions of one f's code whose context_fn (or compiled function) was dropped after use, before the
# candidate decides that a new one comes on every call and declines new ones for that code; and the
# regions of one code in use at once (a context_fn for each of many blocks is one each)
DROPPED_PER_CODE = 4
LIVE_PER_CODE = 256

# per thread: .inductor, depth of Inductor's compiled code running; .running, the region this call
# runs; .veto, why its trace stopped; .trace_depth, checkpoints its trace runs; .quiet, calls left as
# they are, where the warning is not given
_tls = threading.local()
_said = set()  # each decline reason and the warning, once per process
_per_code = {}  # f's code object -> {"live": regions in use, "dropped": regions whose owner was dropped}
# context_fn -> {compiled function -> its compiled region}; a region holds its context_fn weakly,
# so an entry goes when the user drops the context_fn, and nothing is stored on the user's object
_regions = weakref.WeakKeyDictionary()


def say(msg):
    print("sac fix candidate: " + msg, file=sys.stderr, flush=True)


def once(message):
    if message not in _said:
        _said.add(message)
        warnings.warn(message, UserWarning, stacklevel=4)


def decline(why):
    """Today's behaviour, said once per reason."""
    once("torch.utils.checkpoint: checkpoint(torch.compile(f), ..., context_fn=...) runs as it does "
         "without the candidate fix: %s. To have the policy applied to f's ops as compile(sac(f)) "
         "applies it, checkpoint inside the compiled function: torch.compile(lambda *a: checkpoint(f, "
         "*a, use_reentrant=False, context_fn=context_fn))." % why)
    return None


# --------------------------------------------------------------- 1. torch/utils/checkpoint.py
def compiled_parts(fn):
    """(f, the torch.compile context that compiled it) for a torch.compile'd function or module,
    None for anything else. Upstream the compile wrapper would carry its context as an attribute;
    here it is read from the wrapper's closure."""
    wrapper = fn
    if isinstance(fn, TORCH.nn.Module) and not isinstance(fn, EVAL_FRAME.OptimizedModule):
        wrapper = getattr(fn, "_compiled_call_impl", None)  # module.compile()
        if wrapper is None:
            return None
    if isinstance(wrapper, EVAL_FRAME.OptimizedModule):
        return wrapper._orig_mod, wrapper.dynamo_ctx
    orig = getattr(wrapper, "_torchdynamo_orig_callable", None)
    if orig is None or getattr(wrapper, "_torchdynamo_disable", False) or not isinstance(wrapper, types.FunctionType):
        return None
    for cell in wrapper.__closure__ or ():
        try:
            ctx = cell.cell_contents
        except ValueError:
            continue
        if isinstance(ctx, EVAL_FRAME._TorchDynamoContext) and not isinstance(ctx, EVAL_FRAME.DisableContext):
            return orig, ctx
    return None


def region_template(f, /, *args, **kwargs):  # f positional only: the user's own may be named f
    # the module's attribute: Dynamo knows checkpoint by it and traces it as compile(sac(f))
    return CKPT.checkpoint(f, *args, use_reentrant=False, context_fn=sac_context_fn, **kwargs)  # noqa: F821


def weakly(context_fn):
    """The user's context_fn, called on every trace, held weakly: the compiled graph keeps what it
    is given as its context_fn, and Dynamo keeps compiled code, so the policy would outlive its step."""
    ref = weakref.ref(context_fn)

    def sac_context_fn():
        held = ref()
        if held is None:
            raise RuntimeError("the context_fn this compiled region was made for is gone")
        return held()
    return sac_context_fn


def sac_region(context_fn):
    """compile(sac(f)) for one context_fn, f given on each call, as a function of its own code
    object, so that Dynamo keeps its graphs for this context_fn apart from any other's. Compiled
    with a torch.compile context, it is the region that runs instead of checkpoint(compiled f)."""
    # globals of its own too: Dynamo installs each compiled graph into the frame's globals, where
    # this module's would keep every region, and each region's context_fn, for good
    scope = {"CKPT": CKPT, "__builtins__": __builtins__, "__name__": __name__, "sac_context_fn": weakly(context_fn)}
    t = region_template
    return types.FunctionType(t.__code__.replace(), scope, "sac_region")


def module_of(f):
    """The module a compiled f is: torch.compile(module)'s, or module.compile()'s bound _call_impl."""
    if isinstance(f, TORCH.nn.Module):
        return f
    owner = getattr(f, "__self__", None)
    if isinstance(owner, TORCH.nn.Module) and getattr(f, "__func__", None) is TORCH.nn.Module._call_impl:
        return owner
    return None


def wraps_compiled_regions(ctx):
    """Whether torch.compile was given wrap_inductor_compiled_regions, the per-compile form of the flag."""
    backend = EVAL_FRAME.innermost_backend(ctx.callback) if hasattr(EVAL_FRAME, "innermost_backend") else None
    return bool((getattr(backend, "config", None) or {}).get("wrap_inductor_compiled_regions"))


def in_a_checkpoint():
    """Whether this call is inside another checkpoint: its SAC mode or its saved-tensor hooks."""
    C = TORCH._C
    for i in range(C._len_torch_dispatch_stack()):
        if isinstance(C._get_dispatch_stack_at(i), SAC_MODES):
            return True
    hooks = C._autograd._top_saved_tensors_default_hooks(True)
    return hooks is not None and is_checkpoint_hook(hooks[0])


def is_checkpoint_hook(pack):
    if getattr(pack, "_checkpoint_internal", False):  # marked from 2.15
        return True
    while hasattr(pack, "__wrapped__"):  # the recompute hook is under torch._dynamo.disable
        pack = pack.__wrapped__
    return getattr(pack, "__code__", None) in CHECKPOINT_PACK_CODES


def region_for(function, context_fn, kwargs):
    """(the compiled compile(sac(f)) to run instead, f), or None for today's behaviour."""
    found = compiled_parts(function)
    if found is None or TORCH._guards.TracingContext.try_get() is not None:
        # not a compiled function (eager SAC), or inside a trace on this thread (a flag such as
        # torch.compiler.is_compiling() is the whole process's: another thread may be compiling)
        return None
    import torch._inductor.config as inductor_config
    if getattr(inductor_config, "wrap_inductor_compiled_regions", False) or wraps_compiled_regions(found[1]):
        return None  # the existing opt-in: SAC sees the compiled region as one op, as asked
    if in_a_checkpoint():
        return decline("this checkpoint is nested in another checkpoint, whose recompute would run "
                       "the compiled region again")
    if not isinstance(context_fn, (types.FunctionType, functools.partial)):
        return decline("its context_fn is a %s, and compile(sac(f)) takes a function or a "
                       "functools.partial" % type(context_fn).__name__)
    options = sorted(k for k in ("determinism_check", "debug", "early_stop") if k in kwargs)
    if kwargs.get("preserve_rng_state", True) is False:
        options.append("preserve_rng_state=False")
    if options:
        return decline("checkpoint was given %s" % ", ".join(options))
    if isinstance(function, TORCH.nn.Module):
        module = found[0] if isinstance(found[0], TORCH.nn.Module) else function
        if module is not function and hooks_of(function):
            # the region calls the module torch.compile wrapped, not the wrapper that holds these
            return decline("the compiled module's wrapper has hooks, which the region would not run")
    module = module_of(found[0])
    if module is not None and (hooks_of(module) or global_hooks()):
        # on every call: the region's graph runs a module's hooks as traced, and Dynamo does not
        # guard on hooks, so another module of the class, or a hook added later, would run stale ones
        return decline("the compiled module has hooks, or global module hooks are set, which the region's "
                       "graph would run as first traced")
    try:
        entry = _regions.setdefault(context_fn, {"regions": weakref.WeakKeyDictionary(), "by_code": {}})
    except TypeError:  # no weak reference to it: it could only be kept alive
        return decline("the context_fn cannot be referred to weakly")
    # counted by f's code, as Dynamo caches f: a torch.compile(f), or an f, made anew on every
    # step would otherwise make a region, and its graphs, on every step
    state = _per_code.setdefault(code_of(found[0]), {"live": 0, "dropped": 0})
    try:
        region = entry["regions"].get(function)
    except TypeError:
        return decline("the compiled function cannot be referred to weakly")
    if region is not None:
        # a declined one said so when it was
        return None if region._sac_fix["declined"] else (region, found[0])
    # the modules that share a forward share one region's code for each form (module or
    # module.compile()'s bound _call_impl), f given on each call, as they share f's compiled code
    # today: Dynamo keeps one graph for all (guarding on the module's type, not on which one), where
    # a region for each module compiled each anew and counted each against the cap
    key = (code_of(found[0]), isinstance(found[0], TORCH.nn.Module))
    template = entry["by_code"].get(key) if module is not None else None
    stance = getattr(getattr(EVAL_FRAME, "_stance", None), "stance", "default")
    if stance == "force_eager":
        return None  # f runs eagerly today too: eager SAC
    if stance != "default" and template is None:
        # a stance that forbids compiling or runs eagerly on a recompile: a region not made yet
        # would be a new compile (one made before runs under it, as f's compiled code would)
        return decline("torch.compiler.set_stance(%r) is in effect, and compile(sac(f)) for this "
                       "context_fn has not been compiled before it" % stance)
    if template is None:
        new = module is None or not any(k[0] == key[0] for k in entry["by_code"])
        name = getattr(code_of(found[0]), "co_name", "?")
        # this one only: the regions made already keep running
        if new and state["dropped"] >= DROPPED_PER_CODE:
            return decline("f's code (%s) has had %d compiled regions whose context_fn or compiled function was "
                           "dropped after use (functions or modules that share one code count together, as Dynamo "
                           "caches them): one made anew for every call would compile on every call" % (
                               name, state["dropped"]))
        if new and state["live"] >= LIVE_PER_CODE:
            return decline("f's code (%s) has %d compiled regions in use, one for each context_fn (and compiled "
                           "function), the most the candidate keeps" % (name, state["live"]))
        template = sac_region(context_fn)
        if new:
            # a region of a function is its compile wrapper's too: made anew each step, it is dropped
            track(state, context_fn, *((function,) if module is None else ()))
        if module is not None:
            entry["by_code"][key] = template
    # the torch.compile context of this wrapper (its backend, options, fullgraph); the region
    # holds no f, so a module's entry goes with the module
    entry["regions"][function] = region = found[1](template)
    region._sac_fix = {"declined": False}
    return region, found[0]


def track(state, *owners):
    """Counts a region as in use until the first of its owners is dropped, then as dropped."""
    done = []

    def dropped():
        if not done:
            done.append(True)
            state["live"] -= 1
            state["dropped"] += 1
    state["live"] += 1
    for owner in owners:
        weakref.finalize(owner, dropped)


def code_of(f):
    """What Dynamo caches f's compiled code by: its code object (a module's forward's; for a
    partial or a callable object, which torch.compile wraps in a function shared by all of them,
    the code of what it wraps)."""
    while getattr(getattr(f, "__code__", None), "co_filename", None) == WRAP_INLINE_FILE and hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    while isinstance(f, functools.partial):
        f = f.func
    if module_of(f) is not None:
        f = type(module_of(f)).forward
    elif not isinstance(f, (types.FunctionType, types.MethodType)) and hasattr(type(f), "__call__"):
        f = type(f).__call__
    f = getattr(f, "__func__", f)
    return getattr(f, "__code__", f)


def global_hooks():
    m = TORCH.nn.modules.module
    return any(getattr(m, name, None) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"))


def hooks_of(module):
    """Hooks that a call runs (a state_dict hook runs in none)."""
    return any(getattr(module, name, None) for name in (
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"))


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
def nested_codes(cls, name):
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    return {c for c in (init.co_consts if init else ()) if isinstance(c, types.CodeType) and c.co_name == name}


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
    global CHANGE_LABEL, TORCH, CKPT, EVAL_FRAME, SAC_MODES, CHECKPOINT_PACK_CODES, ERROR_ON_GRAPH_BREAK, WRAP_INLINE_FILE
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
    import torch._dynamo.eval_frame as eval_frame
    import torch.utils.checkpoint as ckpt
    TORCH, CKPT, EVAL_FRAME = torch, ckpt, eval_frame
    wrap_inline = getattr(getattr(eval_frame, "external_utils", None), "wrap_inline", None)
    WRAP_INLINE_FILE = getattr(getattr(wrap_inline, "__code__", None), "co_filename", None)
    ERROR_ON_GRAPH_BREAK = torch._dynamo.error_on_graph_break
    SAC_MODES = (ckpt._CachingTorchDispatchMode, ckpt._CachedTorchDispatchMode)
    CHECKPOINT_PACK_CODES = nested_codes(ckpt._checkpoint_hook, "pack_hook") | \
        nested_codes(ckpt._recomputation_hook, "pack_hook")
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
TORCH = CKPT = EVAL_FRAME = ERROR_ON_GRAPH_BREAK = WRAP_INLINE_FILE = None
SAC_MODES = ()
CHECKPOINT_PACK_CODES = set()
if MODE not in MODES:
    CHANGE_LABEL = "%s (not loaded: %s=%r is not one of %s)" % (WHAT, ENV, MODE, ", ".join(MODES))
    say("%s=%r is not one of %s; nothing changed" % (ENV, MODE, ", ".join(MODES)))
elif "torch" in sys.modules:
    install(sys.modules["torch"])
else:
    sys.meta_path.insert(0, FINDER)
