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
import re
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
    """[{"label", "file", "pythonpath", "reloaded_by", "env"}] for each in-process change found, []
    for none. `reloaded_by` says what loads the same change again in a fresh process of this
    interpreter (reloader), `pythonpath` is the folder of PYTHONPATH that does, `env` the variables
    that chose its mode, as the change declares them."""
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
        by, folder = reloader(code_file, declared)
        out.append({"label": label or "torch changed in-process by %s (%s)" % (home_path(code_file), ", ".join(paths)),
                    "file": code_file, "pythonpath": folder if by == BY_PYTHONPATH else None, "reloaded_by": by,
                    "env": {k: os.environ[k] for k in getattr(declared, "RERUN_ENV", ()) if k in os.environ}})
    if reverted:  # reverted by code this run cannot place (a C extension, an edited torch)
        out.append({"label": REVERTED, "file": None, "pythonpath": None, "reloaded_by": None, "env": {}})
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


BY_PYTHONPATH, BY_INTERPRETER = "PYTHONPATH", "the interpreter"
BUNDLE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def reloader(code_file, module):
    """What loads the change again in a fresh process of this interpreter, and from which folder.
    Whatever made it ran before the measurement (at start-up: a sitecustomize.py, usercustomize.py
    or .pth; or on `import torch`), so it runs again where its module is found again:
    (BY_PYTHONPATH, folder) where that is a folder of PYTHONPATH, which the rerun command carries;
    (BY_INTERPRETER, folder) where it is a folder the interpreter is on without PYTHONPATH
    (site-packages, the user's site, a .pth's), found again with no variable at all; (None, None)
    where this run cannot tell (found on neither: a file loaded by its path from elsewhere)."""
    folder = import_folder(code_file, module)
    on_pythonpath = {os.path.realpath(p) for p in pythonpath()}
    if folder in on_pythonpath:
        return BY_PYTHONPATH, folder
    # the rest of sys.path but the bundle's own folders (its entry point's, the script's)
    if folder in {os.path.realpath(p) for p in sys.path if p} - on_pythonpath and folder != BUNDLE \
            and not inside(folder, BUNDLE):
        return BY_INTERPRETER, folder
    return None, None


def pythonpath():
    """PYTHONPATH's folders, as this process found them (relative to the folder it started in)."""
    return [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def import_folder(code_file, module):
    """The folder of sys.path from which module (code_file's) was imported: its file's folder, up
    one level per dot of its name where its name is its path there; else the file's own folder
    (loaded by its path under another name)."""
    name = getattr(module, "__name__", None) or ""
    parts = name.split(".") + (["__init__"] if os.path.basename(code_file) == "__init__.py" else [])
    folder = code_file
    for _ in parts:
        folder = os.path.dirname(folder)
    if name and os.path.join(folder, *parts) + ".py" == code_file:
        return folder
    return os.path.dirname(code_file)


def home_folder():
    """The home folder that a paste writes as ~, or "" where there is none to hide (unset, or /)."""
    home = os.path.expanduser("~").rstrip(os.sep)
    return "" if home in ("", "~") else home


def home_folders():
    """The home folder as $HOME names it and as it is (where $HOME is a symlink, a path given through
    its target is under home too), the longer first; none where there is none to hide."""
    home = home_folder()
    return sorted({home, os.path.realpath(home)} - {"", os.sep}, key=len, reverse=True) if home else []


def home_path(path):
    """path with the home folder written as ~ (a paste names no one's home)."""
    for home in home_folders():
        if path == home or path.startswith(home + os.sep):
            return "~" + path[len(home):]
    return path


def home_written(text):
    """text with the home folder written as ~ where a path starts with it (at the start, or after a
    space, : or =), as --json keeps a variable's value and the interpreter's path."""
    homes = home_folders()
    return re.sub(r"(?<![^\s:=])(?:%s)(?=[/:\s]|$)" % "|".join(map(re.escape, homes)), "~", text) if homes else text


def published(report):
    """The report as --json writes it: the rerun variables and the interpreter as a paste shows them
    (the home folder as ~, a withheld value null: command.rerun_env's)."""
    shown = dict(report, rerun_env={k: v if v is None else home_written(v) for k, v in report["rerun_env"].items()})
    if "python_executable" in report:
        shown["python_executable"] = home_written(report["python_executable"])
    return shown
