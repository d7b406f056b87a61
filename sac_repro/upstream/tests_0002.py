# The test class that patch 0002 adds to PyTorch's test/dynamo/test_activation_checkpointing.py,
# after the regression block (sac_repro/upstream/make_series.py puts it there). It runs only
# with the names that file imports.
def _three_mm(x, w1, w2, w3):
    return torch.relu(torch.relu(x @ w1) @ w2) @ w3


def _three_mm_with_break(x, w1, w2, w3):
    y = torch.relu(x @ w1)
    torch._dynamo.graph_break()
    return torch.relu(y @ w2) @ w3


def _three_mm_with_checkpoint(x, w1, w2, w3):
    return checkpoint(_three_mm, x, w1, w2, w3, use_reentrant=False) @ w1


class _ThreeMM(torch.nn.Module):
    def __init__(self, norm=False):
        super().__init__()
        self.w = nn.ParameterList(nn.Parameter(torch.randn(16, 16)) for _ in range(3))
        self.norm = nn.BatchNorm1d(16) if norm else nn.Identity()

    def forward(self, x):
        return _three_mm(self.norm(x), *self.w)


class _ContextFn:
    def __call__(self):
        return create_selective_checkpoint_contexts([torch.ops.aten.mm.default])


def _save_mm_context_fn():
    return functools.partial(
        create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]
    )


def _save_if_context_fn(table):
    def policy_fn(ctx, op, *args, **kwargs):
        if table.get(op):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy_fn)


def _counting_context_fn():
    # torchtitan's policy: a count per context_fn() call, saving every other matmul
    counts = {False: 0, True: 0}

    def policy_fn(ctx, op, *args, **kwargs):
        if op != torch.ops.aten.mm.default:
            return CheckpointPolicy.PREFER_RECOMPUTE
        counts[ctx.is_recompute] += 1
        if counts[ctx.is_recompute] % 2:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy_fn)


def _refusing_context_fn():
    def policy_fn(ctx, op, *args, **kwargs):
        if op == torch.ops.aten.mm.default:
            raise ValueError("this policy refuses aten.mm")
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy_fn)


class SelectiveCheckpointOfCompiledFnSwitchTests(torch._dynamo.test_case.TestCase):
    # With torch.utils.checkpoint._sac_policy_applies_to_compiled_fn on, checkpoint runs
    # checkpoint(torch.compile(f), ..., use_reentrant=False, context_fn=...) as
    # compile(sac(f)), so that the policy applies to f's ops as in eager SAC
    # (pytorch/pytorch#161889); where it cannot, the call runs as with the switch off,
    # and a warning says why.
    def setUp(self):
        # resets Dynamo, and with it what checkpoint said and counted
        super().setUp()
        switch = self._switch(True)
        switch.start()
        self.addCleanup(switch.stop)

    @staticmethod
    def _switch(on):
        # create=True: on a torch without the switch, a test fails on what it measures
        return mock.patch.object(
            torch.utils.checkpoint,
            "_sac_policy_applies_to_compiled_fn",
            on,
            create=True,
        )

    @staticmethod
    def _inputs():
        return [torch.randn(16, 16, requires_grad=True) for _ in range(4)]

    @staticmethod
    def _sac(fn, context_fn, **kwargs):
        return lambda *args: checkpoint(
            fn, *args, use_reentrant=False, context_fn=context_fn, **kwargs
        )

    def _nested(self, fn, context_fn):
        inner = self._sac(fn, context_fn)
        return lambda *args: checkpoint(inner, *args, use_reentrant=False)

    @staticmethod
    def _bwd(step, *args):
        # backward matmuls of the step after one that compiles
        step(*args).sum().backward()
        loss = step(*args).sum()
        with torch.profiler.profile() as prof:
            loss.backward()
        return _matmuls_computed(prof, "cpu")

    def _bwd_unsaid(self, step, *args):
        # ... where checkpoint says nothing
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            bwd = self._bwd(step, *args)
        said = [str(w.message) for w in caught]
        self.assertEqual(
            [m for m in said if m.startswith("torch.utils.checkpoint:")], []
        )
        return bwd

    def _bwd_said_once(self, regex, step, *args):
        # ... where checkpoint says what regex matches, once
        with self.assertWarnsRegex(UserWarning, regex) as said:
            bwd = self._bwd(step, *args)
        self.assertEqual(
            len([w for w in said.warnings if re.search(regex, str(w.message))]), 1
        )
        return bwd

    def _assert_declined(self, make_step, args, reason):
        with self._switch(False):
            today = self._bwd(make_step(), *args)
        torch._dynamo.reset()
        declined = "_sac_policy_applies_to_compiled_fn off, .*" + re.escape(reason)
        self.assertEqual(self._bwd_said_once(declined, make_step(), *args), today)

    def test_the_policy_applies_to_a_compiled_function_and_module(self):
        context_fn = _save_mm_context_fn()
        args = self._inputs()
        self.assertEqual(self._bwd_unsaid(self._sac(_three_mm, context_fn), *args), 6)
        module = _ThreeMM()
        compiled_in_place = copy.deepcopy(module)
        compiled_in_place.compile()
        forms = {
            "torch.compile(f)": (torch.compile(_three_mm), args, _three_mm),
            "torch.compile(module)": (torch.compile(module), args[:1], module),
            "module.compile()": (compiled_in_place, args[:1], module),
        }
        for name, (fn, fn_args, eager_fn) in forms.items():
            step = self._sac(fn, context_fn)
            self.assertEqual(self._bwd_unsaid(step, *fn_args), 6, name)
            out = step(*fn_args)
            self.assertEqual(type(out.grad_fn).__name__, "CompiledFunctionBackward")
            self.assertEqual(out, eager_fn(*fn_args), msg=name)

    def test_with_the_switch_off_the_policy_sees_inductors_calls(self):
        step = self._sac(torch.compile(_three_mm), _save_mm_context_fn())
        with self._switch(False):
            bwd = self._bwd_said_once("asked about aten.mm.out", step, *self._inputs())
        self.assertEqual(bwd, 9)

    def test_the_policy_runs_per_trace_and_per_context_fn(self):
        # a count kept per context_fn() call, and policies alike but for a dict: each as
        # in eager SAC, each context_fn with its own graph
        mm = torch.ops.aten.mm.default
        cases = [
            _counting_context_fn,
            _save_if_context_fn({mm: 1}),
            _save_if_context_fn({}),
        ]
        compiled = torch.compile(_three_mm)
        args = self._inputs()
        for i, context_fn in enumerate(cases):
            eager = self._bwd(self._sac(_three_mm, context_fn), *args)
            self.assertEqual(
                self._bwd_unsaid(self._sac(compiled, context_fn), *args), eager, i
            )

    def test_declines_where_compile_of_sac_would_differ_from_eager_sac(self):
        args = self._inputs()
        hooked = _ThreeMM()
        hooked.register_forward_hook(lambda *a: None)
        declines = [
            (
                lambda: self._nested(torch.compile(_three_mm), _save_mm_context_fn()),
                args,
                "nested in another checkpoint",
            ),
            (
                lambda: self._sac(torch.compile(hooked), _save_mm_context_fn()),
                args[:1],
                "the compiled module has hooks",
            ),
            (
                lambda: self._sac(
                    torch.compile(_ThreeMM(norm=True)), _save_mm_context_fn()
                ),
                args[:1],
                "f changes a tensor in place",
            ),
            (
                lambda: self._sac(
                    torch.compile(_three_mm_with_break), _save_mm_context_fn()
                ),
                args,
                "compile(sac(f)) did not compile (Unsupported: ",
            ),
            (
                lambda: self._sac(torch.compile(_three_mm), _refusing_context_fn),
                args,
                "did not compile (ValueError: this policy refuses aten.mm)",
            ),
            (
                lambda: self._sac(
                    torch.compile(_three_mm_with_checkpoint), _save_mm_context_fn()
                ),
                args,
                "f calls checkpoint itself",
            ),
            (
                lambda: self._sac(torch.compile(_three_mm), _ContextFn()),
                args,
                "its context_fn is a _ContextFn",
            ),
            (
                lambda: self._sac(
                    torch.compile(_three_mm),
                    _save_mm_context_fn(),
                    determinism_check="none",
                ),
                args,
                "determinism_check='none'",
            ),
        ]
        for make_step, step_args, reason in declines:
            self._assert_declined(make_step, step_args, reason)

    def test_a_strict_stance_declines_a_region_not_compiled_before_it(self):
        compiled = torch.compile(_three_mm)
        args = self._inputs()
        compiled(*args)
        step = self._sac(compiled, _save_mm_context_fn())
        with torch.compiler.set_stance("fail_on_recompile"):
            bwd = self._bwd_said_once(r"set_stance\('fail_on_recompile'\)", step, *args)
        self.assertEqual(bwd, 9)

    def test_a_context_fn_made_anew_on_every_call_stops_compiling(self):
        cnt = CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(_three_mm, backend=cnt)
        args = self._inputs()
        with self.assertWarnsRegex(UserWarning, "dropped after use") as said:
            for _ in range(7):
                self._sac(compiled, _save_mm_context_fn())(*args).sum().backward()
        said = [w for w in said.warnings if "dropped after use" in str(w.message)]
        self.assertEqual(len(said), 1)
        # four regions, then f as with the switch off
        self.assertEqual(cnt.frame_count, 5)

    def test_a_decline_is_said_for_each_compiled_fn_and_forgotten_on_reset(self):
        # context_fns made anew and dropped stop new regions of f's code: that is said
        # again, naming f, for another torch.compile(f), and forgotten, with Dynamo's
        # caches, by torch._dynamo.reset()
        args = self._inputs()
        thrown = torch.compile(_three_mm, backend="aot_eager")
        with self.assertWarnsRegex(UserWarning, "f = _three_mm runs as.*dropped after"):
            for _ in range(5):
                self._sac(thrown, _save_mm_context_fn())(*args)
        context_fn = _save_mm_context_fn()
        step = self._sac(torch.compile(_three_mm), context_fn)
        with self.assertWarnsRegex(UserWarning, "f = _three_mm runs as.*dropped after"):
            self.assertEqual(self._bwd(step, *args), 9)
        torch._dynamo.reset()
        step = self._sac(torch.compile(_three_mm), context_fn)
        self.assertEqual(self._bwd_unsaid(step, *args), 6)

    @torch._inductor.config.patch(wrap_inductor_compiled_regions=True)
    def test_wrap_inductor_compiled_regions_is_left_as_it_is(self):
        context_fn = functools.partial(
            create_selective_checkpoint_contexts,
            [torch.ops.higher_order.inductor_compiled_code],
        )
        step = self._sac(torch.compile(_three_mm), context_fn)
        self.assertEqual(self._bwd_unsaid(step, *self._inputs()), 6)

    def test_a_compiled_fn_called_inside_an_eager_fn_is_left_and_warned(self):
        compiled = torch.compile(_three_mm)
        step = self._sac(lambda *a: compiled(*a), _save_mm_context_fn())
        # said as a decline is: it runs as with the switch off, and why
        warned = "aten.mm.out.*compiled_fn off: the switch applies only where"
        self.assertEqual(self._bwd_said_once(warned, step, *self._inputs()), 9)
