# The test class that patch 0001 adds to PyTorch's test/dynamo/test_activation_checkpointing.py,
# before the regression block of test_sac_compile_upstream.py (sac_repro/upstream/make_series.py
# puts both there). It runs only with the names that file imports.
class SelectiveCheckpointCompiledRegionWarningTests(torch._dynamo.test_case.TestCase):
    # Under checkpoint(torch.compile(f), ..., context_fn=...) the SAC policy is asked
    # about the calls Inductor's code makes (aten.mm.out), not f's ops
    # (pytorch/pytorch#161889). Warn once there, and nowhere the policy is honoured.
    def _context_fn(self):
        return functools.partial(
            create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]
        )

    @staticmethod
    def _fn(x, y):
        return torch.sin(x @ y)

    def _step(self, fn, *shapes):
        inputs = [torch.randn(*s, requires_grad=True) for s in shapes]
        fn(*inputs).sum().backward()

    def _sac_warnings(self, fn, *shapes):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                self._step(fn, *shapes)
        return [w for w in caught if "out= call" in str(w.message)]

    def _sac_of(self, fn, context_fn):
        return lambda *args: checkpoint(
            fn, *args, use_reentrant=False, context_fn=context_fn
        )

    def test_sac_of_inductor_compiled_fn_warns_once(self):
        # once until torch._dynamo.reset(), which the test case's setUp calls
        fn = self._sac_of(
            torch.compile(self._fn, backend="inductor"), self._context_fn()
        )
        regex = "aten.mm.out, the out= call.*wrap_inductor_compiled_regions"
        with self.assertWarnsRegex(UserWarning, regex) as caught:
            for _ in range(3):
                self._step(fn, (8, 8), (8, 8))
        said = [w for w in caught.warnings if "out= call" in str(w.message)]
        self.assertEqual(len(said), 1)

    def test_no_warning_where_the_policy_is_honoured(self):
        context_fn = self._context_fn()
        cases = {
            "eager SAC": self._sac_of(self._fn, context_fn),
            "aot_eager": self._sac_of(
                torch.compile(self._fn, backend="aot_eager"), context_fn
            ),
            "plain checkpoint": lambda x, y: checkpoint(
                torch.compile(self._fn, backend="inductor"), x, y, use_reentrant=False
            ),
            "compile(sac(f))": torch.compile(
                self._sac_of(self._fn, context_fn), backend="inductor"
            ),
        }
        for name, fn in cases.items():
            torch._dynamo.reset()
            self.assertEqual(self._sac_warnings(fn, (8, 8), (8, 8)), [], name)

    def test_no_warning_for_a_fallback_op_that_sac_caches(self):
        def attention(q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

        context_fn = functools.partial(
            create_selective_checkpoint_contexts,
            [torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default],
        )
        fn = self._sac_of(torch.compile(attention, backend="inductor"), context_fn)
        shape = (2, 4, 32, 16)
        self.assertEqual(self._sac_warnings(fn, shape, shape, shape), [])

    @torch._inductor.config.patch(wrap_inductor_compiled_regions=True)
    def test_no_warning_with_wrap_inductor_compiled_regions(self):
        fn = self._sac_of(
            torch.compile(self._fn, backend="inductor"), self._context_fn()
        )
        self.assertEqual(self._sac_warnings(fn, (8, 8), (8, 8)), [])
