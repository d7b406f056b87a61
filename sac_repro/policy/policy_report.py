"""--policy-report: the second finding as a report of its own, in markdown: the policy of SAC
around a compiled function under sac(compile(f)) against compile(sac(f)), from the judged run's
evidence (and the bench's cost, when its JSON is given).
"""
import os

from ..judge.changes import REVERTED
from ..judge.command import command_line
from ..judge.phrases import (asked_ops, changes_said, home_hidden, ISSUE_175229, markdown_table, NAMED_REGIONS_MEASURED,
                             NAMED_REGIONS_NEED, policy_actual, POLICY_HEADER, policy_rows, said_lines, torch_line, under_sac,
                             versions_details)
from ..judge.verdict import B_NO_CHECKPOINT, B_WORKAROUND, B_WRAPPED, CASE, WORKAROUND, WRAPPED

POLICY_SNIPPET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy_snippet.py")


def policy_snippet():
    with open(POLICY_SNIPPET) as fh:
        return fh.read().strip() + "\n"


def render_policy_markdown(report, command, collect_env, bench=None):
    """The open half of the bug as a report of its own: the policy of SAC around a compiled
    function, from this run's evidence (and the bench's cost, when its JSON is given)."""
    return home_hidden(policy_markdown(report, command, collect_env, bench))  # whatever torch quoted: ~


def policy_markdown(report, command, collect_env, bench):
    out = ["### Selective activation checkpointing around a `torch.compile`d function: the policy never "
           "sees the function's ops (follow-up to pytorch/pytorch#161889)", "",
           "%s. %s" % (torch_line(report), command_line(report, command)), ""]
    case = report["scenarios"].get(CASE, {})
    if report["verdict"] == "cannot_test" or case.get("eager_calls") or not case.get("calls"):
        reverted = [c for c in report.get("torch_changes") or [] if c["label"] == REVERTED]
        if report["verdict"] != "cannot_test" and case.get("eager_calls"):
            # measured: the ops the policy was asked about in the case's calls (those that raised too)
            saw_f = "aten.mm.default" in asked_ops(report, CASE)
            why = "the compiled f %s: that is pytorch/pytorch#161889 itself%s%s" % (
                under_sac(case, why=False),
                ", brought back here by %s" % changes_said(reverted, paths=False) if reverted else ", fixed in 2.10",
                ". SAC then sees f's own ops, and the policy applies to them" if saw_f else "")
            advice = "Run it without the in-process revert" if reverted else "Run it on torch 2.10 or later"
        else:
            why, advice = "this build could not be tested: " + report["reason"], "Run it where this build can be tested"
        out += ["This part cannot be shown on this build: %s. %s." % (why, advice), ""]
        return "\n".join(out + versions_details(report["env"], collect_env))
    if report["policy"].get("with_context_matmul_recomputed_in_backward") is False:
        changed = report.get("torch_changes")
        out += ["**This run does not show it**: %s%s. The measurements follow." % (
            policy_actual(report), "; torch was changed in-process: %s" % changes_said(changed, paths=False) if changed else ""), ""]
        out += markdown_table(policy_rows(report), POLICY_HEADER)
        return "\n".join(out + [""] + versions_details(report["env"], collect_env))
    out += ["Since 2.10 a compiled function called inside SAC (`checkpoint(..., use_reentrant=False, "
            "context_fn=create_selective_checkpoint_contexts(policy))`) runs compiled. But the policy is "
            "no longer asked about the function's ops: inside the compiled region it sees what Inductor's "
            "code calls, so a policy written for the model's ops never matches, and backward recomputes "
            "the whole region.", "",
            "The report's f and policy (`MUST_SAVE` on `aten.mm.default`), arranged three ways, and from 2.10 "
            "a fourth: `sac(compile(f))` with `wrap_inductor_compiled_regions` and a policy that saves the "
            "compiled region (CPU or CUDA; it prints what the policy was asked about, and the matmuls "
            "computed in one backward):", "",
            "```python", policy_snippet().rstrip(), "```", "",
            "- **Expected:** under `sac(compile(f))` the policy is asked about `aten.mm.default`, and its "
            "`MUST_SAVE` keeps the forward matmul out of backward, as under `compile(sac(f))`.",
            "- **Actual:** %s." % policy_actual(report), ""]
    out += markdown_table(policy_rows(report), POLICY_HEADER)
    out += ["", "Measured by this bundle's run (torch.profiler, %s; the report's policy in every row): %s." % (
        report["device"], "with a baseline of %d matmuls where the forward matmul is saved (compiled f, no "
        "checkpoint)" % report["policy"]["baseline"] if report["policy"].get("trusted")
        else report["policy"].get("reason", "the policy check was not measured")), ""]
    out += supported_and_open(report, bench)
    if bench:
        out += ["", "**What it costs** (`bench_sac_compile.py`, %s):" % bench_setup(bench), ""]
        out += markdown_table(bench_rows(bench), ("arrangement", "fwd+bwd ms", "x time", "peak GiB",
                                                  "matmul kernels in backward"))
    out += [""] + versions_details(report["env"], collect_env)
    return "\n".join(out)


def backward_said(report, name):
    """What this run measured of the forward matmul in `name`'s backward."""
    p = report["policy"]
    n, recomputed = (p.get("backward_matmuls") or {}).get(name), p.get("%s_matmul_recomputed_in_backward" % name)
    if recomputed is None or n is None:
        return "whether backward reran the forward matmul was not measured"
    return "backward computed %d matmuls: the forward matmul %s" % (n, "ran again" if recomputed else "was saved")


def supported_and_open(report, bench):
    """What PyTorch offers today and what stays open, each claim from this run (and the bench)."""
    def ops(name):
        return ", ".join("`%s`" % op for op in asked_ops(report, name)) or "nothing"

    out = ["**What PyTorch supports today**, in this run:", "",
           "- `compile(sac(f))`, the checkpoint inside the compiled region (Dynamo traces SAC as a "
           "higher-order op): the policy was asked about %s, and %s." % (ops(WORKAROUND),
                                                                          backward_said(report, WORKAROUND))]
    if WRAPPED in report["scenarios"]:
        item = ("- `sac(compile(f))` with `torch.compile(f, options={\"wrap_inductor_compiled_regions\": True})` "
                "(2.10 and later): the policy was asked about %s, the compiled region as one op "
                "(`torch.ops.higher_order.inductor_compiled_code`). The report's policy does not name it, so %s; "
                "a policy that names it saves the region's outputs whole or recomputes the region whole, "
                "never just the matmul (the snippet's last line saves it)." % (ops(WRAPPED),
                                                                               backward_said(report, WRAPPED)))
        rows = (bench or {}).get("rows", {})
        wrapped, nockpt, workaround = (rows.get(n) for n in (B_WRAPPED, B_NO_CHECKPOINT, B_WORKAROUND))
        if wrapped and nockpt and workaround and wrapped.get("mem") is not None:
            item += (" In the bench, a policy that also saves the region takes %.2f GiB at its peak, as much "
                     "as no checkpoint at all (%.2f GiB), against %.2f GiB for `compile(sac(block))`."
                     % (wrapped["mem"], nockpt["mem"], workaround["mem"]))
        out.append(item)
        out.append("- Named regions, not in this run: %s; %s. %s." % (NAMED_REGIONS_NEED, NAMED_REGIONS_MEASURED,
                                                                      ISSUE_175229))
    else:
        out.append("- `wrap_inductor_compiled_regions` (2.10 and later) is not in this torch: not measured.")
    out += ["", "**What stays open:** a policy written for the model's ops, under `sac(compile(f))`, was asked "
            "about %s, and %s. %s" % (ops(CASE), backward_said(report, CASE), silence(report)), "",
            "**What a fix could be**, two directions for the reader to weigh:", "",
            "- *Map the op*: ask the policy about the op the model wrote (`aten.mm.default`) where Inductor's "
            "code calls an extern kernel for it (`aten.mm.out`). Per-op policies would keep working for "
            "matmuls; ops fused into Inductor's own kernels are never dispatched, and could still only be "
            "saved with the whole region.",
            "- *Warn*: when a compiled region runs under SAC and none of the ops the policy was asked about "
            "in it got `MUST_SAVE` or `PREFER_SAVE`, warn that a per-op policy cannot see inside compiled "
            "code, and point to `compile(sac(f))` or `wrap_inductor_compiled_regions`. Cheap and changes no "
            "result, but the recompute stays."]
    return out


def silence(report):
    """Whether anything said so: from what the run's process printed and warned (the child's
    record, said.py), quoted where it said anything."""
    unchecked = "SAC answers every op it is asked about, and does not check that the ops a policy saves ever appear."
    if "said" not in report:  # a run that did not record it
        return unchecked
    said = said_lines(report)  # a log line with nothing after its prefix says nothing
    if not said:
        return "Nothing said so in this run: no warning was shown, and nothing but logs was printed. " + unchecked
    return "What this run's process printed or warned, besides the bundle: %s." % "; ".join(
        "`%s`" % line.replace("`", "'") for line in said)


def bench_setup(bench):
    return "%s, torch %s%s, %d blocks of hidden %d, %d tokens%s, %s%s" % (
        bench["device"], bench["torch"], "".join(" (%s)" % c["label"] for c in bench.get("changes") or []),
        bench["layers"], bench["hidden"], bench["tokens"],
        " per rank" if bench.get("fsdp") else "", bench["dtype"],
        ", FSDP2 over %d ranks" % bench["world"] if bench.get("fsdp") else "")


def bench_rows(bench):
    base = bench["rows"][bench["baseline"]]["median"]
    return [(name, "%.1f" % r["median"], "%.2f" % (r["median"] / base),
             "-" if r.get("mem") is None else "%.2f" % r["mem"], "-" if r.get("bwd_mm") is None else str(r["bwd_mm"]))
            for name, r in bench["rows"].items()]
