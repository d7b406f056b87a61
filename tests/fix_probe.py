"""What tests/test_fix_candidate.py measures, in a child process of its own under the torch and the
PYTHONPATH it is given (sac_repro/policy/fix_candidate or none): the report's f and an MLP block, each as eager
f, eager SAC, sac(compile(f)) and compile(sac(f)), with the matmuls computed in one forward and one
backward (torch.profiler on the CPU), the largest difference from eager f of the output and every
gradient, whether the compiled graph ran, and the warnings that name compile(sac(f)).

    python tests/fix_probe.py OUT.json [CASE ...]    # cases: f, mlp, two_policies, compile_sac_two_policies

two_policies: one compiled f under two policies in turn, sac(compile(f)), each policy's backward
matmuls (the candidate gives each context_fn a region of its own). compile_sac_two_policies: the same
for compile(sac(f)), each policy compiled on its own, as code that builds its compiled step in a
helper does (sac_repro/policy/fix_candidate/repro_policy_guard.py, docs/fix.md).
"""
import copy
import functools
import json
import sys
import warnings

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

MATMULS = {"aten::mm", "aten::addmm"}
WARNING_NAMES = "compile(sac(f))"


def computed(prof):
    """Matmuls that computed. An aten::mm that a dispatch mode intercepts wraps the one that
    computes; one that SAC serves from its cache only detaches the saved output."""
    n = 0
    for e in prof.events():
        children = {c.name for c in e.cpu_children}
        if e.name not in MATMULS or children & (MATMULS | {"PythonDispatchMode"}):
            continue
        if children and children <= {"aten::detach"}:
            continue
        n += 1
    return n


def policy_saving(ops):
    def policy_fn(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy_fn)


def report_f(x, y):  # the report's f
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def variants(fn, context_fn):
    sac = lambda *a: checkpoint(fn, *a, use_reentrant=False, context_fn=context_fn)  # noqa: E731
    compiled = torch.compile(fn)
    return {"eager": fn, "eager SAC": sac,
            "sac(compile(f))": lambda *a: checkpoint(compiled, *a, use_reentrant=False, context_fn=context_fn),
            "compile(sac(f))": torch.compile(sac)}


def measure(fn, inputs, params):
    """The third step (two compile), its forward and backward profiled apart."""
    for _ in range(2):
        fn(*inputs).sum().backward()
    for t in list(inputs) + list(params):
        t.grad = None
    with torch.profiler.profile() as fwd:
        out = fn(*inputs)
        loss = out.sum()
    with torch.profiler.profile() as bwd:
        loss.backward()
    return {"fwd_mm": computed(fwd), "bwd_mm": computed(bwd),
            "compiled": type(out.grad_fn).__name__ == "CompiledFunctionBackward"}, \
        [out.detach()] + [t.grad for t in list(inputs) + list(params)]


def run_case(case):
    torch.manual_seed(0)
    if case == "f":
        made = lambda: (report_f, ())  # noqa: E731
        shapes, saved = [(10, 12), (12, 10)], [torch.ops.aten.mm.default]
    else:
        mlp = MLP()
        made = lambda: (lambda m: (m, tuple(m.parameters())))(copy.deepcopy(mlp))  # noqa: E731
        shapes, saved = [(32, 64)], [torch.ops.aten.mm.default, torch.ops.aten.addmm.default]
    inputs = [torch.randn(*s) for s in shapes]
    rows, reference = {}, None
    for name in variants(report_f, None):
        fn, params = made()
        fn = variants(fn, policy_saving(saved))[name]
        args = [t.clone().requires_grad_() for t in inputs]
        rows[name], values = measure(fn, args, params)
        if reference is None:
            reference = values
        rows[name]["max_err"] = max((v - r).abs().max().item() for v, r in zip(values, reference))
    return rows


def sin_mm(x, w):
    return torch.sin(x @ w)


def two_policies():
    """sac(compile(f)) of one compiled f under two policies that differ only in the ops their
    closure saves: each one's backward matmuls in the order run, then the second's again after
    torch._dynamo.reset(). The candidate guards each compiled frame on its policy."""
    compiled_f = torch.compile(sin_mm)
    out = []
    for name, ops in (("save mm", [torch.ops.aten.mm.default]), ("save nothing", []), ("reset", None)):
        if ops is None:
            torch._dynamo.reset()
            name, ops = "save nothing after reset", []
        context_fn = policy_saving(ops)
        x, w = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
        row, _ = measure(lambda a, b: checkpoint(compiled_f, a, b, use_reentrant=False, context_fn=context_fn),
                         [x, w], [])
        out.append([name, row["bwd_mm"]])
    return out


def compile_sac_two_policies():
    """compile(sac(f)) made by one helper for a policy that saves the matmul, then for one that
    saves nothing (the same code, closures that differ in the ops they save), then the second
    again after torch._dynamo.reset(): each one's backward matmuls."""
    def compile_sac(ops):
        context_fn = policy_saving(ops)
        return torch.compile(lambda a, b: checkpoint(sin_mm, a, b, use_reentrant=False, context_fn=context_fn))

    out = []
    for name, ops in (("save mm", [torch.ops.aten.mm.default]), ("save nothing", []), ("reset", None)):
        if ops is None:
            torch._dynamo.reset()
            name, ops = "save nothing after reset", []
        x, w = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
        row, _ = measure(compile_sac(ops), [x, w], [])
        out.append([name, row["bwd_mm"]])
    return out


CASES = {"two_policies": two_policies, "compile_sac_two_policies": compile_sac_two_policies}


def replaced_where(names):
    """The file that defines each replaced torch function as it is now."""
    import importlib
    where = {}
    for name in names or ():
        module, attrs = name.split(":")
        obj = importlib.import_module(module)
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
        where[name] = obj.__code__.co_filename
    return where


def main(path, cases):
    result = {"torch": torch.__version__, "git": torch.version.git_version,
              "candidate": getattr(torch.utils.checkpoint, "_sac_repro_fix_candidate", None)}
    site = sys.modules.get("sitecustomize")
    result["label"] = getattr(site, "CHANGE_LABEL", None)
    result["replaced"] = getattr(site, "REPLACED", None)
    result["replaced_in"] = replaced_where(result["replaced"])
    result["added"] = getattr(site, "ADDED", None)
    result["added_in"] = replaced_where(result["added"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for case in cases:
            result[case] = CASES[case]() if case in CASES else run_case(case)
    result["warnings"] = [str(w.message) for w in seen if WARNING_NAMES in str(w.message)]
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["f", "mlp"])
