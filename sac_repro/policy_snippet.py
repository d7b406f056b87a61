import functools
import re

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

device = "cuda" if torch.cuda.is_available() else "cpu"
asked = set()


def policy_fn(ctx, op, *args, **kwargs):  # the policy of pytorch/pytorch#161889: save the matmul
    if not ctx.is_recompute:
        asked.add(str(op))
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)


def f(x, y):
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y


def matmuls_in_backward(fn):
    """Matmuls computed in one backward: cuBLAS kernels on CUDA, aten::mm ops on the CPU (one that
    SAC's dispatch mode intercepts is counted once, where it computes)."""
    x = torch.ones(10, 12, device=device, requires_grad=True)
    y = torch.ones(12, 10, device=device, requires_grad=True)
    loss = fn(x, y).sum()
    with torch.profiler.profile() as prof:
        loss.backward()
    if device == "cuda":
        return sum(bool(re.search("gemm|gemv|xmma|cutlass|nvjet", e.name)) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    return sum(e.name == "aten::mm" and not {"aten::mm", "PythonDispatchMode"} & {c.name for c in e.cpu_children}
               for e in prof.events())


f_compiled = torch.compile(f, fullgraph=True, dynamic=True)
arrangements = {
    "sac(compile(f))": lambda x, y: checkpoint(f_compiled, x, y, use_reentrant=False, context_fn=context_fn),
    "compile(sac(f))": torch.compile(lambda x, y: checkpoint(f, x, y, use_reentrant=False, context_fn=context_fn)),
    "compile(f), no checkpoint": torch.compile(f),
}
for name, fn in arrangements.items():
    asked.clear()
    matmuls_in_backward(fn)  # compiles forward and backward; SAC asks the policy while it traces
    print("%-26s matmuls in backward: %d; the policy was asked about: %s"
          % (name, matmuls_in_backward(fn), ", ".join(sorted(asked)) or "-"))
