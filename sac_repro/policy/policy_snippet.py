import functools
import re

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

device = "cuda" if torch.cuda.is_available() else "cpu"
asked = set()


def saving(saved_op):  # a SAC context_fn that saves saved_op and prefers to recompute the rest
    def policy_fn(ctx, op, *args, **kwargs):
        if not ctx.is_recompute:
            asked.add(str(op))
        return CheckpointPolicy.MUST_SAVE if op == saved_op else CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy_fn)


def f(x, y):
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y


def matmuls_in_backward(fn):
    """Matmuls computed in one backward: cuBLAS kernels on CUDA, aten::mm ops on the CPU (counted once
    where a dispatch mode intercepts one, and not where SAC serves one from its cache). A deliberate
    copy of measure.py's backward_matmuls: this snippet is pasted into an issue and runs alone."""
    x = torch.ones(10, 12, device=device, requires_grad=True)
    y = torch.ones(12, 10, device=device, requires_grad=True)
    loss = fn(x, y).sum()
    with torch.profiler.profile() as prof:
        loss.backward()
    if device == "cuda":
        return sum(bool(re.search("gemm|gemv|xmma|cutlass|nvjet", e.name)) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    children = [{c.name for c in e.cpu_children} for e in prof.events() if e.name == "aten::mm"]
    return sum(not c & {"aten::mm", "PythonDispatchMode"} and not (c and c <= {"aten::detach"}) for c in children)


save_mm = saving(torch.ops.aten.mm.default)  # the policy of pytorch/pytorch#161889: save the matmul
f_compiled = torch.compile(f, fullgraph=True)
arrangements = {
    "sac(compile(f))": lambda x, y: checkpoint(f_compiled, x, y, use_reentrant=False, context_fn=save_mm),
    "compile(sac(f))": torch.compile(lambda x, y: checkpoint(f, x, y, use_reentrant=False, context_fn=save_mm)),
    "compile(f), no checkpoint": torch.compile(f),
}
if hasattr(torch._inductor.config, "wrap_inductor_compiled_regions"):  # 2.10 and later
    f_wrapped = torch.compile(f, fullgraph=True, options={"wrap_inductor_compiled_regions": True})
    save_region = saving(torch.ops.higher_order.inductor_compiled_code)
    arrangements["sac(compile(f)), region saved"] = lambda x, y: checkpoint(
        f_wrapped, x, y, use_reentrant=False, context_fn=save_region)
for name, fn in arrangements.items():
    asked.clear()
    matmuls_in_backward(fn)  # compiles forward and backward; SAC asks the policy while it traces
    print("%-30s matmuls in backward: %d; the policy was asked about: %s"
          % (name, matmuls_in_backward(fn), ", ".join(sorted(asked)) or "-"))
