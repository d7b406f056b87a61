"""How the reports say a judged run's facts: the words and tables that the text, the paste and
--policy-report share, so that each says a fact as the others do.
"""
import os
import re

from .changes import home_folders, home_path
from .command import BUNDLE, shown_path
from .verdict import abridge, CASE, EAGER_SAC, eager_label, not_compiled, RAN_THEN_RAISED, WORKAROUND, WRAPPED

TABLE_HEADER = ("scenario", "compiled calls", "eager pointwise ops", "kernels", "fwd/call")
# The table's words for calls that raised fullgraph's error (2.12+): after the eager ops they ran,
# or where their profiles hold none of f's ops
THEN_RAISED = ", then raised"
NONE_SEEN = "none seen: Dynamo raised"
ABLATION_HEADER = ("backend", "Dynamo ran f under SAC", "the policy was asked about", "matmuls in one backward")
# Upstream's named regions: what they need (read from the wheels and upstream's threads), and what they gave,
# as measured apart from any run of the bundle (docs/policy.md, its transcript)
NAMED_REGIONS_NEED = (
    "`torch.compile(f, name=...)` (pytorch/pytorch#175390, implemented by pytorch/pytorch#179003, 2.12 and later) "
    "names a region for SAC only together with `options={\"wrap_inductor_compiled_regions\": True}` (off by default "
    "through 2.15)")
NAMED_REGIONS_MEASURED = (
    "measured on torch 2.13 and 2.15 (CPU) with the report's f: SAC asks the policy once per call about "
    "`inductor_compiled_code` with the keyword `name=`; `MUST_SAVE` for that name saves the region whole (2 "
    "matmuls in one backward), and a per-op policy gets only the region, recomputed whole (3)")
ISSUE_175229 = ("pytorch/pytorch#175229 is ezyang's open issue on SAC policies under `wrap_inductor_compiled_regions`: "
                "they see only `inductor_compiled_code`, so a policy cannot match a region such as flex attention by "
                "what it is")


def report_code(script_path):
    """The script file, byte for byte: what the child ran, and what answers by itself when saved."""
    with open(script_path, newline="") as fh:
        return fh.read()


def environment_line(env, paths=True):
    """The torch under test and its machine, one line; with paths=False (the paste) a change is named
    without its file, which a reader of the issue has not got."""
    keys = (("python", "python"), ("torch", "torch"), ("torch_git", "git"), ("triton", "triton"),
            ("cuda_runtime", "CUDA runtime"), ("gpu", "GPU"), ("driver", "driver"),
            ("device", "device"), ("nvtx", "nvtx"))
    line = " | ".join("%s %s" % (label, env[k]) for k, label in keys if env.get(k))
    return line + (" | changed: " + changes_said(env["changes"], paths) if env.get("changes") else "")


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


# A line of torch's log with nothing after its prefix (level, date, time, pid, file:line], and the
# rank's and the frame's ids): torch logs a warning's text from its second line on (2.15's context_fn warning)
LOG_PREFIX_ONLY = re.compile(r"(?:\[rank\d+\]:)?[DIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\](?: \[[^\]\s]*\])*\s*")


def said_lines(report):
    """What the measured process printed or warned besides the bundle (an in-process change of
    torch, torch itself), as the child caught it (said.py), one line each, with where it came; a
    log line that says nothing is left out."""
    return ["said (%s; %s%s): %s" % (s["where"], s["kind"], " from " + shown_path(s["file"]) if s.get("file") else "",
                                     shown_text(s["text"])) for s in report.get("said") or []
            if not LOG_PREFIX_ONLY.fullmatch(s["text"])]


def shown_text(text):
    """Words a process printed, with the paths in them named as a paste names paths: the bundle's
    files by their path in it, the home folder as ~ (a change names its own file: a machine path)."""
    return home_hidden(text.replace(BUNDLE + os.sep, ""))


def home_hidden(text):
    """text with the home folder written as ~ wherever a path starts with it, in either spelling
    ($HOME, and where that is a link, its target: changes.home_folders, as the Command takes them):
    a path is whole after a space, a quote, a bracket, = : , or ; and ends where its folder does.
    Every report passes through it: a torch's error or log line quotes the home folder whole."""
    homes = home_folders()
    if not homes:
        return text
    return re.sub(r"(?<![^\s'\"`(\[{<=:,;])(?:%s)(?=[/\s'\"`)\]}>:,;]|\.(?:\s|$)|$)" % "|".join(map(re.escape, homes)),
                  "~", text)


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


def table(rows, header):
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]


def markdown_table(rows, header):
    return ["| %s |" % " | ".join(header), "|%s" % ("---|" * len(header))] + [
        "| %s |" % " | ".join(c.replace("|", "\\|") for c in r) for r in rows]


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


def asked_ops(report, name):
    return [op for op, _, _ in (report["policy"].get("ops_seen") or {}).get(name, [])]


def ops_asked(seen):
    """'aten.mm.out -> PREFER_RECOMPUTE, ...', one entry per op, in the order of the policy's answer."""
    return ", ".join("%s -> %s" % (op, decision) for op, decision, _ in sorted(seen, key=lambda r: (r[1] != "MUST_SAVE", r[0])))


def extern_mm_met(report):
    """Inductor's extern matmul, where the case's policy was asked about it: under a change that
    keeps the matmul in the policy's sight (the candidate fix), Inductor's output code still calls
    it, but SAC's mode meets aten.mm.default instead."""
    return bool(report.get("inductor_extern_mm")) and "aten.mm.out" in asked_ops(report, CASE)


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


def torch_line(report, changes=True):
    """The torch that ran, and where, with what changed it in-process unless changes=False (the
    paste names that once, in its headline)."""
    env = report["env"]
    if not env.get("torch") and report.get("python_executable"):  # a live run whose torch never said its version
        reason, failed = report.get("reason") or "", "torch failed to import: "
        if reason.startswith(failed):
            return "torch failed to import in %s (%s)" % (home_path(report["python_executable"]), reason[len(failed):])
        return "the torch of %s, which did not say its version (%s)" % (home_path(report["python_executable"]), reason)
    if not env.get("torch"):  # a capture judged from its file alone
        return "%s (the torch that made it, and any in-process change of it, are unknown: judged " \
               "from the file alone)" % shown_text(report["source"])  # a path as a paste names paths
    changed = report.get("torch_changes")
    return "torch %s (git %s) on %s%s" % (env.get("torch"), (env.get("torch_git") or "?")[:12],
                                         env.get("gpu") or env.get("device"),
                                         ", **%s**" % changes_said(changed) if changed and changes else "")


def versions_details(env, collect_env, paths=True):
    return ["<details><summary>Versions (python -m torch.utils.collect_env)</summary>", "", "```",
            environment_line(env, paths), "", collect_env or "(not collected)", "```", "", "</details>"]


# The policy's table: each arrangement of the report's f and policy, what the policy was asked, and
# the matmuls of one backward (--policy-report's, and the paste's second finding)
POLICY_ROWS = ((CASE, "`sac(compile(f))`, the report's pattern"),
               (WORKAROUND, "`compile(sac(f))`, the checkpoint inside the compiled region"),
               (EAGER_SAC, "eager SAC, no compile"),
               (WRAPPED, "`sac(compile(f))` with `wrap_inductor_compiled_regions=True`"))
POLICY_HEADER = ("arrangement", "the policy was asked about (forward)", "matmuls computed in one backward", "forward matmul")


def asked_about(report, name):
    seen = (report["policy"].get("ops_seen") or {}).get(name)
    return ", ".join("`%s -> %s`" % (op, d) for op, d, _ in
                     sorted(seen, key=lambda r: (r[1] != "MUST_SAVE", r[0]))) if seen else "-"


def policy_rows(report):
    p = report["policy"]
    counts = p.get("backward_matmuls") or {}
    rows = []
    for name, label in POLICY_ROWS:
        if name not in report["scenarios"]:
            continue
        n = counts.get(name)
        recomputed = p.get("%s_matmul_recomputed_in_backward" % name)
        if name == EAGER_SAC and n is not None and p.get("trusted"):  # a control the verdict does not judge
            recomputed = n > p["baseline"]
        rows.append((label, asked_about(report, name), "-" if n is None else str(n),
                     {True: "**recomputed**", False: "saved", None: "not measured"}[recomputed]))
    return rows
