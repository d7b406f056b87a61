"""Everything built on the bundle's script, which it runs as written, one folder per concern:

    judge/       the judged run, `python3 -m sac_repro`: the child that runs the script, then the
                 scenarios under torch.profiler; captures; the verdict; the text, paste and plot
    revert_fix/  the 2.10 fix: its hunk, and a sitecustomize.py that undoes it in-process
    bisecting/   bisect_torch.py: indexes of wheels, the cache, builds, their environments
    bench/       bench_sac_compile.py: what the bug costs at a realistic size
    policy/      the second finding: --policy-report, and the candidate fix (fix_candidate/)
    upstream/    the regression test written for PyTorch's test/dynamo/

and, shared by every entry point, exits.py (the exit codes, the `git bisect run` contract) and
outputs.py (where outputs may go, each written in one step).

Only judge/measure.py and bench/bench.py import torch: measure only in the child process, bench
once the bench's options have been read.
"""
