"""A candidate PyTorch change for what the 2.10 fix of pytorch/pytorch#161889 leaves open: under
sac(compile(f)) a per-op SAC policy never sees f's ops (aten.mm.default), so backward recomputes
what the policy says to save. Loaded in any Python started with this folder on PYTHONPATH, as
sac_repro/revert_fix is; for torch 2.10 to 2.15.

    PYTHONPATH=sac_repro/policy/fix_candidate python3 -m sac_repro
    SAC_FIX_CANDIDATE=warn PYTHONPATH=sac_repro/policy/fix_candidate python3 sac_repro/bench/bench_sac_compile.py

SAC_FIX_CANDIDATE picks the mode:

- fix (the default): a frame that Dynamo compiles while a SAC policy is active is compiled as
  compile(sac(f)) with that policy, so the partitioner saves what the policy says and the rest is
  recomputed inside the compiled backward.
- warn: changes no result; the first time a SAC policy is asked about an op of a compiled region
  (Inductor's aten.mm.out, a fallback), one UserWarning names compile(sac(f)).

Each part stands for one file of PyTorch (docs/fix.md has the design, its risks and the numbers):

1. torch/utils/checkpoint.py: the recompute mode keeps its policy, so the policy on the stack is
   known in forward and in recompute alike; the warning.
2. torch/_dynamo/convert_frame.py: the policy on the stack is recorded before Dynamo disables the
   modes to compile a frame.
3. torch/_dynamo/guards.py: every frame is guarded on the policy it was compiled under (None
   outside SAC), next to the global-state guard that every frame has.
4. torch/_dynamo/backends/common.py (the AOTAutograd entry of aot_eager and inductor): a graph
   compiled under a policy becomes tag_activation_checkpoint(body, *inputs) with the policy as the
   body's context_fn, the graph Dynamo makes for compile(sac(f)).
5. torch/_functorch/_aot_autograd/runtime_wrappers.py: while such a region runs, the outer
   checkpoint's saved-tensor hooks and its SAC mode (when on top) step aside, so the region keeps
   the residuals its compiled backward needs.

Nothing here imports torch: the change is made once `import torch` has run, all of it or nothing.
A torch that lacks a hook gets one line on stderr, and nothing of it is changed.
"""
import contextlib
import functools
import importlib.abc
import importlib.machinery
import operator
import os
import sys
import threading
import types
import warnings

ENV = "SAC_FIX_CANDIDATE"
MODES = ("fix", "warn")
MODE = os.environ.get(ENV, "fix")
WHAT = "candidate fix for the SAC policy under sac(compile(f))"
# Read by the bundle's report (the environment line, markdown, JSON, plot): what this process runs
CHANGE_LABEL = "%s (not loaded: torch was not imported)" % WHAT
# "module:qualname" of each torch function replaced, once the change is made (docs/fix.md lists them)
REPLACED = []
ORIGINAL = {}  # the same names -> the functions they were

_tls = threading.local()  # .compiling: (policy,) while Dynamo compiles a frame; .in_region: depth
_warned = []  # the warning is given once per process
_keys = {}  # id(policy) -> (policy, key): the policy is kept, so its id is not reused


def say(msg):
    print("sac fix candidate: " + msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------- 1. torch/utils/checkpoint.py
def cached_mode_init(self, policy_fn, *args, **kwargs):
    """_CachedTorchDispatchMode.__init__ keeps its policy, so that a frame called again in
    recompute finds the policy it found in forward. From 2.13 create_selective_checkpoint_contexts
    passes None ("ignored for BC"); upstream would pass policy_fn, here it is read from that call."""
    ORIGINAL["cached_init"](self, policy_fn, *args, **kwargs)
    if policy_fn is None:
        caller = sys._getframe(1)
        if caller.f_code is CONTEXTS_CODE:
            policy_fn = caller.f_locals.get("policy_fn")
    self._sac_fix_policy = policy_fn


def caching_dispatch(self, func, types_, args=(), kwargs=None):
    """_CachingTorchDispatchMode.__torch_dispatch__: warns the first time the policy is asked,
    inside a compiled region, about an op that torch.compile's code dispatched."""
    if (getattr(_tls, "in_region", 0) and not _warned and func not in CKPT.SAC_IGNORED_OPS
            and getattr(func, "__name__", "") != "inductor_compiled_code"):
        # inductor_compiled_code is wrap_inductor_compiled_regions' region op: a policy asked
        # about it knows that it gets the region, not its ops
        _warned.append(func)
        warnings.warn(
            "torch.utils.checkpoint: a selective activation checkpointing policy was asked about "
            "%s, an op of the code torch.compile generated, not one of the compiled function's own "
            "ops: under checkpoint(torch.compile(f), ..., context_fn=...) a per-op policy cannot see "
            "f's ops (aten.mm.default), and what it would save is recomputed in backward. Put the "
            "checkpoint inside the compiled function, compile(sac(f)): torch.compile(lambda *args: "
            "checkpoint(f, *args, use_reentrant=False, context_fn=context_fn)) "
            "(pytorch/pytorch#161889)" % func, UserWarning, stacklevel=2)
    return ORIGINAL["caching_dispatch"](self, func, types_, args, kwargs)


def active_policy():
    """The policy of the innermost SAC mode on the dispatch-mode stack, or None."""
    C = TORCH._C
    for i in range(C._len_torch_dispatch_stack() - 1, -1, -1):
        mode = C._get_dispatch_stack_at(i)
        if isinstance(mode, CKPT._CachingTorchDispatchMode):
            return mode.policy_fn
        if isinstance(mode, CKPT._CachedTorchDispatchMode):
            return getattr(mode, "_sac_fix_policy", None)
    return None


def frozen(obj, depth=0):
    """A hashable stand-in for a policy, for the guard: a function by its code and what its closure
    holds (op lists and sets by value, as create_selective_checkpoint_contexts([ops]) makes a new
    closure on every call); a dict by its type only, since policies keep counters in one
    (torchtitan's) and compile(sac(f)) runs them at trace time too; anything else by identity."""
    if depth > 4:
        return ("id", id(obj))
    if obj is None or isinstance(obj, (bool, int, float, str, bytes, types.CodeType, TORCH._ops.OpOverload,
                                       TORCH._ops.OpOverloadPacket, TORCH._ops.HigherOrderOperator)):
        return obj
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__,) + tuple(frozen(o, depth + 1) for o in obj)
    if isinstance(obj, (set, frozenset)):
        return ("set", frozenset(frozen(o, depth + 1) for o in obj))
    if isinstance(obj, dict):
        return ("dict", type(obj).__name__)
    if isinstance(obj, functools.partial):
        return ("partial", frozen(obj.func, depth + 1), frozen(obj.args, depth + 1),
                tuple(sorted((k, frozen(v, depth + 1)) for k, v in obj.keywords.items())))
    if isinstance(obj, types.FunctionType):
        cells = []
        for cell in obj.__closure__ or ():
            try:
                cells.append(frozen(cell.cell_contents, depth + 1))
            except ValueError:  # a cell not yet filled
                cells.append(("empty",))
        return ("function", obj.__code__, frozen(obj.__defaults__, depth + 1), tuple(cells))
    if isinstance(obj, types.MethodType):
        return ("method", frozen(obj.__func__, depth + 1), ("id", id(obj.__self__)))
    return ("id", id(obj))


def policy_key(policy):
    if policy is None:
        return None
    explicit = getattr(policy, "cache_hash", None)  # what AOTAutogradCache asks of a context_fn
    if explicit is not None:
        return ("cache_hash", explicit)
    hit = _keys.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    if len(_keys) > 512:
        _keys.clear()
    key = frozen(policy)
    _keys[id(policy)] = (policy, key)
    return key


def current_key():
    """The key the guard compares: while Dynamo compiles (the modes are disabled then, and the
    guards it builds are checked on the frame), the policy recorded for that compile."""
    compiling = getattr(_tls, "compiling", None)
    return policy_key(compiling[0] if compiling is not None else active_policy())


# ------------------------------------------------------------ 2. torch/_dynamo/convert_frame.py
def catch_errors_call(self, frame, cache_entry, frame_state):
    """CatchErrorsWrapper.__call__, which compiles a frame under _disable_current_modes(): the
    SAC policy on the stack is recorded first, for the guard and for the AOTAutograd entry."""
    before = getattr(_tls, "compiling", None)
    _tls.compiling = (active_policy(),)
    try:
        return ORIGINAL["catch_errors_call"](self, frame, cache_entry, frame_state)
    finally:
        _tls.compiling = before


# ------------------------------------------------------------------ 3. torch/_dynamo/guards.py
def global_state_guard(self, guard):
    """GuardBuilder.GLOBAL_STATE, which every frame gets (init_ambient_guards): also guards the
    frame on the SAC policy it is compiled under, so the same code called outside SAC or under
    another policy compiles again instead of running a graph partitioned for another policy."""
    ORIGINAL["global_state_guard"](self, guard)
    key = current_key()
    name = "None" if key is None else "%s (key %x)" % (policy_name(getattr(_tls, "compiling", (None,))[0]),
                                                        hash(key) & 0xFFFFFFFF)

    def sac_policy_unchanged(_):
        return current_key() == key

    parts = ["___sac_policy() == %s" % name]
    try:
        self.guard_manager.root.add_lambda_guard(sac_policy_unchanged, parts, guard.user_stack)
    except TypeError:  # 2.10 takes no user stack
        self.guard_manager.root.add_lambda_guard(sac_policy_unchanged, parts)


def policy_name(policy):
    return getattr(policy, "__qualname__", type(policy).__name__)


# ------------------------------------------------ 4. torch/_dynamo/backends/common.py (AOT entry)
def aot_call(self, gm, example_inputs, **kwargs):
    """AotAutograd.__call__: rewrites a graph compiled under a SAC policy into compile(sac(f))'s
    graph, and wraps what it returns so that the region runs as its own (part 5)."""
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        # AotAutograd flattens such inputs and calls itself again: the rewrite happens there
        return ORIGINAL["aot_call"](self, gm, example_inputs, **kwargs)
    compiling = getattr(_tls, "compiling", None)
    policy = compiling[0] if compiling is not None and MODE == "fix" else None
    rewritten = False
    if policy is not None and isinstance(gm, TORCH.fx.GraphModule):
        if decline_reason(gm) is None:
            into_checkpoint(gm, policy)
            rewritten = True
    compiled = ORIGINAL["aot_call"](self, gm, example_inputs, **kwargs)
    return region_runner(compiled, rewritten)


def decline_reason(gm):
    """Why a graph keeps today's behaviour (None: it is rewritten)."""
    import torch._inductor.config
    from torch._higher_order_ops.wrap import tag_activation_checkpoint
    if getattr(torch._inductor.config, "wrap_inductor_compiled_regions", False):
        return "wrap_inductor_compiled_regions is set: SAC sees the region as one op, as asked"
    nodes = list(gm.graph.nodes)
    out = nodes[-1]
    if out.op != "output" or not isinstance(out.args[0], (tuple, list)):
        return "its output is not a tuple"
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for v in out.args[0]:
        if not isinstance(v, TORCH.fx.Node) or not isinstance(v.meta.get("example_value"), TORCH.Tensor):
            return "an output is not a tensor"
        if v in placeholders:
            return "it returns one of its inputs"
    calls = [n for n in nodes if n.op in ("call_function", "call_method", "call_module")]
    if not calls:
        return "it has no ops"
    for n in calls:
        if n.target is tag_activation_checkpoint:
            return "it already holds a checkpoint (compile(sac(f)) inside)"
        name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
        if name.endswith("_") and not name.startswith("_") and n.args and n.args[0] in placeholders:
            return "it mutates an input in place (%s)" % name
    return None


def into_checkpoint(gm, policy):
    """gm's body moves into a submodule called as tag_activation_checkpoint(body, *inputs), with
    body.meta["_checkpoint_context_fn"] made from the policy: what Dynamo builds when it traces
    checkpoint(f, ..., context_fn=...) (torch/_dynamo/variables/higher_order_ops.py). AOTAutograd
    then tags each forward node with policy(op), and the partitioner honours the tags."""
    from torch._higher_order_ops.wrap import tag_activation_checkpoint
    fx = TORCH.fx
    graph = gm.graph
    nodes = list(graph.nodes)
    out = nodes[-1]
    outputs = out.args[0]
    body_graph = fx.Graph()
    body_graph.output(body_graph.graph_copy(graph, {}))
    body = fx.GraphModule(gm, body_graph, class_name="sac_region_body")
    body.meta["_checkpoint_context_fn"] = functools.partial(CKPT.create_selective_checkpoint_contexts, policy)
    name = "sac_region_body"
    while hasattr(gm, name):
        name += "_"
    gm.add_submodule(name, body)
    out.args = ((),)
    for n in reversed(nodes):
        if n.op not in ("placeholder", "output"):
            graph.erase_node(n)
    inputs = [n for n in nodes if n.op == "placeholder"]
    with graph.inserting_before(out):
        call = graph.call_function(tag_activation_checkpoint, (graph.get_attr(name), *inputs),
                                   {"use_reentrant": False})
        call.meta["example_value"] = tuple(v.meta["example_value"] for v in outputs)
        items = []
        for i, v in enumerate(outputs):
            item = graph.call_function(operator.getitem, (call, i))
            item.meta.update({k: v.meta[k] for k in ("example_value", "val", "stack_trace") if k in v.meta})
            items.append(item)
    out.args = (type(outputs)(items),)
    graph.lint()
    gm.recompile()


# ----------------------------------- 5. torch/_functorch/_aot_autograd/runtime_wrappers.py
def region_runner(compiled, rewritten):
    """What Dynamo calls in place of the compiled graph. A rewritten region runs with the outer
    checkpoint's hooks and its SAC mode set aside; any other marks that it runs, for the warning."""
    def run(*args):
        if not rewritten:
            _tls.in_region = getattr(_tls, "in_region", 0) + 1
            try:
                return compiled(*args)
            finally:
                _tls.in_region -= 1
        with contextlib.ExitStack() as stack:
            hooks = TORCH._C._autograd._top_saved_tensors_default_hooks(True)
            if hooks is not None and is_checkpoint_hook(hooks[0]):
                # the checkpoint's pack hook would drop the region's residuals and rerun it in backward
                TORCH._C._autograd._pop_saved_tensors_default_hooks()
                stack.callback(TORCH._C._autograd._push_saved_tensors_default_hooks, *hooks)
            n = TORCH._C._len_torch_dispatch_stack()
            if n and isinstance(TORCH._C._get_dispatch_stack_at(n - 1), SAC_MODES):
                # opaque to the outer SAC in forward and in recompute alike, so their counts agree
                stack.enter_context(TORCH.utils._python_dispatch._pop_mode_temporarily())
            return compiled(*args)

    return TORCH._dynamo.disable(run, reason="do not trace the AOT-compiled SAC region")


def is_checkpoint_hook(pack):
    if getattr(pack, "_checkpoint_internal", False):  # marked from 2.15
        return True
    while hasattr(pack, "__wrapped__"):  # the recompute hook is under torch._dynamo.disable
        pack = pack.__wrapped__
    return getattr(pack, "__code__", None) in CHECKPOINT_PACK_CODES


# --------------------------------------------------------------------------- making the change
def nested_codes(cls, name):
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    return {c for c in (init.co_consts if init else ()) if isinstance(c, types.CodeType) and c.co_name == name}


def targets(torch):
    """(name, owner, attribute, replacement) for the mode, or the one hook this torch lacks."""
    import torch._dynamo  # noqa: F401  (what compiles; its import is what a torch.compile call does)
    import torch._dynamo.backends.common as common
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.guards as guards
    import torch.utils.checkpoint as ckpt
    import torch.utils._python_dispatch  # noqa: F401
    wanted = [("caching_dispatch", ckpt, "_CachingTorchDispatchMode", "__torch_dispatch__", caching_dispatch),
              ("aot_call", common, "AotAutograd", "__call__", aot_call)]
    if MODE == "fix":
        wanted += [("cached_init", ckpt, "_CachedTorchDispatchMode", "__init__", cached_mode_init),
                   ("catch_errors_call", convert_frame, "CatchErrorsWrapper", "__call__", catch_errors_call),
                   ("global_state_guard", guards, "GuardBuilder", "GLOBAL_STATE", global_state_guard)]
    found = []
    for key, module, cls_name, attr, replacement in wanted:
        cls = getattr(module, cls_name, None)
        if cls is None or not callable(cls.__dict__.get(attr)):
            return None, "%s.%s.%s is missing" % (module.__name__, cls_name, attr)
        found.append((key, module, cls, attr, replacement))
    for needed in ("_top_saved_tensors_default_hooks", "_pop_saved_tensors_default_hooks",
                   "_push_saved_tensors_default_hooks"):
        if not hasattr(torch._C._autograd, needed):
            return None, "torch._C._autograd.%s is missing" % needed
    if not hasattr(ckpt, "SAC_IGNORED_OPS"):
        return None, "torch.utils.checkpoint.SAC_IGNORED_OPS is missing"
    if not hasattr(torch.utils._python_dispatch, "_pop_mode_temporarily"):
        return None, "torch.utils._python_dispatch._pop_mode_temporarily is missing"
    if not (nested_codes(ckpt._checkpoint_hook, "pack_hook") and nested_codes(ckpt._recomputation_hook, "pack_hook")):
        return None, "the pack hooks of torch.utils.checkpoint's _checkpoint_hook and _recomputation_hook are missing"
    if not ckpt._CachingTorchDispatchMode.ignore_compile_internals():
        return None, ("SAC's dispatch modes do not opt in with ignore_compile_internals(): f runs eagerly "
                      "under SAC on this torch (before 2.10), nothing to apply the policy to")
    return found, None


def install(torch):
    """Makes the whole change on an imported torch, or none of it (one line says why)."""
    global CHANGE_LABEL, TORCH, CKPT, SAC_MODES, CHECKPOINT_PACK_CODES, CONTEXTS_CODE
    if REPLACED:
        return True
    try:
        found, missing = targets(torch)
    except Exception as e:  # a torch too different to even look at
        found, missing = None, "%s: %s" % (type(e).__name__, e)
    if missing:
        CHANGE_LABEL = "%s (not loaded: %s)" % (WHAT, missing)
        say("not loaded on torch %s: %s; nothing changed" % (getattr(torch, "__version__", "?"), missing))
        return False
    import torch.utils.checkpoint as ckpt
    TORCH, CKPT = torch, ckpt
    SAC_MODES = (ckpt._CachingTorchDispatchMode, ckpt._CachedTorchDispatchMode)
    CONTEXTS_CODE = getattr(ckpt.create_selective_checkpoint_contexts, "__code__", None)
    CHECKPOINT_PACK_CODES = nested_codes(ckpt._checkpoint_hook, "pack_hook") | \
        nested_codes(ckpt._recomputation_hook, "pack_hook")
    for key, module, cls, attr, replacement in found:
        ORIGINAL[key] = cls.__dict__[attr]
        setattr(cls, attr, replacement)
        REPLACED.append("%s:%s.%s" % (module.__name__, cls.__name__, attr))
    ckpt._sac_repro_fix_candidate = MODE
    CHANGE_LABEL = "%s loaded in-process (mode: %s)" % (WHAT, MODE)
    return True


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
TORCH = CKPT = CONTEXTS_CODE = None
SAC_MODES = ()
CHECKPOINT_PACK_CODES = set()
if MODE not in MODES:
    CHANGE_LABEL = "%s (not loaded: %s=%r is not one of %s)" % (WHAT, ENV, MODE, ", ".join(MODES))
    say("%s=%r is not one of %s; nothing changed" % (ENV, MODE, ", ".join(MODES)))
elif "torch" in sys.modules:
    install(sys.modules["torch"])
else:
    sys.meta_path.insert(0, FINDER)
