# mypy: allow-untyped-defs
"""Selective activation checkpointing (SAC) of a torch.compile'd function.

Under ``checkpoint(torch.compile(f), *args, use_reentrant=False,
context_fn=context_fn)``, sac(compile(f)), f's compiled code runs under SAC's dispatch
modes, which are off while Dynamo compiles f (they opt in with
``ignore_compile_internals``). The policy is then asked about the calls that Inductor's
code makes inside ``CompiledFxGraph.__call__``, such as ``aten.mm.out``, and never about
f's own ops, such as ``aten.mm.default``: backward recomputes what the policy says to
save (pytorch/pytorch#161889).

- :func:`on_policy_query`, called by SAC's caching mode, warns once where that happens.
- :func:`reset`, called by ``torch._dynamo.reset()``, forgets what was said.
"""

import threading
import warnings


class _InductorCodeRunning(threading.local):
    depth = 0


# Inductor-compiled code running on this thread (CompiledFxGraph.__call__ counts it)
inductor_code_running = _InductorCodeRunning()
# each warning, once until torch._dynamo.reset() (as Dynamo's own warn_once)
_said: set[str] = set()
_POLICY_SEES_COMPILED_CALLS = "policy sees compiled calls"


def reset() -> None:
    """Called by torch._dynamo.reset(): what was said goes with Dynamo's caches."""
    _said.clear()


def _warn_once(key, message) -> None:
    if key not in _said:
        _said.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def on_policy_query(func) -> None:
    """Called by SAC's caching mode for each op whose policy it asks."""
    if not inductor_code_running.depth:
        return
    overload = getattr(func, "_overloadname", "")
    if overload != "out" and not overload.endswith("_out"):
        # fallback ops keep their own overload, and the policy is honoured for them
        return
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
        "torch._inductor.config.wrap_inductor_compiled_regions = True.",
    )
