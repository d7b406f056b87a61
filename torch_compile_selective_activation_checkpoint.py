#!/usr/bin/env python3
"""A torch.compile'd function called inside selective activation checkpointing (SAC) runs
eagerly: no Inductor kernels run (pytorch/pytorch#161889).

This file is the report's code, then the scenarios that judge it. Run it and the report's code
runs in a child process under torch.profiler; the verdict comes from what ran there, call by call.
Or judge a capture of the report's loops: --from-nsys, --from-ncu (run_nsys.sh makes one).
"""
import sys

if __name__ == "__main__":
    import os
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # sac_repro/, wherever called from
    try:
        from sac_repro import cli  # never imports torch: a crash of the torch under test becomes 125
    except Exception as e:  # copied without its package: abort a bisect (exits.EXIT_ABORT, unreachable here)
        try:
            print("error: cannot import sac_repro beside %s (%s): copy the bundle's whole folder" % (
                __file__, e), file=sys.stderr)
        finally:
            os._exit(128)
    sys.exit(cli.main(__file__))

# Below, between the two markers: the report's code as filed, but for the lines marked [changed] or
# [added]. The child process runs it as written, at module level; `--markdown` pastes exactly it.
# ==== the report's code (pytorch/pytorch#161889) ==================================================
import functools
import os  # [added]
import sys  # [added]
import types  # [added]

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

# [changed] The report hard-codes device="cuda". The NVTX calls go through torch.cuda.nvtx, as
# filed, which nsys records; a CPU-only build of torch has no NVTX, so there they do nothing.
device = "cuda" if torch.cuda.is_available() else "cpu"
nvtx = torch.cuda.nvtx if torch.version.cuda else types.SimpleNamespace(
    range_push=lambda msg: None, range_pop=lambda: None)

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
x = torch.ones(10, 12, device=device, requires_grad=True)  # [changed] device="cuda"
y = torch.ones(12, 10, device=device, requires_grad=True)  # [changed] device="cuda"

# Compile the function
f_compiled = torch.compile(f, fullgraph=True, dynamic=True)

# [added] Compile before the capture range opens, and without SAC: on affected torch, once f has
# been called under SAC, Dynamo skips it for good, with or without SAC.
checkpoint_fn_without_context(f_compiled, x, y)
# [added] Run on its own, this code answers at its end. From 2.12, a fullgraph=True function that
# Dynamo skips raises instead of running eagerly: that error is the answer, in Dynamo's words.
if __name__ == "__main__":
    def answer_of_error(kind, error, tb):
        skipped = [l.strip() for l in str(error).splitlines() if l.strip().startswith("- f (")]
        reproduced = "found no compiled frames" in str(error)
        if reproduced:
            print("f_compiled under SAC: ran no compiled code (pytorch/pytorch#161889 reproduces); "
                  "Dynamo raised: " + (skipped or str(error).splitlines())[0])
        elif issubclass(kind, Exception):
            print("f_compiled under SAC: cannot tell (the report's code raised %s)" % kind.__name__)
        sys.__excepthook__(kind, error, tb)
        if issubclass(kind, Exception) and not reproduced:  # Python's exit 1 would read as "reproduces"
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(125)
    sys.excepthook = answer_of_error
# [added] What the report's `nsys --capture-range=cudaProfilerApi` waits for; as filed the script
# never calls it, and nsys captures nothing.
if device == "cuda":
    torch.cuda.profiler.start()

# Profile the function calls
for i in range(50):
    nvtx.range_push(f"f_compiled_without_context {i}")  # [changed] torch.cuda.nvtx.range_push
    checkpoint_fn_without_context(f_compiled, x, y)
    nvtx.range_pop()  # [changed] torch.cuda.nvtx.range_pop

for i in range(50):
    nvtx.range_push(f"f_compiled_with_context {i}")  # [changed] torch.cuda.nvtx.range_push
    checkpoint_fn_with_context(f_compiled, x, y)
    nvtx.range_pop()  # [changed] torch.cuda.nvtx.range_pop

if device == "cuda":  # [added] close the capture range
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()

# [added] The answer, from what ran in one more call under SAC: compiled code shows up as Dynamo's
# and AOTAutograd's regions, f run eagerly as its own aten::mul and aten::add.
if __name__ == "__main__":
    with torch.profiler.profile() as prof:
        checkpoint_fn_with_context(f_compiled, x, y)
    ran = {e.name for e in prof.events()}
    compiled = any(n.startswith(("Torch-Compiled Region", "CompiledFunction")) for n in ran)
    eager = {"aten::mul", "aten::add"} <= ran
    if compiled != eager:
        print("f_compiled under SAC: ran %s (pytorch/pytorch#161889 %s)" % (
            ("compiled code", "does not reproduce") if compiled else ("eagerly: aten::mul, aten::add", "reproduces")))
        sys.exit(1 if eager else 0)
    print("f_compiled under SAC: cannot tell (compiled regions: %s, eager aten::mul/add: %s)" % (compiled, eager))
    sys.exit(125)
# ==== end of the report's code ====================================================================


# ==== the scenarios ================================================================================
# Each runs after the report's loops, in the same process, a few calls under torch.profiler. The
# verdict needs the control and the case; the others show what the fix leaves open and what to do
# instead. Their names and what each shows are sac_repro/verdict.py's SCENARIOS.
import torch._inductor.config  # noqa: E402

from sac_repro.measure import fresh_code  # noqa: E402
from sac_repro.verdict import (  # noqa: E402
    AFTER_SAC, CASE, CONTROL, EAGER_SAC, NO_CHECKPOINT, WORKAROUND, WRAPPED)

# The names of the report's block that sac_repro/measure.py reads: the block must keep them.
REPORT_NAMES = ("device", "policy_fn", "context_fn", "create_selective_checkpoint_contexts",
                "checkpoint_fn_with_context", "f_compiled")


def sac_of_f(x, y):
    return checkpoint_fn_with_context(f, x, y)


# Dynamo's cache, and on affected torch its sticky skip, live on f's code object: the control gets
# a code object that was never called under SAC.
f_control = torch.compile(fresh_code(f), fullgraph=True, dynamic=True)
f_sac_compiled = torch.compile(sac_of_f, fullgraph=True)  # as the README's workaround spells it

SCENARIOS = {
    CONTROL: lambda: checkpoint_fn_without_context(f_control, x, y),
    CASE: lambda: checkpoint_fn_with_context(f_compiled, x, y),
    WORKAROUND: lambda: f_sac_compiled(x, y),
    AFTER_SAC: lambda: checkpoint_fn_without_context(f_compiled, x, y),
    EAGER_SAC: lambda: sac_of_f(x, y),
    NO_CHECKPOINT: lambda: f_control(x, y),
}
# For --policy-report only (2.10 and later): the option that shows SAC the compiled region as one op.
if hasattr(torch._inductor.config, "wrap_inductor_compiled_regions"):
    f_wrapped = torch.compile(fresh_code(f), fullgraph=True, dynamic=True,
                              options={"wrap_inductor_compiled_regions": True})
    SCENARIOS[WRAPPED] = lambda: checkpoint_fn_with_context(f_wrapped, x, y)
