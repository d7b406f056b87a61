"""The command that reruns a run, as a paste prints it, and how a paste names paths and variables:
from any folder (the interpreter, the bundle and each file by its absolute path), with the home
folder written as ~, and only the variables of one list, a secret's value never shown.
"""
import os
import re
import shlex
import sys

from .changes import BY_INTERPRETER, home_folders, home_path

BUNDLE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shown_path(path):
    """A file as a paste names it: one of the bundle's by its path in the bundle, any other whole,
    with the home folder written as ~ (a name to read; commands take shell_path's)."""
    rel = os.path.relpath(path, BUNDLE)
    return home_path(path) if rel == ".." or rel.startswith(".." + os.sep) else rel


SCRIPT_NAME = "torch_compile_selective_activation_checkpoint.py"
# run_nsys.sh's report name when no -o is given
DEFAULT_CAPTURE = "torch_compile_selective_activation_checkpoint"


# The one list of the variables that change what the run does: the rerun command and the JSON carry
# these, and nothing else of the environment (a paste is public). Dynamo's, Inductor's and
# torch.compile's switches, under both spellings torch reads (TORCHDYNAMO_DISABLE,
# TORCH_COMPILE_DISABLE, TORCHINDUCTOR_*: which kernels, which caches); TORCH_LOGS and its format
# (what Dynamo logs; the child reads its skip reasons from that log); the GPUs torch sees (--device
# auto takes cuda where it sees one); where Python finds modules (a revert, the candidate, anyone's
# patch); its warnings filter (error turns a warning into a raise: 125); the C++ compiler Inductor
# calls on the CPU; the candidate's mode. Not TORCH_TRACE or TORCH_LOGS_OUT (files that logs go
# to: nothing that runs changes), nor PYTORCH_* (the allocator and the like: no verdict changes).
# Only names a shell can set: a prefix assignment takes no other.
RERUN_VARIABLES = re.compile(r"(?:TORCHDYNAMO|TORCH_DYNAMO|TORCHINDUCTOR|TORCH_INDUCTOR|TORCH_COMPILE|TORCH_COMPILER)"
                             r"_[A-Za-z0-9_]*|TORCH_LOGS|TORCH_LOGS_FORMAT|CUDA_VISIBLE_DEVICES|PYTHONPATH|"
                             r"PYTHONWARNINGS|CC|CXX|SAC_FIX_CANDIDATE")
# A value never printed: of a name that says it holds a secret (an auth header's, a password's: PASS
# as a word or PASSWORD, not Inductor's TORCHINDUCTOR_DISABLED_PASSES), or a URL with a user in it
# or a secret in its query (a remote cache's: redis://user:password@host, redis://host/0?password=).
# The command takes it from the shell.
SECRET = r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|(?<![A-Z])PASS(?![A-Z])|AUTH|CREDENTIAL|COOKIE"
SECRET_NAME = re.compile(SECRET, re.I)
URL_WITH_USER = re.compile(r"://[^/@\s]*@")
SECRET_QUERY = re.compile(r"[?&;][^=&;#\s]*(?:%s)[^=&;#\s]*=" % SECRET, re.I)


def withheld(name, value):
    return value is None or bool(SECRET_NAME.search(name) or URL_WITH_USER.search(value) or SECRET_QUERY.search(value))


def rerun_env(environ, through_run_nsys=False):
    """What of environ the rerun command must carry (cli.py records it in the report): the listed
    variables, a withheld value as None."""
    env = {k: None if withheld(k, v) else v for k, v in environ.items() if RERUN_VARIABLES.fullmatch(k)}
    if through_run_nsys:
        env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)  # run_nsys.sh sets it itself
    return env


def shell_path(path):
    """path as one shell word that names it from any folder: absolute, the home folder as ~ (which
    the shell expands there, and a quoted ~ or a ~ before a quoted slash it would not)."""
    shown = home_path(os.path.abspath(path))
    if shown == "~" or shown.startswith("~" + os.sep):
        return "~" + (os.sep + shlex.quote(shown[2:]) if shown[2:] else "")
    return shlex.quote(shown)


def shell_value(value):
    """A variable's value as one shell word of an assignment: each of its :-separated parts that is
    a path under the home folder as ~/... (expanded after = and after :), the home folder anywhere
    else in it as "$HOME"."""
    homes, words = home_folders(), []
    for part in value.split(os.pathsep):
        head = ""
        home = next((h for h in homes if part == h or part.startswith(h + os.sep)), None)
        if home:
            head, part = ("~", "") if part == home else ("~" + os.sep, part[len(home) + 1:])
        pieces = re.split("(?:%s)(?=/|$)" % "|".join(map(re.escape, homes)), part) if homes else [part]
        word = '"$HOME"'.join(shlex.quote(p) if p else "" for p in pieces)
        words.append(head + word if head or word else "''")
    return os.pathsep.join(words)


def assignment(name, value):
    return '%s="$%s"' % (name, name) if withheld(name, value) else "%s=%s" % (name, shell_value(value))


# The judged run's options that name a file, relative to the folder it ran in: absolute in the command
PATH_OPTIONS = ("--json", "--plot", "--trace", "--from-nsys", "--from-ncu", "--bench-json")


def rerun_prefix(report):
    """The words before a rerun's interpreter: the variables of the run's environment that change
    what runs, and the PYTHONPATH that loaded each in-process change of torch, or a reader who
    reruns it tests another torch."""
    env = dict(report.get("rerun_env") or {})
    kept = "PYTHONPATH" in env and env["PYTHONPATH"] is None  # withheld: the shell's own, after the changes'
    paths = [p for p in (env.pop("PYTHONPATH", None) or "").split(os.pathsep) if p]
    for c in report.get("torch_changes") or []:
        for k, v in (c.get("env") or {}).items():
            env.setdefault(k, v)
        folder = c.get("pythonpath")
        if folder and not any(os.path.realpath(p) == os.path.realpath(folder) for p in paths):
            paths.insert(0, folder)
    words = ([shell_value(os.pathsep.join(os.path.abspath(p) for p in paths))] if paths else []) + \
        (['"$PYTHONPATH"'] if kept else [])
    prefix = ["PYTHONPATH=" + os.pathsep.join(words)] if words else []
    return prefix + [assignment(k, v) for k, v in sorted(env.items())]


def script_command(report):
    """The standalone script run as rerun_command runs the bundle (verdict's DYNAMO_HINT names it). A
    capture judged alone names no torch, nor a change of it: the script then runs under those that
    made the capture."""
    script = shell_path(os.path.join(BUNDLE, SCRIPT_NAME))
    if not report["env"].get("torch"):
        return "python3 %s, under the torch that made the capture, with any in-process change it had" % script
    return " ".join(rerun_prefix(report) + [shell_path(sys.executable), script])


def rerun_command(report, script_path, argv, capture_options=None, python=None):
    """The command that reruns what ran, from any folder: the interpreter that ran (python, else this
    one) on the bundle's path, the files it was given by their absolute paths, after rerun_prefix.
    The home folder is written as ~. A capture that run_nsys.sh made and handed over
    (capture_options: its capture run's options) reruns as run_nsys.sh, the judge's own options
    after its capture run's."""
    prefix = rerun_prefix(report)
    python = python or sys.executable
    shown, report_file, given = [], None, iter(argv)
    for a in given:
        option, eq, value = a.partition("=")
        if option not in PATH_OPTIONS + ("--_env",):
            shown.append(shlex.quote(a))
            continue
        value = value if eq else next(given, None)
        if option == "--_env":  # run_nsys.sh's hand-off file is gone once it has judged
            continue
        if capture_options is not None and option in ("--from-nsys", "--from-ncu"):
            report_file = value
        elif value is not None:
            shown += [option, value if value == "-" and option == "--json" else shell_path(value)]
    if capture_options is None:
        return " ".join(prefix + [shell_path(python) if python else "python3", shell_path(os.path.join(BUNDLE, "sac_repro"))]
                        + shown)
    name = re.sub(r"(\.nsys-rep|\.qdrep|\.ncu\.txt)$", "", report_file or "")
    named = [] if name in ("", DEFAULT_CAPTURE) else ["-o", shell_path(name)]
    rest = [shlex.quote(a) for a in capture_options] + shown
    return " ".join(prefix + (["PYTHON=" + shell_value(python)] if python else [])
                    + [shell_path(os.path.join(BUNDLE, "run_nsys.sh"))] + named + (["--"] + rest if rest else []))


def rerun_gaps(report):
    """The in-process changes that the rerun command is not known to load again: made by a file
    found neither on PYTHONPATH (which the command carries) nor where the interpreter looks by
    itself (site-packages, the user's site, a .pth's folder: the same interpreter finds it again),
    or by code no file names (changes.reloader). Never "does not rerun": that is not measured."""
    return ["%s (%s)" % (c["label"], "made by %s, found neither on PYTHONPATH nor where the interpreter looks by "
                                     "itself" % shown_path(c["file"]) if c.get("file")
                          else "made by code this run could not place")
            for c in report.get("torch_changes") or []
            if not c.get("pythonpath") and c.get("reloaded_by") != BY_INTERPRETER]


def command_line(report, command):
    """'Command: `...`', which of its variables a reader's shell gives, and what it is not known to
    load again, for a paste."""
    env = dict(report.get("rerun_env") or {})
    for c in report.get("torch_changes") or []:
        env.update((k, v) for k, v in (c.get("env") or {}).items() if k not in env)
    taken = sorted(k for k, v in env.items() if withheld(k, v))
    gaps = rerun_gaps(report)
    return "Command: `%s`%s%s" % (
        command, "; %s: from the shell, not shown" % ", ".join(taken) if taken else "",
        "; not known to load again what changed torch: %s" % "; ".join(gaps) if gaps else "")
