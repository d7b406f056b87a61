"""The script as people use scripts: run as a program, pasted into a notebook cell, imported. And
its answer, `answer()` and the excepthook that calls it, read in this process against a stand-in
torch: each way the evidence can fall, with the exit code that it gives (no torch runs there)."""
import importlib.util
import logging
import os
import subprocess
import sys
import types

import pytest

from conftest import ROOT, SCRIPT

ANSWER = "f_compiled under SAC: "
# A notebook kernel's argv: ipykernel's launcher and the connection file it was given.
KERNEL_ARGV = ["ipykernel_launcher.py", "-f", "/tmp/kernel.json"]


def script_text():
    with open(SCRIPT) as fh:
        return fh.read()


# ----------------------------------------------------------------------- a notebook cell, a module
# Cells run as IPython runs them (InteractiveShell.run_code): in __main__'s namespace, which has no
# __file__, under the kernel's argv, with get_ipython in builtins; an error a handler was set for with
# set_custom_exc goes to it (which must return a list, a string or None), any other is shown, and the
# kernel goes on to the next cell.
AS_CELLS = """import builtins, sys, traceback
sys.argv = %r
class Shell:
    custom_exceptions = ()
    def set_custom_exc(self, exc_tuple, handler):
        self.custom_exceptions, self.handler = exc_tuple, handler
    def CustomTB(self, etype, value, tb, tb_offset=None):
        stb = self.handler(self, etype, value, tb, tb_offset=tb_offset)
        assert stb is None or isinstance(stb, (str, list)), stb
    def showtraceback(self, exc_tuple=None, filename=None, tb_offset=None, exception_only=False):
        traceback.print_exception(*exc_tuple)
shell = Shell()
builtins.get_ipython = lambda: shell
for cell in %r:
    print("--- a cell", flush=True)
    try:
        exec(compile(cell, "<ipython-input>", "exec"), vars(sys.modules["__main__"]))
    except SystemExit as e:
        print("SystemExit:", e)
    except shell.custom_exceptions:
        shell.CustomTB(*sys.exc_info())
    except BaseException:
        traceback.print_exc()
    sys.stdout.flush()
print("excepthook replaced:", sys.excepthook is not sys.__excepthook__)
"""
REVERT = os.path.join(ROOT, "sac_repro", "revert_fix", "sitecustomize.py")
LATER_ERROR = "raise ValueError('a later cell of its own')"


def cells(*texts, python=(sys.executable,), timeout=600, cwd=None):
    """Each cell's stdout (the last with what followed it), and the whole stderr."""
    proc = subprocess.run(list(python) + ["-c", AS_CELLS % (KERNEL_ARGV, list(texts))], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout.split("--- a cell\n")[1:], proc.stderr


@pytest.mark.release  # real torch, 10 s; the fast tier's cell test runs the same machinery on a stand-in
def test_pasted_into_a_notebook_cell_with_the_fix_reverted_it_answers_after_the_error(tmp_path):
    """With the revert loaded in a cell before: the report's loop raises Dynamo's refusal (fullgraph,
    2.12+) and ends the cell; IPython shows it, and the answer follows, reproduced (it printed none).
    Not 128 on the kernel's arguments, nor the excepthook taken; a later cell's own error gets none."""
    out, err = cells("import runpy; runpy.run_path(%r)" % REVERT, script_text(), LATER_ERROR, cwd=tmp_path)
    answers = [[l for l in o.splitlines() if l.startswith(ANSWER)] for o in out]
    assert [len(a) for a in answers] == [0, 1, 0], (out, err[-3000:])
    assert answers[1][0].startswith(ANSWER + "ran eagerly: aten::mul, aten::add, then raised (pytorch/pytorch#161889 "
                                    "reproduces; torch 2."), answers[1]
    assert "the 2.10 fix reverted in-process); Dynamo skipped f: " in answers[1][0]
    assert "found no compiled frames" in err and err.count("ValueError: a later cell of its own") == 1, err[-3000:]
    assert "takes no options" not in err and out[-1].endswith("excepthook replaced: False\n"), out[-1]


# A torch that runs the report's code through in a blink, its calls seen by the profiler as compiled
# code: the cell's end, without a real compile.
COMPILING_TORCH = """import sys, types
__version__, version = "2.13.0+cpu", types.SimpleNamespace(cuda=None, git_version="cf30153c" * 5)
cuda = types.SimpleNamespace(is_available=lambda: False)
ops = types.SimpleNamespace(aten=types.SimpleNamespace(mm=types.SimpleNamespace(default="aten.mm.default")))
class Tensor:
    __mul__ = __rmul__ = __add__ = __matmul__ = lambda self, other: self
ones = lambda *shape, **kw: Tensor()
compile = lambda fn, **kw: fn
seen = []
class profile:
    def __enter__(self):
        seen.clear()
        return self
    def __exit__(self, *exc):
        pass
    def events(self):
        return [types.SimpleNamespace(name=n) for n in seen]
profiler = types.SimpleNamespace(profile=profile)
def checkpoint(fn, *args, use_reentrant=None, context_fn=None):
    seen.append("Torch-Compiled Region: 0/0")
    return fn(*args)
CheckpointPolicy = types.SimpleNamespace(MUST_SAVE=1, PREFER_RECOMPUTE=2)
create_selective_checkpoint_contexts = lambda policy_fn: None
utils = sys.modules["torch.utils"] = types.SimpleNamespace(checkpoint=types.SimpleNamespace(**globals()))
sys.modules["torch.utils.checkpoint"] = utils.checkpoint
"""


@pytest.mark.unit
def test_as_a_cell_it_answers_after_its_error_and_only_its_own(tmp_path):
    """Without torch (-S), in a tenth of a second: the cell stops at `import torch`, shown as a
    notebook shows it, then the answer, cannot tell; not 128 "takes no options", nor the excepthook
    taken. A later cell's own error gets no answer, nor does one after Ctrl-C stopped the script,
    nor one after the script ran through (on a stand-in torch: its answer, and no SystemExit)."""
    for name, text in (("interrupted", "raise KeyboardInterrupt\n"), ("compiling", COMPILING_TORCH)):
        (tmp_path / name / "torch").mkdir(parents=True)
        (tmp_path / name / "torch" / "__init__.py").write_text(text)
    beside = "import sys; sys.path.insert(0, %r)\n"
    out, err = cells(script_text(), LATER_ERROR, beside % str(tmp_path / "interrupted") + script_text(), LATER_ERROR,
                     beside % str(tmp_path / "compiling") + script_text(), LATER_ERROR,
                     python=(sys.executable, "-S"), cwd=tmp_path, timeout=60)
    assert out[0] == ANSWER + "cannot tell (ModuleNotFoundError: No module named 'torch'; torch did not import)\n", out
    assert out[1:4] == ["", "", ""], out
    assert out[4] == ANSWER + "ran compiled code (pytorch/pytorch#161889 does not reproduce; torch 2.13.0+cpu, git " \
                              "cf30153c)\n", out
    assert out[5] == "excepthook replaced: False\n", out
    assert err.count("ModuleNotFoundError: No module named 'torch'") == 1 and err.count("a later cell of its own") == 3
    assert "KeyboardInterrupt" in err and "takes no options" not in err, err


# Imported, then an error of the importer's own: Python's exit 1 and its traceback, never the
# script's answer (it was 125, "f_compiled under SAC: cannot tell"). Run with -S, without torch:
# the import stops at `import torch`, after the point where the script would take the excepthook.
IMPORTED = {
    "import": "import repro",
    "runpy under another name": "import runpy; runpy.run_path('repro.py', run_name='not_main')",
}
AN_IMPORTER = """import sys
sys.path.insert(0, '.')
try:
    %s
except ImportError:
    pass
print("excepthook replaced:", sys.excepthook is not sys.__excepthook__)
raise ValueError("an error of the importer's own")
"""


@pytest.mark.unit
@pytest.mark.parametrize("how", sorted(IMPORTED))
def test_imported_it_leaves_the_excepthook_alone(tmp_path, how):
    (tmp_path / "repro.py").write_text(script_text())
    proc = subprocess.run([sys.executable, "-S", "-c", AN_IMPORTER % IMPORTED[how]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == "excepthook replaced: False\n", (proc.stdout, proc.stderr)
    assert "ValueError: an error of the importer's own" in proc.stderr


@pytest.mark.unit
@pytest.mark.parametrize("how", ["python3 FILE", "python3 -m NAME", "python3 - < FILE", "python3 -c TEXT"])
def test_run_as_a_program_it_takes_the_excepthook_and_refuses_options(tmp_path, how):
    """The contract as a program: an error is 125 (here no torch: -S), an option 128. Under -c there
    is no __file__, as in a cell, yet it is a program (it exited 1)."""
    (tmp_path / "repro.py").write_text(script_text())
    cmd = {"python3 FILE": ["repro.py"], "python3 -m NAME": ["-m", "repro"], "python3 - < FILE": ["-"],
           "python3 -c TEXT": ["-c", script_text()]}[how]
    for extra, rc in (([], 125), (["--markdown"], 128)):
        with open(tmp_path / "repro.py") as stdin:
            proc = subprocess.run([sys.executable, "-S"] + cmd + extra, cwd=tmp_path, stdin=stdin,
                                  capture_output=True, text=True, timeout=60)
        assert proc.returncode == rc, (how, extra, proc.stdout, proc.stderr)
        assert (ANSWER + "cannot tell (ModuleNotFoundError" in proc.stdout) == (rc == 125), proc.stdout
        assert ("takes no options" in proc.stderr) == (rc == 128), proc.stderr


@pytest.mark.unit
@pytest.mark.parametrize("exit_with", ["0", "1", "'a torch saying bye'", "None"])
def test_a_torch_that_exits_as_it_imports_is_no_answer(tmp_path, exit_with):
    """SystemExit never reaches an excepthook: a torch that raised it as it imported (or anywhere
    in the report's code) ended the script with its own code, 0 or 1 read as a verdict, no line."""
    (tmp_path / "repro.py").write_text(script_text())
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise SystemExit(%s)\n" % exit_with)
    proc = subprocess.run([sys.executable, "-S", "repro.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 125, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ANSWER + "cannot tell (SystemExit: exiting unanswered; torch did not import)\n", proc.stdout
    # a usage error keeps its 128, and an answer its own code
    proc = subprocess.run([sys.executable, "-S", "repro.py", "--x"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 128 and proc.stdout == "", (proc.stdout, proc.stderr)


# ----------------------------------------------------------------------- its answer, in this process
COMPILED = {"Torch-Compiled Region: 0/0", "CompiledFunction", "aten::mm"}
EAGER = {"aten::mul", "aten::add", "aten::mm"}
BOTH, NEITHER = COMPILED | EAGER, {"aten::mm"}
# Dynamo's refusal as torch 2.13 words it, raised where SAC called f (fullgraph=True, 2.12+)
REFUSAL = ("torch.compile with fullgraph=True found no compiled frames. Skipped frames:\n  - f (repro.py:87): "
           "non-infra torch dispatch mode present, this is not supported today in torch.compile\n"
           "  - find (simple_registry.py:38): frame is in the Dynamo skipfiles list")


@pytest.fixture
def script(monkeypatch):
    """The script's code before the report's, run under another name (so no excepthook, no
    options read) in a namespace of its own; the logger it sets up is put back afterwards."""
    log = logging.getLogger("torch._dynamo.convert_frame")
    monkeypatch.setattr(log, "handlers", list(log.handlers))
    monkeypatch.setattr(log, "level", log.level)
    monkeypatch.setattr(log, "propagate", log.propagate)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # (test_imported_it_leaves_the_excepthook_alone)
    monkeypatch.setattr(sys, "argv", ["the_script"])  # pytest's options are not the script's
    text = script_text()
    namespace = {"__name__": "the_script"}
    exec(compile(text[:text.index("# ==== the report's code")], SCRIPT, "exec"), namespace)
    return namespace


def stand_in(monkeypatch, namespace, control=COMPILED, under_sac=COMPILED, raises=None, checkpoint=None):
    """A torch whose profiler sees `control` in the call without SAC (which raises where that holds
    "raises") and `under_sac` in the call with it, which then raises `raises`; and the report's
    names that answer() reads."""
    profiles = []

    class Profile:
        def __enter__(self):
            self.names = set()
            profiles.append(self)
            return self

        def __exit__(self, *exc):
            profiles.remove(self)

        def events(self):
            return [types.SimpleNamespace(name=n) for n in self.names]

    def checkpoint_fn_without_context(fn, *args):
        for p in profiles:
            p.names |= control - {"raises"}
        if "raises" in control and profiles:
            raise RuntimeError("the control raised")

    def checkpoint_fn_with_context(fn, *args):
        for p in profiles:
            p.names |= under_sac
        if raises is not None:
            raise RuntimeError(raises)

    torch = types.SimpleNamespace(__version__="2.13.0+cpu", version=types.SimpleNamespace(git_version="cf30153c" * 5),
                                  profiler=types.SimpleNamespace(profile=Profile), compile=lambda fn, **kw: fn,
                                  utils=types.SimpleNamespace(checkpoint=checkpoint))
    monkeypatch.setitem(sys.modules, "torch", torch)
    namespace.update(f=lambda x, y: x @ y, x=1, y=2, f_compiled=lambda x, y: x @ y,
                     checkpoint_fn_without_context=checkpoint_fn_without_context,
                     checkpoint_fn_with_context=checkpoint_fn_with_context)
    return checkpoint_fn_with_context


def raised_in(call, *args):
    try:
        call(*args)
    except Exception as e:
        return e
    raise AssertionError("it did not raise")


def checkpoint_fn_with_context(message):
    """Where the report's loop calls f under SAC: the frame that answer() looks for."""
    raise RuntimeError(message)


def elsewhere(message):
    raise RuntimeError(message)


# The report's loop: what it raised (None: it ran to the end).
LOOP = {None: lambda: None,
        "refusal": lambda: raised_in(checkpoint_fn_with_context, REFUSAL),
        "a crash": lambda: raised_in(checkpoint_fn_with_context, "a stand-in crash"),
        "a refusal outside SAC": lambda: raised_in(elsewhere, REFUSAL),
        "another function refused": lambda: raised_in(checkpoint_fn_with_context, REFUSAL.replace("- f (", "- h ("))}
ON = "torch 2.13.0+cpu, git cf30153c"
REPRODUCES = "(pytorch/pytorch#161889 reproduces; %s)" % ON
DYNAMO = "; Dynamo skipped f: non-infra torch dispatch mode present, this is not supported today in torch.compile"
CONTROL = "cannot tell (the control, without SAC, did not run compiled code alone; "
# the loop's error; what the profiler sees in the call without SAC (the control), and in the call
# under SAC; what that call raises -> the exit code, the line's start
CASES = {
    "compiled": (None, COMPILED, COMPILED, None, 0,
                 "ran compiled code (pytorch/pytorch#161889 does not reproduce; %s)" % ON),
    "eager": (None, COMPILED, EAGER, None, 1, "ran eagerly: aten::mul, aten::add " + REPRODUCES),
    "both ran": (None, COMPILED, BOTH, None, 125,
                 "cannot tell (compiled code ran: True, aten::mul and add ran: True; "),
    "neither ran": (None, COMPILED, NEITHER, None, 125,
                    "cannot tell (compiled code ran: False, aten::mul and add ran: False; "),
    "control eager": (None, EAGER, EAGER, None, 125, CONTROL),
    "control both": (None, BOTH, EAGER, None, 125, CONTROL),
    "control neither": (None, NEITHER, EAGER, None, 125, CONTROL),
    "refused, eager": ("refusal", COMPILED, EAGER, REFUSAL, 1,
                       "ran eagerly: aten::mul, aten::add, then raised " + REPRODUCES + DYNAMO),
    "refused, nothing ran": ("refusal", COMPILED, NEITHER, REFUSAL, 1,
                             "ran no compiled code, then raised " + REPRODUCES + DYNAMO),
    "refused, compiled code ran": ("refusal", COMPILED, COMPILED, REFUSAL, 125,
                                   "cannot tell (compiled code ran: True, aten::mul and add ran: False, then raised; "),
    "refused in the loop only": ("refusal", COMPILED, EAGER, None, 125, "cannot tell (compiled code ran: False, "
                                 "aten::mul and add ran: True, without the loop's error; "),
    "refused, the control raised": ("refusal", COMPILED | {"raises"}, EAGER, REFUSAL, 125, CONTROL),
    "a crash": ("a crash", COMPILED, EAGER, None, 125, "cannot tell (RuntimeError: a stand-in crash; %s)" % ON),
    "a refusal outside SAC": ("a refusal outside SAC", COMPILED, EAGER, REFUSAL, 125, "cannot tell (RuntimeError: "
                              "torch.compile with fullgraph=True found no compiled frames. Skipped frames: - f ("),
    "another function refused": ("another function refused", COMPILED, EAGER, REFUSAL, 125,
                                 "cannot tell (RuntimeError: torch.compile with fullgraph=True found no compiled"),
}


@pytest.mark.unit
@pytest.mark.parametrize("case", CASES)
def test_the_answer_to_each_evidence(script, monkeypatch, capsys, case):
    loop, control, under_sac, raises, rc, says = CASES[case]
    stand_in(monkeypatch, script, control, under_sac, raises)
    assert script["answer"](LOOP[loop]()) == rc
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(ANSWER + says), out


@pytest.mark.unit
@pytest.mark.parametrize("raises", [REFUSAL, "a stand-in crash"])
def test_without_the_loops_error_what_the_profiled_call_raises_is_raised_on(script, monkeypatch, raises):
    """The loops ran, and the profiled call under SAC raises: raised on, for the excepthook to answer
    it as it answers an error of the loops (a refusal there is then profiled again)."""
    stand_in(monkeypatch, script, COMPILED, EAGER, raises)
    with pytest.raises(RuntimeError) as raised:
        script["answer"]()
    assert str(raised.value) == raises


# ----------------------------------------------------------------------- its excepthook
class Exited(BaseException):
    pass


def exits(monkeypatch, namespace):
    """The codes the script's os._exit is called with, in order (the first ends a real process)."""
    codes = []

    def _exit(code):
        codes.append(code)
        raise Exited(code)
    monkeypatch.setitem(namespace, "os", types.SimpleNamespace(_exit=_exit))
    return codes


class Stop(BaseException):
    """Neither an Exception nor Ctrl-C: no answer can be formed from it."""


class BrokenTorch(types.ModuleType):
    """A torch that breaks as it is read: answer() itself raises `error`."""
    def __init__(self, error):
        super().__init__("torch")
        self.error = error

    def __getattr__(self, name):
        if name in ("__version__", "version", "utils", "profiler"):  # not what pytest's report of a failure reads
            raise self.error
        raise AttributeError(name)


@pytest.mark.unit
@pytest.mark.parametrize("kind, torch, rc, answered", [
    (Stop, None, 125, False),
    (KeyboardInterrupt, None, 130, False),
    (RuntimeError, BrokenTorch(RuntimeError("broken")), 125, False),
    (RuntimeError, BrokenTorch(KeyboardInterrupt()), 130, False),
    (RuntimeError, None, 125, True),
], ids=["baseexception", "ctrl-c", "answer-raises", "ctrl-c-in-the-answer", "torch-did-not-import"])
def test_the_excepthook_never_exits_1_for_an_error(script, monkeypatch, capsys, kind, torch, rc, answered):
    codes = exits(monkeypatch, script)
    monkeypatch.setitem(sys.modules, "torch", torch)
    error = raised_in(elsewhere, "an error") if kind is RuntimeError else kind()
    with pytest.raises(Exited):
        script["answer_error"](kind, error, error.__traceback__)
    assert codes[:1] == [rc]
    out, err = capsys.readouterr()
    assert out.startswith(ANSWER + "cannot tell (RuntimeError: an error; torch did not import)") == answered, out
    assert err.startswith("Traceback") or kind is not RuntimeError


@pytest.mark.unit
def test_the_excepthook_passes_the_answers_code_on(script, monkeypatch):
    """Dynamo's refusal of f under SAC raised in the report's loop: the answer's 1."""
    codes = exits(monkeypatch, script)
    stand_in(monkeypatch, script, COMPILED, EAGER, REFUSAL)
    error = LOOP["refusal"]()
    with pytest.raises(Exited):
        script["answer_error"](RuntimeError, error, error.__traceback__)
    assert codes[:1] == [1]


# ----------------------------------------------------------------------- the fix, reverted in this process
SAC_MODES = """
class _CachingTorchDispatchMode:
    {caching}

class _CachedTorchDispatchMode:
    {cached}
"""
FIXED = "@classmethod\n    def ignore_compile_internals(cls):\n        return True"


def checkpoint_module(tmp_path, monkeypatch, caching=FIXED, cached=FIXED, live=(True, True)):
    """A checkpoint.py on disk, as torch ships it, whose modes answer `live` in this process."""
    path = tmp_path / "checkpoint_stand_in.py"
    path.write_text(SAC_MODES.format(caching=caching, cached=cached))
    spec = importlib.util.spec_from_file_location("checkpoint_stand_in", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "checkpoint_stand_in", module)
    spec.loader.exec_module(module)
    for mode, answer in zip((module._CachingTorchDispatchMode, module._CachedTorchDispatchMode), live):
        mode.ignore_compile_internals = classmethod(lambda cls, answer=answer: answer)
    return module


@pytest.mark.unit
@pytest.mark.parametrize("caching, cached, live, said", [
    (FIXED, FIXED, (True, True), False),  # 2.10 and later, as shipped
    (FIXED, FIXED, (False, False), True),  # sac_repro/revert_fix
    (FIXED, FIXED, (True, False), True),  # one of the two modes without the fix it ships
    ("pass", "pass", (False, False), False),  # 2.5-2.9: no fix on disk, nothing reverted
    (FIXED, "pass", (True, False), False),  # a torch that ships half a fix: not the 2.10 fix
], ids=["fixed", "reverted", "one-reverted", "affected", "half-shipped"])
def test_the_answer_names_a_fix_reverted_in_process(script, monkeypatch, capsys, tmp_path, caching, cached, live, said):
    """What torch's own checkpoint.py defines on disk against what its modes answer live."""
    stand_in(monkeypatch, script, checkpoint=checkpoint_module(tmp_path, monkeypatch, caching, cached, live))
    assert script["answer"]() == 0
    line = capsys.readouterr().out
    assert line.endswith("(pytorch/pytorch#161889 does not reproduce; torch 2.13.0+cpu, git cf30153c%s)\n" % (
        "; the 2.10 fix reverted in-process" if said else "")), line


@pytest.mark.unit
def test_a_torch_whose_checkpoint_has_no_source_names_nothing(script, monkeypatch, capsys):
    """No file to read (a frozen or compiled-only torch): modes that answer False say nothing."""
    checkpoint = types.ModuleType("torch.utils.checkpoint")
    exec(SAC_MODES.format(caching=FIXED, cached=FIXED), vars(checkpoint))
    for mode in (checkpoint._CachingTorchDispatchMode, checkpoint._CachedTorchDispatchMode):
        mode.ignore_compile_internals = classmethod(lambda cls: False)
    stand_in(monkeypatch, script, checkpoint=checkpoint)
    # inspect finds a class's file through sys.modules: where a real torch was imported before (another
    # test in this worker), its checkpoint.py would be read for the stand-in's classes
    monkeypatch.setitem(sys.modules, "torch.utils.checkpoint", checkpoint)
    assert script["answer"]() == 0 and "reverted" not in capsys.readouterr().out
