#!/usr/bin/env python3
"""What the bug costs at a realistic size: a stack of transformer MLP blocks, each checkpointed
with the report's kind of policy (save the matmuls, recompute the rest), in six arrangements.

    python bench_sac_compile.py                      # H200-sized: hidden 4096, 16k tokens, bf16
    python bench_sac_compile.py --device cpu --small  # smoke test: runs everything, no timing claims

Correctness first (gradients against eager), then fwd+bwd time (CUDA events, median of many),
peak memory, and the matmul kernels that ran in backward. Ratios are against compile(sac(block)).
"""
import argparse
import functools
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

from measure import backward_matmuls, fresh_code

MATMULS = [torch.ops.aten.mm.default]


def policy_saving(ops):
    def policy_fn(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy_fn)


def block(x, norm_w, w_up, w_down):
    """Pre-norm MLP block: x + W_down(gelu(W_up(rmsnorm(x)))). Matmuls are aten.mm (no bias)."""
    h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * norm_w
    return x + F.gelu(h @ w_up, approximate="tanh") @ w_down


def arrangements(has_wrap_option):
    sac = policy_saving(MATMULS)
    compile_ = functools.partial(torch.compile, fullgraph=True)
    c_plain, c_inner = compile_(fresh_code(block)), compile_(fresh_code(block))
    block_outer = fresh_code(block)
    c_outer = compile_(lambda *a: checkpoint(block_outer, *a, use_reentrant=False, context_fn=sac))
    out = {
        "eager": block,
        "eager SAC": lambda *a: checkpoint(block, *a, use_reentrant=False, context_fn=sac),
        "compiled, no checkpoint": c_plain,
        "sac(compile(block)) [reported]": lambda *a: checkpoint(c_inner, *a, use_reentrant=False, context_fn=sac),
        "compile(sac(block)) [workaround]": c_outer,
    }
    if has_wrap_option:
        c_wrap = torch.compile(fresh_code(block), fullgraph=True, options={"wrap_inductor_compiled_regions": True})
        sac_wrap = policy_saving(MATMULS + [torch.ops.higher_order.inductor_compiled_code])
        out["sac(compile(block, wrap_inductor_compiled_regions))"] = \
            lambda *a: checkpoint(c_wrap, *a, use_reentrant=False, context_fn=sac_wrap)
    return out


def make_inputs(args, device):
    g = torch.Generator(device="cpu").manual_seed(0)
    h, t = args.hidden, args.tokens
    x = (torch.randn(t, h, generator=g) * 0.5).to(device, args.dtype).requires_grad_()
    params = []
    for _ in range(args.layers):
        params.append([torch.ones(h).to(device, args.dtype).requires_grad_(),
                       (torch.randn(h, 4 * h, generator=g) / h ** 0.5).to(device, args.dtype).requires_grad_(),
                       (torch.randn(4 * h, h, generator=g) / (4 * h) ** 0.5).to(device, args.dtype).requires_grad_()])
    return x, params


def forward(fn, x, params):
    y = x
    for p in params:
        y = fn(y, *p)
    return y


def step(fn, x, params):
    forward(fn, x, params).float().square().mean().backward()


def grads(fn, x, params):
    for t in [x] + [p for ps in params for p in ps]:
        t.grad = None
    step(fn, x, params)
    return [t.grad.float().clone() for t in [x] + [p for ps in params for p in ps]]


def max_rel_err(got, ref):
    return max(((g - r).norm() / r.norm().clamp_min(1e-12)).item() for g, r in zip(got, ref))


def time_steps(fn, x, params, device, warmup, iters):
    for _ in range(warmup):
        step(fn, x, params)
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(fn, x, params)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step(fn, x, params)
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def peak_memory_gb(fn, x, params, device):
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(fn, x, params)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 30


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--small", action="store_true", help="tiny shapes, float32, few iterations (smoke test)")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--tolerance", type=float, default=2e-2,
                   help="max relative error of any gradient against eager (bf16 default)")
    args = p.parse_args()
    args.dtype = torch.bfloat16
    if args.small:
        args.hidden, args.tokens, args.layers, args.iters, args.warmup = 64, 128, 2, 3, 1
        args.dtype, args.tolerance = torch.float32, 1e-4
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device here; use --device cpu --small", file=sys.stderr)
        return 2
    has_wrap = hasattr(torch._inductor.config, "wrap_inductor_compiled_regions")
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print("torch %s (git %s) | %s | hidden %d, tokens %d, layers %d, %s | %s" % (
        torch.__version__, torch.version.git_version[:12], gpu, args.hidden, args.tokens,
        args.layers, str(args.dtype).replace("torch.", ""), time.strftime("%Y-%m-%d")))
    x, params = make_inputs(args, args.device)
    arr = arrangements(has_wrap)
    ref = grads(arr["eager"], x, params)
    rows = {}
    for name, fn in arr.items():
        err = max_rel_err(grads(fn, x, params), ref)
        ok = err <= args.tolerance
        print("correctness %-55s max rel grad err vs eager %.2e  %s" % (name, err, "ok" if ok else "FAIL"))
        if not ok:
            return 1
    for name, fn in arr.items():
        times = time_steps(fn, x, params, args.device, args.warmup, args.iters)
        q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), 0, max(times)]
        rows[name] = {"median": statistics.median(times), "p25": q[0], "p75": q[-1],
                      "mem": peak_memory_gb(fn, x, params, args.device),
                      "bwd_mm": backward_matmuls(lambda: forward(fn, x, params), args.device)}
    base = rows["compile(sac(block)) [workaround]"]
    print("%-55s %12s %17s %8s %10s %8s %13s" % ("arrangement", "fwd+bwd ms", "p25-p75 ms",
                                                 "x time", "peak GiB", "x mem", "bwd matmuls"))
    for name, r in rows.items():
        mem = "-" if r["mem"] is None else "%.2f" % r["mem"]
        xmem = "-" if r["mem"] is None else "%.2f" % (r["mem"] / base["mem"])
        print("%-55s %12.3f %8.3f-%-8.3f %8.2f %10s %8s %13s" % (
            name, r["median"], r["p25"], r["p75"], r["median"] / base["median"], mem, xmem,
            "-" if r["bwd_mm"] is None else r["bwd_mm"]))
    if args.small:
        print("(--small: a smoke test; these numbers are not a measurement)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
