"""The judged run: `python3 -m sac_repro [options]` from the bundle's folder, or `python3
PATH/sac_repro` from anywhere. It runs the bundle's script in a child process (--help)."""
import os
import sys

if not __package__:  # run by path: the bundle's folder, not this one, is where imports start
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
try:
    from sac_repro.judge import cli  # never imports torch: a crash of the torch under test becomes 125
except Exception as e:  # a broken copy of the bundle: abort a bisect rather than read it
    print("error: cannot import sac_repro (%s): copy the bundle's whole folder" % e, file=sys.stderr)
    sys.exit(128)
sys.exit(cli.main(cli.SCRIPT))
