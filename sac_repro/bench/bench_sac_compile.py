#!/usr/bin/env python3
"""What the bug costs at a realistic size: a stack of transformer MLP blocks, each checkpointed
with the report's kind of policy (save the matmuls, recompute the rest), in six arrangements.

    python sac_repro/bench/bench_sac_compile.py                       # one GPU: hidden 4096, 16k tokens, bf16
    torchrun --nproc-per-node 2 sac_repro/bench/bench_sac_compile.py --fsdp   # sharded with FSDP2, 16k tokens per rank
    python sac_repro/bench/bench_sac_compile.py --device cpu --small  # smoke test: runs everything, no timing claims
    torchrun --nproc-per-node 2 sac_repro/bench/bench_sac_compile.py --fsdp --device cpu --small   # the same, gloo

The arrangements are built as sharded-training code builds them: `checkpoint_wrapper` with the SAC
`context_fn`, `torch.compile` per block, and with --fsdp `fully_shard` per block and at the root
with a bf16 MixedPrecisionPolicy, in torchtitan's order or the reported one. Correctness first (the
loss and every gradient, gathered, against eager without sharding), then fwd+bwd time (CUDA events,
median of many; with --fsdp the slowest rank's median), peak memory (the largest of the ranks), and
the matmul kernels that ran in one backward. Ratios are against compile(sac(block)).
"""
import argparse
import json
import os
import sys

# the folder that holds sac_repro/, from this file's real path, wherever it is called from, -I included: nothing here
# may need the script's folder or PYTHONPATH on sys.path
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
try:
    from sac_repro import exits, outputs
    from sac_repro.judge import plot
    from sac_repro.judge.cli import Parser, positive_float, whole_number
except Exception as e:  # copied without its package: abort (exits.EXIT_ABORT, unreachable here)
    if __name__ != "__main__":
        raise
    try:
        print("error: cannot import sac_repro beside %s (%s): copy the bundle's whole folder" % (
            __file__, e), file=sys.stderr)
    finally:
        os._exit(128)


def parse_args(argv):
    p = Parser(prog=sys.argv[0] if sys.argv[0].startswith("python3 -m") else "bench_sac_compile.py",
               description=__doc__.split("\n\n")[0],
               epilog=exits.codes_help(exits.BENCH_CODES, "exit codes:"),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--fsdp", action="store_true", help="shard with FSDP2; run with torchrun")
    p.add_argument("--small", action="store_true", help="tiny shapes, float32, few iterations (smoke test)")
    p.add_argument("--hidden", type=whole_number(1), default=4096)
    p.add_argument("--tokens", type=whole_number(1), default=16384, help="per rank with --fsdp")
    p.add_argument("--layers", type=whole_number(1), default=4)
    p.add_argument("--iters", type=whole_number(1), default=30)
    p.add_argument("--warmup", type=whole_number(0), default=5)
    p.add_argument("--json", metavar="PATH", help="also write the table as JSON (for --policy-report's cost)")
    p.add_argument("--plot", metavar="PATH", help="also draw the table (.png or .svg; needs matplotlib)")
    p.add_argument("--tolerance", type=positive_float, default=2e-2,
                   help="max relative error of the loss and any gradient against eager (bf16 default)")
    args = p.parse_args(argv)
    outputs.check_outputs([("--json", args.json), ("--plot", args.plot)])
    if args.plot and plot.plot_path_problem(args.plot):
        raise exits.UsageError(plot.plot_path_problem(args.plot))
    if args.small:
        args.hidden, args.tokens, args.layers, args.iters, args.warmup = 64, 128, 2, 3, 1
        args.tolerance = 1e-4
    return args


def write_outputs(table, args):
    if args.json:
        outputs.write_text(args.json, json.dumps(table, indent=2), "--json")
    if args.plot:
        try:
            outputs.replace_atomically(args.plot, lambda target: plot.draw_bench(table, target))
        except Exception as e:
            raise exits.OutputError("cannot draw --plot %s: %s" % (args.plot, exits.one_line(e)))
        print("plot: " + args.plot)


def run(args):
    """Imports the torch under test only now that the options are read, then measures. What fails
    inside torch is this build's (cannot test); what fails in this bundle's code is a bug here."""
    try:
        import torch  # noqa: F401
    except Exception as e:
        raise exits.CannotTest("torch failed to import: %s" % exits.one_line(e)[:300])
    try:
        from sac_repro.bench import bench
        table = bench.measure(args)
    except (exits.UsageError, exits.OutputError, exits.CannotTest):
        raise
    except Exception as e:
        if exits.raised_by_this_bundle(e):
            raise
        raise exits.CannotTest("the torch under test raised %s" % exits.one_line(e))
    if table is not None:  # rank 0 writes what all the ranks measured
        write_outputs(table, args)
    return exits.EXIT_OK


def main(argv=None):
    return exits.guarded(lambda: run(parse_args(sys.argv[1:] if argv is None else argv)), "bench_sac_compile.py")


if __name__ == "__main__":
    sys.exit(main())
