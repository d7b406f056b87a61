"""What the series costs where it changes nothing: eager SAC's training step, where the policy is
asked about every op (patch 0001 adds a check to each ask), and a plain checkpoint's step (patch
0002 reads its switch on each checkpoint call), on a torch without the series and on a copy with
it, its switch off and on. The eager function is a chain of small pointwise ops, so that per-op
dispatch, not arithmetic, is what a step costs.

    python3 sac_repro/upstream/hot_path.py --compare PATCHED_SITE   # PATCHED_SITE: series_check.sh's copy

Each arrangement runs in a process of its own, once a round, the order rotating from round to
round (a machine's drift falls on all three, not on the last one alone); the table gives, for each, the
median of its rounds' median steps, and with two rounds or more the spread: the largest minus the
smallest of those, over their median. Exit codes: 0 measured, 125 a process of the torch under
test failed, 128 usage error.
"""
import json
import os
import statistics
import subprocess
import sys
import time

# the folder that holds sac_repro/, wherever this is called from
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
from sac_repro import exits  # noqa: E402
from sac_repro.judge.cli import Parser, whole_number  # noqa: E402


ANSWER = "hot_path.py: "  # begins the line of a measuring process's answer


def chain(x, ops):
    for _ in range(ops):
        x = x * 1.0001
    return x


def measure(switch, ops, repeat):
    """One arrangement in this process: the median step of each kind, in ms."""
    import torch
    import torch.utils.checkpoint as c
    series = hasattr(torch.utils, "_sac_compiled_fn") or os.path.exists(
        os.path.join(os.path.dirname(c.__file__), "_sac_compiled_fn.py"))
    if switch is not None:
        c._sac_policy_applies_to_compiled_fn = switch == "on"
    context_fn = lambda: c.create_selective_checkpoint_contexts(lambda ctx, op, *a, **k: c.CheckpointPolicy.PREFER_RECOMPUTE)  # noqa: E731
    steps = {"eager SAC": dict(use_reentrant=False, context_fn=context_fn),
             "plain checkpoint": dict(use_reentrant=False)}
    x = torch.randn(64, requires_grad=True)
    out = {"torch": torch.__version__, "series": series, "file": torch.__file__}
    for name, kwargs in steps.items():
        times = []
        for i in range(repeat + 3):  # three to warm up
            start = time.perf_counter()
            c.checkpoint(chain, x, ops, **kwargs).sum().backward()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times[3:]) * 1e3
    return out


def compare(site, ops, repeat, rounds):
    arrangements = [("without the series", None, None), ("series, switch off", site, "off"),
                    ("series, switch on", site, "on")]
    runs = {name: [] for name, _, _ in arrangements}
    for r in range(rounds):
        for name, path, switch in arrangements[r % 3:] + arrangements[:r % 3]:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            if path:
                env["PYTHONPATH"] = path
            cmd = [sys.executable, os.path.abspath(__file__), "--ops", str(ops), "--repeat", str(repeat)]
            proc = subprocess.run(cmd + (["--switch", switch] if switch else []), env=env, capture_output=True,
                                  text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
            said = "%s: its process exited %d: %s" % (name, proc.returncode, " ".join(proc.stderr.split())[-500:])
            if proc.returncode == exits.EXIT_ABORT:  # the measuring code's own error, not the torch's
                raise RuntimeError(said)
            if proc.returncode != 0:
                raise exits.CannotTest(said)
            # its answer's line, whatever the torch printed, even as the process ended
            (answer,) = [line[len(ANSWER):] for line in proc.stdout.splitlines() if line.startswith(ANSWER)][-1:]
            runs[name].append(json.loads(answer))
            if runs[name][-1]["series"] != bool(path):
                raise exits.UsageError("%s: its torch is %s (%s)" % (
                    site, "not one with the series applied" if path else "the installed one, which has the series",
                    runs[name][-1]["file"]))
    first = runs["without the series"][0]
    print("torch %s, %d pointwise ops a step, median of %d steps a process, %d round%s" % (
        first["torch"], ops, repeat, rounds, "" if rounds == 1 else "s"))
    print("%-20s %-7s %18s %8s %18s %8s" % ("arrangement", "series", "eager SAC step ms", "spread",
                                           "checkpoint step ms", "spread"))
    for name, measured in runs.items():
        cells = []
        for kind in ("eager SAC", "plain checkpoint"):
            per_round = [m[kind] for m in measured]
            median = statistics.median(per_round)
            cells += ["%.3f" % median, "%.1f%%" % (100 * (max(per_round) - min(per_round)) / median)
                      if rounds > 1 else "-"]
        print("%-20s %-7s %18s %8s %18s %8s" % (name, "yes" if measured[0]["series"] else "no", *cells))


def run(argv):
    parser = Parser(prog="hot_path.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", metavar="PATCHED_SITE", help="a folder whose torch/ has the series applied")
    parser.add_argument("--switch", choices=("on", "off"), help="the series' switch, in this process")
    parser.add_argument("--ops", type=whole_number(1), default=200)
    parser.add_argument("--repeat", type=whole_number(1), default=30)
    parser.add_argument("--rounds", type=whole_number(1), help="with --compare: how many (5)")
    args = parser.parse_args(argv)
    if args.compare is not None and args.switch:
        raise exits.UsageError("--switch is for one process: --compare runs the switch off and on")
    if args.compare is None and args.rounds:
        raise exits.UsageError("--rounds is for --compare")
    if args.compare is not None:
        if not os.path.isfile(os.path.join(args.compare, "torch", "utils", "_sac_compiled_fn.py")):
            raise exits.UsageError("'%s' holds no torch with the series applied (no torch/utils/_sac_compiled_fn.py): "
                                   "give series_check.sh's copy" % args.compare)
        compare(os.path.abspath(args.compare), args.ops, args.repeat, args.rounds or 5)
    else:
        try:
            measured = measure(args.switch, args.ops, args.repeat)
        except Exception as e:
            if exits.raised_by_this_bundle(e):
                raise
            raise exits.CannotTest("the torch under test raised: %s" % exits.one_line(e))
        print(ANSWER + json.dumps(measured), flush=True)  # a write that fails is ours: guarded's 128
    return exits.EXIT_OK


if __name__ == "__main__":
    sys.exit(exits.guarded(lambda: run(sys.argv[1:]), "hot_path.py"))
