"""The verdict and its evidence as text (the default), and as markdown to paste into a GitHub
issue: the headline, expected and actual, the evidence, the script file that ran, then collect_env.
"""
import os
import re
import shlex

from .changes import REVERTED
from .verdict import abridge, B_NO_CHECKPOINT, B_WORKAROUND, B_WRAPPED, CASE, classify, DYNAMO_HINT, EAGER_SAC, eager_label, LOOP_CALLS, LOOPS, not_compiled, WORKAROUND, WRAPPED

PROGRESS = "sac-repro: "  # the child's progress lines; the parent passes these on as they come
BUNDLE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = "the compiled f runs compiled code (Inductor kernels) under SAC, as it does under a plain checkpoint"
POLICY_HEADING = "#### A second finding: the policy never sees the compiled matmul"
TABLE_HEADER = ("scenario", "compiled calls", "eager pointwise ops", "kernels", "fwd/call")


def report_code(script_path):
    """The script file, byte for byte: what the child ran, and what answers by itself when saved."""
    with open(script_path, newline="") as fh:
        return fh.read()


def environment_line(env):
    keys = (("python", "python"), ("torch", "torch"), ("torch_git", "git"), ("triton", "triton"),
            ("cuda_runtime", "CUDA runtime"), ("gpu", "GPU"), ("driver", "driver"),
            ("device", "device"), ("nvtx", "nvtx"))
    line = " | ".join("%s %s" % (label, env[k]) for k, label in keys if env.get(k))
    return line + (" | changed: " + changes_said(env["changes"]) if env.get("changes") else "")


def shown_path(path):
    """A file of the bundle by its path in the bundle (as the commands run from its folder)."""
    rel = os.path.relpath(path, BUNDLE)
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


def changes_said(changes):
    """'the 2.10 fix reverted in-process (tools/revert_fix/sitecustomize.py)': what changed the
    torch under test in-process, as the child read it from torch (changes.py)."""
    return "; ".join(c["label"] + (" (%s)" % shown_path(c["file"]) if c.get("file") else "") for c in changes)


# run_nsys.sh's report name when no -o is given
DEFAULT_CAPTURE = "torch_compile_selective_activation_checkpoint"


# The variables of the run's environment that change what runs: torch's, Dynamo's and Inductor's
# switches (TORCHDYNAMO_DISABLE, TORCH_COMPILE_DISABLE, TORCH_LOGS, ...), the candidate's mode,
# the GPUs torch sees, and where Python finds modules (a revert, the candidate, anyone's patch).
RERUN_VARIABLES = re.compile(r"TORCH.*|PYTORCH_.*|SAC_FIX_CANDIDATE|CUDA_VISIBLE_DEVICES|PYTHONPATH")


def rerun_env(environ, through_run_nsys=False):
    """What of environ the rerun command must carry (cli.py records it in the report)."""
    env = {k: v for k, v in environ.items() if RERUN_VARIABLES.fullmatch(k)}
    if through_run_nsys:
        env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)  # run_nsys.sh sets it itself
    return env


def rerun_command(report, script_path, argv, capture_options=None):
    """The command that reruns what ran: with the variables of its environment that change what
    runs, and the PYTHONPATH that loaded each in-process change of torch, or a reader who reruns
    it tests another torch. A capture that run_nsys.sh made and handed over (capture_options: its
    capture run's options) reruns as run_nsys.sh, the judge's own options after its capture run's."""
    env = dict(report.get("rerun_env") or {})
    paths = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p]
    for c in report.get("torch_changes") or []:
        for k, v in (c.get("env") or {}).items():
            env.setdefault(k, v)
        folder = c.get("pythonpath")
        if folder and not any(os.path.realpath(p) == os.path.realpath(folder) for p in paths):
            paths.insert(0, folder)
    prefix = ["PYTHONPATH=" + shlex.quote(os.pathsep.join(shown_path(os.path.abspath(p)) for p in paths))] if paths else []
    prefix += ["%s=%s" % (k, shlex.quote(v)) for k, v in sorted(env.items())]
    shown, report_file, given = [], None, iter(argv)
    for a in given:  # run_nsys.sh's hand-off file (cli.py's --_env) is gone once it has judged
        if a == "--_env":
            next(given, None)
        elif a.startswith("--_env="):
            continue
        elif capture_options is not None and a in ("--from-nsys", "--from-ncu"):
            report_file = next(given, None)
        elif capture_options is not None and a.startswith(("--from-nsys=", "--from-ncu=")):
            report_file = a.partition("=")[2]
        else:
            shown.append(a)
    if capture_options is None:
        return " ".join(prefix + ["python3", "-m", "sac_repro"] + [shlex.quote(a) for a in shown])
    name = re.sub(r"(\.nsys-rep|\.qdrep|\.ncu\.txt)$", "", report_file or "")
    named = [] if name in ("", DEFAULT_CAPTURE) else ["-o", shlex.quote(name)]
    rest = [shlex.quote(a) for a in capture_options + shown]
    return " ".join(prefix + ["./run_nsys.sh"] + named + (["--"] + rest if rest else []))


def rerun_gaps(report):
    """The in-process changes that the rerun command cannot load again by itself: made by a file
    that PYTHONPATH does not load (a sitecustomize elsewhere, a .pth), or by code no file names."""
    return ["%s (%s)" % (c["label"], "made by %s, which the command does not load" % c["file"] if c.get("file")
                          else "made by code this run could not place")
            for c in report.get("torch_changes") or [] if not c.get("pythonpath")]


def command_line(report, command):
    """'Command: `...`', and what it cannot rerun, for a paste."""
    gaps = rerun_gaps(report)
    return "Command: `%s`%s" % (command, "; it does not rerun: %s" % "; ".join(gaps) if gaps else "")


def dynamo_lines(report):
    """Dynamo's own words for each skip of a frame of the report's code, whole, one line each,
    with where it first came (the child records them: measure.DynamoSkips)."""
    first = {}
    for s in report.get("dynamo_skips") or []:
        first.setdefault((s["frame"], s["reason"]), s["where"] or "outside the measured calls")
    return ["dynamo (%s): skipping: %s (reason: %s)" % (where, frame, reason) for (frame, reason), where in first.items()]


def scenario_rows(report):
    rows = []
    for name, s in report["scenarios"].items():
        n = len(s["calls"])
        ran = "%d/%d" % (s["compiled_calls"], n) if n else "-"
        eager = ", ".join("%s x%d" % (eager_label(k), v) for k, v in s["eager_pointwise"].items()) or "-"
        kernels = ", ".join(abridge(k, 34) for k in s["kernels"][:4]) or "-"
        if len(s["kernels"]) > 4:
            kernels += ", +%d more" % (len(s["kernels"]) - 4)
        if s.get("error"):
            kernels = "error: " + s["error"][:60]
        elif s.get("refused") and eager == "-":
            eager = "none: Dynamo raised"
        fwd = "%.0f us" % s["forward_us"] if s.get("forward_us") else "-"
        rows.append((name, ran, eager, kernels, fwd))
    return rows


def loop_kernel_lines(report):
    """Kernels per NVTX range, the loop index folded: one block per loop of the report."""
    out = []
    for range_name, scenario in LOOPS.items():
        s = report["scenarios"].get(scenario, {})
        if "kernel_counts" not in s:
            continue
        out.append("%s <0..%d>: %d ranges with kernels, %d ran compiled code, %d ran eagerly" % (
            range_name, LOOP_CALLS - 1, len(s["calls"]), s["compiled_calls"], s["eager_calls"]))
        for k, n in sorted(s["kernel_counts"].items(), key=lambda kv: (-kv[1], kv[0])):
            out.append("  %5d x %-12s %s" % (n, classify(k).family, abridge(k, 100)))
    return out


def policy_lines(policy):
    if not policy:
        return []
    if not policy.get("trusted"):
        out = ["policy (MUST_SAVE aten.mm): %s" % policy.get("reason", "not measured")]
    else:
        c = policy["backward_matmuls"]
        word = {True: "RECOMPUTED (policy ignored)", False: "saved", None: "not measured"}
        if policy.get("device") == "cpu":
            word[None] += " (on CPU only matmuls inside compiled code can be counted)"
        parts = []
        for name in (CASE, WORKAROUND):
            n, verdict = c.get(name), word[policy["%s_matmul_recomputed_in_backward" % name]]
            parts.append("%s %s" % (name, verdict) if n is None else "%s %s -> %s" % (name, n, verdict))
        out = ["policy (MUST_SAVE aten.mm), matmuls computed in one backward: %d where the forward "
               "matmul is saved; %s" % (policy["baseline"], "; ".join(parts))]
    seen = policy.get("ops_seen") or {}
    if seen:
        out.append("policy was asked about: " + "; ".join(
            "%s %s" % (name, ops_asked(seen[name])) for name in (CASE, EAGER_SAC, WORKAROUND) if name in seen))
    for name, error in (policy.get("backward_errors") or {}).items():
        out.append("policy: backward of %s raised %s" % (name, error))
    return out


def ops_asked(seen):
    """'aten.mm.out -> PREFER_RECOMPUTE, ...', one entry per op, in the order of the policy's answer."""
    return ", ".join("%s -> %s" % (op, decision) for op, decision, _ in sorted(seen, key=lambda r: (r[1] != "MUST_SAVE", r[0])))


def verdict_line(report):
    return "VERDICT: %s (exit %d): %s" % (report["verdict"], report["exit_code"], report["reason"])


def headline(report):
    """The paste's first words: whether this run shows pytorch/pytorch#161889, and nothing else."""
    if report["verdict"] == "cannot_test":
        return "**This build cannot show pytorch/pytorch#161889**: %s." % report["reason"]
    case = report["scenarios"][CASE]
    if report["verdict"] == "reproduced" and not case["eager_calls"]:  # --strict-policy's reading
        return "**This run reproduces, as `--strict-policy` reads it**: %s." % report["reason"].replace(
            "--strict-policy: ", "", 1)
    if case["eager_calls"]:
        return "**This run reproduces pytorch/pytorch#161889**: the compiled f %s under SAC in %d of %d calls%s." % (
            not_compiled(case), case["eager_calls"], len(case["calls"]),
            " (Dynamo skipped it and, with fullgraph=True, raised)" if case.get("refused_calls") else "")
    return "**This run does not reproduce pytorch/pytorch#161889**: the compiled f ran compiled code under " \
           "SAC in all %d calls." % len(case["calls"])


def actual(report):
    """What this run showed of the bug, in one sentence, with Dynamo's own first word on it."""
    if report["verdict"] == "cannot_test":
        return "this build could not be tested: " + report["reason"]
    case = report["scenarios"][CASE]
    if not case["eager_calls"]:
        return "the compiled f ran Inductor kernels under SAC in all %d calls" % len(case["calls"])
    said = report["reason"]  # "N of M calls under SAC ran eagerly (...)": Expected names the compiled f
    quoted = dynamo_lines(report)
    return said + ("; Dynamo said `%s`" % quoted[0].split(": ", 1)[1] if quoted else "")


def policy_section(report):
    """The policy's finding, apart from the bug: only where the compiled f ran under SAC."""
    if report["verdict"] == "cannot_test":  # before any scenario, there may be none to read
        return []
    case, policy = report["scenarios"][CASE], report["policy"]
    if case["eager_calls"] or not policy_lines(policy):
        return []
    ignored = policy.get("with_context_matmul_recomputed_in_backward")
    heading = POLICY_HEADING if ignored else "#### The SAC policy under `sac(compile(f))`"
    return ["", heading, "", "Not pytorch/pytorch#161889 itself: %s. Its own report: `--policy-report`; "
            "region-level policies upstream: pytorch/pytorch#175229; the bundle's `docs/policy.md`." %
            policy_actual(report), ""] + ["%s  " % l for l in policy_lines(policy)]


def table(rows, header):
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]


def markdown_table(rows, header):
    return ["| %s |" % " | ".join(header), "|%s" % ("---|" * len(header))] + [
        "| %s |" % " | ".join(c.replace("|", "\\|") for c in r) for r in rows]


def render_text(report):
    out = []
    if report["env"].get("torch"):
        out.append("environment: " + environment_line(report["env"]))
    out.append("evidence: " + report["source"])
    rows = scenario_rows(report)
    if rows:
        out += table(rows, TABLE_HEADER)
    out += loop_kernel_lines(report)
    if report.get("other_ranges"):
        n = report["other_ranges"]
        out.append("%d other NVTX range%s ignored: not named as the report's loops name their calls"
                   % (n, " was" if n == 1 else "s were"))
    out += dynamo_lines(report)
    out += policy_lines(report["policy"])
    if report["errors"].get("loops_error"):
        out.append("the report's loops raised Dynamo's error for a fullgraph=True function it skipped: "
                   + report["errors"]["loops_error"])
    out.append(verdict_line(report))
    if report["verdict"] == "reproduced" and report["scenarios"][CASE]["eager_calls"] and not dynamo_lines(report):
        out.append("hint: " + DYNAMO_HINT)
    return "\n".join(out)


def torch_line(report):
    env = report["env"]
    if not env.get("torch"):  # a capture judged from its file alone
        return "%s (the torch that made it, and any in-process change of it, are unknown: judged " \
               "from the file alone)" % report["source"]
    changed = report.get("torch_changes")
    return "torch %s (git %s) on %s%s" % (env.get("torch"), (env.get("torch_git") or "?")[:12],
                                         env.get("gpu") or env.get("device"),
                                         ", **%s**" % changes_said(changed) if changed else "")


def versions_details(env, collect_env):
    return ["<details><summary>Versions (python -m torch.utils.collect_env)</summary>", "", "```",
            environment_line(env), "", collect_env or "(not collected)", "```", "", "</details>"]


def render_markdown(report, command, script_path, collect_env):
    out = ["### torch.compile'd function called inside selective activation checkpointing (pytorch/pytorch#161889)",
           "", headline(report), "", "%s. %s" % (torch_line(report), command_line(report, command)), "",
           "- **Expected:** %s." % EXPECTED,
           "- **Actual:** %s." % actual(report),
           "- **Verdict:** `%s` (exit %d)" % (report["verdict"], report["exit_code"]), ""]
    if report.get("plot"):
        out += ["Picture of the evidence (`--plot`): attach `%s` here." % os.path.basename(report["plot"]), ""]
    rows = scenario_rows(report)
    if rows:
        out += markdown_table(rows, TABLE_HEADER)
    out += policy_section(report)
    out += ["", "<details><summary>Repro: %s, the file that ran (standalone: saved and run, it prints "
            "its answer and exits 0, 1 where f ran eagerly or was refused under SAC, 125 where it cannot "
            "tell; [changed] and [added] mark the edits to the report)</summary>" % os.path.basename(script_path),
            "", "```python", report_code(script_path) + "```", "", "</details>", ""]
    out += versions_details(report["env"], collect_env)
    return "\n".join(out)


# ----------------------------------------------------------------------------- the policy report
POLICY_SNIPPET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy_snippet.py")
POLICY_ROWS = ((CASE, "`sac(compile(f))`, the report's pattern"),
               (WORKAROUND, "`compile(sac(f))`, the checkpoint inside the compiled region"),
               ("eager_sac", "eager SAC, no compile"),
               (WRAPPED, "`sac(compile(f))` with `wrap_inductor_compiled_regions=True`"))


def policy_snippet():
    with open(POLICY_SNIPPET) as fh:
        return fh.read().strip() + "\n"


def render_policy_markdown(report, command, collect_env, bench=None):
    """The open half of the bug as a report of its own: the policy of SAC around a compiled
    function, from this run's evidence (and the bench's cost, when its JSON is given)."""
    out = ["### Selective activation checkpointing around a `torch.compile`d function: the policy never "
           "sees the function's ops (follow-up to pytorch/pytorch#161889)", "",
           "%s. %s" % (torch_line(report), command_line(report, command)), ""]
    case = report["scenarios"].get(CASE, {})
    if report["verdict"] == "cannot_test" or case.get("eager_calls") or not case.get("calls"):
        reverted = [c for c in report.get("torch_changes") or [] if c["label"] == REVERTED]
        if report["verdict"] != "cannot_test" and case.get("eager_calls"):
            why = "the compiled f %s under SAC in %d of %d calls: that is pytorch/pytorch#161889 itself%s%s" % (
                not_compiled(case), case["eager_calls"], len(case.get("calls", [])),
                ", brought back here by %s" % changes_said(reverted) if reverted else ", fixed in 2.10",
                "" if case.get("refused_calls") else ". SAC then sees f's own ops, and the policy applies to them")
            advice = "Run it without the in-process revert" if reverted else "Run it on torch 2.10 or later"
        else:
            why, advice = "this build could not be tested: " + report["reason"], "Run it where this build can be tested"
        out += ["This part cannot be shown on this build: %s. %s." % (why, advice), ""]
        return "\n".join(out + versions_details(report["env"], collect_env))
    if report["policy"].get("with_context_matmul_recomputed_in_backward") is False:
        changed = report.get("torch_changes")
        out += ["**This run does not show it**: %s%s. The measurements follow." % (
            policy_actual(report), "; torch was changed in-process: %s" % changes_said(changed) if changed else ""), ""]
        out += markdown_table(policy_rows(report), ("arrangement", "the policy was asked about (forward)",
                                                    "matmuls computed in one backward", "forward matmul"))
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
    out += markdown_table(policy_rows(report), ("arrangement", "the policy was asked about (forward)",
                                                "matmuls computed in one backward", "forward matmul"))
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


def asked_ops(report, name):
    return [op for op, _, _ in (report["policy"].get("ops_seen") or {}).get(name, [])]


def asked_about(report, name):
    seen = (report["policy"].get("ops_seen") or {}).get(name)
    return ", ".join("`%s -> %s`" % (op, d) for op, d, _ in
                     sorted(seen, key=lambda r: (r[1] != "MUST_SAVE", r[0]))) if seen else "-"


def backward_said(report, name):
    """What this run measured of the forward matmul in `name`'s backward."""
    p = report["policy"]
    n, recomputed = (p.get("backward_matmuls") or {}).get(name), p.get("%s_matmul_recomputed_in_backward" % name)
    if recomputed is None or n is None:
        return "whether backward reran the forward matmul was not measured"
    return "backward computed %d matmuls: the forward matmul %s" % (n, "ran again" if recomputed else "was saved")


def policy_rows(report):
    p = report["policy"]
    counts = p.get("backward_matmuls") or {}
    rows = []
    for name, label in POLICY_ROWS:
        if name not in report["scenarios"]:
            continue
        recomputed = p.get("%s_matmul_recomputed_in_backward" % name)
        n = counts.get(name)
        rows.append((label, asked_about(report, name), "-" if n is None else str(n),
                     {True: "**recomputed**", False: "saved", None: "not measured"}[recomputed]))
    return rows


def policy_actual(report):
    p, counts = report["policy"], report["policy"].get("backward_matmuls") or {}
    asked = asked_ops(report, CASE)
    said = "under `sac(compile(f))` the policy was asked about %s%s" % (
        ", ".join("`%s`" % op for op in asked) or "nothing",
        "" if "aten.mm.default" in asked else " only, never `aten.mm.default`")
    recomputed = p.get("with_context_matmul_recomputed_in_backward")
    if recomputed:
        return "%s; backward computed %d matmuls, against %d where the forward matmul is saved: the " \
               "forward matmul ran again" % (said, counts[CASE], p["baseline"])
    if recomputed is False:
        return "%s, and backward computed no more matmuls than where the forward matmul is saved" % said
    return "%s; whether the forward matmul ran again was not measured (%s)" % (said, p.get("reason", "?"))


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
    else:
        out.append("- `wrap_inductor_compiled_regions` (2.10 and later) is not in this torch: not measured.")
    out += ["", "**What stays open:** a policy written for the model's ops, under `sac(compile(f))`, was asked "
            "about %s, and %s. Nothing says so: SAC answers every op it is asked about, and does not check "
            "that the ops a policy saves ever appear." % (ops(CASE), backward_said(report, CASE)), "",
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


def release_table_markdown(rows):
    """bisect_torch.py's per-release table, to paste under a --markdown report."""
    return "\n".join(markdown_table(rows, ("torch", "git", "verdict", "exit", "evidence")))
