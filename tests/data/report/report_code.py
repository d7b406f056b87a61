import functools

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

# Define which operations to save during checkpointing
ops_to_save = [
    torch.ops.aten.mm.default,
]

# Define the policy for checkpointing
def policy_fn(ctx, op, *args, **kwargs):
    if op in ops_to_save:
        return CheckpointPolicy.MUST_SAVE
    else:
        return CheckpointPolicy.PREFER_RECOMPUTE

# Create the context function for selective checkpointing
context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)

# Define a checkpointing function with the context
def checkpoint_fn_with_context(fn, *args, **kwargs):
    return checkpoint(fn, *args, **kwargs, use_reentrant=False, context_fn=context_fn)

# Define a checkpointing function without the context
def checkpoint_fn_without_context(fn, *args, **kwargs):
    return checkpoint(fn, *args, **kwargs, use_reentrant=False)

# Define the function to be compiled
def f(x, y):
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y

# Create the input tensors
x = torch.ones(10, 12, device="cuda", requires_grad=True)
y = torch.ones(12, 10, device="cuda", requires_grad=True)

# Compile the function
f_compiled = torch.compile(f, fullgraph=True, dynamic=True)

# Profile the function calls
for i in range(50):
    torch.cuda.nvtx.range_push(f"f_compiled_without_context {i}")
    checkpoint_fn_without_context(f_compiled, x, y)
    torch.cuda.nvtx.range_pop()

for i in range(50):
    torch.cuda.nvtx.range_push(f"f_compiled_with_context {i}")
    checkpoint_fn_with_context(f_compiled, x, y)
    torch.cuda.nvtx.range_pop()
