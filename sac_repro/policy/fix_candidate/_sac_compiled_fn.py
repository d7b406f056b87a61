# mypy: allow-untyped-defs
"""Selective activation checkpointing (SAC) of a torch.compile'd function.

Under ``checkpoint(torch.compile(f), ..., context_fn=...)``, sac(compile(f)), the policy
is asked about the calls Inductor's code makes (``aten.mm.out``), never about f's ops
(``aten.mm.default``): backward recomputes what it says to save (#161889).
:func:`on_policy_query` warns where that happens. With
``torch.utils.checkpoint._sac_policy_applies_to_compiled_fn`` on, :func:`checkpoint`
runs the call as compile(sac(f)), under f's torch.compile options, so that the
partitioner saves what the policy says; or, where that would not be eager SAC's answer,
as with the switch off, and says why. :func:`reset` goes with ``torch._dynamo.reset()``.
"""

import functools
import threading
import types
import warnings
import weakref

import torch


class _InductorCodeRunning(threading.local):
    depth = 0


# Inductor-compiled code running on this thread (CompiledFxGraph.__call__ counts it)
inductor_code_running = _InductorCodeRunning()
# each warning, once until torch._dynamo.reset() (as Dynamo's own warn_once)
_said: set[str] = set()
_POLICY_SEES_COMPILED_CALLS = "policy sees compiled calls"


def _warn_once(key, message) -> None:
    if key not in _said:
        _said.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def on_policy_query(func) -> None:
    """Called by SAC's caching mode for each op whose policy it asks."""
    if (
        _region.running is not None
        and getattr(func, "_schema", None) is not None
        and func._schema.is_mutable
        and torch._guards.TracingContext.try_get() is not None
    ):
        _veto(
            f"f changes a tensor in place ({func}): eager SAC, recomputing f in "
            "backward, may change it again, and compile(sac(f)) changes it once"
        )
    if not inductor_code_running.depth or _region.quiet:
        return
    overload = getattr(func, "_overloadname", "")
    if overload != "out" and not overload.endswith("_out"):
        # fallback ops keep their own overload, and the policy is honoured for them
        return
    note = ""
    if torch.utils.checkpoint._sac_policy_applies_to_compiled_fn:
        note = (
            " This call runs as it does with torch.utils.checkpoint."
            "_sac_policy_applies_to_compiled_fn off: the switch applies only where "
            "checkpoint is given the torch.compile'd function or module itself, not a "
            "function that calls it."
        )
    _warn_once(
        _POLICY_SEES_COMPILED_CALLS,
        "torch.utils.checkpoint: a selective activation checkpointing policy was "
        f"asked about {func}, the out= call that Inductor's compiled code makes for "
        "the compiled function's own op: under checkpoint(torch.compile(f), ..., "
        "context_fn=...) the policy is not asked about f's ops "
        "(pytorch/pytorch#161889). To apply a per-op policy to them, checkpoint "
        "inside the compiled function, compile(sac(f)): torch.compile(lambda *args: "
        "checkpoint(f, *args, use_reentrant=False, context_fn=context_fn)). To have "
        "the policy asked about the compiled region as one op, set "
        "torch._inductor.config.wrap_inductor_compiled_regions = True." + note,
    )


# ------------------ checkpoint(torch.compile(f), ...) as compile(sac(f)), the switch on
# Regions of one f's code whose context_fn or compiled function was dropped after use:
# past this many, a context_fn (or torch.compile(f)) made anew on every call would
# compile on every call, so new ones decline. Regions of one code in use at once: one
# per block's context_fn, say.
DROPPED_PER_CODE = 4
LIVE_PER_CODE = 256
# checkpoint's options that compile(sac(f)) takes only at their defaults
_DEFAULTS = {"determinism_check": "default", "debug": False, "early_stop": True}


class _RegionState(threading.local):
    # (f, the compiled function given to checkpoint) whose region this thread runs
    running = None
    veto = None  # why the region's trace stopped
    # checkpoints that the region's trace runs: more than one is a checkpoint inside f
    trace_depth = 0
    quiet = 0  # calls left as they are, where the warning above is not given
    # the next checkpoint call runs as with the switch off (the call made from here)
    bypass = False


_region = _RegionState()
# f's code -> {"live": regions in use, "dropped": regions whose owner was dropped}
_per_code: dict = {}
# context_fn -> its regions, held weakly: they go when the user drops the context_fn
_regions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# compiled function given to checkpoint -> the reasons its calls were declined, said
_declines_said: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def reset() -> None:
    """Called by torch._dynamo.reset(): regions, counts and what was said go with
    Dynamo's caches, as in a fresh process."""
    _said.clear()
    _per_code.clear()
    _regions.clear()
    _declines_said.clear()


class _Veto(Exception):
    """Raised inside the region's trace where compile(sac(f)) would not be eager SAC."""


def _veto(why):
    _region.veto = why
    raise _Veto(why)


def _name_of(f) -> str:
    f = type(_module_of(f)) if _module_of(f) is not None else f
    while isinstance(f, functools.partial):
        f = f.func
    return getattr(f, "__qualname__", type(f).__qualname__)


def _decline(function, f, why) -> None:
    """Says why this call runs as with the switch off, once for each compiled function
    and reason: once for context_fns made anew, again for another torch.compile(f)."""
    try:
        said = _declines_said.setdefault(function, set())
    except TypeError:  # no weak reference to it
        said = _said
    if why in said:
        return
    said.add(why)
    warnings.warn(
        "torch.utils.checkpoint: checkpoint(torch.compile(f), ..., context_fn=...) of "
        f"f = {_name_of(f)} runs as it does with "
        "torch.utils.checkpoint._sac_policy_applies_to_compiled_fn off, its policy "
        f"not applied to f's ops: {why}. To apply the policy to f's ops, checkpoint "
        "inside the compiled function, compile(sac(f)): torch.compile(lambda *args: "
        "checkpoint(f, *args, use_reentrant=False, context_fn=context_fn)).",
        UserWarning,
        stacklevel=4,
    )


def applies(use_reentrant, context_fn) -> bool:
    """Whether checkpoint hands this call to :func:`checkpoint` (the switch is on)."""
    if _region.bypass:
        _region.bypass = False
        return False
    noop = torch.utils.checkpoint.noop_context_fn
    return use_reentrant is False and context_fn is not noop


def _as_today(checkpoint_fn, function, args, options, kwargs):
    _region.bypass = True
    try:
        return checkpoint_fn(function, *args, **options, **kwargs)
    finally:
        _region.bypass = False


def checkpoint(checkpoint_fn, function, /, *args, context_fn, **kwargs):
    """``checkpoint_fn(function, *args, use_reentrant=False, context_fn=context_fn,
    **kwargs)``, where ``function`` is a torch.compile'd function or module, as
    compile(sac(f)); any other call as with the switch off."""
    options = {name: kwargs.pop(name) for name in _DEFAULTS}
    options.update(use_reentrant=False, context_fn=context_fn)
    running = _region.running
    if running is not None and torch._guards.TracingContext.try_get() is not None:
        # a checkpoint that the region's trace runs: its own, or one inside f, which
        # compile(sac(f)) nests in it and eager SAC runs flat
        if _region.trace_depth:
            _veto(
                "f calls checkpoint itself, and compile(sac(f)) nests that checkpoint "
                "in the outer one, which eager SAC does not"
            )
        _region.trace_depth += 1
        try:
            return _as_today(checkpoint_fn, function, args, options, kwargs)
        finally:
            _region.trace_depth -= 1
    if running is not None and function is running[0]:
        # Dynamo ran the region without compiling it (a force_eager stance, or past
        # recompile_limit), as it would run f: eager SAC
        return _as_today(checkpoint_fn, function, args, options, kwargs)
    found = _region_for(function, context_fn, options, kwargs)
    if found is None:
        quiet = _compiled_parts(function) is not None
        _region.quiet += quiet
        try:
            return _as_today(checkpoint_fn, function, args, options, kwargs)
        finally:
            _region.quiet -= quiet
    region, f = found
    _region.running, _region.veto = (f, function), None
    try:
        # a graph break raises in the region, and never runs f eagerly
        with torch._dynamo.error_on_graph_break(True):
            return region(f, *args, **kwargs)
    except Exception as e:
        if not _is_compile_error(e):
            raise
        _region.running = running
        if _is_recompile_limit(e):
            # where f itself would run eagerly too, past its own limit: eager SAC
            return _as_today(checkpoint_fn, f, args, options, kwargs)
        why = _region.veto or f"compile(sac(f)) did not compile ({_cause(e)})"
        _region.quiet += 1
        try:
            out = _as_today(checkpoint_fn, function, args, options, kwargs)
        except Exception:
            # the call's own error (a wrong shape, say), raised as with the switch off;
            # the second time, stop tracing the region on every call
            region._sac_state["failures"] += 1
            if region._sac_state["failures"] >= 2:
                region._sac_state["declined"] = True
                why = "compile(sac(f)) did not compile twice, and the call raised too"
                _decline(function, f, why)
            raise
        finally:
            _region.quiet -= 1
        region._sac_state["declined"] = True  # this region only
        _decline(function, f, why)
        return out
    finally:
        _region.running = running


def _is_compile_error(e) -> bool:
    """An error of Dynamo's or Inductor's compile, not one that f raised."""
    return isinstance(e, _Veto) or type(e).__module__.startswith(
        ("torch._dynamo", "torch._inductor")
    )


def _cause(e) -> str:
    """The error that stopped the compile, as "Type: message": a backend's failure holds
    it as inner_exception, its own first line naming only the backend."""
    while getattr(e, "inner_exception", None) is not None:
        e = e.inner_exception
    first = (str(e).strip().splitlines() or [""])[0][:200]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _is_recompile_limit(e) -> bool:
    first = str(e).split("\n", 1)[0]
    said = "recompile_limit" in first or "recompile limit" in first
    return type(e).__name__ == "FailOnRecompileLimitHit" or said


def _compiled_parts(fn):
    """(f, the torch.compile context that compiled it) for a torch.compile'd function or
    module, or a module after module.compile(); None for anything else."""
    from torch._dynamo import eval_frame

    wrapper = fn
    if isinstance(fn, torch.nn.Module) and not isinstance(
        fn, eval_frame.OptimizedModule
    ):
        wrapper = getattr(fn, "_compiled_call_impl", None)  # module.compile()
    if isinstance(wrapper, eval_frame.OptimizedModule):
        return wrapper._orig_mod, wrapper.dynamo_ctx
    ctx = getattr(wrapper, "_torchdynamo_context", None)
    if ctx is None or isinstance(ctx, eval_frame.DisableContext):
        return None
    return wrapper._torchdynamo_orig_callable, ctx


def _region_template(f, /, *args, **kwargs):  # f positional-only: f's own may be "f"
    return torch.utils.checkpoint.checkpoint(
        f,
        *args,
        use_reentrant=False,
        context_fn=sac_context_fn,  # type: ignore[name-defined]  # noqa: F821
        **kwargs,
    )


_REGION_FILE = "<torch.utils.checkpoint: compile(sac(f))>"


def _new_region(context_fn):
    """compile(sac(f)) for one context_fn, f given on each call, as a function with a
    code object and globals of its own: Dynamo keeps its graphs apart from any other
    context_fn's. Its code is named apart from torch's files, which Dynamo skips."""
    ref = weakref.ref(context_fn)

    def sac_context_fn():
        # the compiled graph holds what it is given as its context_fn: held weakly, the
        # policy does not outlive the user's context_fn
        held = ref()
        if held is None:
            raise RuntimeError("the context_fn of this compiled region is gone")
        return held()

    sac_context_fn.__code__ = sac_context_fn.__code__.replace(co_filename=_REGION_FILE)
    scope = {"torch": torch, "__builtins__": __builtins__, "__name__": __name__}
    scope["sac_context_fn"] = sac_context_fn
    code = _region_template.__code__.replace(co_filename=_REGION_FILE)
    return types.FunctionType(code, scope, "sac_region")


def _module_of(f):
    """The module a compiled f is: torch.compile(module)'s, or module.compile()'s
    bound _call_impl."""
    if isinstance(f, torch.nn.Module):
        return f
    owner = getattr(f, "__self__", None)
    bound = getattr(f, "__func__", None) is torch.nn.Module._call_impl
    return owner if bound and isinstance(owner, torch.nn.Module) else None


def _in_a_checkpoint() -> bool:
    """Whether this call is inside another checkpoint: its SAC mode or its hooks."""
    ckpt = torch.utils.checkpoint
    modes = (ckpt._CachingTorchDispatchMode, ckpt._CachedTorchDispatchMode)
    for i in range(torch._C._len_torch_dispatch_stack()):
        if isinstance(torch._C._get_dispatch_stack_at(i), modes):
            return True
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)
    if hooks is None:
        return False
    pack = hooks[0]
    if getattr(pack, "_checkpoint_internal", False):
        return True
    while hasattr(pack, "__wrapped__"):  # the recompute hook is under dynamo's disable
        pack = pack.__wrapped__
    return getattr(pack, "__code__", None) in _checkpoint_pack_codes()


@functools.cache
def _checkpoint_pack_codes():
    ckpt = torch.utils.checkpoint
    inits = (ckpt._checkpoint_hook.__init__, ckpt._recomputation_hook.__init__)
    consts = [c for init in inits for c in init.__code__.co_consts]
    return frozenset(
        c for c in consts if isinstance(c, types.CodeType) and c.co_name == "pack_hook"
    )


_HOOKS = ("forward_hooks", "forward_pre_hooks", "backward_hooks", "backward_pre_hooks")


def _hooks_of(module) -> bool:
    """Hooks that a call runs (a state_dict hook runs in none)."""
    return any(getattr(module, "_" + name, None) for name in _HOOKS)


def _global_hooks() -> bool:
    m = torch.nn.modules.module
    return any(getattr(m, "_global_" + name, None) for name in _HOOKS)


def _code_of(f):
    """What Dynamo caches f's compiled code by: its code object (a module's forward's;
    for a partial or a callable object, the code of what it wraps)."""
    from torch._dynamo import external_utils

    wrap_inline = external_utils.wrap_inline.__code__.co_filename
    while getattr(
        getattr(f, "__code__", None), "co_filename", None
    ) == wrap_inline and hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    while isinstance(f, functools.partial):
        f = f.func
    if _module_of(f) is not None:
        f = type(_module_of(f)).forward
    elif not isinstance(f, (types.FunctionType, types.MethodType)):
        f = type(f).__call__ if callable(f) else f
    f = getattr(f, "__func__", f)
    return getattr(f, "__code__", f)


def _region_for(function, context_fn, options, kwargs):
    """(the compiled compile(sac(f)) to run, f), or None to run as with it off."""
    import torch._inductor.config as inductor_config
    from torch._dynamo import eval_frame

    found = _compiled_parts(function)
    if found is None or torch._guards.TracingContext.try_get() is not None:
        # not a compiled function (eager SAC), or inside a trace on this thread
        return None
    f, ctx = found
    decline = functools.partial(_decline, function, f)
    backend = eval_frame.innermost_backend(ctx.callback)
    backend_config = getattr(backend, "config", None) or {}
    if inductor_config.wrap_inductor_compiled_regions or backend_config.get(
        "wrap_inductor_compiled_regions"
    ):
        return None  # the opt-in for a policy on the compiled region as one op
    if _in_a_checkpoint():
        return decline(
            "this checkpoint is nested in another checkpoint, whose recompute would "
            "run the compiled region again",
        )
    if not isinstance(context_fn, (types.FunctionType, functools.partial)):
        return decline(
            f"its context_fn is a {type(context_fn).__name__}, and compile(sac(f)) "
            "takes a function or a functools.partial",
        )
    given = [f"{k}={options[k]!r}" for k, v in _DEFAULTS.items() if options[k] != v]
    if kwargs.get("preserve_rng_state", True) is False:
        given.append("preserve_rng_state=False")
    if given:
        return decline(f"checkpoint was given {', '.join(given)}")
    if isinstance(f, torch.nn.Module) and f is not function and _hooks_of(function):
        # the region calls the module torch.compile wrapped, not this wrapper
        return decline(
            "the compiled module's wrapper has hooks, which the region would not run",
        )
    module = _module_of(f)
    if module is not None and (_hooks_of(module) or _global_hooks()):
        # on every call: Dynamo does not guard on hooks, so the region's graph, shared
        # by the module's class, would run the hooks as first traced
        return decline(
            "the compiled module has hooks, or global module hooks are set, which the "
            "region's graph would run as first traced",
        )
    try:
        entry = _regions.setdefault(
            context_fn, {"regions": weakref.WeakKeyDictionary(), "by_code": {}}
        )
        region = entry["regions"].get(function)
    except TypeError:  # no weak reference to it: it could only be kept alive
        return decline(
            "its context_fn or compiled function cannot be referred to weakly",
        )
    if region is not None:
        return None if region._sac_state["declined"] else (region, f)
    # Modules that share a forward share a region's code for each form (the module, or
    # module.compile()'s _call_impl), f given on each call, as they share f's compiled
    # code: Dynamo keeps one graph for all, guarding on the module's type.
    code = _code_of(f)
    state = _per_code.setdefault(code, {"live": 0, "dropped": 0})
    key = (code, isinstance(f, torch.nn.Module))
    template = entry["by_code"].get(key) if module is not None else None
    stance = eval_frame._stance.stance
    if stance == "force_eager":
        return None  # f runs eagerly too: eager SAC
    if stance != "default" and template is None:
        # a region not compiled yet would be a new compile, which the stance forbids
        # or runs eagerly; one compiled before runs under it, as f's code would
        return decline(
            f"torch.compiler.set_stance({stance!r}) is in effect, and compile(sac(f)) "
            "for this context_fn has not been compiled before it",
        )
    if template is None:
        new = module is None or not any(k[0] == code for k in entry["by_code"])
        if new and state["dropped"] >= DROPPED_PER_CODE:
            return decline(
                f"f's code ({code.co_name}) has had {state['dropped']} compiled "
                "regions whose context_fn or compiled function was dropped after use: "
                "one made anew for every call would compile on every call; new ones "
                "decline until torch._dynamo.reset()",
            )
        if new and state["live"] >= LIVE_PER_CODE:
            return decline(
                f"f's code ({code.co_name}) has {state['live']} compiled regions in "
                "use, one for each context_fn and compiled function, the most kept",
            )
        template = _new_region(context_fn)
        if new:
            # a function's region is its compile wrapper's too: made anew each call, it
            # is dropped each call
            _track(state, context_fn, *((function,) if module is None else ()))
        if module is not None:
            entry["by_code"][key] = template
    region = ctx(template)  # the torch.compile options that compiled f
    region._sac_state = {"declined": False, "failures": 0}
    entry["regions"][function] = region
    return region, f


def _track(state, *owners) -> None:
    """Counts a region as in use until the first of its owners is dropped."""
    done = []

    def dropped():
        if not done:
            done.append(True)
            state["live"] -= 1
            state["dropped"] += 1

    state["live"] += 1
    for owner in owners:
        weakref.finalize(owner, dropped)
