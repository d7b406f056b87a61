# Owner(s): ["module: dynamo"]
"""A torch.compile'd function called inside selective activation checkpointing, sac(compile(f)):
regression tests for pytorch/pytorch#161889 in PyTorch's own idiom, to paste into
test/dynamo/test_activation_checkpointing.py as they are (the class, its helpers and the
instantiate line; that file already has the imports).

    python test_sac_compile_upstream.py -v       # against the torch installed here

It needs `expecttest`, as every test of PyTorch's does (`pip install expecttest`). Each test runs
the report's f, policy (MUST_SAVE on aten.mm.default, PREFER_RECOMPUTE for the rest) and inputs,
on the CPU, and on CUDA when there is one:

1. test_compiled_fn_runs_compiled_under_sac: every call of the compiled f under SAC runs the code
   Inductor compiled. Fails on 2.5-2.9 (Dynamo skips f under SAC's dispatch mode); passes from 2.10.
2. test_sac_policy_applies_to_compiled_fn: under sac(compile(f)), MUST_SAVE on aten.mm.default
   keeps the forward matmul out of backward. Fails on 2.10-2.15: the policy is asked about
   Inductor's aten.mm.out instead and never matches. Skipped where test 1 fails (f never compiles
   under SAC there, so this part cannot be shown).
3. test_sac_policy_applies_inside_compile: under compile(sac(f)) the same policy is honoured.
   Passes from 2.5: the supported arrangement.

How they count changes nothing that they measure: test 1 counts runs of the compiled code with a
backend that wraps Inductor's output, and tests 2 and 3 count matmuls with torch.profiler. A
counting TorchDispatchMode around the call would itself make 2.5-2.9's Dynamo skip f.
"""
import collections
import functools
import re
import types

import torch
import torch._dynamo.test_case
import torch._inductor.compile_fx
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

CUBLAS_KERNEL = re.compile(r"gemm|gemv|xmma|cutlass|nvjet", re.IGNORECASE)


def _report_f(x, y):
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y


def _fresh_f():
    """The report's f with a code object of its own: Dynamo's cache, and on 2.5-2.9 its skip under
    SAC, stick to a code object, so no test may see what another did to f."""
    return types.FunctionType(_report_f.__code__.replace(), globals(), "f")


def _recording_context_fn():
    """The report's policy, as a context_fn, and what SAC asked it in the forward (op -> answer)."""
    asked = collections.Counter()

    def policy_fn(ctx, op, *args, **kwargs):
        answer = CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE
        if not ctx.is_recompute:
            asked["%s -> %s" % (op, answer.name)] += 1
        return answer

    return functools.partial(create_selective_checkpoint_contexts, policy_fn), asked


class _CountingInductor:
    """Inductor, counting each run of the code it compiled. It adds no dispatch mode."""

    def __init__(self):
        self.runs = 0

    def __call__(self, gm, example_inputs):
        compiled = torch._inductor.compile_fx.compile_fx(gm, example_inputs)

        def run(*args):
            self.runs += 1
            return compiled(*args)

        return run


def _asked(asked):
    return ", ".join(sorted(asked)) or "nothing"


class SelectiveCheckpointOfCompiledFnTests(torch._dynamo.test_case.TestCase):
    def _inputs(self, device):
        return (torch.ones(10, 12, device=device, requires_grad=True),
                torch.ones(12, 10, device=device, requires_grad=True))

    def _eager_calls_under_sac(self, device, calls=3):
        """(eager calls of 3, what the policy was asked) for the compiled f called under SAC."""
        x, y = self._inputs(device)
        backend = _CountingInductor()
        f_compiled = torch.compile(_fresh_f(), backend=backend, fullgraph=True, dynamic=True)
        checkpoint(f_compiled, x, y, use_reentrant=False)  # compiled first, without SAC
        context_fn, asked = _recording_context_fn()
        eager = 0
        for _ in range(calls):
            before = backend.runs
            try:
                checkpoint(f_compiled, x, y, use_reentrant=False, context_fn=context_fn)
            except Exception as e:  # from 2.12, fullgraph=True says so when Dynamo skips f
                if "found no compiled frames" not in str(e):
                    raise
            eager += backend.runs == before
        return eager, asked

    def _matmuls_in_backward(self, fn, device):
        """Matmuls computed in one backward of fn(x, y).sum(), forward outside the profile. On CUDA,
        cuBLAS kernels (a matmul that SAC serves from its cache launches none); on the CPU, aten::mm
        inside Inductor's compiled graphs. None where the CPU cannot tell."""
        x, y = self._inputs(device)
        fn(x, y).sum().backward()  # backward graphs compile lazily: keep that out of the profile
        loss = fn(x, y).sum()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            loss.backward()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        events = prof.events()
        if device.startswith("cuda"):
            return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                       and CUBLAS_KERNEL.search(e.name))
        computed = 0
        for e in events:
            if e.name != "aten::mm" or {c.name for c in e.cpu_children} & {"aten::mm", "PythonDispatchMode"}:
                continue  # not a matmul, or one a dispatch mode intercepted (the computing op is inside)
            parent = e.cpu_parent
            while parent is not None and not parent.name.startswith("## Call CompiledFxGraph"):
                parent = parent.cpu_parent
            if parent is None:
                return None
            computed += 1
        return computed

    def _baseline(self, device):
        """Matmuls in the backward of the compiled f with no checkpoint: the forward's is saved."""
        n = self._matmuls_in_backward(torch.compile(_fresh_f(), fullgraph=True, dynamic=True), device)
        self.assertIsNotNone(n, "the matmuls of a compiled backward could not be counted")
        return n

    def test_compiled_fn_runs_compiled_under_sac(self, device):
        eager, asked = self._eager_calls_under_sac(device)
        self.assertEqual(
            eager, 0,
            "%d of 3 calls under SAC ran eagerly: the compiled code did not run, and the policy was "
            "asked about f's ops one by one (%s). Dynamo skipped f under SAC's dispatch mode; "
            "TORCH_LOGS=+dynamo shows 'skipping: f (reason: non-infra torch dispatch mode present ...)'"
            % (eager, _asked(asked)))

    def test_sac_policy_applies_to_compiled_fn(self, device):
        eager, _ = self._eager_calls_under_sac(device, calls=1)
        if eager:
            self.skipTest("the compiled f ran eagerly under SAC (see test_compiled_fn_runs_compiled_"
                          "under_sac): this torch cannot show whether the policy applies to compiled code")
        context_fn, asked = _recording_context_fn()
        f_compiled = torch.compile(_fresh_f(), fullgraph=True, dynamic=True)
        got = self._matmuls_in_backward(
            lambda x, y: checkpoint(f_compiled, x, y, use_reentrant=False, context_fn=context_fn), device)
        want = self._baseline(device)
        self.assertIsNotNone(got, "the matmuls of this backward could not be counted on %s" % device)
        self.assertEqual(
            got, want,
            "under sac(compile(f)) backward computed %d matmuls, against %d where the forward matmul "
            "is saved: the forward matmul ran again. The policy was asked about %s%s, so its MUST_SAVE "
            "on aten.mm.default never matched" % (
                got, want, _asked(asked),
                "" if any(k.startswith("aten.mm.default") for k in asked) else ", never aten.mm.default"))

    def test_sac_policy_applies_inside_compile(self, device):
        context_fn, asked = _recording_context_fn()
        f = _fresh_f()
        sac_compiled = torch.compile(
            lambda x, y: checkpoint(f, x, y, use_reentrant=False, context_fn=context_fn), fullgraph=True)
        got = self._matmuls_in_backward(sac_compiled, device)
        want = self._baseline(device)
        self.assertEqual(
            got, want,
            "under compile(sac(f)) backward computed %s matmuls, against %d where the forward matmul is "
            "saved. The policy was asked about %s" % (got, want, _asked(asked)))


instantiate_device_type_tests(SelectiveCheckpointOfCompiledFnTests, globals(), only_for=("cpu", "cuda"))

if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
