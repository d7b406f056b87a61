"""The judged run's command line (`python3 -m sac_repro`). It never imports torch: the bundle's
script runs in a child process, so that a crash or hang of the torch under test becomes "cannot
test" (125) instead of taking the verdict with it. Or it reads a profiler capture.
"""
import argparse
import ast
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback

from .. import outputs
from . import plot
from .captures import load_ranges, sqlite_of_nsys_rep, timeline_from_sqlite
from .changes import published
from .phrases import home_hidden
from ..exits import (codes_help, dies_with_parent, end_group, end_own_group, EXIT_ABORT, EXIT_CANNOT_TEST, EXIT_OK,
                     guarded, Interrupted, one_line, OutputError, raised_by_this_bundle, say_error, UsageError)
from ..policy.policy_report import render_policy_markdown
from .command import rerun_command, rerun_env
from .render import changes_said, dynamo_lines, PROGRESS, render_markdown, render_text
from .said import KEPT, Said
from .inputs import load_bench, load_capture_run
from .verdict import LOOP_RANGE, LOOPS, report_from_child, report_from_loops


PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # sac_repro/
SCRIPT = os.path.join(os.path.dirname(PACKAGE), "torch_compile_selective_activation_checkpoint.py")
ENTRY = os.path.join(PACKAGE, "__main__.py")  # the child's command: the engine, which runs SCRIPT
STARTED = PROGRESS + "the measured child started"  # not passed on: it marks where start-up's output ends


class Parser(argparse.ArgumentParser):
    """Errors are usage errors (128, one line), and no option is abbreviated: `--_c` is not
    `--_child`, `--from-n` is not `--from-nsys`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError("%s (see --help)" % message)

    def _print_message(self, message, file=None):
        """argparse swallows a failed write of --help; here it is output not delivered (128)."""
        if message:
            try:
                file = file or sys.stdout
                file.write(message)
                file.flush()
            except (OSError, AttributeError) as e:
                raise OutputError("cannot write the help: %s" % (getattr(e, "strerror", None) or e))


def whole_number(least):
    """An argparse type: a whole number >= least, else a usage error naming what was given."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not a whole number: %r" % text)
        if value < least:
            raise argparse.ArgumentTypeError("must be %d or more, got %r" % (least, text))
        return value
    return parse


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text)
    if not math.isfinite(value) or value <= 0:  # nan would turn a timeout off
        raise argparse.ArgumentTypeError("must be a finite number > 0, got %r" % text)
    return value


def parse_args(argv, doc):
    p = Parser(prog="python3 -m sac_repro", description=doc,
               epilog=codes_help() + "\n\nThe same command runs the bundle's tools: `python3 -m sac_repro bisect "
               "COMMAND ...` (bisecting, its own --help) and `python3 -m sac_repro bench ...` (the bench).",
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: cuda when available, else cpu")
    p.add_argument("--json", metavar="PATH", help="also write the verdict and evidence as JSON "
                   "(schema 2); - writes it to stdout instead of the text")
    p.add_argument("--markdown", action="store_true",
                   help="print a report to paste into a GitHub issue instead of the text")
    p.add_argument("--plot", metavar="PATH",
                   help="also draw what the verdict was judged from (.png or .svg; needs matplotlib)")
    p.add_argument("--policy-report", action="store_true",
                   help="print, as markdown, a report of the open half alone: the policy under "
                        "sac(compile(f)) against compile(sac(f)) (2.10 and later)")
    p.add_argument("--bench-json", metavar="PATH",
                   help="with --policy-report: add the cost that `bench_sac_compile.py --json PATH` measured")
    p.add_argument("--ablation", action="store_true",
                   help="also run the case under each torch.compile backend (eager, aot_eager, "
                        "aot_eager_decomp_partition, inductor): which part of the stack each finding is "
                        "(--markdown runs it)")
    p.add_argument("--trace", metavar="PATH.tar.gz",
                   help="also write this run's TORCH_TRACE log (the structured log of Dynamo, AOTAutograd and "
                        "Inductor that tlparse reads) as one archive to attach, as PyTorch's bug template asks")
    p.add_argument("--strict-policy", action="store_true",
                   help="also exit 1 when compiled code runs under SAC but the policy's MUST_SAVE "
                        "on aten.mm is ignored (torch 2.10 and later)")
    p.add_argument("--hunt-fix", action="store_true",
                   help="swap exits 0 and 1, for `git bisect start --term-old broken --term-new fixed`")
    p.add_argument("--timeout", type=positive_float, default=900.0, metavar="S",
                   help="seconds before a hung torch counts as cannot-test (default 900)")
    p.add_argument("--loops-only", action="store_true",
                   help="run only the report's code and its two NVTX loops (for nsys/ncu); no "
                        "verdict: exit 0 when they ran, 125 when they raised or could not run")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from-nsys", metavar="FILE",
                     help="judge from an nsys report (.nsys-rep, .sqlite, or nvtx_kern_sum CSV)")
    src.add_argument("--from-ncu", metavar="FILE",
                     help="judge from `ncu --nvtx --print-summary per-nvtx` output")
    p.add_argument("--_child", metavar="OUT", dest="child_out", help=argparse.SUPPRESS)
    # run_nsys.sh's hand-off: --loops-only writes the torch it ran (and what changed it in-process)
    # to FILE, and the judge of the capture reads it, so that its report names that torch
    p.add_argument("--_env", metavar="FILE", dest="env_file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.terms = "fix" if args.hunt_fix else "regression"
    check_paths(args)
    return args


def check_paths(args):
    """Paths are checked before any work: an empty one is an unset variable, never "no option"."""
    for option, value in (("--json", args.json), ("--from-nsys", args.from_nsys), ("--from-ncu", args.from_ncu),
                          ("--plot", args.plot), ("--bench-json", args.bench_json)):
        if value is not None and not value:
            raise UsageError("%s was given an empty path (an unset shell variable?)" % option)
    if not args.child_out:  # the child is given the parent's --plot, which the parent checked
        outputs.check_outputs([("--json", None if args.json == "-" else args.json), ("--plot", args.plot),
                               ("--trace", args.trace),
                               ("--_env", args.env_file if args.loops_only else None)],
                              [("--from-nsys", args.from_nsys, "the capture being judged"),
                               ("--from-ncu", args.from_ncu, "the capture being judged"),
                               ("--_env", None if args.loops_only else args.env_file, "the capture run's hand-off"),
                               ("--bench-json", args.bench_json, "the bench's table")])
    for option, path, problem in (("--_child", args.child_out, outputs.not_our_result_file),
                                  ("--_env", args.env_file if args.loops_only else None, outputs.not_our_hand_off)):
        problem = path is not None and problem(path)
        if problem:
            raise UsageError("%s %s: %s; an internal option, it takes only the temporary file that the bundle "
                             "made for it" % (option, path, problem))
    if args.plot and not args.child_out:
        problem = plot.plot_path_problem(args.plot)
        if problem:
            raise UsageError(problem)
    if args.json == "-" and (args.markdown or args.policy_report):
        raise UsageError("--json - and a markdown report both want stdout: write the JSON to a file")
    if args.policy_report and (args.from_nsys is not None or args.from_ncu is not None):
        raise UsageError("--policy-report needs a backward, and a capture of the report's loops holds none: "
                         "run the script itself")
    if args.loops_only:  # it runs the loops for a profiler, and judges nothing: these would be ignored
        given = [o for o, v in (("--json", args.json), ("--plot", args.plot), ("--markdown", args.markdown),
                                ("--hunt-fix", args.hunt_fix), ("--strict-policy", args.strict_policy),
                                ("--policy-report", args.policy_report), ("--ablation", args.ablation),
                                ("--trace", args.trace)) if v]
        if given:
            raise UsageError("--loops-only gives no verdict, so %s would be ignored: give %s to the judge of "
                             "its capture (--from-nsys or --from-ncu, or run_nsys.sh -- OPTIONS)"
                             % (", ".join(given), "it" if len(given) == 1 else "them"))
    if args.trace is not None and not args.trace.endswith((".tar.gz", ".tgz")):
        raise UsageError("--trace %s: name a .tar.gz, the archive it writes" % args.trace)
    if args.trace is not None and (args.from_nsys is not None or args.from_ncu is not None):
        raise UsageError("--trace needs a run of torch, and a capture is judged without one: run without --from-nsys/--from-ncu")
    if args.bench_json is not None and not args.policy_report:
        raise UsageError("--bench-json goes with --policy-report")
    if args.bench_json is not None:
        args.bench = load_bench(args.bench_json)


def main(script_path, argv=None):
    script_path = os.path.abspath(script_path)
    argv = sys.argv[1:] if argv is None else argv
    return guarded(lambda: run(script_path, argv), "this bundle")


def check_options(argv):
    """For run_nsys.sh: are these the script's options? 0, or a usage error (128) before any capture."""
    return guarded(lambda: parse_args(argv, __doc__) and EXIT_OK, "this bundle")


def run(script_path, argv):
    doc = ast.get_docstring(ast.parse(open(script_path).read()))
    args = parse_args(argv, doc)
    if args.child_out:
        try:
            return child(script_path, args)
        except Interrupted:  # the parent died (dies_with_parent) or was told to end us
            end_own_group()
            raise
    if args.from_nsys is not None or args.from_ncu is not None:
        kind, path = ("ncu", args.from_ncu) if args.from_ncu is not None else ("nsys", args.from_nsys)
        capture_run = load_capture_run(args.env_file)
        report = report_from_loops(load_ranges(path, kind), "%s %s" % (kind, path), args.terms, args.strict_policy,
                                   capture_run)
    else:
        capture_run = None
        try:
            raw, log = run_child(script_path, args)
        except BaseException:  # interrupted: the trace it was collecting goes with it
            shutil.rmtree(getattr(args, "trace_dir", None) or os.devnull + "/none", ignore_errors=True)
            raise
        if raw["status"] == "our_bug":
            where = re.findall(r'File "([^"]+)", line (\d+)', raw.get("traceback", ""))
            at = " (at %s:%s)" % (os.path.basename(where[-1][0]), where[-1][1]) if where else ""
            raise RuntimeError("in the measured part: %s%s" % (raw["reason"], at))
        if raw["status"] == "torch_error":
            raw.update(status="cannot_test", show_log=True, reason="the torch under test raised " + raw["reason"])
        log = printed_by_torch(log)
        if raw.get("show_log") and log.strip():
            sys.stderr.write("--- the torch under test printed (last lines):\n%s\n---\n" % log[-3000:])
        if args.loops_only:
            return loops_only_exit(raw, args.env_file, argv)
        report = report_from_child(raw, args.terms, args.strict_policy)
        report["python_executable"] = sys.executable  # the torch's: what a failed import is named by
        if args.trace:
            report["trace"] = outputs.write_trace(args.trace_dir, args.trace, home_hidden)
    # What reruns it: a judge of a capture file alone reruns on the file, whatever its environment.
    report["rerun_env"] = rerun_env(os.environ, through_run_nsys=bool(capture_run)) \
        if capture_run or (args.from_nsys is None and args.from_ncu is None) else {}
    if args.plot:
        draw(report, args)
    # in the order printed: scenarios as the table lists them
    as_json = home_hidden(json.dumps(published(report), indent=2))  # the home folder as ~ in every string
    if args.json == "-":
        emit(as_json)
        return report["exit_code"]
    if args.json:
        outputs.write_text(args.json, as_json + "\n", "--json")
    command = rerun_command(report, script_path, argv, capture_run and capture_run.get("capture_options"))
    if args.policy_report:
        if args.markdown:
            say_error("note: --policy-report prints the policy report alone (markdown); --markdown's report "
                      "of #161889 is a run without --policy-report")
        emit(render_policy_markdown(report, command, collect_env() if report["env"].get("torch") else None,
                                    getattr(args, "bench", None)))
    elif args.markdown:
        if report.get("plot"):  # an instruction for the one pasting, not words for the issue
            say_error("attach %s to the issue: the picture of what this paste's verdict was judged from"
                      % report["plot"])
        emit(render_markdown(report, command, script_path,
                             collect_env() if report["env"].get("torch") else None))
    else:
        emit(render_text(report))
    return report["exit_code"]


def draw(report, args):
    """--plot: the picture of what the verdict was judged from, after the verdict."""
    timeline = None
    if args.from_nsys is not None:
        with open(args.from_nsys, "rb") as fh:
            is_sqlite = fh.read(16).startswith(b"SQLite format 3")
        if is_sqlite:
            timeline = timeline_from_sqlite(args.from_nsys, LOOP_RANGE, LOOPS)
        elif args.from_nsys.endswith((".nsys-rep", ".qdrep")):
            with tempfile.TemporaryDirectory(prefix="sac_repro_") as folder:
                timeline = timeline_from_sqlite(sqlite_of_nsys_rep(args.from_nsys, folder), LOOP_RANGE, LOOPS)
    try:
        outputs.replace_atomically(args.plot, lambda target: plot.draw_report(report, target, timeline))
    except Exception as e:
        raise OutputError("cannot draw --plot %s: %s" % (args.plot, one_line(e)))
    report["plot"] = args.plot


def emit(text):
    """The report on stdout. A pipe whose reader has gone is no delivered verdict: OutputError."""
    try:
        if sys.stdout is None:
            raise OSError("standard output is closed")
        try:
            print(text)
        except UnicodeEncodeError:  # a stdout in latin-1 (a locale, a console): what it cannot encode is '?'
            encoding = sys.stdout.encoding
            print(text.encode(encoding, "replace").decode(encoding))
        sys.stdout.flush()
    except OSError as e:
        raise OutputError("cannot write the report to standard output: %s" % (e.strerror or e))


def loops_only_exit(raw, env_file, argv):
    """No verdict: 0 when the report's loops ran through, 125 when they raised or could not run."""
    changed = raw.get("env", {}).get("changes")
    torch_said = "torch %s%s" % (raw.get("env", {}).get("torch"), "; changed: " + changes_said(changed) if changed else "")
    if raw["status"] != "ok":
        emit("cannot_test: " + raw["reason"])
        return EXIT_CANNOT_TEST
    if raw.get("loops_error"):
        emit("cannot_test: the report's loops raised %s (%s); a capture of them is incomplete: the script "
             "itself, without --loops-only, judges this torch" % (raw["loops_error"], torch_said))
        for line in dynamo_lines(raw):
            emit(line)
        return EXIT_CANNOT_TEST
    if env_file:  # what reruns this capture: its own options, but for the hand-off
        options = [a for i, a in enumerate(argv) if a != "--loops-only" and not a.startswith("--_env")
                   and (i == 0 or argv[i - 1] != "--_env")]
        outputs.write_text(env_file, json.dumps({"env": raw["env"], "dynamo_skips": raw.get("dynamo_skips", []),
                                                 "capture_options": options}), "--_env")
    emit("ran the report's two loops on %s (%s); judge them with --from-nsys or --from-ncu"
         % (raw["env"]["device"], torch_said))
    return EXIT_OK


# What every torch release the bundle tests has, and its code uses before any torch op runs
TORCH_HAS = ("__version__", "version", "compile", "cuda", "profiler", "utils")


def child(script_path, args):
    """In the child process: import the torch under test, then measure (measure.py). What Python
    code says from here on is caught (said.py): an in-process change may speak as torch imports."""
    print(STARTED, flush=True)  # what the parent saw before this, Python's start-up said
    said = Said().install()
    said.where = "while torch imported"
    try:
        import torch  # noqa: F401
    except (Interrupted, KeyboardInterrupt):  # a signal, not a torch that fails to import
        raise
    except BaseException as e:
        return write_child_result(args.child_out, {
            "status": "cannot_test", "reason": "torch failed to import: %s" % one_line(e)[:300],
            "said": said.finish()})
    try:
        torch = sys.modules["torch"]
        lacks = ["torch." + name for name in TORCH_HAS if not hasattr(torch, name)]
        lacks += [] if isinstance(getattr(torch, "__version__", ""), str) else ["torch.__version__ as a string"]
    except Exception as e:  # a torch that raises as it is read (a module __getattr__)
        lacks = ["what it raised as it was read (%s)" % one_line(e)[:300]]
    if lacks:  # a stand-in or a broken install: the bundle's code would fail on it, not torch's
        return write_child_result(args.child_out, {
            "status": "cannot_test", "said": said.finish(), "reason": "torch imported, but lacks %s, "
            "which every release has: not a torch build this bundle can test" % ", ".join(lacks)})
    try:
        from . import measure
    except Exception as e:  # ours unless it broke inside torch's own imports
        return write_child_result(args.child_out, {
            "status": "our_bug" if raised_by_this_bundle(e) else "torch_error", "reason":
            "importing sac_repro.judge.measure: " + one_line(e), "traceback": traceback.format_exc()})
    return measure.child_main(script_path, args.child_out, args.device, args.loops_only, args.policy_report,
                              bool(args.plot), args.ablation, said)


def write_child_result(path, result):
    with open(path, "w") as fh:
        json.dump(result, fh)
    return EXIT_OK


def shadowed_sitecustomize(pythonpath):
    """The folders on PYTHONPATH whose sitecustomize.py never loads: Python imports the first one
    only (sac_repro/revert_fix and sac_repro/policy/fix_candidate at once, say). [(loaded, shadowed)]."""
    found = [p for p in (pythonpath or "").split(os.pathsep) if p and os.path.isfile(os.path.join(p, "sitecustomize.py"))]
    return [(found[0], p) for p in found[1:]]


def run_child(script_path, args):
    """Runs the measured part; returns (result dict, its output). Crashes and hangs -> cannot_test.
    The child's progress lines go to stderr as they come; the rest is kept for a crash report."""
    env = dict(os.environ)
    for loaded, shadowed in shadowed_sitecustomize(env.get("PYTHONPATH")):
        say_error("note: PYTHONPATH holds two sitecustomize.py: %s's loads, %s's does not (Python imports "
                  "the first only)" % (loaded, shadowed))
    # Names Inductor's C++ kernels (cpp_fused_*) in the CPU profile; CUDA kernels are named anyway.
    env.setdefault("TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE", "1")
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the report's code picks cuda whenever torch sees a GPU
    if args.trace:
        env["TORCH_TRACE"] = args.trace_dir = tempfile.mkdtemp(prefix="sac_repro_trace_")
    # The child's result file has no name from the start: nothing is left, whatever ends this run
    # (SIGKILL too); the child writes it through the descriptor it inherits, as /dev/fd/N.
    fd, out_path = tempfile.mkstemp(prefix="sac_repro_", suffix=".json")
    os.unlink(out_path)
    cmd = [sys.executable, ENTRY, "--_child", "/dev/fd/%d" % fd, "--device", args.device]
    if args.loops_only:
        cmd.append("--loops-only")
    if args.policy_report:
        cmd.append("--policy-report")
    if args.ablation or args.markdown:  # the paste runs it; the plain run offers it (its cost)
        cmd.append("--ablation")
    if args.plot:
        cmd += ["--plot", args.plot]  # the child records each call's timeline; the parent draws
    log = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                text=True, errors="replace", start_new_session=True,
                                preexec_fn=dies_with_parent(), pass_fds=(fd,))
        reader = threading.Thread(target=pass_on_progress, args=(proc.stdout, log), daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            end_group(proc)
            reader.join(10)
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test gave no result "
                    "within --timeout %gs: it hung, or needs longer here (raise it if compilation is slow)"
                    % args.timeout}, "".join(log)
        except BaseException:
            end_group(proc)
            raise
        reader.join(10)
        text = "".join(log)
        if rc < 0:
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "crashed: killed by %s" % signal_name(-rc)}, text
        with open(fd, closefd=False) as fh:
            content = fh.read()
        if not content and rc == EXIT_ABORT:  # only our own guard ends the child so: never a skip
            said = [l for l in text.splitlines() if l.strip() and not l.startswith(PROGRESS)]
            raise RuntimeError("the measured child aborted: %s" % (said[-1] if said else "no word said"))
        if not content:
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "exited with code %d before giving a result" % rc}, text
        return said_at_start_up(json.loads(content), text), text
    finally:
        os.close(fd)


def said_at_start_up(raw, text):
    """The lines the child printed before its own code ran (a sitecustomize's, a .pth's: the
    candidate's "not loaded"), which said.py, installed later, cannot catch: first in what was said."""
    before, started, _ = text.partition(STARTED + "\n")
    lines = [" ".join(line.split()) for line in before.splitlines() if line.strip()] if started else []
    if lines:
        raw["said"] = [{"where": "at Python's start-up", "kind": "output", "file": None, "text": line}
                       for line in lines[:KEPT]] + raw.get("said", [])
    return raw


def printed_by_torch(log):
    """The child's output less our own lines: its progress (passed on as it came) and its start marker."""
    return "".join(line for line in log.splitlines(True) if not line.startswith(PROGRESS))


def pass_on_progress(stream, log):
    """Reads the child's output to its end, whatever happens to our stderr: a reader that stopped
    would leave the child blocked on a full pipe."""
    for line in stream:
        log.append(line)
        if line.startswith(PROGRESS) and line.rstrip("\n") != STARTED:
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass  # the guard reports the closed stream once the verdict is in


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


# `python -m torch.utils.collect_env`, in a wrapper that ends its whole session when told to end:
# collect_env runs pip, nvidia-smi and others, any of which can hang, and the death signal that
# dies_with_parent arms reaches the wrapper alone, never what collect_env started.
COLLECT_ENV = """import os, runpy, signal, sys
def end(signum, frame):
    os.killpg(0, signal.SIGKILL)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, end)
sys.argv = [sys.argv[0]]
runpy.run_module("torch.utils.collect_env", run_name="__main__", alter_sys=True)
"""
COLLECT_ENV_TIMEOUT = 120


def collect_env():
    """The versions PyTorch's bug template asks for: `python -m torch.utils.collect_env`, started as
    run_child starts the measured child, so that nothing of it outlives this run."""
    try:
        proc = subprocess.Popen([sys.executable, "-c", COLLECT_ENV], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
                                preexec_fn=dies_with_parent())
    except OSError as e:
        return "collect_env failed: %s" % e
    try:
        return proc.communicate(timeout=COLLECT_ENV_TIMEOUT)[0].strip()
    except subprocess.TimeoutExpired:
        end_group(proc)
        return "collect_env failed: no answer within %d s" % COLLECT_ENV_TIMEOUT
    except BaseException:
        end_group(proc)
        raise
