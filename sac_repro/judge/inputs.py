"""What the judged run reads from files besides a capture: the bench's table (--bench-json) and
run_nsys.sh's hand-off from its capture run (--_env). Each is checked whole before any work, so
that a file of another shape is the caller's mistake (128), never a bug of the reports.
"""
import json
import math

from ..exits import one_line, UsageError
from .verdict import B_NO_CHECKPOINT, B_WORKAROUND, B_WRAPPED


def load_bench(path):
    """A bench JSON (`bench_sac_compile.py --json`), checked for all that the policy report reads."""
    from .captures import check_input_file
    check_input_file(path, "--bench-json", "the bench's JSON")
    try:
        with open(path) as fh:
            bench = json.load(fh)
        problem = bench_problem(bench)
    except OSError as e:  # a file that passes every check and fails its read (/proc/self/mem)
        raise UsageError("--bench-json %s: cannot read it: %s" % (path, e.strerror or e))
    except ValueError as e:
        problem = "not JSON: %s" % one_line(e)
    except RecursionError:  # json's reader recurses per level; the bench's table is four deep
        problem = "nested deeper than Python's JSON reader can follow"
    if problem:
        raise UsageError("--bench-json %s: expected the JSON that `bench_sac_compile.py --json` writes: %s"
                         % (path, problem))
    return bench


def bench_problem(bench):
    """The first field of a bench table that render.py's policy report could not read, or None."""
    if not isinstance(bench, dict):
        return "a JSON object, found %s" % type(bench).__name__
    for key in ("device", "torch", "dtype"):
        if not (isinstance(bench.get(key), str) and bench[key]):
            return wrong(bench, key, "a non-empty string")
    for key in ("layers", "hidden", "tokens") + (("world",) if bench.get("fsdp") else ()):
        if not is_count(bench.get(key), 1):
            return wrong(bench, key, "a whole number > 0")
    if "fsdp" in bench and not isinstance(bench["fsdp"], bool):
        return wrong(bench, "fsdp", "true or false")
    rows = bench.get("rows")
    if not (isinstance(rows, dict) and rows):
        return wrong(bench, "rows", "an object of arrangements, one at least")
    for name, r in rows.items():
        at = 'rows["%s"]' % name
        if not isinstance(r, dict):
            return wrong(rows, name, "an object", at)
        if not (is_number(r.get("median")) and r["median"] > 0):
            return wrong(r, "median", "a finite number of ms > 0", at + ".median")
        if r.get("mem") is not None and not (is_number(r["mem"]) and r["mem"] >= 0):
            return wrong(r, "mem", "a finite number of GiB >= 0, or null", at + ".mem")
        if r.get("bwd_mm") is not None and not is_count(r["bwd_mm"], 0):
            return wrong(r, "bwd_mm", "a whole number >= 0, or null", at + ".bwd_mm")
    if not (isinstance(bench.get("baseline"), str) and bench["baseline"] in rows):
        return wrong(bench, "baseline", "the name of one of the rows")
    # the wrapped arrangement's memory is set against these two rows' (policy_report.supported_and_open)
    wrapped = [r for n, r in rows.items() if n == B_WRAPPED and r.get("mem") is not None]
    for name in (B_NO_CHECKPOINT, B_WORKAROUND):
        if wrapped and name in rows and rows[name].get("mem") is None:
            return wrong(rows[name], "mem", "a number: the wrapped arrangement's memory is compared with it",
                         'rows["%s"].mem' % name)
    return None


def wrong(holder, key, expected, name=None):
    found = "nothing" if key not in holder else json.dumps(holder[key])[:60]
    return "%s must be %s, found %s" % (name or key, expected, found)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_count(value, least):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def load_capture_run(path):
    """--_env FILE, as --loops-only wrote it; None without one. Every value the reports read is
    checked here: a hand-off of another shape is the caller's mistake, not a bug of the judge."""
    if path is None:
        return None
    try:
        if not path:
            raise ValueError("an empty path")
        with open(path) as fh:
            got = json.load(fh)
        problem = hand_off_problem(got)
        if problem:
            raise ValueError("not what --loops-only writes: " + problem)
    except (OSError, ValueError) as e:
        raise UsageError("--_env %s: %s (it is run_nsys.sh's hand-off from the capture run; leave it out)"
                         % (path, one_line(e)))
    return got


def hand_off_problem(got):
    """What in a hand-off is not as loops_only_exit writes it, or None."""
    def strings(d, keys, optional=()):
        return isinstance(d, dict) and all(isinstance(d.get(k), str) for k in keys) and \
            all(d.get(k) is None or isinstance(d.get(k), str) for k in optional)

    if not isinstance(got, dict):
        return "not an object"
    env = got.get("env")
    if not isinstance(env, dict) or not all(v is None or isinstance(v, str) for k, v in env.items() if k != "changes"):
        return "env is not an object of strings"
    changes = env.get("changes", [])
    if not isinstance(changes, list) or not all(
            strings(c, ("label",), ("file", "pythonpath")) and isinstance(c.get("env", {}), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in c.get("env", {}).items()) for c in changes):
        return "env.changes is not a list of changes"
    skips = got.get("dynamo_skips")
    if not isinstance(skips, list) or not all(strings(k, ("frame", "reason"), ("where", "source")) for k in skips):
        return "dynamo_skips is not a list of Dynamo's skips"
    options = got.get("capture_options", [])  # a hand-off written before it had them has none
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        return "capture_options is not a list of strings"
    return None
