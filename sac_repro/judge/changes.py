"""What was changed in the torch under test from outside it, in-process, read from torch itself:
a run whose torch was patched (sac_repro/revert_fix/, sac_repro/policy/fix_candidate/, or anyone's
sitecustomize.py) must say so, or its paste misstates the torch that ran.

Two readings. The 2.10 fix of pytorch/pytorch#161889 is SAC's two dispatch modes answering
`ignore_compile_internals() -> True`: where torch's own checkpoint.py defines that answer but the
modes give False, the fix was reverted in-process, whoever did it. And any of the torch functions
below whose code lives outside torch's folder was replaced from that file. Runs in the measured
child and in the bench (they import torch); the reports only read the list it returns.
"""
import ast
import inspect
import os
import sys

SAC_MODES = ("_CachingTorchDispatchMode", "_CachedTorchDispatchMode")
# Where a change to SAC or to Dynamo's handling of it would be made: (module, attribute path).
WATCHED = (
    ("torch.utils.checkpoint", "_CachingTorchDispatchMode.ignore_compile_internals"),
    ("torch.utils.checkpoint", "_CachedTorchDispatchMode.ignore_compile_internals"),
    ("torch.utils.checkpoint", "_CachingTorchDispatchMode.__torch_dispatch__"),
    ("torch.utils.checkpoint", "_CachedTorchDispatchMode.__torch_dispatch__"),
    ("torch.utils.checkpoint", "create_selective_checkpoint_contexts"),
    ("torch.utils.checkpoint", "checkpoint"),
    ("torch._dynamo.convert_frame", "CatchErrorsWrapper.__call__"),
    ("torch._dynamo.backends.common", "AotAutograd.__call__"),
    ("torch._dynamo.output_graph", "OutputGraph.init_ambient_guards"),
)
REVERTED = "the 2.10 fix reverted in-process"


def torch_changes(torch):
    """[{"label", "file", "pythonpath", "env"}] for each in-process change found, [] for none.
    `pythonpath` is the folder to put on PYTHONPATH to load the same change again (a
    sitecustomize.py's), `env` the variables that chose its mode, as the change declares them."""
    by_file = {}
    for module_name, path in WATCHED:
        module = sys.modules.get(module_name)
        code_file = module and defined_in(module, path)
        if code_file and not inside(code_file, os.path.dirname(torch.__file__)):
            by_file.setdefault(code_file, []).append(path)
    reverted = fix_reverted(sys.modules.get("torch.utils.checkpoint"))
    out = []
    for code_file, paths in by_file.items():
        declared = changer(code_file)
        label = getattr(declared, "CHANGE_LABEL", None)
        if reverted and any(p.endswith("ignore_compile_internals") for p in paths):
            label, reverted = REVERTED, False
        out.append({"label": label or "torch changed in-process by %s (%s)" % (code_file, ", ".join(paths)),
                    "file": code_file, "pythonpath": loader_folder(code_file),
                    "env": {k: os.environ[k] for k in getattr(declared, "RERUN_ENV", ()) if k in os.environ}})
    if reverted:  # reverted by code this run cannot place (a C extension, an edited torch)
        out.append({"label": REVERTED, "file": None, "pythonpath": None, "env": {}})
    return out


def defined_in(module, path):
    """The file whose code defines module.<path>, or None where it is no Python function."""
    obj = module
    for i, part in enumerate(path.split(".")):
        try:
            obj = inspect.getattr_static(obj, part) if i else getattr(obj, part)
        except AttributeError:
            return None
    obj = getattr(obj, "__func__", obj)  # classmethod, staticmethod
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__call__", None), "__code__", None)
    return os.path.realpath(code.co_filename) if code else None


def inside(path, folder):
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)


def fix_reverted(checkpoint):
    """True where torch's own checkpoint.py gives both SAC modes the fix's answer, and the modes,
    as this process has them, do not."""
    if checkpoint is None or not all(hasattr(checkpoint, m) for m in SAC_MODES):
        return False
    try:
        tree = ast.parse(open(checkpoint.__file__).read())
    except (OSError, SyntaxError, TypeError):
        return False
    shipped = {node.name for node in tree.body if isinstance(node, ast.ClassDef) and any(
        isinstance(item, ast.FunctionDef) and item.name == "ignore_compile_internals" for item in node.body)}
    if not set(SAC_MODES) <= shipped:
        return False  # 2.5-2.9: no fix shipped, nothing to revert
    return not all(getattr(checkpoint, m).ignore_compile_internals() for m in SAC_MODES)


def changer(code_file):
    """The loaded module whose file made the change (for the label it declares), or None."""
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if f and os.path.realpath(f) == code_file:
            return module
    return None


def loader_folder(code_file):
    """A sitecustomize.py is loaded from PYTHONPATH: its folder is what reloads the change."""
    return os.path.dirname(code_file) if os.path.basename(code_file) == "sitecustomize.py" else None
