"""The bundle's one command: `python3 -m sac_repro [options]` from the bundle's folder, or `python3
PATH/sac_repro` from anywhere. Plain, it is the judged run: the bundle's script in a child process
(--help). `... bisect COMMAND` is bisecting/bisect_torch.py, `... bench` bench/bench_sac_compile.py."""
import os
import sys

if not __package__:  # run by path: the bundle's folder, not this one, is where imports start
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
TOOLS = {"bisect": "sac_repro.bisecting.bisect_torch", "bench": "sac_repro.bench.bench_sac_compile"}
try:
    import importlib
    tool = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in TOOLS else None
    # neither imports torch here: a crash of the torch under test becomes 125
    entry = importlib.import_module(TOOLS[tool] if tool else "sac_repro.judge.cli")
except Exception as e:  # a broken copy of the bundle: abort a bisect rather than read it
    print("error: cannot import sac_repro (%s): copy the bundle's whole folder" % e, file=sys.stderr)
    sys.exit(128)
if tool:
    sys.argv[0] = "python3 -m sac_repro " + tool  # what --help and usage errors name
sys.exit(entry.main(sys.argv[2:]) if tool else entry.main(entry.SCRIPT))
