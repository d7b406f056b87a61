"""Which compiled region a checkpoint call runs under the candidate fix (sitecustomize.py, part 1),
or why it declines: the identity the user gave (the context_fn object, the compiled function or
module forward), the declines that do not need a trace, and the counts that tell a context_fn made
anew on every call. Nothing here imports torch: bind() is given it once the change is made."""
import functools
import sys
import types
import warnings
import weakref

# regions of one f's code whose context_fn (or compiled function) was dropped after use, before the
# candidate decides that a new one comes on every call and declines new ones for that code; and the
# regions of one code in use at once (a context_fn for each of many blocks is one each)
DROPPED_PER_CODE = 4
LIVE_PER_CODE = 256
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


def nested_codes(cls, name):
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    return {c for c in (init.co_consts if init else ()) if isinstance(c, types.CodeType) and c.co_name == name}


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
        inner = found[0] if isinstance(found[0], TORCH.nn.Module) else function
        if inner is not function and hooks_of(function):
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
    code = code_of(found[0])
    state = _per_code.setdefault(code, {"live": 0, "dropped": 0})
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
    key = (code, isinstance(found[0], TORCH.nn.Module))
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
        new = module is None or not any(k[0] == code for k in entry["by_code"])
        name = getattr(code, "co_name", "?")
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


def bind(torch):
    """The torch this process imported, once the change is made."""
    global TORCH, CKPT, EVAL_FRAME, SAC_MODES, CHECKPOINT_PACK_CODES, WRAP_INLINE_FILE
    import torch._dynamo.eval_frame as eval_frame
    import torch.utils.checkpoint as ckpt
    TORCH, CKPT, EVAL_FRAME = torch, ckpt, eval_frame
    SAC_MODES = (ckpt._CachingTorchDispatchMode, ckpt._CachedTorchDispatchMode)
    CHECKPOINT_PACK_CODES = nested_codes(ckpt._checkpoint_hook, "pack_hook") | \
        nested_codes(ckpt._recomputation_hook, "pack_hook")
    wrap_inline = getattr(getattr(eval_frame, "external_utils", None), "wrap_inline", None)
    WRAP_INLINE_FILE = getattr(getattr(wrap_inline, "__code__", None), "co_filename", None)


TORCH = CKPT = EVAL_FRAME = WRAP_INLINE_FILE = None
SAC_MODES = ()
CHECKPOINT_PACK_CODES = set()
