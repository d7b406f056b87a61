"""The patch series of sac_repro/upstream/ (PyTorch's fix for what the 2.10 fix of
pytorch/pytorch#161889 leaves open: under sac(compile(f)) a per-op SAC policy never sees f's ops,
aten.mm.default, so backward recomputes what the policy says to save), made in-process, so that
it can be measured on a released torch. Loaded in any Python started with this folder on
PYTHONPATH, as sac_repro/revert_fix is; for torch 2.10 to 2.15.

    PYTHONPATH=sac_repro/policy/fix_candidate python3 -m sac_repro
    SAC_FIX_CANDIDATE=warn PYTHONPATH=sac_repro/policy/fix_candidate python3 -m sac_repro bench

The series' new code is _sac_compiled_fn.py beside this file, which the series adds to torch as
torch/utils/_sac_compiled_fn.py (sac_repro/upstream/make_series.py writes the patches from it).
It is loaded here as that module, and each hook below makes the call that the series adds to one
of torch's own files:

1. torch/utils/checkpoint.py: _CachingTorchDispatchMode.__torch_dispatch__ calls
   on_policy_query (the warning; in fix mode the in-place veto too), and checkpoint hands a call
   to the module's checkpoint where the switch _sac_policy_applies_to_compiled_fn is on;
2. torch/_inductor/output_code.py: CompiledFxGraph.__call__ counts Inductor's code running;
3. torch/_dynamo/__init__.py: reset() resets the module's tables with Dynamo's caches;
4. torch/_dynamo/eval_frame.py: a compile wrapper carries its torch.compile context.

SAC_FIX_CANDIDATE picks the mode: fix (the default) turns the switch on; warn leaves it off and
makes hooks 1 (the warning), 2 and 3 only, as patch 0001 does. Nothing here imports torch: the change is made once
`import torch` has run, all of it or nothing; a torch that lacks a hook gets one line on stderr.
"""
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

ENV = "SAC_FIX_CANDIDATE"
MODES = ("fix", "warn")
MODE = os.environ.get(ENV, "fix")
RERUN_ENV = (ENV,)
WHAT = "candidate fix for the SAC policy under sac(compile(f))"
# Read by the bundle's report (the environment line, markdown, JSON, plot): what this process runs
CHANGE_LABEL = "%s (not loaded: torch was not imported)" % WHAT
# "module:qualname" of each torch function replaced, once the change is made
REPLACED = []
ADDED = []  # "module:name" of each function added to torch, which the series' module uses
ORIGINAL = {}  # the same names -> the functions they were
SHARED_NAME = "torch.utils._sac_compiled_fn"  # the module the series adds to torch
SHARED_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sac_compiled_fn.py")
SWITCH = "_sac_policy_applies_to_compiled_fn"  # torch.utils.checkpoint's, as the series adds it
_sac_compiled_fn = ckpt = None  # the shared module and torch.utils.checkpoint, once loaded


def say(msg):
    print("sac fix candidate: " + msg, file=sys.stderr, flush=True)


# ------------------------------------------------ the hooks, each the call the series adds to torch
def caching_dispatch(self, func, types_, args=(), kwargs=None):
    """_CachingTorchDispatchMode.__torch_dispatch__ (torch/utils/checkpoint.py)."""
    if func not in ckpt.SAC_IGNORED_OPS:
        _sac_compiled_fn.on_policy_query(func)
    return ORIGINAL["caching_dispatch"](self, func, types_, args, kwargs)


def inductor_call(self, inputs):
    """CompiledFxGraph.__call__ (torch/_inductor/output_code.py)."""
    inductor_code = _sac_compiled_fn.inductor_code_running
    inductor_code.depth += 1
    try:
        return ORIGINAL["inductor_call"](self, inputs)
    finally:
        inductor_code.depth -= 1


def reset_of(original):
    """torch._dynamo.reset (torch/_dynamo/__init__.py): the module's tables and what it said go
    with Dynamo's caches."""
    @functools.wraps(original)
    def reset():
        original()
        _sac_compiled_fn.reset()
    return reset


def dynamo_context_call(self, fn):
    """_TorchDynamoContext.__call__ (torch/_dynamo/eval_frame.py): the compile wrapper carries
    its context, as `module.dynamo_ctx` does for a compiled module."""
    wrapper = ORIGINAL["dynamo_context_call"](self, fn)
    if isinstance(wrapper, types.FunctionType) and hasattr(wrapper, "_torchdynamo_orig_callable"):
        wrapper._torchdynamo_context = self
    return wrapper


def checkpoint_of(original):
    """torch.utils.checkpoint.checkpoint, its first statement the one the series adds."""
    @functools.wraps(original)
    def checkpoint(function, *args, use_reentrant=None, context_fn=ckpt.noop_context_fn,
                   determinism_check=ckpt._DEFAULT_DETERMINISM_MODE, debug=False, early_stop=True, **kwargs):
        # BEGIN the series' hook
        if ckpt._sac_policy_applies_to_compiled_fn and _sac_compiled_fn.applies(use_reentrant, context_fn):
            return _sac_compiled_fn.checkpoint(
                ckpt.checkpoint, function, *args, context_fn=context_fn, determinism_check=determinism_check,
                debug=debug, early_stop=early_stop, **kwargs)
        # END the series' hook
        return original(function, *args, use_reentrant=use_reentrant, context_fn=context_fn,
                        determinism_check=determinism_check, debug=debug, early_stop=early_stop, **kwargs)
    return checkpoint


def innermost_backend(fn):
    """torch._dynamo.eval_frame.innermost_backend as 2.11 to 2.13 define it, for 2.10, which lacks it
    (the series' module finds the backend of a compiled function's context with it)."""
    while hasattr(fn, "_torchdynamo_orig_backend"):
        fn = fn._torchdynamo_orig_backend
        if not callable(fn):
            raise AssertionError(f"A callable function is expected, but {type(fn)} is provided.")
    return fn


# --------------------------------------------------------------------------- making the change
def pack_hook_codes(cls):
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    return [c for c in (init.co_consts if init else ()) if isinstance(c, types.CodeType) and c.co_name == "pack_hook"]


def targets(torch):
    """(key, owner, attribute, replacement maker) for the mode, or why this torch cannot take it."""
    import torch._dynamo as dynamo
    import torch._dynamo.eval_frame as eval_frame
    import torch._inductor.output_code as output_code
    import torch.utils.checkpoint as checkpoint
    wanted = [("caching_dispatch", checkpoint._CachingTorchDispatchMode, "__torch_dispatch__", lambda o: caching_dispatch),
              ("inductor_call", getattr(output_code, "CompiledFxGraph", None), "__call__", lambda o: inductor_call),
              ("dynamo_reset", dynamo, "reset", reset_of)]
    if MODE == "fix":
        wanted += [("dynamo_context_call", getattr(eval_frame, "_TorchDynamoContext", None), "__call__",
                    lambda o: dynamo_context_call),
                   ("checkpoint", checkpoint, "checkpoint", checkpoint_of)]
    for key, owner, attr, _ in wanted:
        if owner is None or not callable(vars(owner).get(attr)):
            return None, "%s.%s is missing" % (getattr(owner, "__qualname__", getattr(owner, "__name__", "?")), attr)
    import torch._dynamo.decorators as decorators
    if not hasattr(decorators, "error_on_graph_break"):
        return None, "torch._dynamo.error_on_graph_break is missing"
    for needed in ("DisableContext", "OptimizedModule", "_stance"):
        if not hasattr(eval_frame, needed):
            return None, "torch._dynamo.eval_frame.%s is missing" % needed
    if not hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks"):
        return None, "torch._C._autograd._top_saved_tensors_default_hooks is missing"
    if not (pack_hook_codes(checkpoint._checkpoint_hook) and pack_hook_codes(checkpoint._recomputation_hook)):
        return None, "the pack hooks of torch.utils.checkpoint's _checkpoint_hook and _recomputation_hook are missing"
    if not checkpoint._CachingTorchDispatchMode.ignore_compile_internals():
        answer = vars(checkpoint._CachingTorchDispatchMode).get("ignore_compile_internals")
        code = getattr(getattr(answer, "__func__", answer), "__code__", None)
        if code is not None and os.path.realpath(code.co_filename) != os.path.realpath(checkpoint.__file__):
            return None, ("the 2.10 fix is reverted in-process (by %s): f runs eagerly under SAC, and there is "
                          "no compiled region for the policy to see" % code.co_filename)
        return None, ("SAC's dispatch modes do not opt in with ignore_compile_internals() on this torch (before "
                      "2.10): f runs eagerly under SAC, and there is no compiled region for the policy to see")
    return wanted, None


def load_shared(torch):
    """The series' module, from the file beside this one, as torch.utils._sac_compiled_fn."""
    spec = importlib.util.spec_from_file_location(SHARED_NAME, SHARED_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[SHARED_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[SHARED_NAME]
        raise
    torch.utils._sac_compiled_fn = module
    return module


def install(torch):
    """Makes the whole change on an imported torch, or none of it (one line says why)."""
    global CHANGE_LABEL, _sac_compiled_fn, ckpt
    if REPLACED:
        return True
    import torch.utils.checkpoint as checkpoint
    if hasattr(checkpoint, SWITCH):  # this torch has the series itself: its switch is all there is to set
        setattr(checkpoint, SWITCH, MODE == "fix")
        CHANGE_LABEL = "%s: not loaded, this torch has the series; its switch set %s (mode: %s)" % (
            WHAT, "on" if MODE == "fix" else "off", MODE)
        say("this torch has the series itself: %s.%s set %s; nothing else changed" % (
            checkpoint.__name__, SWITCH, MODE == "fix"))
        return False
    try:
        found, missing = targets(torch)
        if not missing:
            ckpt, _sac_compiled_fn = checkpoint, load_shared(torch)
    except Exception as e:  # a torch too different to even look at
        found, missing = None, "%s: %s" % (type(e).__name__, e)
    if missing:
        CHANGE_LABEL = "%s (not loaded: %s)" % (WHAT, missing)
        say("not loaded on torch %s: %s; nothing changed" % (getattr(torch, "__version__", "?"), missing))
        return False
    setattr(checkpoint, SWITCH, MODE == "fix")
    import torch._dynamo.eval_frame as eval_frame
    if MODE == "fix" and not hasattr(eval_frame, "innermost_backend"):
        eval_frame.innermost_backend = innermost_backend
        ADDED.append("torch._dynamo.eval_frame:innermost_backend")
    for key, owner, attr, make in found:
        ORIGINAL[key] = vars(owner)[attr]
        setattr(owner, attr, make(ORIGINAL[key]))
        REPLACED.append("%s:%s" % (owner.__name__, attr) if isinstance(owner, types.ModuleType)
                        else "%s:%s.%s" % (owner.__module__, owner.__qualname__, attr))
    for key, owner, attr, _ in found:
        if isinstance(owner, types.ModuleType):
            repoint(ORIGINAL[key], getattr(owner, attr), owner)
    checkpoint._sac_repro_fix_candidate = MODE
    added = "".join(", adding %s as 2.11 defines it" % a.replace(":", ".") for a in ADDED)
    CHANGE_LABEL = "%s loaded in-process%s (mode: %s)" % (WHAT, added, MODE)
    return True


def repoint(original, replacement, owner):
    """Modules imported already that bound a replaced function by name: checkpoint_wrapper binds
    checkpoint (Dynamo knows checkpoint by the module's attribute, and would try to trace a stale
    copy), torch._dynamo.testing binds reset."""
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", {})
        for name, value in list(names.items()):
            if value is original and module is not owner:
                setattr(module, name, replacement)


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if FINDER in sys.meta_path:
            sys.meta_path.remove(FINDER)
        install(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


FINDER = _Finder()
if not os.path.isfile(SHARED_FILE):
    CHANGE_LABEL = "%s (not loaded: _sac_compiled_fn.py is not beside its sitecustomize.py)" % WHAT
    print("sac fix candidate: _sac_compiled_fn.py is not beside %s: copy the whole folder, not sitecustomize.py "
          "alone; nothing changed" % os.path.abspath(__file__), file=sys.stderr, flush=True)
elif MODE not in MODES:
    CHANGE_LABEL = "%s (not loaded: %s=%r is not one of %s)" % (WHAT, ENV, MODE, ", ".join(MODES))
    say("%s=%r is not one of %s; nothing changed" % (ENV, MODE, ", ".join(MODES)))
elif "torch" in sys.modules:
    install(sys.modules["torch"])
else:
    sys.meta_path.insert(0, FINDER)
