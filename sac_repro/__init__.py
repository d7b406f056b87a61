"""The judged run (`python3 -m sac_repro`), built on the bundle's script, which it runs as written,
and the machinery behind bisect_torch.py and bench_sac_compile.py, one concern per module, in the
order the data flows:

    exits     exit codes (the `git bisect run` contract), signals, and the guard of every entry point
    cli       the judged run's command line: the child process, or a capture read
    inputs    what it reads besides a capture: the bench's table, run_nsys.sh's hand-off
    measure   the child: runs the script as written, then the scenarios, under torch.profiler
    captures  nsys and ncu captures read into NVTX ranges and the kernels in each
    verdict   the kernel classifier, each call judged, the policy check
    render    the text and the markdown paste, in the form of PyTorch's torch.compile bug template
    policy_report  --policy-report: the second finding as a report of its own (policy_snippet: its code)
    plot      --plot: pictures drawn from the judged report (matplotlib, imported only then)
    outputs   where the entry points write: never onto an input or the bundle, and in one step
    indexes   bisect_torch.py's indexes: where torch wheels are listed, and which one is picked
    caches    the cache that holds the builds: where it is, its layout, locks and free space
    builds    a build under test: the wheel known by its sha256, and the commit it names
    envs      a cached virtual environment per build: installed, checked, listed, pruned
    bench     bench_sac_compile.py's measurement: each arrangement checked against eager, then timed

Only `measure` and `bench` import torch: `measure` only in the child process, `bench` once the
bench's options have been read.
"""
