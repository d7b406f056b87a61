"""The command line of torch_compile_selective_activation_checkpoint.py. It never imports torch:
the report's code runs in a child process, so that a crash or hang of the torch under test becomes
"cannot test" (125) instead of taking the verdict with it. Or it reads a profiler capture.
"""
import argparse
import ast
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

from .captures import load_rows
from .render import PROGRESS, render_markdown, render_text
from .verdict import EXIT_ABORT, EXIT_CANNOT_TEST, report_from_child, report_from_loops, UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError("%s (see --help)" % message)


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0, got %r" % text)
    return value


def parse_args(argv, doc):
    p = Parser(prog=os.path.basename(sys.argv[0]) or None, description=doc.split("\n\n")[0],
               epilog=doc.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: cuda when available, else cpu")
    p.add_argument("--json", metavar="PATH", help="also write the verdict and evidence as JSON")
    p.add_argument("--markdown", action="store_true",
                   help="print a report to paste into a GitHub issue instead of the text")
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
    args = p.parse_args(argv)
    args.terms = "fix" if args.hunt_fix else "regression"
    return args


def guarded(body, whose, interrupted="interrupted"):
    """Runs a command line's body; usage errors, Ctrl-C and our own bugs exit EXIT_ABORT with one
    line, so they abort a bisect instead of passing as a verdict."""
    try:
        return body()
    except UsageError as e:
        print("usage error: %s" % e, file=sys.stderr)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
    except Exception as e:
        print("internal error (a bug in %s, not a verdict): %s" % (
            whose, " ".join(("%s: %s" % (type(e).__name__, e)).split())[:400]), file=sys.stderr)
    return EXIT_ABORT


def main(script_path, argv=None):
    script_path = os.path.abspath(script_path)
    argv = sys.argv[1:] if argv is None else argv
    return guarded(lambda: run(script_path, argv), "this bundle")


def run(script_path, argv):
    doc = ast.get_docstring(ast.parse(open(script_path).read()))
    args = parse_args(argv, doc)
    if args.child_out:
        return child(script_path, args)
    if args.json:
        check_writable(args.json)
    if args.from_nsys or args.from_ncu:
        kind, path = ("ncu", args.from_ncu) if args.from_ncu else ("nsys", args.from_nsys)
        report = report_from_loops(load_rows(path, kind), "%s %s" % (kind, path), args.terms, args.strict_policy)
    else:
        raw, log = run_child(script_path, args)
        if raw["status"] == "our_bug":
            where = re.findall(r'File "([^"]+)", line (\d+)', raw.get("traceback", ""))
            at = " (at %s:%s)" % (os.path.basename(where[-1][0]), where[-1][1]) if where else ""
            raise RuntimeError("in the measured part: %s%s" % (raw["reason"], at))
        if raw["status"] == "torch_error":
            raw.update(status="cannot_test", show_log=True, reason="the torch under test raised " + raw["reason"])
        if raw.get("show_log") and log.strip():
            sys.stderr.write("--- the torch under test printed (last lines):\n%s\n---\n" % log[-3000:])
        if args.loops_only:
            return loops_only_exit(raw)
        report = report_from_child(raw, args.terms, args.strict_policy)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)  # in the order printed: scenarios as the table lists them
    if args.markdown:
        command = "python %s %s" % (os.path.basename(script_path), " ".join(argv))
        print(render_markdown(report, command.strip(), script_path,
                              collect_env() if report["env"].get("torch") else None))
    else:
        print(render_text(report))
    return report["exit_code"]


def loops_only_exit(raw):
    """No verdict: 0 when the report's loops ran through, 125 when they raised or could not run."""
    if raw["status"] != "ok":
        print("cannot_test: " + raw["reason"])
        return EXIT_CANNOT_TEST
    if raw.get("loops_error"):
        print("cannot_test: the report's loops raised %s; a capture of them is incomplete" % raw["loops_error"])
        return EXIT_CANNOT_TEST
    print("ran the report's two loops on %s (torch %s); judge them with --from-nsys or --from-ncu"
          % (raw["env"]["device"], raw["env"]["torch"]))
    return 0


def child(script_path, args):
    """In the child process: import the torch under test, then measure (measure.py)."""
    try:
        import torch  # noqa: F401
    except BaseException as e:
        with open(args.child_out, "w") as fh:
            json.dump({"status": "cannot_test", "reason": "torch failed to import: %s: %s" % (
                type(e).__name__, " ".join(str(e).split())[:300])}, fh)
        return 0
    from . import measure
    return measure.child_main(script_path, args.child_out, args.device, args.loops_only)


def run_child(script_path, args):
    """Runs the measured part; returns (result dict, its output). Crashes and hangs -> cannot_test.
    The child's progress lines go to stderr as they come; the rest is kept for a crash report."""
    env = dict(os.environ)
    # Names Inductor's C++ kernels (cpp_fused_*) in the CPU profile; CUDA kernels are named anyway.
    env.setdefault("TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE", "1")
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the report's code picks cuda whenever torch sees a GPU
    fd, out_path = tempfile.mkstemp(prefix="sac_repro_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, script_path, "--_child", out_path, "--device", args.device]
    if args.loops_only:
        cmd.append("--loops-only")
    log = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                text=True, errors="replace", start_new_session=True)
        reader = threading.Thread(target=pass_on_progress, args=(proc.stdout, log), daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            reader.join(10)
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "hung: no result within --timeout %gs (raise it if compilation is slow here)"
                    % args.timeout}, "".join(log)
        except BaseException:
            kill_group(proc)
            raise
        reader.join(10)
        text = "".join(log)
        if rc < 0:
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "crashed: killed by %s" % signal_name(-rc)}, text
        with open(out_path) as fh:
            content = fh.read()
        if not content:
            return {"status": "cannot_test", "show_log": True, "reason": "the torch under test "
                    "exited with code %d before giving a result" % rc}, text
        return json.loads(content), text
    finally:
        os.unlink(out_path)


def pass_on_progress(stream, log):
    for line in stream:
        log.append(line)
        if line.startswith(PROGRESS):
            sys.stderr.write(line)
            sys.stderr.flush()


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


def check_writable(path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UsageError("--json %s: folder %s does not exist or is not writable" % (path, folder))


def collect_env():
    """The versions PyTorch's bug template asks for: `python -m torch.utils.collect_env`."""
    try:
        return subprocess.run([sys.executable, "-m", "torch.utils.collect_env"], capture_output=True,
                              text=True, timeout=120).stdout.strip()
    except Exception as e:
        return "collect_env failed: %s" % e
