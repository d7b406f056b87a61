"""The candidate fix's hard cases (issue 39), measured in a child of their own under the torch and
the PYTHONPATH it is given: each case's matmuls computed in one backward (torch.profiler, CPU),
per step where it has steps, and the warnings it raised. tests/test_fix_candidate.py compares them
with eager SAC's, and with today's (no candidate) where the candidate declined and said so.

    python tests/fix_cases.py OUT.json [--reported-only] [--switch] [CASE ...]

--switch turns on torch.utils.checkpoint._sac_policy_applies_to_compiled_fn, on a torch patched
with sac_repro/upstream's series (a torch without it: exit 1, nothing measured).

Every case is run three ways, by `how`: "eager SAC" (f itself under SAC), "sac(compile(f))" (the
report's pattern) and "compile(sac(f))" (the reference where it compiles).
"""
import collections
import functools
import gc
import json
import sys
import warnings
import weakref

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

from fix_probe import computed

MM = torch.ops.aten.mm.default
HOWS = ("eager SAC", "sac(compile(f))", "compile(sac(f))")
WARNING_WORDS = ("checkpoint(torch.compile(f)", "out= call")


def three_mm(x, w1, w2, w3):
    return torch.relu(torch.relu(x @ w1) @ w2) @ w3


def call(how, fn, context_fn, backend="inductor"):
    """The step function for one way of combining fn and SAC."""
    if how == "eager SAC":
        return lambda *a: checkpoint(fn, *a, use_reentrant=False, context_fn=context_fn)
    if how == "sac(compile(f))":
        compiled = torch.compile(fn, backend=backend)
        return lambda *a: checkpoint(compiled, *a, use_reentrant=False, context_fn=context_fn)
    return torch.compile(lambda *a: checkpoint(fn, *a, use_reentrant=False, context_fn=context_fn), backend=backend)


def inputs(n=3, size=16):
    torch.manual_seed(0)
    return [torch.randn(size, size, requires_grad=True) for _ in range(n + 1)]


def backward_mm(step, args):
    """Matmuls computed in one backward of step(*args), its forward outside the profile."""
    loss = step(*args).sum()
    with torch.profiler.profile() as prof:
        loss.backward()
    return computed(prof)


def counting_context_fn():
    """torchtitan's policy (its _get_custom_policy): a fresh counter per context_fn() call, one
    count for forward and one for recompute, saving every matmul but every second one."""
    meta = collections.defaultdict(int)

    def policy(ctx, op, *args, **kwargs):
        key = "%s_mm_count" % ("recompute" if ctx.is_recompute else "forward")
        if op is MM:
            meta[key] += 1
        save = op is MM and meta[key] % 2 == 1
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def sin_chain(x, *ws):
    """Every matmul's output is needed in backward (sin's gradient reads its input), so which of
    them the policy saves shows in the count; after a relu the last one's would not be."""
    for w in ws:
        x = torch.sin(x @ w)
    return x


def case_counting(how):
    """An odd number of matmuls, 3 then 5: a count that runs on from one trace into the next saves
    the even ones instead (the old candidate's 8 and 13, against eager SAC's 7 and 12)."""
    out = []
    for n in (3, 5):
        step = call(how, sin_chain, counting_context_fn)
        args = inputs(n)
        backward_mm(step, args)  # compile
        out.append(backward_mm(step, args))
    return out


SAVED = [MM]


def dict_policy(table):
    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if table.get(op) else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy)


def kwonly_policy(save):
    def policy(ctx, op, *args, _save=save, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in _save else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy)


def global_policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVED else CheckpointPolicy.PREFER_RECOMPUTE


def case_look_alikes(how):
    """Pairs of policies that differ only in a closure's dict, a keyword-only default or a global
    list: the first saves the matmuls, the second nothing, one compiled f for both; then the very
    first policy again, which past the candidate's cap of 4 compiles must still get its graph."""
    out = []
    fn = three_mm
    compiled = torch.compile(fn)
    pairs = ((dict_policy({MM: True}), dict_policy({})), (kwonly_policy((MM,)), kwonly_policy(())),
             ("global", "global"))
    for cf in [cf for pair in pairs for cf in pair] + [pairs[0][0]]:
        if cf == "global":
            SAVED[:] = [MM] if not out or len(out) % 2 == 0 else []
            cf = functools.partial(create_selective_checkpoint_contexts, global_policy)
        if how == "sac(compile(f))":
            step = lambda *a, cf=cf: checkpoint(compiled, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
        else:
            step = call(how, fn, cf)
        args = inputs()
        backward_mm(step, args)
        out.append(backward_mm(step, args))
    SAVED[:] = [MM]
    return out


class CallablePolicy:
    def __call__(self, ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op is MM else CheckpointPolicy.PREFER_RECOMPUTE


def case_fresh_each_step(how):
    """A fresh callable policy in a fresh context_fn on every step, for 12 steps; then the same
    compiled f outside SAC must still run compiled."""
    compiled = torch.compile(three_mm)
    out, alive = [], []
    for _ in range(12):
        policy = CallablePolicy()
        alive.append(weakref.ref(policy))
        cf = functools.partial(create_selective_checkpoint_contexts, policy)
        if how == "sac(compile(f))":
            step = lambda *a: checkpoint(compiled, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
        else:
            step = call(how, three_mm, cf)
        out.append(backward_mm(step, inputs()))
        del policy, cf, step
    gc.collect()
    outside = compiled(*inputs())
    return {"per_step": out, "alive": sum(r() is not None for r in alive),
            "outside_compiled": type(outside.grad_fn).__name__ == "CompiledFunctionBackward"}


def own_modes_context_fn(cached_policy=True):
    """A context_fn that builds SAC's modes itself, as some libraries do; with cached_policy=False
    the recompute mode gets None for its policy, as create_selective_checkpoint_contexts gives it
    where that mode ignores it (2.13)."""
    from torch.utils.checkpoint import _CachedTorchDispatchMode, _CachingTorchDispatchMode
    storage = collections.defaultdict(dict)  # as create_selective_checkpoint_contexts makes it

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op is MM else CheckpointPolicy.PREFER_RECOMPUTE
    try:
        return (_CachingTorchDispatchMode(policy, storage),
                _CachedTorchDispatchMode(policy if cached_policy else None, storage, False))
    except TypeError:
        return _CachingTorchDispatchMode(policy, storage), _CachedTorchDispatchMode(policy, storage)


def case_own_modes(how):
    """The own-modes context_fn with an eager op on the checkpoint's output, and where this torch's
    recompute mode ignores its policy (2.13) also given None, then with the eager op inside the
    checkpointed function, which calls f (the old candidate crashed backward there: aten.mm.out
    not found in storage)."""
    forms = [(own_modes_context_fn, False)]
    if not hasattr(create_selective_checkpoint_contexts([MM])[1], "policy_fn"):
        forms += [(functools.partial(own_modes_context_fn, cached_policy=False), inside) for inside in (False, True)]
    out = []
    for cf, inside in forms:
        if inside:
            fn = torch.compile(three_mm) if how == "sac(compile(f))" else three_mm
            step = call("compile(sac(f))" if how == "compile(sac(f))" else "eager SAC",
                        lambda *a, fn=fn: torch.sin(fn(*a)), cf)
        else:
            step = lambda *a, inner=call(how, three_mm, cf): torch.sin(inner(*a))  # noqa: E731
        args = inputs()
        backward_mm(step, args)
        out.append(backward_mm(step, args))
    return out


def value_reading_context_fn():
    def policy(ctx, op, *args, **kwargs):
        if op is MM and args and isinstance(args[0], torch.Tensor) and float(args[0].abs().sum()) > 0:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def case_value_reading(how):
    """A policy that reads a value cannot be traced: compiled with fullgraph=False and True, each
    must still run f's compiled code (today's), not f eagerly, nor crash."""
    out, compiled = [], []
    save_mm = functools.partial(create_selective_checkpoint_contexts, [MM])
    # then a policy that can be traced, on f compiled again: a decline for one policy is not f's
    for fullgraph, cf in ((False, value_reading_context_fn), (True, value_reading_context_fn), (False, save_mm)):
        if how == "sac(compile(f))":
            fn = torch.compile(three_mm, fullgraph=fullgraph)
            step = lambda *a, fn=fn, cf=cf: checkpoint(fn, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
        else:
            step = call(how, three_mm, cf)  # compile(sac(f)) breaks the graph at the value-reading one
        args = inputs()
        backward_mm(step, args)
        out.append(backward_mm(step, args))
        compiled.append(type(step(*args).grad_fn).__name__ == "CompiledFunctionBackward")
    return {"per_step": out, "compiled": compiled}


def case_nested(how):
    """The report's pattern inside an outer plain checkpoint."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    inner = call(how, three_mm, cf)
    step = lambda *a: checkpoint(inner, *a, use_reentrant=False)  # noqa: E731
    args = inputs()
    backward_mm(step, args)
    return [backward_mm(step, args)]


class Block(torch.nn.Module):
    def __init__(self, norm=False):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(16, 16)) for _ in range(3)])
        self.norm = torch.nn.BatchNorm1d(16) if norm else None

    def forward(self, x):
        x = torch.relu(x @ self.w[0])
        if self.norm is not None:
            x = self.norm(x)
        return torch.relu(x @ self.w[1]) @ self.w[2]


def module_case(how, block):
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    if how == "eager SAC":
        step = lambda x: checkpoint(block, x, use_reentrant=False, context_fn=cf)  # noqa: E731
    elif how == "sac(compile(f))":
        compiled = torch.compile(block)
        step = lambda x: checkpoint(compiled, x, use_reentrant=False, context_fn=cf)  # noqa: E731
    else:
        step = torch.compile(lambda x: checkpoint(block, x, use_reentrant=False, context_fn=cf))
    x = torch.randn(16, 16, requires_grad=True)
    backward_mm(step, [x])
    return [backward_mm(step, [x])]


def case_hooked_wrapper(how):
    """A hook on what torch.compile(module) returns: the region would call the module inside."""
    block = Block()
    if how == "sac(compile(f))":
        compiled = torch.compile(block)
        compiled.register_forward_hook(lambda m, i, o: o * 2)
        cf = functools.partial(create_selective_checkpoint_contexts, [MM])
        x = torch.randn(16, 16, requires_grad=True)
        step = lambda x: checkpoint(compiled, x, use_reentrant=False, context_fn=cf)  # noqa: E731
        backward_mm(step, [x])
        return [backward_mm(step, [x])]
    return module_case(how, block)


def case_buffers(how):
    """BatchNorm in the module: in training eager SAC updates its running stats again in
    recompute; in eval its buffers are only read, and nothing stands in the candidate's way."""
    out = module_case(how, Block(norm=True))
    block = Block(norm=True).eval()
    return out + module_case(how, block)


def case_copied_context_fn(how):
    """The context_fn copied after a step, the original dropped, then a step at a new shape."""
    import copy
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    compiled = torch.compile(three_mm) if how == "sac(compile(f))" else three_mm
    out = []
    for size in (16, 8):
        if how == "compile(sac(f))":
            step = torch.compile(lambda *a, cf=cf: checkpoint(three_mm, *a, use_reentrant=False, context_fn=cf))
        else:
            step = lambda *a, cf=cf: checkpoint(compiled, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
        args = inputs(size=size)
        backward_mm(step, args)
        out.append(backward_mm(step, args))
        cf = copy.deepcopy(cf)
        gc.collect()
    return out


def case_wrong_shape_first(how):
    """A call with a wrong shape raises (the caller's error, today as with the candidate); the
    right calls after it are measured."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    step = call(how, three_mm, cf)
    good = inputs()
    try:
        step(torch.randn(16, 5), *good[1:])
    except Exception:
        pass
    else:
        raise AssertionError("a (16, 5) @ (16, 16) matmul ran")
    backward_mm(step, good)
    return [backward_mm(step, good)]


def case_state_in_place(how):
    """f changes state in place outside any module's buffers (a step counter in a closure, a
    BatchNorm in a closure): eager SAC changes it again in recompute; so must the candidate, or
    decline. The state after two steps is part of the answer."""
    counter, norm = torch.zeros(()), torch.nn.BatchNorm1d(16)

    def counted(x, w1, w2, w3):
        counter.add_(1)
        return torch.relu(norm(torch.relu(x @ w1)) @ w2) @ w3
    step = call(how, counted, functools.partial(create_selective_checkpoint_contexts, [MM]))
    args = inputs()
    backward_mm(step, args)
    n = backward_mm(step, args)
    return {"per_step": [n], "state": [float(counter), int(norm.num_batches_tracked)]}


def checkpoint_inside(x, w1, w2, w3):
    return checkpoint(three_mm, x, w1, w2, w3, use_reentrant=False) @ w1


def case_checkpoint_inside_f(how):
    """f calls a plain checkpoint itself: compile(sac(f)) nests it, eager SAC does not."""
    step = call(how, checkpoint_inside, functools.partial(create_selective_checkpoint_contexts, [MM]))
    args = inputs()
    backward_mm(step, args)
    return [backward_mm(step, args)]


def case_recompile_limit(how):
    """A new shape on each of 4 steps past a recompile_limit of 2: where Dynamo runs f eagerly
    today, the candidate's region may too (eager SAC's answer), not today's compiled f afresh."""
    import torch._dynamo.config as dynamo_config
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    compiled = torch.compile(three_mm, dynamic=False) if how == "sac(compile(f))" else None
    out, limit = [], dynamo_config.recompile_limit
    dynamo_config.recompile_limit = 2
    try:
        for size in (16, 8, 12, 4):
            if how == "sac(compile(f))":
                step = lambda *a: checkpoint(compiled, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
            else:
                step = call(how, three_mm, cf)
            out.append(backward_mm(step, inputs(size=size)))
    finally:
        dynamo_config.recompile_limit = limit
    return out


def case_force_eager_steps(how):
    """Two steps under torch.compiler.set_stance("force_eager"), then two as usual."""
    step = call(how, three_mm, functools.partial(create_selective_checkpoint_contexts, [MM]))
    out = []
    for stance in ("force_eager", "force_eager", "default", "default"):
        with torch.compiler.set_stance(stance):
            out.append(backward_mm(step, inputs()))
    return out


def case_strict_stances(how):
    """f compiled and run outside SAC, then a SAC step under set_stance("fail_on_recompile") and
    one under "eager_on_recompile": a region is a new compile, which these stances forbid."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    compiled = torch.compile(three_mm)
    compiled(*inputs())
    out = []
    for stance in ("fail_on_recompile", "eager_on_recompile"):
        if how == "sac(compile(f))":
            step = lambda *a: checkpoint(compiled, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
        else:
            step = call(how, three_mm, cf)
            if how == "compile(sac(f))":
                backward_mm(step, inputs())  # compiled before the stance, as f was
        with torch.compiler.set_stance(stance):
            out.append(backward_mm(step, inputs()))
    return out


def case_stance_after_default(how):
    """A step as usual, then one under set_stance("fail_on_recompile") and one under
    "eager_on_recompile", same shapes: what compiled before runs under them (a decline there sent
    the call to today's path, whose f had never compiled: a crash where today runs)."""
    step = call(how, three_mm, functools.partial(create_selective_checkpoint_contexts, [MM]))
    out = [backward_mm(step, inputs())]
    for stance in ("fail_on_recompile", "eager_on_recompile"):
        with torch.compiler.set_stance(stance):
            out.append(backward_mm(step, inputs()))
    return out


class PolicyError(Exception):
    pass


def raising_context_fn():
    def policy(ctx, op, *args, **kwargs):
        raise PolicyError("this policy raises whatever it is asked")
    return create_selective_checkpoint_contexts(policy)


def case_raising_policy(how):
    """A policy that raises its own error, on 4 calls: each raises it, as today; Dynamo's frame
    traces over the 4 calls are counted (today's f traces once; a region retried on every call
    would trace on every call)."""
    from torch._dynamo.utils import counters
    step = call(how, three_mm, raising_context_fn)
    before, raised = counters["frames"]["total"], []
    for _ in range(4):
        try:
            step(*inputs())
        except Exception as e:
            raised.append(type(e).__name__ == "PolicyError" or "PolicyError" in str(e))
    return {"per_step": [], "policy_error": raised, "traces": counters["frames"]["total"] - before}


def case_fresh_compile_each_step(how):
    """torch.compile(f) made anew on each of 6 steps, of an f made anew too (a lambda of the same
    code, which Dynamo's cache serves), one context_fn: 4 compiles, then the wrappers dropped
    after use say that one comes anew on every call."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    out = []
    for _ in range(6):
        if how == "sac(compile(f))":
            compiled = torch.compile(lambda *a: three_mm(*a))
            step = lambda *a: checkpoint(compiled, *a, use_reentrant=False, context_fn=cf)  # noqa: E731
        else:
            step = call(how, three_mm, cf)
        out.append(backward_mm(step, inputs()))
    return out


def case_throwaway_then_stable(how):
    """Five context_fns made anew and dropped on one compiled f (aot_eager: cheap), then one kept,
    on a new torch.compile(f), for a step, and after torch._dynamo.reset() for another: the kept
    one declines past the cap, and is told so (it was silent, the cap's decline said once for the
    process), and after the reset gets the policy (it stayed declined for the process)."""
    thrown = torch.compile(three_mm, backend="aot_eager") if how == "sac(compile(f))" else three_mm
    for _ in range(5):
        cf = lambda: create_selective_checkpoint_contexts([MM])  # noqa: E731
        step = call(how, three_mm, cf, backend="aot_eager") if how == "compile(sac(f))" else \
            (lambda *a, cf=cf: checkpoint(thrown, *a, use_reentrant=False, context_fn=cf))
        step(*inputs())
        del cf, step
    gc.collect()
    cf, out = functools.partial(create_selective_checkpoint_contexts, [MM]), []
    for _ in range(2):
        out.append(backward_mm(call(how, three_mm, cf), inputs()))
        torch._dynamo.reset()
    return out


def blocks_backward_mm(how, blocks, cfs, rescale=False):
    """Matmuls in one backward of the blocks checkpointed in turn, each with its context_fn, after
    a step that compiles (compile(sac(f)) compiles the whole stack); rescale keeps a deep stack finite."""
    def stack(x):
        for b, cf in zip(blocks, cfs):
            x = checkpoint(b, x / x.detach().abs().max() if rescale else x, use_reentrant=False, context_fn=cf)
        return x
    step = torch.compile(stack) if how == "compile(sac(f))" else stack
    x = torch.randn(16, 16, requires_grad=True)
    backward_mm(step, [x])
    return [backward_mm(step, [x])]


def case_per_block_context_fns(how):
    """Six blocks, each with a context_fn of its own, made once and kept (as torchtitan makes one
    per block): all get the policy (a cap of 4 per code gave four, and today's on two, one step)."""
    blocks = [Block() for _ in range(6)]
    cfs = [functools.partial(create_selective_checkpoint_contexts, [MM]) for _ in blocks]
    if how == "sac(compile(f))":
        blocks = [torch.compile(b) for b in blocks]
    return blocks_backward_mm(how, blocks, cfs)


def case_state_dict_hook(how):
    """A block with a state_dict hook, which no call runs: nothing to decline (it was declined,
    with a reason about hooks the region would run)."""
    block = Block()
    block.register_state_dict_post_hook(lambda *a: None)
    return module_case(how, block)


def helper(x, w1, w2, w3):
    return three_mm(x, w1, w2, w3)


def case_compiled_partials(how):
    """Four steps of a torch.compile(functools.partial(helper, ...)) made anew and dropped, then a
    compiled partial of another function: it gets the policy. torch.compile wraps every partial in
    one function of its own, whose code counted the dropped ones for all partials, with a false
    reason."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    out = []
    for fn in [helper] * 4 + [three_mm]:
        x, w1, w2, w3 = inputs()
        part = functools.partial(fn, w3=w3)
        if how == "sac(compile(f))":
            part = torch.compile(part)
        step = lambda x, w1, w2, p=part: checkpoint(p, x, w1, w2, use_reentrant=False, context_fn=cf)  # noqa: E731
        step = torch.compile(step) if how == "compile(sac(f))" else step
        out.append(backward_mm(step, [x, w1, w2]))
        del part, step
        gc.collect()
    return out[-1:]


def case_seventy_context_fns(how):
    """Seventy blocks, each with a context_fn of its own, kept: all get the policy (a ceiling of 64
    regions in use gave today's on six, in every step)."""
    torch.manual_seed(0)
    blocks = [Block() for _ in range(70)]
    cfs = [functools.partial(create_selective_checkpoint_contexts, [MM]) for _ in blocks]
    if how == "sac(compile(f))":
        blocks = [torch.compile(b) for b in blocks]
    return blocks_backward_mm(how, blocks, cfs, rescale=True)


def case_many_blocks(how):
    """Ten blocks of one class, each compiled on its own (five by torch.compile(block), five by
    block.compile(), as torchtitan compiles), one context_fn for all: every block gets the policy.
    A cap of 4 on (compiled block, context_fn) pairs gave four of each five, and compiled each anew."""
    blocks = [Block() for _ in range(10)]
    if how == "sac(compile(f))":
        for b in blocks[5:]:
            b.compile()
        blocks = [torch.compile(b) for b in blocks[:5]] + blocks[5:]
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    return blocks_backward_mm(how, blocks, [cf] * len(blocks))


def case_fresh_blocks_each_step(how):
    """A new block each step, compiled in place (block.compile()), one context_fn: the policy on
    every step, and no block kept alive after its step (the candidate kept four, for as long as
    the context_fn lived)."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    out, alive = [], []
    for _ in range(6):
        block = Block()
        alive.append(weakref.ref(block))
        if how == "sac(compile(f))":
            block.compile()
        step = lambda x: checkpoint(block, x, use_reentrant=False, context_fn=cf)  # noqa: E731
        step = torch.compile(step) if how == "compile(sac(f))" else step
        out.append(backward_mm(step, [torch.randn(16, 16, requires_grad=True)]))
        del block, step
    gc.collect()
    block = Block()
    block.compile()
    outside = block(torch.randn(16, 16, requires_grad=True))
    return {"per_step": out, "alive": sum(r() is not None for r in alive),
            "outside_compiled": type(outside.grad_fn).__name__ == "CompiledFunctionBackward"}


def case_kwarg_f(how):
    """f takes an argument named f, given by keyword: the region's own f must not take it."""
    def g(x, f):
        return three_mm(x, f, f, f)
    fn = torch.compile(g) if how == "sac(compile(f))" else g
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    step = lambda x, w: checkpoint(fn, x, f=w, use_reentrant=False, context_fn=cf)  # noqa: E731
    step = torch.compile(step) if how == "compile(sac(f))" else step
    args = inputs(1)
    backward_mm(step, args)
    return [backward_mm(step, args)]


def case_hooked_blocks(how):
    """A block of the class runs first; then another with a forward hook; then a hook added to the
    first. Dynamo does not guard on hooks, so a graph shared by the class would run without them:
    the outputs must be eager SAC's (the candidate's shared region gave the hook-less one's)."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    plain, hooked = Block(), Block()
    hooked.register_forward_hook(lambda m, i, o: o * 3)
    x = torch.randn(16, 16, requires_grad=True)
    out, values = [], []
    for i, block in enumerate((plain, hooked, plain)):
        if i == 2:
            plain.register_forward_hook(lambda m, i, o: o * 5)
        if how == "sac(compile(f))":
            block = torch.compile(block)
        step = lambda x, b=block: checkpoint(b, x, use_reentrant=False, context_fn=cf)  # noqa: E731
        step = torch.compile(step) if how == "compile(sac(f))" else step
        y = step(x)
        values.append(round(float(y.abs().sum()), 1))
        out.append(backward_mm(step, [x]))
    return {"per_step": out, "values": values}


class KBlock(Block):
    def forward(self, x):
        return super().forward(x) * self.k  # an attribute Dynamo guards by value


def case_mixed_forms(how):
    """Twelve blocks, each k of six in both forms (torch.compile(block), block.compile()): today
    each form's compiled code stays under recompile_limit; a region shared by both forms would not,
    and its last blocks would run eagerly. Every block must run compiled."""
    blocks = []
    for i in range(12):
        b = KBlock()
        b.k = i // 2 + 1
        if how == "sac(compile(f))":
            if i % 2:
                b = torch.compile(b)
            else:
                b.compile()
        blocks.append(b)
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    x = torch.randn(16, 16, requires_grad=True)
    y, compiled = x, []
    for b in blocks:
        y = checkpoint(b, y / y.detach().abs().max(), use_reentrant=False, context_fn=cf)
        compiled.append(type(y.grad_fn).__name__ == "CompiledFunctionBackward")
    with torch.profiler.profile() as prof:
        y.sum().backward()
    return {"per_step": [computed(prof)], "compiled": compiled if how == "sac(compile(f))" else [True]}


def case_subclasses(how):
    """Five subclasses that inherit one forward, one context_fn: one code, all get the policy (the
    cap counted them against one code while a region was made per class: 4 got it, 1 declined)."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    blocks = [type("Sub%d" % i, (Block,), {})() for i in range(5)]
    if how == "sac(compile(f))":
        blocks = [torch.compile(b) for b in blocks]
    return blocks_backward_mm(how, blocks, [cf] * len(blocks))


def case_stance_new_block(how):
    """A block runs; then a new block of the class under "fail_on_recompile", and another under
    "eager_on_recompile": it runs the class's graph, as today (the candidate declined to today's
    path, whose f had never compiled: a crash, then a false "as without the candidate")."""
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    x = torch.randn(16, 16, requires_grad=True)
    out, compiled = [], []
    for stance in ("default", "fail_on_recompile", "eager_on_recompile"):
        block = Block()
        if how == "sac(compile(f))":
            block = torch.compile(block)
        step = lambda x, b=block: checkpoint(b, x, use_reentrant=False, context_fn=cf)  # noqa: E731
        if how == "compile(sac(f))":
            step = torch.compile(step)
        with torch.compiler.set_stance(stance):
            y = step(x)
            compiled.append(type(y.grad_fn).__name__ == "CompiledFunctionBackward" or how == "eager SAC")
            with torch.profiler.profile() as prof:
                y.sum().backward()
        out.append(computed(prof))
    return {"per_step": out, "compiled": compiled}


def case_wrap_option(how):
    """wrap_inductor_compiled_regions given to torch.compile itself: the user asked for the policy
    to see f as one op, and its policy saves that op (eager SAC, with no such op, saves nothing).
    The candidate leaves the option as it is, as it leaves the global flag; it once overrode the
    option, and the policy never saw the op it names."""
    cf = functools.partial(create_selective_checkpoint_contexts, [torch.ops.higher_order.inductor_compiled_code])
    fn = three_mm
    if how == "sac(compile(f))":
        fn = torch.compile(three_mm, options={"wrap_inductor_compiled_regions": True})
    step = call("compile(sac(f))" if how == "compile(sac(f))" else "eager SAC", fn, cf)
    args = inputs()
    backward_mm(step, args)
    return [backward_mm(step, args)]


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def case_warning_aot_eager(how):
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    step = call(how, three_mm, cf, backend="aot_eager")
    args = inputs()
    backward_mm(step, args)
    return [backward_mm(step, args)]


def case_warning_fallback(how):
    """SDPA on the CPU: Inductor calls its aten fallback, which SAC caches."""
    ops = [torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default]
    cf = functools.partial(create_selective_checkpoint_contexts, ops)
    step = call(how, attention, cf)
    torch.manual_seed(0)
    args = [torch.randn(2, 4, 32, 16, requires_grad=True) for _ in range(3)]
    step(*args).sum().backward()
    step(*args).sum().backward()
    return ["ran"]


def case_warning_mm(how):
    cf = functools.partial(create_selective_checkpoint_contexts, [MM])
    step = call(how, three_mm, cf)
    args = inputs()
    backward_mm(step, args)
    return [backward_mm(step, args)]


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main(path, names, hows=HOWS):
    result = {"torch": torch.__version__, "label": getattr(sys.modules.get("sitecustomize"), "CHANGE_LABEL", None),
              "switch": getattr(torch.utils.checkpoint, "_sac_policy_applies_to_compiled_fn", None)}
    for name in names or CASES:
        result[name] = {}
        for how in hows:
            # each case as in a process of its own: the series' module resets with Dynamo, what it
            # said and the compiles it counts of one f's code (three_mm serves every case)
            torch._dynamo.reset()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                try:
                    got = CASES[name](how)
                except Exception as e:  # a crash is an answer too: the test compares it with today's
                    got = {"raised": "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200])}
            said = [str(w.message) for w in seen if any(word in str(w.message) for word in WARNING_WORDS)]
            result[name][how] = {"got": got, "said": said}
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    reported_only = "--reported-only" in sys.argv[2:]  # the candidate changes only this way
    if "--switch" in sys.argv[2:]:  # a torch patched with sac_repro/upstream's series: its switch on
        if not hasattr(torch.utils.checkpoint, "_sac_policy_applies_to_compiled_fn"):
            sys.exit("fix_cases.py: --switch, but torch %s has no _sac_policy_applies_to_compiled_fn" % torch.__file__)
        torch.utils.checkpoint._sac_policy_applies_to_compiled_fn = True
    main(sys.argv[1], [a for a in sys.argv[2:] if a not in ("--reported-only", "--switch")],
         ("sac(compile(f))",) if reported_only else HOWS)
