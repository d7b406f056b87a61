"""What torch really ran: a run with the 2.10 fix reverted in-process says so in each of its outputs
(read from torch itself, sac_repro/judge/changes.py), and Dynamo's own reason for skipping f is in the
report, whole (measure.DynamoSkips). On torch 2.13 (this environment's), as shipped and reverted."""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, HealthCheck, settings, strategies as st

from conftest import FIXED_COMMAND, REVERTED_COMMAND, ROOT
from sac_repro.judge import changes, plot

REVERT = os.path.join(ROOT, "sac_repro", "revert_fix")
DYNAMO_REASON = "skipping: f (reason: non-infra torch dispatch mode present, this is not supported today in torch.compile)"


def command_of(markdown):
    return re.search(r"Command: `([^`]*)`", markdown).group(1)


def test_a_reverted_run_says_so_in_every_output(reverted_run):
    rc, report, text, _, markdown = reverted_run
    assert rc == 1 and report["verdict"] == "reproduced"
    assert [c["label"] for c in report["torch_changes"]] == [changes.REVERTED]          # --json
    assert report["torch_changes"][0]["file"] == os.path.join(REVERT, "sitecustomize.py")
    env_line = text.splitlines()[0]                                                     # the text
    assert env_line.endswith("| changed: the 2.10 fix reverted in-process (sac_repro/revert_fix/sitecustomize.py)")
    assert "torch 2.13" in markdown.splitlines()[8] and "with the 2.10 fix reverted in-process**" in markdown.splitlines()[6]
    assert changes.REVERTED in plot.title(report)                                       # --plot


def test_the_markdown_command_reruns_what_ran(reverted_run, fixed_run):
    """The fixtures ran these commands as typed, `python3 -m sac_repro` in the bundle's folder; the
    paste quotes them back in a form that runs from any folder: the Python that ran and the bundle
    by their paths, the PYTHONPATH absolute (`-m` elsewhere is Python's 'No module named', exit 1)."""
    from sac_repro.judge import render
    ran = "%s %s --device cpu --markdown" % (render.shell_path(os.path.join(os.path.dirname(sys.executable), "python3")),
                                             render.shell_path(os.path.join(ROOT, "sac_repro")))
    for run, typed in ((reverted_run, "PYTHONPATH=%s %s" % (render.shell_value(REVERT), ran)), (fixed_run, ran)):
        assert re.fullmatch(re.escape(typed) + r" --json \S+report\.json", command_of(run[4])), command_of(run[4])


def run_from(folder, command, environ=None):
    """A printed command run as printed, by bash, in folder, from a shell with none of the run's variables."""
    clean = {k: v for k, v in os.environ.items() if not re.fullmatch(r"TORCH.*|PYTORCH_.*|SAC_FIX_CANDIDATE|PYTHONPATH", k)}
    proc = subprocess.run(["bash", "-c", command], cwd=folder, env=dict(clean, **(environ or {})), capture_output=True,
                          text=True, timeout=900)
    return proc.returncode, proc.stdout


def verdict_lines(paste):
    return [l for l in paste.splitlines() if l.startswith(("- **Verdict:**", "policy (MUST_SAVE", "**This run"))]


def test_the_pastes_command_gives_the_runs_verdict_from_another_folder(reverted_run, tmp_path):
    """The Command of a paste, run in another folder: the run's verdict (1) and the same Command, not
    'No module named sac_repro', exit 1 too, which git bisect reads as bad."""
    rc, _, _, _, markdown = reverted_run
    command = command_of(markdown)
    assert " -m " not in command and not command.startswith("python3 ")
    again, paste = run_from(tmp_path, command, {"HOME": os.environ["HOME"]})
    assert (again, command_of(paste), verdict_lines(paste)) == (rc, command, verdict_lines(markdown))


def test_the_command_names_every_file_from_anywhere_with_the_home_folder_as_tilde(tmp_path):
    """Judged in one folder with relative paths, rerun from another: each file by its absolute path,
    the home folder written as ~, which the shell expands."""
    home = os.path.dirname(ROOT)
    proc = subprocess.run([sys.executable, os.path.relpath(os.path.join(ROOT, "sac_repro"), os.path.join(ROOT, "tests")),
                           "--from-nsys", os.path.join("data", "h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv"),
                           "--markdown"], cwd=os.path.join(ROOT, "tests"), env=dict(os.environ, HOME=home),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    command = command_of(proc.stdout)
    name = os.path.basename(ROOT)
    assert command.endswith("~/%s/sac_repro --from-nsys ~/%s/tests/data/h200-torch2.11-fix-reverted/nvtx_kern_sum.csv "
                            "--markdown" % (name, name)), command
    assert home + os.sep not in command
    if sys.executable.startswith(home + os.sep):  # the interpreter that ran, by its path
        assert command.split()[0] == "~/" + os.path.relpath(sys.executable, home)
    again, paste = run_from(tmp_path, command, {"HOME": home})
    assert (again, command_of(paste), verdict_lines(paste)) == (1, command, verdict_lines(proc.stdout))


def test_the_shipped_torch_says_nothing_changed(fixed_run):
    _, report, text, _, markdown = fixed_run
    assert report["torch_changes"] == [] and "changed:" not in text and "in-process" not in markdown.splitlines()[8]


def run_python(code, pythonpath=None):
    env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r)\n" % ROOT + code],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return eval(proc.stdout.strip().splitlines()[-1])


READ = "import torch, torch.utils.checkpoint\nfrom sac_repro.judge.changes import torch_changes\n"


def test_the_revert_is_read_from_torch_not_from_the_environment():
    """Whoever undoes the fix, and however: the modes' answer on a torch that ships it tells."""
    # one process, as shipped and then undone by hand (each torch import costs seconds of the fast tier)
    by_hand = READ + ("before = torch_changes(torch)\n"
                      "for m in (torch.utils.checkpoint._CachingTorchDispatchMode, torch.utils.checkpoint._CachedTorchDispatchMode):\n"
                      "    m.ignore_compile_internals = classmethod(lambda cls: False)\n"
                      "print(repr((before, [c['label'] for c in torch_changes(torch)])))")
    assert run_python(by_hand) == ([], [changes.REVERTED])
    loaded = run_python(READ + "print(repr(torch_changes(torch)))", REVERT)
    assert [(c["label"], c["pythonpath"]) for c in loaded] == [(changes.REVERTED, REVERT)]


def test_another_change_of_torch_is_named_by_its_file():
    code = READ + ("torch.utils.checkpoint.create_selective_checkpoint_contexts = lambda *a: None\n"
                   "print(repr(torch_changes(torch)))")
    (found,) = run_python(code)
    assert found["label"].startswith("torch changed in-process by ") and "create_selective_checkpoint_contexts" in found["label"]


def test_dynamo_reason_is_in_the_report_whole(reverted_run):
    rc, report, text, stdout, markdown = reverted_run
    lines = text.splitlines()
    assert "dynamo (the report's loops): " + DYNAMO_REASON in lines
    assert not any(l.startswith("hint:") for l in lines)  # the line a hint would point to is there
    actual = next(l for l in markdown.splitlines() if l.startswith("- **Actual:**"))
    assert actual.startswith("- **Actual:** 3 of 3 calls under SAC ran eagerly, then raised (no compiled code, eager "
                             "aten::add, aten::mul; then RuntimeError: torch.compile with fullgraph=True found no "
                             "compiled frames.), while all 3 calls of the control ran compiled code; Dynamo said `")
    assert "Dynamo said `%s`" % DYNAMO_REASON in actual
    raised = next(l for l in lines if l.startswith("the report's loops raised"))
    assert raised.endswith("RuntimeError: torch.compile with fullgraph=True found no compiled frames.")


def test_a_shipped_torch_shows_no_dynamo_skip(fixed_run):
    _, report, text, _, _ = fixed_run
    assert report["dynamo_skips"] == [] and not any(l.startswith("dynamo (") for l in text.splitlines())


def test_one_finding_per_heading(fixed_run, reverted_run):
    """The bug, and only the bug, first; the second finding after the next step, in one sentence."""
    from sac_repro.judge import render
    fixed = fixed_run[4].splitlines()
    assert fixed[6] == "**This run does not reproduce pytorch/pytorch#161889**, which is fixed from torch 2.10.0."
    (finding,) = [i for i, l in enumerate(fixed) if l.startswith(render.SECOND_FINDING)]
    before = "\n".join(l for l in fixed[:finding] if not l.startswith(("`", "|")) and "policy" not in l.lower()
                       and not l.startswith(("#", "    ", "def ", "ops_to_save", "context_fn")))
    assert "MUST_SAVE" not in before and "aten.mm" not in before, before
    assert "pytorch/pytorch#175229" in fixed[finding] and "never `aten.mm.default`" in fixed[finding]
    assert fixed_run[4].count("| arrangement |") == 1  # its table, collapsed below it
    reverted = reverted_run[4]
    # from 2.12 Dynamo raises where it skips a fullgraph=True f, once f has run eagerly
    assert reverted.splitlines()[6] == ("**This run reproduces pytorch/pytorch#161889 with the 2.10 fix reverted "
                                        "in-process**: the compiled f ran eagerly under SAC in 3 of 3 calls, then raised.")
    assert "second finding" not in reverted and render.SECOND_FINDING not in reverted


def test_a_revert_of_one_mode_of_two_is_a_revert():
    """Either mode answering False brings the skip back: the fix is undone."""
    one = READ + ("torch.utils.checkpoint._CachedTorchDispatchMode.ignore_compile_internals = classmethod(lambda cls: False)\n"
                  "print(repr([c['label'] for c in torch_changes(torch)]))")
    assert run_python(one) == [changes.REVERTED]


@pytest.mark.unit
def test_a_torch_that_ships_no_fix_has_none_reverted(tmp_path):
    """2.5-2.9: torch's own checkpoint.py gives the SAC modes no answer of their own, and they answer
    False, as before the fix: nothing was undone, and a run there must not say so."""
    import types
    path = tmp_path / "checkpoint.py"
    module = types.ModuleType("checkpoint")
    module.__file__ = str(path)
    base = "class TorchDispatchMode:\n    @classmethod\n    def ignore_compile_internals(cls):\n        return False\n\n"
    for own in ("", FIXED_ANSWER):  # as 2.9 ships it; as 2.10 does
        path.write_text(base + "".join("class %s(TorchDispatchMode):\n    %s\n\n" % (m, own or "pass") for m in changes.SAC_MODES))
        for m in changes.SAC_MODES:  # what the modes answer in this process: False
            setattr(module, m, type(m, (), {"ignore_compile_internals": classmethod(lambda cls: False)}))
        assert changes.fix_reverted(module) is bool(own), own


FIXED_ANSWER = "@classmethod\n    def ignore_compile_internals(cls):\n        return True"


def test_a_folder_named_like_torchs_is_not_torch(tmp_path):
    """A patch in site-packages/torch_patches/ is not torch's own code."""
    torch_dir = tmp_path / "site-packages" / "torch"
    (torch_dir / "utils").mkdir(parents=True)
    (tmp_path / "site-packages" / "torch_patches").mkdir()
    assert changes.inside(str(torch_dir / "utils" / "checkpoint.py"), str(torch_dir))
    assert not changes.inside(str(tmp_path / "site-packages" / "torch_patches" / "p.py"), str(torch_dir))


# ------------------------------------------------------------------ the Command that reruns it
def rerun(environ, changed=(), argv=("--markdown",)):
    from sac_repro.judge import render
    report = {"rerun_env": render.rerun_env(environ), "torch_changes": list(changed)}
    return render.rerun_command(report, None, list(argv)), render.command_line(report, "x")


@pytest.mark.unit
def test_the_home_folder_is_home_through_its_symlink_and_only_whole(tmp_path, monkeypatch):
    """HOME a symlink (linkhome -> "w d#%"): a file given under the real path is named from ~ too (the
    Command printed the real path); a folder whose name only begins with home's is not home's
    (/home/al turned /home/alice into ~ice)."""
    from sac_repro.judge import command
    real, link = tmp_path / "w d#%", tmp_path / "linkhome"
    (real / "sub").mkdir(parents=True)
    link.symlink_to(real)
    monkeypatch.setenv("HOME", str(link))
    capture = str(real / "sub" / "cap.nsys-rep")
    for path in (capture, str(link / "sub" / "cap.nsys-rep")):
        assert changes.home_path(path) == command.shell_path(path) == "~/sub/cap.nsys-rep", path
    assert changes.home_path(str(real)) == "~"
    assert command.shell_value(os.pathsep.join([str(real / "a"), str(link), "x" + str(real)])) == '~/a:~:x"$HOME"'
    rerun = command.rerun_command({"rerun_env": {"PYTHONPATH": str(real)}, "torch_changes": []}, None,
                                  ["--from-nsys", capture], python="/usr/bin/python3")
    assert rerun.startswith("PYTHONPATH=~ /usr/bin/python3 ") and rerun.endswith(" --from-nsys ~/sub/cap.nsys-rep")
    assert str(tmp_path) not in rerun, rerun
    os.mkdir(tmp_path / "al")
    monkeypatch.setenv("HOME", str(tmp_path / "al"))
    alice = str(tmp_path / "alice" / "x")
    assert changes.home_path(alice) == alice and command.shell_path(alice) == shlex.quote(alice)
    assert command.shell_value(alice) == shlex.quote(alice)


def run_words():
    from sac_repro.judge import render
    return "%s %s" % (render.shell_path(sys.executable), render.shell_path(os.path.join(ROOT, "sac_repro")))


def test_the_command_carries_the_switches_of_torch_and_the_candidate():
    """SAC_FIX_CANDIDATE=warn, TORCHDYNAMO_DISABLE=1, TORCH_COMPILE_DISABLE=1 were dropped: the
    Command, run as printed, gave another answer."""
    candidate = os.path.join(ROOT, "sac_repro", "policy", "fix_candidate")
    environ = {"SAC_FIX_CANDIDATE": "warn", "TORCHDYNAMO_DISABLE": "1", "TORCH_COMPILE_DISABLE": "1",
               "TORCH_LOGS": "+dynamo", "HOME": "/nonexistent-home", "PATH": "/usr/bin", "PYTHONPATH": candidate}
    command, line = rerun(environ)
    assert command == ("PYTHONPATH=%s SAC_FIX_CANDIDATE=warn TORCHDYNAMO_DISABLE=1 TORCH_COMPILE_DISABLE=1 "
                       "TORCH_LOGS=+dynamo %s --markdown" % (shlex.quote(candidate), run_words()))
    assert line == "Command: `x`"


def test_the_command_keeps_the_pythonpath_that_loaded_a_change_and_says_what_it_may_not_load(tmp_path):
    """A revert by a module on PYTHONPATH (imported by the user's own sitecustomize): PYTHONPATH
    carried whole, nothing said; by a module that Python finds again by itself (site-packages),
    nothing said ("it does not rerun" was said, and was false); by a file found on neither, this run
    cannot tell what loads it, and says that."""
    mine = str(tmp_path / "my site")
    revert = {"label": changes.REVERTED, "file": os.path.join(mine, "undo.py"), "pythonpath": mine,
              "reloaded_by": changes.BY_PYTHONPATH, "env": {}}
    command, line = rerun({"PYTHONPATH": mine}, [revert])
    assert command == "PYTHONPATH=%s %s --markdown" % (shlex.quote(mine), run_words()) and line == "Command: `x`"
    by_itself = dict(revert, file="/usr/lib/python3/site-packages/undo.py", pythonpath=None,
                     reloaded_by=changes.BY_INTERPRETER)
    command, line = rerun({}, [by_itself])
    assert command == "%s --markdown" % run_words() and line == "Command: `x`"
    unplaced = dict(by_itself, reloaded_by=None)
    command, line = rerun({}, [unplaced])
    assert line == ("Command: `x`; not known to load again what changed torch: the 2.10 fix reverted in-process (made "
                    "by /usr/lib/python3/site-packages/undo.py, found neither on PYTHONPATH nor where the "
                    "interpreter looks by itself)")
    loaded = {"label": changes.REVERTED, "file": os.path.join(REVERT, "sitecustomize.py"), "pythonpath": REVERT, "env": {}}
    command, line = rerun({}, [loaded])  # PYTHONPATH gone from the environment, the change still read
    assert command == "PYTHONPATH=%s %s --markdown" % (shlex.quote(REVERT), run_words()) and line == "Command: `x`"


def run_in_bundle(command, env):
    proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout


# The fast tier's rerun is the reverted run's Command, from another folder (above)
@pytest.mark.parametrize("environ", [
    pytest.param({"TORCHDYNAMO_DISABLE": "1"}, marks=pytest.mark.release),
    pytest.param({"TORCH_COMPILE_DISABLE": "1"}, marks=pytest.mark.release),
    pytest.param({"SAC_FIX_CANDIDATE": "warn", "PYTHONPATH": "sac_repro/policy/fix_candidate"}, marks=pytest.mark.release),
    pytest.param({"PYTHONPATH": "sac_repro/revert_fix"}, marks=pytest.mark.release),
], ids=["dynamo-disabled", "compile-disabled", "candidate-warn", "reverted"])
def test_the_pastes_command_run_as_printed_gives_the_same_answer(environ):
    """From a shell with none of the run's variables: the Command alone must bring them back."""
    clean = {k: v for k, v in os.environ.items() if not re.fullmatch(r"TORCH.*|PYTORCH_.*|SAC_FIX_CANDIDATE|PYTHONPATH", k)}
    clean["PATH"] = os.path.dirname(sys.executable) + os.pathsep + clean["PATH"]
    rc, paste = run_in_bundle("python3 -m sac_repro --device cpu --markdown", dict(clean, **environ))
    command = command_of(paste)
    assert "not known to load again" not in paste.splitlines()[8]
    again, paste_again = run_from(os.path.dirname(ROOT), command)
    assert (again, command_of(paste_again)) == (rc, command)
    verdict = [l for l in paste.splitlines() if l.startswith(("- **Verdict:**", "policy (MUST_SAVE"))]
    assert verdict == [l for l in paste_again.splitlines() if l.startswith(("- **Verdict:**", "policy (MUST_SAVE"))]


# ------------------------------------------------------- what loads a change again (changes.reloader)
def test_a_revert_that_python_loads_by_itself_is_not_said_to_be_lost(tmp_path):
    """A revert imported by a sitecustomize.py in the interpreter's own site-packages (no PYTHONPATH):
    a rerun of the same interpreter loads it again. 'It does not rerun' was said, and was false."""
    import importlib.util
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = [os.path.join(root, d) for root, dirs, _ in os.walk(venv / "lib") for d in dirs if d == "site-packages"]
    torch_site = os.path.dirname(importlib.util.find_spec("torch").submodule_search_locations[0])
    with open(os.path.join(site, "torch_here.pth"), "w") as fh:
        fh.write(torch_site + "\n")
    shutil.copy(os.path.join(REVERT, "sitecustomize.py"), os.path.join(site, "undo_fix.py"))
    with open(os.path.join(site, "sitecustomize.py"), "w") as fh:
        fh.write("import undo_fix\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; sys.path.insert(0, %r)\n" % ROOT + READ
                           + "print(repr(torch_changes(torch)))"], capture_output=True, text=True, env=env, timeout=300)
    (found,) = eval(proc.stdout.strip().splitlines()[-1])
    assert (found["label"], found["reloaded_by"], found["pythonpath"]) == (changes.REVERTED, changes.BY_INTERPRETER, None)
    assert found["file"] == os.path.realpath(os.path.join(site, "undo_fix.py"))
    assert rerun({}, [found])[1] == "Command: `x`"


@pytest.mark.unit
def test_the_folder_that_reloads_a_change_is_the_one_its_module_was_found_on(tmp_path, monkeypatch):
    """By its module's name: a/b/c.py as a.b.c was found on the folder above a/; a file loaded by its
    path under another name (the candidate's torch.utils._sac_compiled_fn) on its own folder."""
    class Module:
        def __init__(self, name):
            self.__name__ = name
    root = os.path.realpath(str(tmp_path))
    for code_file, name, folder in (("site/undo.py", "undo", "site"), ("site/pkg/sub/mod.py", "pkg.sub.mod", "site"),
                                     ("site/pkg/__init__.py", "pkg", "site"),
                                     ("fix/_sac_compiled_fn.py", "torch.utils._sac_compiled_fn", "fix"),
                                     ("fix/loose.py", None, "fix")):
        assert changes.import_folder(os.path.join(root, code_file), Module(name) if name else None) == \
            os.path.join(root, folder), code_file
    for name in ("on_pythonpath", "on_sys_path", "nowhere"):
        os.mkdir(os.path.join(root, name))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.path.join(root, "on_pythonpath"), "relative"]))
    monkeypatch.setattr(sys, "path", [ROOT, os.path.join(root, "on_pythonpath"), os.path.join(root, "on_sys_path"),
                                      os.path.join(ROOT, "sac_repro", "revert_fix")])
    for folder, by in (("on_pythonpath", changes.BY_PYTHONPATH), ("on_sys_path", changes.BY_INTERPRETER),
                       ("nowhere", None)):
        code_file = os.path.join(root, folder, "undo.py")
        assert changes.reloader(code_file, Module("undo")) == ((by, os.path.dirname(code_file)) if by else (None, None))
    # the bundle's own folders (its entry point's, on sys.path) reload nothing of anyone's
    for code_file in (os.path.join(ROOT, "undo.py"), os.path.join(REVERT, "sitecustomize.py")):
        assert changes.reloader(os.path.realpath(code_file), Module(os.path.basename(code_file)[:-3])) == (None, None)


# ------------------------------------------------------------------ a paste safe to make public
# Values the paste never shows: by the variable's name, or a URL's user or secret query in the value
SECRETS = [("TORCHINDUCTOR_REDIS_URL", "redis://cache:6379/0?password=hunter2"),
           ("TORCHINDUCTOR_AUTH_HDR", "sekritvalue"), ("TORCHINDUCTOR_REDIS_PASS", "hunter2"),
           ("TORCHINDUCTOR_X_COOKIE", "c00kie"), ("TORCHINDUCTOR_CREDENTIALS", "creds"), ("CC", "x?pass=1"),
           ("TORCHINDUCTOR_REMOTE", "https://cache.example/x?token=abc"),
           ("TORCHINDUCTOR_REMOTE", "https://cache.example/x?a=1&api_key=abc"),
           ("TORCHINDUCTOR_REMOTE", "https://cache.example/x?Password=abc"),
           ("TORCHINDUCTOR_REMOTE", "https://al@cache.example/x"), ("TORCHINDUCTOR_REMOTE", "redis://:pw@cache:6379")]
SHOWN = [("TORCHINDUCTOR_CACHE_DIR", "/tmp/cache?x=1"), ("TORCHINDUCTOR_REMOTE", "https://cache.example/x?a=1"),
         ("TORCH_LOGS", "+dynamo"), ("TORCHINDUCTOR_DISABLED_PASSES", "a,b"), ("TORCHINDUCTOR_BYPASS", "1")]


@pytest.mark.unit
@pytest.mark.parametrize("name, value", SECRETS + SHOWN)
def test_a_secret_is_withheld_by_its_name_or_its_urls_user_or_query(name, value):
    """TORCHINDUCTOR_REDIS_URL=redis://...?password=... and TORCHINDUCTOR_AUTH_HDR were printed."""
    command, line = rerun({name: value})
    secret = (name, value) in SECRETS
    assert command.count(name + "=") == 1 and ('%s="$%s"' % (name, name) in command) == secret, command
    assert (line == "Command: `x`; %s: from the shell, not shown" % name) == secret, line


@pytest.mark.unit
def test_a_withheld_pythonpath_is_the_shells_after_the_changes_folder(tmp_path):
    """A PYTHONPATH withheld (a secret in it) and a change loaded from a folder: the command puts the
    change's folder first and the reader's own after it ("$PYTHONPATH"); without it, the rest went."""
    from sac_repro.judge import command as command_module
    printer = tmp_path / "print-env"
    printer.write_text("#!/bin/sh\nexec env -0\n")
    printer.chmod(0o755)
    revert = {"label": changes.REVERTED, "file": os.path.join(REVERT, "sitecustomize.py"), "pythonpath": REVERT,
              "env": {}}
    report = {"rerun_env": command_module.rerun_env({"PYTHONPATH": "/opt/x?token=1"}), "torch_changes": [revert]}
    command = command_module.rerun_command(report, None, [], python=str(printer)).rsplit(" ", 1)[0]
    assert command.startswith('PYTHONPATH=%s:"$PYTHONPATH" ' % shlex.quote(REVERT)), command
    proc = subprocess.run(["bash", "-c", command], env={"PATH": os.environ["PATH"], "PYTHONPATH": "/opt/x?token=1"},
                          capture_output=True, timeout=60)
    got = dict(e.split(b"=", 1) for e in proc.stdout.split(b"\0") if b"=" in e)
    assert got[b"PYTHONPATH"] == (REVERT + ":/opt/x?token=1").encode(), got


FAKE_HOME = "/home/alice"
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "api_key", "Password", "AUTH", "Cookie", "_PASS", "CREDENTIAL")


def is_secret(name, value):
    """The rule as docs/json.md states it: a name that holds one of the words (PASS as a word), or a
    URL with a user, or with one of the words in a query's key."""
    words = r"token|key|secret|password|passwd|(?<![a-z])pass(?![a-z])|auth|credential|cookie"
    return bool(re.search(words, name.lower()) or re.search(r"://[^/@\s]*@", value)
                or re.search(r"[?&;][^=&;#\s]*(%s)[^=&;#\s]*=" % words, value.lower()))
NAMES = st.one_of(
    st.sampled_from(["TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE", "TORCHINDUCTOR_CACHE_DIR", "TORCH_LOGS", "CC",
                     "CXX", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "PYTHONWARNINGS", "SAC_FIX_CANDIDATE",
                     "TORCHINDUCTOR_REDIS_URL", "TORCH_COMPILE_CACHE_KEY_TAG", "HOME", "PATH", "TORCH_HOME",
                     "PYTORCH_CUDA_ALLOC_CONF", "GITHUB_TOKEN", "HF_TOKEN", "TORCH_TRACE", "TORCH_LOGS_OUT",
                     "AWS_SECRET_ACCESS_KEY", "TORCHINDUCTOR-X", "TORCHINDUCTOR_\u00e9"]),
    st.builds(lambda p, s, r: p + s + r,
              st.sampled_from(["TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_", "TORCH_", "PYTORCH_", "", "MY_"]),
              st.sampled_from(("",) + SECRET_WORDS), st.text(alphabet="ABXYZ_019-.", max_size=5))).filter(lambda n: n not in ("", "_", "PWD", "SHLVL", "OLDPWD"))  # bash's own
VALUES = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12),
    st.builds(lambda a, b: FAKE_HOME + "/" + a + os.pathsep + b, st.text(alphabet="ab c'\"$~:/", max_size=8),
              st.sampled_from(["", FAKE_HOME, "x", "ccache " + FAKE_HOME + "/bin/g++"])),
    st.sampled_from(["redis://u:pw@cache:6379", "redis://cache:6379/0?password=hunter2", "1", "+dynamo", "~/literal"]))


@pytest.mark.unit
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(environ=st.dictionaries(NAMES, VALUES, max_size=6))
def test_the_command_carries_only_the_listed_variables_and_no_secret(environ, tmp_path_factory):
    """Only RERUN_VARIABLES, the home folder written as ~ (or "$HOME"), never the value of a name
    that holds a secret's word, nor a URL with a user or a secret query; and run by a shell, the
    command sets each carried variable to the run's value (a withheld one from that shell's own)."""
    from sac_repro.judge import render
    folder = tmp_path_factory.mktemp("env")
    printer = folder / "print-env"
    printer.write_text("#!/bin/sh\nexec env -0\n")
    printer.chmod(0o755)
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = FAKE_HOME
    try:
        report = {"rerun_env": render.rerun_env(environ), "torch_changes": []}
        command = render.rerun_command(report, None, [], python=str(printer)).rsplit(" ", 1)[0]  # no bundle path
    finally:
        os.environ["HOME"] = old_home
    carried = {k for k in environ if render.RERUN_VARIABLES.fullmatch(k)}
    secret = {k for k in carried if is_secret(k, environ[k])}
    assert set(report["rerun_env"]) == carried and {k for k, v in report["rerun_env"].items() if v is None} == secret
    assert FAKE_HOME not in command and "redis://u:pw@" not in command and "hunter2" not in command
    for k in carried - secret - {"PYTHONPATH"}:  # the home folder as ~ where a shell expands it
        assert not environ[k].startswith(FAKE_HOME + "/") or "%s=~/" % k in command, (k, command)
    shell = {"HOME": FAKE_HOME, "PATH": os.environ["PATH"]}
    shell.update({k: environ[k] for k in secret})  # what the reader's shell holds
    proc = subprocess.run(["bash", "-c", command], env=shell, capture_output=True, timeout=60)
    got = dict(e.split(b"=", 1) for e in proc.stdout.split(b"\0") if b"=" in e)
    assert proc.returncode == 0, proc.stderr
    for k in carried:
        want = environ[k]
        if k == "PYTHONPATH" and k not in secret:  # its folders made absolute, and an empty one dropped
            want = os.pathsep.join(os.path.abspath(p) for p in want.split(os.pathsep) if p) or None
        assert got.get(k.encode()) == (want.encode() if want is not None else None), (k, environ[k], command)
    for k in set(environ) - carried - set(shell):
        assert k.encode() not in got, (k, command)
