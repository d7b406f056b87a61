#!/usr/bin/env python3
"""compile(sac(f)) runs the graph partitioned for one SAC policy under another policy of the same
code: Dynamo guards the policy function by its code object only, not by what its closure holds.

    python3 sac_repro/policy/fix_candidate/repro_policy_guard.py     # any torch from 2.5; CPU, seconds

One helper makes compile(sac(f)) for a policy that saves the matmul, then for one that saves
nothing. The second should recompute the forward matmul in backward (3 matmuls, as it does when
run alone or after torch._dynamo.reset()); it computes 2, the first policy's graph. Exit 1 when
that happens, 0 when each policy gets its own graph.
"""
import functools
import sys

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts


def f(x, w):
    return torch.sin(x @ w)


def compile_sac(ops):
    """compile(sac(f)) with a policy that saves `ops`: the same code for every `ops`."""
    def policy_fn(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE

    context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)
    return torch.compile(lambda x, w: checkpoint(f, x, w, use_reentrant=False, context_fn=context_fn),
                         backend="aot_eager")


def backward_matmuls(fn):
    """aten::mm calls in one backward, after a step that compiles (aot_eager runs ATen ops, so
    each matmul of the compiled backward is one aten::mm event). Simpler than measure.py's count on
    purpose: this probe runs alone, with aot_eager only."""
    x, w = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    fn(x, w).sum().backward()
    loss = fn(x, w).sum()
    with torch.profiler.profile() as prof:
        loss.backward()
    return sum(e.name == "aten::mm" for e in prof.events())


def main():
    print("torch %s (git %s)" % (torch.__version__, torch.version.git_version[:12]))
    saved = backward_matmuls(compile_sac([torch.ops.aten.mm.default]))
    print("policy saving aten.mm: %d matmuls in backward (expected 2: the 2 gradients)" % saved)
    shared = backward_matmuls(compile_sac([]))
    print("policy saving nothing, next: %d matmuls in backward (expected 3: the forward matmul again)" % shared)
    torch._dynamo.reset()
    alone = backward_matmuls(compile_sac([]))
    print("policy saving nothing, after torch._dynamo.reset(): %d matmuls in backward" % alone)
    if (saved, alone) != (2, 3):
        print("cannot tell: the counts without a shared graph are not 2 and 3")
        return 125
    if shared == saved:
        print("reproduced: the second policy ran the graph partitioned for the first")
        return 1
    print("not reproduced: each policy got its own graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
