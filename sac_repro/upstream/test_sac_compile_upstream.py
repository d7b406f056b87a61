# Owner(s): ["module: dynamo"]
"""Regression tests for pytorch/pytorch#161889: a torch.compile'd function called inside
selective activation checkpointing (SAC), sac(compile(f)).

The part between "# BEGIN upstream" and "# END upstream" is meant to be appended, unchanged,
to PyTorch's test/dynamo/test_activation_checkpointing.py just before its
`if __name__ == "__main__":`; it needs no import that file lacks. The rest of this file lets
the same part run on its own, written for any torch from 2.5:

    python sac_repro/upstream/test_sac_compile_upstream.py -v    # needs expecttest, as PyTorch's tests do

On the CPU, and on CUDA where there is one:

- test_compiled_fn_runs_compiled_under_sac: every call of the compiled f under SAC runs the
  graph Inductor compiled, with eager's results. Fails before 2.10 (Dynamo skipped f under
  SAC's dispatch modes, the bug); passes from 2.10.
- test_sac_op_policy_applies_inside_compiled_fn: the open half, an expected failure. A policy
  that saves aten.mm.default keeps f's matmul out of backward under sac(compile(f)) as it
  does for eager f. Today SAC is asked about Inductor's aten.mm.out instead, and backward
  computes 3 matmuls against 2.
- test_sac_region_policy_saves_compiled_region: what 2.10+ supports. With
  wrap_inductor_compiled_regions, a policy that saves the inductor_compiled_code region keeps
  backward at 2 matmuls, with eager's results.

Before 2.10 the last two are skipped here (below the block): f never runs compiled under SAC
there, and wrap_inductor_compiled_regions does not exist.
"""

import functools
import re
import unittest

import torch
import torch._dynamo.test_case
from torch._dynamo.testing import CompileCounterWithBackend
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.utils.checkpoint import (
    checkpoint,
    CheckpointPolicy,
    create_selective_checkpoint_contexts,
)


# BEGIN upstream
# pytorch/pytorch#161889: a torch.compile'd function called inside selective activation
# checkpointing, sac(compile(f)). The tests above cover compile(sac(f)), where Dynamo
# traces the checkpoint itself. No import beyond this file's own.

_CUBLAS_KERNEL = re.compile(r"gemm|gemv|xmma|cutlass|nvjet", re.IGNORECASE)
_RAN_EAGERLY = (
    "the compiled f ran eagerly under SAC (test_compiled_fn_runs_compiled_under_sac)"
)


def _sac_fn(x, y):
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y


def _save_mm_policy(asked):
    def policy_fn(ctx, op, *args, **kwargs):
        if not ctx.is_recompute:
            asked.append(str(op))
        if op == torch.ops.aten.mm.default:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy_fn


def _save_compiled_region_policy(ctx, op, *args, **kwargs):
    if op == torch.ops.higher_order.inductor_compiled_code:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _matmuls_computed(prof, device):
    # A deliberate copy of sac_repro/judge/measure.py's backward_matmuls, in PyTorch's test idiom: this
    # block is pasted into PyTorch's test file and must not import the bundle.
    # On CUDA a matmul served from SAC's cache launches no kernel. On the CPU, an
    # aten::mm that a dispatch mode intercepts wraps the one that computes, and one
    # served from SAC's cache only detaches the saved output.
    if torch.device(device).type == "cuda":
        return sum(
            e.device_type == torch.autograd.DeviceType.CUDA
            and bool(_CUBLAS_KERNEL.search(e.name))
            for e in prof.events()
        )
    computed = 0
    for e in prof.events():
        children = {c.name for c in e.cpu_children}
        if e.name != "aten::mm" or children & {"aten::mm", "PythonDispatchMode"}:
            continue
        if children and children <= {"aten::detach"}:
            continue
        computed += 1
    return computed


def _expected_failure_on(message):
    """unittest.expectedFailure for one known failure only: an AssertionError whose text
    holds `message`. Any other exception is re-raised from a cleanup, which unittest
    runs after the expected-failure window, so it fails the test instead."""

    def decorator(test):
        @functools.wraps(test)
        def wrapper(self, *args, **kwargs):
            try:
                test(self, *args, **kwargs)
            except unittest.SkipTest:
                raise
            except Exception as e:
                if isinstance(e, AssertionError) and message in str(e):
                    raise
                self.addCleanup(_reraise, e)

        return unittest.expectedFailure(wrapper)

    return decorator


def _reraise(e):
    raise e


class SelectiveCheckpointOfCompiledFnTests(torch._dynamo.test_case.TestCase):
    def _inputs(self, device):
        return (
            torch.randn(10, 12, device=device, requires_grad=True),
            torch.randn(12, 10, device=device, requires_grad=True),
        )

    def _sac_of(self, fn, policy_fn):
        context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)
        return lambda x, y: checkpoint(
            fn, x, y, use_reentrant=False, context_fn=context_fn
        )

    def _run_against_eager(self, fn, device):
        x, y = self._inputs(device)
        x_ref, y_ref = (t.detach().clone().requires_grad_() for t in (x, y))
        out = fn(x, y)
        out.sum().backward()
        ref = _sac_fn(x_ref, y_ref)
        ref.sum().backward()
        self.assertEqual(out, ref)
        self.assertEqual(x.grad, x_ref.grad)
        self.assertEqual(y.grad, y_ref.grad)
        # AOTAutograd's autograd.Function made the output only where the graph ran.
        return type(out.grad_fn).__name__ == "CompiledFunctionBackward"

    def _matmuls_in_backward(self, fn, device):
        # The step after one that compiles, its forward and backward profiled apart.
        x, y = self._inputs(device)
        fn(x, y).sum().backward()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if x.is_cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as fwd:
            loss = fn(x, y).sum()
            if x.is_cuda:
                torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as bwd:
            loss.backward()
            if x.is_cuda:
                torch.cuda.synchronize()
        n = _matmuls_computed(fwd, device)
        self.assertEqual(n, 1, f"{n} matmuls counted in a forward of f, which runs one")
        return _matmuls_computed(bwd, device)

    def test_compiled_fn_runs_compiled_under_sac(self, device):
        # Fixed in 2.10: SAC's dispatch modes opt in with ignore_compile_internals(), so
        # Dynamo no longer skips f under them. The nearest test,
        # test_checkpoint_recompute_preserves_nested_fx_trace_policy, calls a compiled f
        # inside checkpoint under make_fx, on CUDA, without SAC.
        cnt = CompileCounterWithBackend("inductor")
        sac_of_compiled = self._sac_of(
            torch.compile(_sac_fn, backend=cnt), _save_mm_policy([])
        )
        runs = sum(self._run_against_eager(sac_of_compiled, device) for _ in range(3))
        self.assertEqual(
            runs,
            3,
            f"pytorch/pytorch#161889: {3 - runs} of 3 calls of the compiled f under "
            "SAC ran eagerly: Dynamo skipped f under SAC's dispatch mode",
        )
        # one frame compiled, whether as f itself (today) or as compile(sac(f)) with f's
        # ops inside its checkpoint subgraph (a fix that moves the checkpoint in)
        self.assertEqual(cnt.frame_count, 1)

    # The proposal: a per-op policy should reach the ops of a compiled region. Today SAC
    # is asked about what Inductor's code dispatches (aten.mm.out), so MUST_SAVE on
    # aten.mm.default never matches and backward reruns the region's matmul.
    @_expected_failure_on(
        "pytorch/pytorch#161889: backward computed 3 matmuls, against 2"
    )
    def test_sac_op_policy_applies_inside_compiled_fn(self, device):
        # The nearest test, test_compile_selective_checkpoint_must_not_recompute_gemm
        # (GPU only), checks this policy under compile(sac(f)) in the traced graphs.
        # Under sac(compile(f)) SAC recomputes at run time, outside any graph: counted
        # with the profiler, checked against eager f under SAC first.
        eager_asked, compiled_asked = [], []
        sac_of_eager = self._sac_of(_sac_fn, _save_mm_policy(eager_asked))
        n = self._matmuls_in_backward(sac_of_eager, device)
        self.assertEqual(n, 2, f"eager f under SAC: backward computed {n} matmuls")
        cnt = CompileCounterWithBackend("inductor")
        sac_of_compiled = self._sac_of(
            torch.compile(_sac_fn, backend=cnt), _save_mm_policy(compiled_asked)
        )
        bwd = self._matmuls_in_backward(sac_of_compiled, device)
        self.assertTrue(self._run_against_eager(sac_of_compiled, device), _RAN_EAGERLY)
        self.assertEqual(cnt.frame_count, 1)
        self.assertEqual(
            bwd,
            2,
            f"pytorch/pytorch#161889: backward computed {bwd} matmuls, against 2 with "
            f"the forward matmul saved. The policy was asked about "
            f"{sorted(set(compiled_asked))} inside the compiled f, about "
            f"{sorted(set(eager_asked))} in eager f",
        )

    def test_sac_region_policy_saves_compiled_region(self, device):
        # What 2.10+ supports: with wrap_inductor_compiled_regions SAC sees the compiled
        # region as one inductor_compiled_code op, saved or recomputed whole. The
        # nearest test, test_sac_outer_compile_inner_basic in
        # test_wrap_inductor_compiled_regions.py (CUDA only), checks that the op is
        # visible and the numerics; this one counts that backward does not rerun the
        # region's matmul.
        cnt = CompileCounterWithBackend("inductor")
        sac_of_compiled = self._sac_of(
            torch.compile(_sac_fn, backend=cnt), _save_compiled_region_policy
        )
        with torch._inductor.config.patch(wrap_inductor_compiled_regions=True):
            bwd = self._matmuls_in_backward(sac_of_compiled, device)
            self.assertTrue(
                self._run_against_eager(sac_of_compiled, device), _RAN_EAGERLY
            )
        self.assertEqual(cnt.frame_count, 1)
        self.assertEqual(
            bwd, 2, f"backward computed {bwd} matmuls, against 2 with the region saved"
        )


instantiate_device_type_tests(
    SelectiveCheckpointOfCompiledFnTests, globals(), only_for=("cpu", "cuda")
)
# END upstream


if torch.__version__ < "2.10":
    # There f never runs compiled under SAC (the first test fails) and
    # wrap_inductor_compiled_regions does not exist: the other two cannot be shown.
    _skip = unittest.skip("torch before 2.10: f does not run compiled under SAC")
    for _cls_name, _cls in list(globals().items()):
        if _cls_name.startswith("SelectiveCheckpointOfCompiledFnTests"):
            for _name in list(vars(_cls)):
                if _name.startswith(("test_sac_op_policy", "test_sac_region_policy")):
                    setattr(_cls, _name, _skip(getattr(_cls, _name)))


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
