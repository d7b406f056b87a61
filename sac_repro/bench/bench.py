"""The bench's measurement (sac_repro/bench/bench_sac_compile.py is its command line): a stack of MLP
blocks in each arrangement of SAC and torch.compile, checked against eager, then timed. It
imports torch, the torch under test; the command line imports it only once its options are read.
"""
import argparse
import functools
import os
import statistics
import time

import torch
import torch._inductor.config
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from ..judge.changes import torch_changes
from ..exits import CannotTest, one_line, UsageError
from ..judge.measure import backward_matmuls, fresh_code, FULLGRAPH_FRAME
from ..judge.render import changes_said
from ..judge.verdict import B_EAGER, B_EAGER_SAC, B_NO_CHECKPOINT, B_REPORTED, B_WORKAROUND, B_WRAPPED, refused_to_run_eagerly

MATMULS = [torch.ops.aten.mm.default]
WORKAROUND = B_WORKAROUND


def policy_saving(ops):
    def policy_fn(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy_fn)


class Block(torch.nn.Module):
    """Pre-norm MLP block: x + W_down(gelu(W_up(rmsnorm(x)))). Matmuls are aten.mm (no bias)."""

    def __init__(self, hidden):
        super().__init__()
        self.norm_w = torch.nn.Parameter(torch.ones(hidden))
        self.w_up = torch.nn.Parameter(torch.empty(hidden, 4 * hidden))
        self.w_down = torch.nn.Parameter(torch.empty(4 * hidden, hidden))

    def forward(self, x):
        h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.norm_w
        return x + F.gelu(h @ self.w_up, approximate="tanh") @ self.w_down


def compiled(module, **options):
    """torch.compile in place (Module.compile), as torchtitan compiles its blocks: the module stays
    itself, so checkpoint_wrapper and fully_shard wrap it as they would an uncompiled one."""
    module.compile(fullgraph=True, **({"options": options} if options else {}))
    return module


def arrangements():
    """name -> how a block is wrapped. Each arrangement gets a Block class with its own forward
    code object: Dynamo's cache, and on affected torch its sticky skip under SAC, live on it."""
    sac = policy_saving(MATMULS)
    out = {
        B_EAGER: lambda b: b,
        B_EAGER_SAC: lambda b: checkpoint_wrapper(b, context_fn=sac),
        B_NO_CHECKPOINT: lambda b: compiled(b),
        B_REPORTED: lambda b: checkpoint_wrapper(compiled(b), context_fn=sac),
        B_WORKAROUND: lambda b: compiled(checkpoint_wrapper(b, context_fn=sac)),
    }
    if hasattr(torch._inductor.config, "wrap_inductor_compiled_regions"):  # 2.10 and later
        sac_wrap = policy_saving(MATMULS + [torch.ops.higher_order.inductor_compiled_code])
        out[B_WRAPPED] = lambda b: checkpoint_wrapper(
            compiled(b, wrap_inductor_compiled_regions=True), context_fn=sac_wrap)
    return out


def initial_weights(args):
    """The same weights for every arrangement and every rank, made on the CPU from one seed."""
    g = torch.Generator().manual_seed(0)
    h = args.hidden
    return [{"norm_w": torch.ones(h), "w_up": torch.randn(h, 4 * h, generator=g) / h ** 0.5,
             "w_down": torch.randn(4 * h, h, generator=g) / (4 * h) ** 0.5} for _ in range(args.layers)]


def build(name, wrap, weights, args, mesh):
    """The model of one arrangement: its blocks wrapped, on the device, sharded with --fsdp."""
    cls = type("Block_" + "".join(c if c.isalnum() else "_" for c in name), (Block,),
               {"forward": fresh_code(Block.forward)})
    blocks = []
    for w in weights:
        b = cls(args.hidden)
        b.load_state_dict(w)
        blocks.append(b.to(args.device, torch.float32 if args.fsdp else args.dtype))
    if not args.fsdp:
        return torch.nn.Sequential(*[wrap(b) for b in blocks])
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    mp = MixedPrecisionPolicy(param_dtype=args.dtype, reduce_dtype=torch.float32)
    model = torch.nn.Sequential(*[wrap(b) for b in blocks])
    for block in model:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    return fully_shard(model, mesh=mesh, mp_policy=mp)


def fsdp_layout(model):
    """'N fully_shard units, this rank holds K of M parameters': what the sharding really did."""
    from torch.distributed.fsdp import FSDPModule
    units = sum(isinstance(m, FSDPModule) for m in model.modules())
    local = sum(p.to_local().numel() for p in model.parameters())
    return "%d fully_shard units, rank %d holds %d of %d parameters" % (
        units, dist.get_rank(), local, sum(p.numel() for p in model.parameters()))


def make_input(args):
    g = torch.Generator().manual_seed(1)  # the same on every rank: sharded grads equal eager's
    return (torch.randn(args.tokens, args.hidden, generator=g) * 0.5).to(args.device, args.dtype).requires_grad_()


def loss_and_grads(model, x):
    for p in list(model.parameters()) + [x]:
        p.grad = None
    loss = model(x).float().square().mean()
    loss.backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    return loss.detach().float(), [(g.full_tensor() if hasattr(g, "full_tensor") else g).float() for g in grads]


def max_rel_err(got, ref):
    return max(((g - r).norm() / r.norm().clamp_min(1e-12)).item() for g, r in zip(got, ref))


def step(model, x):
    model(x).float().square().mean().backward()


def time_steps(model, x, args):
    for _ in range(args.warmup):
        step(model, x)
    times = []
    for _ in range(args.iters):
        if args.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(model, x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step(model, x)
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def peak_memory_gb(model, x, args):
    if args.device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(model, x)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 30


def across_ranks(value, op):
    """The largest (or smallest) of a number over the ranks; the number itself without --fsdp."""
    if not dist.is_initialized() or value is None:
        return value
    t = torch.tensor([float(value)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=op)
    return t.item()


def setup(args):
    """(rank, world size, device mesh); with --fsdp the process group, one GPU per rank."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CannotTest("--device cuda: this torch sees no CUDA device (torch.cuda.is_available() is False); "
                         "use --device cpu --small")
    if not args.fsdp:
        return 0, 1, None
    if "RANK" not in os.environ:
        raise UsageError("--fsdp: start it with torchrun --nproc-per-node N")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    from torch.distributed.device_mesh import init_device_mesh
    return dist.get_rank(), dist.get_world_size(), init_device_mesh(args.device, (dist.get_world_size(),))


def refusal(name, e):
    """2.12 and later: fullgraph=True turns the bug into Dynamo's error. Said whole, in Dynamo's
    words for this bench's own frames (torch's skipfiles frames say nothing about the bug)."""
    skipped = ["%s (reason: %s)" % (m["frame"], m["reason"].strip()) for m in FULLGRAPH_FRAME.finditer(str(e))
               if os.path.realpath(m["file"].strip()) == os.path.realpath(__file__)]
    changed = torch_changes(torch)
    return ("%s cannot run compiled on torch %s%s: Dynamo refused it under fullgraph=True, skipping %s; "
            "nothing to time" % (name, torch.__version__, " (changed: %s)" % changes_said(changed) if changed else "",
                                 "; ".join(skipped) or one_line(e)))


def measure(args):
    """Checks, times and prints every arrangement; returns the table on rank 0 (None on the others)."""
    args.dtype = torch.float32 if args.small else torch.bfloat16
    rank, world, mesh = setup(args)
    say = print if rank == 0 else (lambda *a, **k: None)
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    say("torch %s (git %s) | %s%s | hidden %d, tokens %d%s, layers %d, %s | %s" % (
        torch.__version__, torch.version.git_version[:12], "%d x " % world if args.fsdp else "", gpu,
        args.hidden, args.tokens, " per rank" if args.fsdp else "", args.layers,
        str(args.dtype).replace("torch.", ""), time.strftime("%Y-%m-%d")))
    if args.fsdp:
        say("FSDP2: fully_shard per block and at the root, MixedPrecisionPolicy(param_dtype=%s, "
            "reduce_dtype=float32), %s" % (str(args.dtype).replace("torch.", ""), dist.get_backend()))
    weights, x = initial_weights(args), make_input(args)
    ref_args = argparse.Namespace(**dict(vars(args), fsdp=False))
    ref_loss, ref_grads = loss_and_grads(build("reference", lambda b: b, weights, ref_args, None), x)
    rows = {}
    for name, wrap in arrangements().items():
        model = build(name, wrap, weights, args, mesh)
        if args.fsdp and name == "eager":
            say("FSDP2 layout: " + fsdp_layout(model))
        try:
            loss, grads = loss_and_grads(model, x)
        except Exception as e:
            if not refused_to_run_eagerly(e, frame="forward"):
                raise
            raise CannotTest(refusal(name, e))
        err = max(abs(loss.item() - ref_loss.item()) / abs(ref_loss.item()), max_rel_err(grads, ref_grads))
        err = across_ranks(err, dist.ReduceOp.MAX)
        ok = err <= args.tolerance
        say("correctness %-55s max rel err of loss and grads vs eager %.2e  %s" % (name, err, "ok" if ok else "FAIL"))
        if not ok:
            raise CannotTest("%s differs from eager by %.2e, beyond --tolerance %g: timing it would time a wrong "
                             "result" % (name, err, args.tolerance))
        times = time_steps(model, x, args)
        q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), 0, max(times)]
        rows[name] = {"median": across_ranks(statistics.median(times), dist.ReduceOp.MAX),
                      "p25": q[0], "p75": q[-1],
                      "mem": across_ranks(peak_memory_gb(model, x, args), dist.ReduceOp.MAX),
                      "bwd_mm": backward_matmuls(lambda: model(x), args.device)}
        model = None  # frees this arrangement before the next is built
        if args.device == "cuda":
            torch.cuda.empty_cache()
    changed = torch_changes(torch)  # after the runs: what they imported (SAC, Dynamo) is there to be read
    if changed:
        say("torch changed in-process: " + changes_said(changed))
    base = rows[WORKAROUND]
    say("%-55s %12s %17s %8s %10s %8s %13s" % ("arrangement", "fwd+bwd ms", "p25-p75 ms",
                                               "x time", "peak GiB", "x mem", "bwd matmuls"))
    for name, r in rows.items():
        mem = "-" if r["mem"] is None else "%.2f" % r["mem"]
        xmem = "-" if r["mem"] is None else "%.2f" % (r["mem"] / base["mem"])
        say("%-55s %12.3f %8.3f-%-8.3f %8.2f %10s %8s %13s" % (
            name, r["median"], r["p25"], r["p75"], r["median"] / base["median"], mem, xmem,
            "-" if r["bwd_mm"] is None else r["bwd_mm"]))
    if args.fsdp:
        say("(fwd+bwd: the slowest rank's median; p25-p75: rank 0's; peak GiB: the largest of the ranks)")
    if args.small:
        say("(--small: a smoke test; these numbers are not a measurement)")
    table = {"schema": 1, "torch": torch.__version__, "git": torch.version.git_version, "device": gpu,
             "world": world, "fsdp": args.fsdp, "hidden": args.hidden, "tokens": args.tokens,
             "layers": args.layers, "dtype": str(args.dtype).replace("torch.", ""), "small": args.small,
             "date": time.strftime("%Y-%m-%d"), "baseline": WORKAROUND, "rows": rows, "changes": changed}
    if args.fsdp:
        dist.destroy_process_group()
    return table if rank == 0 else None


