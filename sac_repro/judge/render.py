"""The verdict and its evidence as text (the default), and as markdown to paste into a GitHub
issue: the headline, expected and actual, the evidence, the script file that ran, then collect_env.
"""
import os
import re

from .changes import home_folder, home_path, REVERTED
# the Command that reruns a run, and how a paste names paths and variables (command.py)
from .command import (BUNDLE, command_line, DEFAULT_CAPTURE, rerun_command, rerun_env, RERUN_VARIABLES,  # noqa: F401
                      shell_path, shell_value, shown_path)
from .verdict import (abridge, CASE, classify, DYNAMO_HINT, EAGER_SAC, eager_label, LOOP_CALLS, LOOPS, not_compiled,
                      RAN_THEN_RAISED, WORKAROUND)

PROGRESS = "sac-repro: "  # the child's progress lines; the parent passes these on as they come
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


def changes_said(changes, paths=True):
    """'the 2.10 fix reverted in-process (sac_repro/revert_fix/sitecustomize.py)': what changed the
    torch under test in-process, as the child read it from torch (changes.py)."""
    return "; ".join(c["label"] + (" (%s)" % shown_path(c["file"]) if c.get("file") and paths else "") for c in changes)


def dynamo_lines(report):
    """Dynamo's own words for each skip of a frame of the report's code, whole, one line each,
    with where it first came (the child records them: measure.DynamoSkips)."""
    first = {}
    for s in report.get("dynamo_skips") or []:
        first.setdefault((s["frame"], s["reason"]), s["where"] or "outside the measured calls")
    return ["dynamo (%s): skipping: %s (reason: %s)" % (where, frame, reason) for (frame, reason), where in first.items()]


# The table's words for calls that raised fullgraph's error (2.12+): after the eager ops they ran,
# or where their profiles hold none of f's ops
THEN_RAISED = ", then raised"
NONE_SEEN = "none seen: Dynamo raised"


def said_lines(report):
    """What the measured process printed or warned besides the bundle (an in-process change of
    torch, torch itself), as the child caught it (said.py), one line each, with where it came."""
    return ["said (%s; %s%s): %s" % (s["where"], s["kind"], " from " + shown_path(s["file"]) if s.get("file") else "",
                                     shown_text(s["text"])) for s in report.get("said") or []]


def shown_text(text):
    """Words a process printed, with the paths in them named as a paste names paths: the bundle's
    files by their path in it, the home folder as ~ (a change names its own file: a machine path)."""
    home = home_folder()
    text = text.replace(BUNDLE + os.sep, "")
    return text.replace(home + os.sep, "~" + os.sep) if home and home != os.sep else text


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
            eager = NONE_SEEN
        elif s.get("refused"):
            eager += THEN_RAISED
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


def not_counted(policy, scenarios, name):
    """Why a scenario's backward has no count: its calls or its backward raised; or, in a run
    recorded before the CPU told a matmul that computes from one that does not, the CPU."""
    if name in (policy.get("backward_matmuls") or {}):
        return "not measured" + (" (on CPU only matmuls inside compiled code can be counted)"
                                 if policy.get("device") == "cpu" else "")
    s = (scenarios or {}).get(name) or {}
    return "not measured" + (" (its calls raised)" if s.get("refused_calls") else
                             " (its backward raised)" if s.get("backward_error") else "")


def policy_lines(policy, scenarios=None):
    if not policy:
        return []
    if not policy.get("trusted"):
        out = ["policy (MUST_SAVE aten.mm): %s" % policy.get("reason", "not measured")]
    else:
        c = policy["backward_matmuls"]
        word = {True: "RECOMPUTED (policy ignored)", False: "saved"}
        parts = []
        for name in (CASE, WORKAROUND):
            n, recomputed = c.get(name), policy["%s_matmul_recomputed_in_backward" % name]
            parts.append("%s %s" % (name, not_counted(policy, scenarios, name)) if recomputed is None
                         else "%s %s -> %s" % (name, n, word[recomputed]))
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
        changed = report.get("torch_changes")
        return "**This run reproduces pytorch/pytorch#161889%s**: the compiled f %s." % (
            " with %s on torch %s" % (changes_said(changed, paths=False), report["env"].get("torch")) if changed else "",
            under_sac(case))
    return "**This run does not reproduce pytorch/pytorch#161889**, which is fixed from torch 2.10.0: the compiled " \
           "f ran compiled code under SAC in all %d calls." % len(case["calls"])


def under_sac(case, why=True):
    """'ran eagerly under SAC in 3 of 3 calls, then raised (...)': how the case's calls ran, and
    with why, why they raised."""
    how, _, after = not_compiled(case).partition(", ")
    said = "%s under SAC in %d of %d calls%s" % (how, case["eager_calls"], len(case["calls"]), ", " + after if after else "")
    if not case.get("refused_calls") or not why:
        return said
    if not_compiled(case) == "ran no compiled code":
        return said + " (Dynamo skipped it and, with fullgraph=True, raised)"
    return said + " (Dynamo skipped it, and with fullgraph=True torch.compile raised once f had run)"


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
            policy_actual(report), ""] + ["%s  " % l for l in policy_lines(policy)] + (
        ["", "Inductor's generated code for f (this run's output code) calls the matmul as `%s`: that is "
         "the op SAC's mode meets at run time." % report["inductor_extern_mm"]] if extern_mm_met(report) else [])


def extern_mm_met(report):
    """Inductor's extern matmul, where the case's policy was asked about it: under a change that
    keeps the matmul in the policy's sight (the candidate fix), Inductor's output code still calls
    it, but SAC's mode meets aten.mm.default instead."""
    return bool(report.get("inductor_extern_mm")) and "aten.mm.out" in asked_ops(report, CASE)


ABLATION_HEADER = ("backend", "Dynamo ran f under SAC", "the policy was asked about", "matmuls in one backward")


def ablation_rows(report):
    return [(r["backend"], ablation_ran(r), ", ".join(r.get("policy_saw") or ()) or "-",
             "-" if r.get("backward_matmuls") is None else str(r["backward_matmuls"]))
            for r in report["ablation"]["rows"]]


def ablation_ran(r):
    """Whether Dynamo ran f compiled under SAC with this backend, and else what the call's profile
    shows (`eager_ops`: f's eager ops it recorded)."""
    if r.get("error"):
        return "error: " + abridge(r["error"], 60)
    if r.get("refused"):
        return "no: %s (fullgraph=True)" % (RAN_THEN_RAISED if r.get("eager_ops") else "raised, f's ops not seen")
    return "yes" if r.get("frame_compiled") else "no"


def ablation_lines(report):
    """The ablation as text, or the offer of it where this run did not pay for it."""
    if report.get("ablation"):
        return ["ablation, the case under each backend:"] + table(ablation_rows(report), ABLATION_HEADER) + [
            "ablation reads: " + report["ablation"]["reading"]]
    if report["source"].startswith("torch.profiler") and report["verdict"] != "cannot_test":
        return ["ablation: not run (it compiles f once per backend); --ablation or --markdown runs it"]
    return []


def trace_line(trace):
    return ("trace: %s, %d TORCH_TRACE log%s of Dynamo, AOTAutograd and Inductor, to attach (`tlparse` reads "
            "them). They hold what was compiled, not what Dynamo skipped: a skip is only in its debug log (the "
            "`dynamo` lines)." % (trace["path"], len(trace["logs"]), "" if len(trace["logs"]) == 1 else "s"))


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
    out += said_lines(report)
    out += policy_lines(report["policy"], report["scenarios"])
    if extern_mm_met(report) and policy_section(report):
        out.append("inductor's output code calls: " + report["inductor_extern_mm"])
    out += ablation_lines(report)
    if report.get("trace"):
        out.append(trace_line(report["trace"]))
    if report["errors"].get("loops_error"):
        out.append("the report's loops raised Dynamo's error for a fullgraph=True function it skipped: "
                   + report["errors"]["loops_error"])
    out.append(verdict_line(report))
    if report["verdict"] == "reproduced" and report["scenarios"][CASE]["eager_calls"] and not dynamo_lines(report):
        out.append("hint: " + DYNAMO_HINT)
    return "\n".join(out)


def torch_line(report):
    env = report["env"]
    if not env.get("torch") and report.get("python_executable"):  # a live run whose torch never said its version
        reason, failed = report.get("reason") or "", "torch failed to import: "
        if reason.startswith(failed):
            return "torch failed to import in %s (%s)" % (home_path(report["python_executable"]), reason[len(failed):])
        return "the torch of %s, which did not say its version (%s)" % (home_path(report["python_executable"]), reason)
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


REPORTERS_PLACE = "<!-- Your own words first: what you were doing, what you expected. -->"
GENERATED = "*Below: generated by the repro bundle of pytorch/pytorch#161889 (sac_repro) from one run.*"


def render_markdown(report, command, script_path, collect_env):
    """The paste, in the form of PyTorch's torch.compile bug template: its three headings, the
    reporter's own words first, then what this run generated, labelled so."""
    out = ["### 🐛 Describe the bug", "", REPORTERS_PLACE, "", GENERATED, "",
           headline(report), "", "%s. %s" % (torch_line(report), command_line(report, command)), "",
           "- **Expected:** %s." % EXPECTED,
           "- **Actual:** %s." % actual(report),
           "- **Verdict:** `%s` (exit %d)" % (report["verdict"], report["exit_code"]),
           "- **Next step:** %s" % next_step(report), ""]
    rows = scenario_rows(report)
    if rows:
        out += markdown_table(rows, TABLE_HEADER)
    out += policy_section(report)
    if report.get("ablation"):
        out += ["", "**Ablation**, the case under each backend (what the template asks): %s." % report["ablation"]["reading"],
                "", "<details><summary>The ablation, backend by backend</summary>", ""]
        out += markdown_table(ablation_rows(report), ABLATION_HEADER) + ["", "</details>"]
    out += ["", "<details><summary>Repro: %s, the file that ran (standalone: saved and run, it prints "
            "its answer and exits 0, 1 where f ran eagerly or was refused under SAC, 125 where it cannot "
            "tell; [changed] and [added] mark the edits to the report)</summary>" % os.path.basename(script_path),
            "", "```python", report_code(script_path) + "```", "", "</details>", ""]
    if report["verdict"] == "not_reproduced":
        out += ["<details><summary>The fix: torch/utils/checkpoint.py, 2.9.1 against 2.10.0 (the wheels' "
                "sources)</summary>", "", "```diff", fix_hunk().rstrip(), "```", "", "</details>", ""]
    out += ["### Error logs", ""] + error_logs(report) + ["", "### Versions", ""]
    if report.get("trace"):  # the archive is attached to the issue: name it, no instruction
        out[-2:-2] = ["", trace_line(report["trace"]).replace("trace: %s" % report["trace"]["path"],
                                                             "The TORCH_TRACE logs: `%s`" % os.path.basename(report["trace"]["path"]))]
    out += versions_details(report["env"], collect_env)
    return "\n".join(out)


FIX_HUNK = os.path.join(BUNDLE, "sac_repro", "revert_fix", "fix_hunk.diff")


def fix_hunk():
    with open(FIX_HUNK) as fh:
        return fh.read()


def next_step(report):
    """What a maintainer (or the reporter) does next, from this run's verdict and changes."""
    changed = report.get("torch_changes") or []
    if report["verdict"] == "cannot_test":
        return "make this build testable (the reason above), then run it again; a bisect skips it (125)."
    if report["verdict"] == "not_reproduced":
        return ("none for #161889: it is fixed from torch 2.10.0, where both of SAC's dispatch modes answer "
                "`ignore_compile_internals() -> True` (the change is below). A maintainer can take the "
                "bundle's regression test (`sac_repro/upstream/test_sac_compile_upstream.py`, for "
                "`test/dynamo/test_activation_checkpointing.py`)%s." % (
                    ", and the second finding below as an issue of its own (#161889 is closed; "
                    "`--policy-report` writes it)" if policy_section(report) and report["env"].get("torch") else ""))
    if report["scenarios"][CASE].get("eager_calls") and any(c["label"] == REVERTED for c in changed):
        return ("none for torch: this run undid the 2.10 fix in-process on purpose (%s); without that, "
                "this torch does not reproduce." % changes_said(changed))
    if report["scenarios"][CASE].get("eager_calls") and not report["env"].get("torch"):
        return ("run `python3 -m sac_repro` on the torch that made this capture: it says which torch that is, and "
                "what changed it in-process, which a capture alone cannot.")
    if report["scenarios"][CASE].get("eager_calls"):
        return ("upgrade to torch 2.10.0 or later, where it is fixed; until then put the checkpoint inside "
                "the compiled function (`torch.compile(lambda x, y: checkpoint(f, x, y, use_reentrant=False, "
                "context_fn=context_fn))`, the `workaround` row).")
    return "read the policy finding below: it is not #161889 itself (`--strict-policy` counts it)."


def error_logs(report):
    """Dynamo's own words, and the error a loop raised: the template's Error logs."""
    logs = dynamo_lines(report) + said_lines(report) + (["the report's loops raised: " + report["errors"]["loops_error"]]
                                                         if report["errors"].get("loops_error") else [])
    if report["verdict"] == "cannot_test":
        logs.append(report["reason"])
    if not logs:
        return ["None: nothing raised, and Dynamo logged no skip of f%s." % (
            "; apart from logs and the bundle's progress, nothing was printed or warned" if "said" in report else "")]
    return ["```"] + logs + ["```"]


def asked_ops(report, name):
    return [op for op, _, _ in (report["policy"].get("ops_seen") or {}).get(name, [])]


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


def release_table_markdown(rows):
    """bisect_torch.py's per-release table, to paste under a --markdown report."""
    return "\n".join(markdown_table(rows, ("torch", "git", "verdict", "exit", "evidence")))
