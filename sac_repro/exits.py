"""Exit codes, the contract with `git bisect run`, in one place; and the guard that every entry
point runs inside, so that nothing but a judged verdict ever exits 0 or 1.
"""
import os
import signal
import sys

EXIT_NOT_REPRODUCED, EXIT_REPRODUCED, EXIT_CANNOT_TEST, EXIT_ABORT = 0, 1, 125, 128
EXIT_OK = 0  # no verdict was asked for and the job is done: --help, --loops-only, a listing
# `bisect_torch.py releases` found no release that changes the verdict: an answer about a range,
# never any one build's verdict, so neither 0 nor 1 (releases is no `git bisect run` step)
EXIT_NO_CHANGE = 3
# The contract, one row per code: what --help says, and what the README's table must say.
CODES = (
    (EXIT_NOT_REPRODUCED, "not_reproduced",
     "every call of the control and every call under SAC ran compiled code (git bisect: good, the old term)"),
    (EXIT_REPRODUCED, "reproduced",
     "every call of the control ran compiled code, and at least one call under SAC ran eagerly (bad, the new term)"),
    (EXIT_CANNOT_TEST, "cannot_test",
     "this build cannot show the bug: no SAC API, no such device, torch crashed, hung or failed to "
     "import, a control call ran no compiled code, or the evidence settles nothing (skip)"),
    (EXIT_ABORT, "-", "usage error, output that could not be written, or a bug in this bundle (aborts a bisect); "
     "128+n: ended by signal n"),
)
# The bench (sac_repro/bench/bench_sac_compile.py) gives no verdict: it measures, or says why it could not.
BENCH_CODES = (
    (EXIT_OK, "measured", "every arrangement matched eager and was timed: the table printed, --json and "
     "--plot written"),
    (EXIT_CANNOT_TEST, "cannot_test", "this build cannot be measured: no such device, torch failed to import "
     "or raised, or an arrangement's loss or gradients differ from eager beyond --tolerance"),
    (EXIT_ABORT, "-", "usage error, output that could not be written, or a bug in this bundle; "
     "128+n: ended by signal n"),
)
# The exit code of each verdict, for each way of bisecting: --hunt-fix swaps 0 and 1, for
# `git bisect start --term-old broken --term-new fixed`.
TERMS = {
    "regression": {"not_reproduced": EXIT_NOT_REPRODUCED, "reproduced": EXIT_REPRODUCED, "cannot_test": EXIT_CANNOT_TEST},
    "fix": {"reproduced": EXIT_NOT_REPRODUCED, "not_reproduced": EXIT_REPRODUCED, "cannot_test": EXIT_CANNOT_TEST},
}

ABORTS = "; 128+n: ended by signal n"
# bisect_torch.py's exit codes, one row per command and code: each command's --help prints its
# rows, and docs/bisecting.md's table must hold all of them, in this order.
BISECT_CODES = (
    ("nightly-step", EXIT_NOT_REPRODUCED, "the old term: good (not reproduced); with --hunt-fix, broken (reproduced)"),
    ("nightly-step", EXIT_REPRODUCED, "the new term: bad (reproduced); with --hunt-fix, fixed (not reproduced)"),
    ("nightly-step", EXIT_CANNOT_TEST, "skip this nightly: no wheel for its date on the index, a wheel of another "
     "commit, a failed install, or the repro says cannot_test"),
    ("nightly-step", EXIT_ABORT, "abort the bisect: a usage error, the bisect's terms against --hunt-fix, an "
     "index that cannot be reached, too little disk, or a bug here" + ABORTS),
    ("nightly", EXIT_NOT_REPRODUCED, "not_reproduced"),
    ("nightly", EXIT_REPRODUCED, "reproduced"),
    ("nightly", EXIT_CANNOT_TEST, "cannot_test: no wheel for that date, a failed install, or the repro says so"),
    ("nightly", EXIT_ABORT, "a usage error (a date that is no day or is after today, a bad index), an index that "
     "cannot be reached, too little disk, or a bug here" + ABORTS),
    ("matrix", EXIT_OK, "every build given was judged: each verdict is on its line and in the table"),
    ("matrix", EXIT_CANNOT_TEST, "at least one build could not be judged (its line says why); the others were"),
    ("matrix", EXIT_ABORT, "a usage error (a build that is no release, date or latest, a bad index), an index "
     "that cannot be reached, too little disk, or a bug here" + ABORTS),
    ("releases", EXIT_OK, "found: the first release whose verdict differs from OLD's is named"),
    ("releases", EXIT_NO_CHANGE, "no change: NEW gives OLD's verdict, so no release between them changes it"),
    ("releases", EXIT_CANNOT_TEST, "the change lies among releases that could not be tested: the span is named, "
     "no release is"),
    ("releases", EXIT_ABORT, "a usage error (OLD not older than NEW, either not on the index or untestable), an "
     "index that cannot be reached, too little disk, or a bug here" + ABORTS),
    ("nightly-range", EXIT_OK, "the main-branch commits to read are printed"),
    ("nightly-range", EXIT_ABORT, "no finished bisect here, or not a commit of the nightly branch" + ABORTS),
    ("cache", EXIT_OK, "listed (and pruned)"),
    ("cache", EXIT_ABORT, "a usage error, or a bug here" + ABORTS),
)


def codes_help(codes=CODES, heading="exit codes (the `git bisect run` contract; --hunt-fix swaps 0 and 1):"):
    """The exit codes as --help prints them."""
    import textwrap
    return heading + "\n" + "\n".join(
        textwrap.fill(meaning, 100, initial_indent="  %-4d %-15s " % (code, verdict), subsequent_indent=" " * 23)
        for code, verdict, meaning in codes)


def command_codes_help(command):
    """One bisect_torch.py command's exit codes as its --help prints them."""
    import textwrap
    return "exit codes:\n" + "\n".join(
        textwrap.fill(meaning, 100, initial_indent="  %-4d " % code, subsequent_indent=" " * 7)
        for cmd, code, meaning in BISECT_CODES if cmd == command)


HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)  # SIGQUIT: Ctrl-\


class UsageError(Exception):
    """Bad input from the user: one line and EXIT_ABORT, never a verdict."""


class CannotTest(Exception):
    """This build cannot show it or be measured (no such device, torch failed): one line and
    EXIT_CANNOT_TEST."""


class Untestable(Exception):
    """bisect_torch.py: this build cannot be tested: skip it (125), never guess. `wheel` and
    `built_from` say which wheel it was and the commit it names, where they were read before the
    build was given up."""

    def __init__(self, message, wheel="-", built_from=None):
        super().__init__(message)
        self.wheel, self.built_from = wheel, built_from


class OutputError(Exception):
    """A report or a file could not be written: the verdict was not delivered, so no verdict."""


class Interrupted(BaseException):
    """A signal, raised where the program is, so that every `finally` on the way out ends the
    processes and removes the files it made. A BaseException, as KeyboardInterrupt is."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


# What the process was started ignoring (`nohup` ignores SIGHUP; a shell's `cmd &` without job
# control, SIGINT and SIGQUIT): left ignored, or the run would end on what its caller meant it to outlive.
IGNORED_AT_START = frozenset(s for s in HANDLED_SIGNALS if signal.getsignal(s) == signal.SIG_IGN)


def raise_on_signals():
    def handler(signum, frame):
        for s in HANDLED_SIGNALS:  # the clean-up on the way out must not be cut short by a second one
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)
    for s in HANDLED_SIGNALS:
        if s not in IGNORED_AT_START:
            signal.signal(s, handler)


def dies_with_parent():
    """For Popen's preexec_fn, with start_new_session: the child gets SIGTERM when its parent
    dies, even by SIGKILL (the OOM killer, `timeout -s KILL`), which no handler of ours sees; a
    child in a session of its own is otherwise left running. Linux only; elsewhere a no-op."""
    parent = os.getpid()

    def arm():
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(EXIT_ABORT)
    return arm if sys.platform.startswith("linux") else None


def end_own_group():
    """In a child that leads a session of its own (run_child's), on its way out after a signal: ends
    what it started (Inductor's compile workers, a compiler), which the death signal that
    dies_with_parent armed in the child alone never reaches. Linux (the group read from /proc);
    elsewhere, and in a process that leads no group, nothing is done."""
    me = os.getpid()
    if os.getpgrp() != me or not os.path.isdir("/proc"):
        return
    for _ in range(3):  # and what was being started meanwhile
        others = [pid for pid in group_members(me) if pid != me]
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not others:
            return


def group_members(pgid):
    members = []
    for name in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % name) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold anything
        except (OSError, IndexError):
            continue
        if name.isdigit() and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(name))
    return members


def end_group(proc, grace=0):
    """Ends a child started in a session of its own, with all it started: SIGTERM first when
    there is time to clean up (`grace` seconds), then SIGKILL for whatever is left."""
    if grace:
        try:
            proc.terminate()
            proc.wait(grace)
        except Exception:  # subprocess.TimeoutExpired: it had its chance
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def one_line(e):
    return " ".join(("%s: %s" % (type(e).__name__, e)).split())[:400]


def say(msg):
    """One line on stdout, at once: a bisect's log shows each step as it happens."""
    print(msg, flush=True)


def say_error(line):
    """One line on stderr, if stderr can still take it."""
    if sys.stderr is None:  # closed: print(file=None) would write the line into stdout's report
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def guarded(body, whose):
    """Runs an entry point's body and returns its exit code: the body's, EXIT_CANNOT_TEST with one
    line for CannotTest, or EXIT_ABORT with one line for a usage error, output that could not be written, or a bug of `whose`; 128+n for a
    signal. Output is flushed here, so a closed pipe is caught here and not at interpreter exit."""
    raise_on_signals()
    try:
        try:
            code = body()
        except SystemExit as e:  # argparse's --help: delivered only if it could be written
            if e.code not in (0, None):
                raise
            code = 0
        for stream in (sys.stdout, sys.stderr):
            if stream is None:
                raise OutputError("cannot write the report: standard output or error is closed")
            stream.flush()
        return code
    except CannotTest as e:
        say_error("cannot_test: %s" % e)
        return EXIT_CANNOT_TEST
    except UsageError as e:
        say_error("usage error: %s" % e)
    except OutputError as e:
        say_error("error: %s" % e)
    except BrokenPipeError as e:
        say_error("error: cannot write the report: %s" % e.strerror)
    except Interrupted as e:
        say_error("interrupted by %s: stopped what it had started, no verdict" % signal.Signals(e.signum).name)
        return EXIT_ABORT + e.signum
    except KeyboardInterrupt:  # a SIGINT that our handler saw arrives as Interrupted (raise_on_signals)
        say_error("interrupted: KeyboardInterrupt, which this bundle's signal handler did not see: stopped what it "
                  "had started, no verdict")
        return EXIT_ABORT + signal.SIGINT
    except Exception as e:
        say_error("internal error (a bug in %s, not a verdict): %s" % (whose, one_line(e)))
    finally:
        quiet_closed_streams()
    return EXIT_ABORT


def quiet_closed_streams():
    """Where stdout or stderr can no longer be written, point it at /dev/null: otherwise Python's
    own flush at exit fails too, and exits 120."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
            except (OSError, ValueError):
                pass


def raised_by_this_bundle(e):
    """Ours (abort the bisect) or the torch under test's (cannot test this build)? Anything that
    passed through torch's or triton's Python code is theirs; so is a RuntimeError (how torch's
    C++ reports failures). A plain Python error that never entered torch is a bug here."""
    import traceback
    if isinstance(e, BrokenPipeError) and stdout_reader_gone():
        return True  # our own lines' write: guarded says so, 128
    packages = [os.path.dirname(m.__file__) + os.sep for m in
                (sys.modules.get("torch"), sys.modules.get("triton")) if m and getattr(m, "__file__", None)]
    for frame in traceback.extract_tb(e.__traceback__):
        if any(os.path.abspath(frame.filename).startswith(p) for p in packages):
            return False
    if isinstance(e, ImportError) and (e.name or "").split(".")[0] in ("torch", "triton"):
        return False  # a module that torch or triton lacks: a broken build, whoever imported it
    return isinstance(e, OUR_BUG_TYPES)


def stdout_reader_gone():
    """Whether standard output is a pipe whose reader has closed it (poll says POLLERR)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no stdout, or no descriptor
        return False


OUR_BUG_TYPES = (NameError, TypeError, KeyError, IndexError, AttributeError, ValueError,
                 AssertionError, ZeroDivisionError, ImportError)
