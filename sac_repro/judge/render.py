"""The verdict and its evidence as text (the default), and as markdown to paste into a GitHub
issue: a first screen that a maintainer acts on (the answer, the script to run, expected and
actual, the next step, the ablation's reading, the second finding), and each detail once, collapsed.
"""
import html
import os
import re

from .changes import REVERTED
# the Command that reruns a run, and how a paste names paths and variables (command.py)
from .command import (BUNDLE, command_line, DEFAULT_CAPTURE, rerun_command, rerun_env, RERUN_VARIABLES,  # noqa: F401
                      script_command, shell_path, shell_value, shown_path)
# how every report says a fact (phrases.py)
from .phrases import (ABLATION_HEADER, ablation_rows, asked_ops, changes_said, dynamo_lines,  # noqa: F401
                      environment_line, extern_mm_met, home_hidden, ISSUE_175229, markdown_table, NAMED_REGIONS_MEASURED,
                      NAMED_REGIONS_NEED, NONE_SEEN, ops_asked, policy_actual,
                      POLICY_HEADER, policy_rows, report_code, said_lines, scenario_rows, table, TABLE_HEADER,
                      THEN_RAISED, torch_line, under_sac, versions_details)
from .verdict import (abridge, CASE, classify, CONTROL, DYNAMO_HINT, EAGER_SAC, INDUCTOR_READING, LOOP_CALLS, LOOPS,
                      WORKAROUND)

PROGRESS = "sac-repro: "  # the child's progress lines; the parent passes these on as they come
EXPECTED = "the compiled f runs compiled code (Inductor kernels) under SAC, as under a plain checkpoint"
# The bundle's address, where its owner has put it: the paste links its files there. Without it the
# paste names none of them, since a reader of the issue has not got the bundle.
URL_VARIABLE = "SAC_REPRO_URL"


# ----------------------------------------------------------------------------- the text
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


def verdict_line(report):
    return "VERDICT: %s (exit %d): %s" % (report["verdict"], report["exit_code"], report["reason"])


def ablation_lines(report):
    """The ablation as text, or the offer of it where this run did not pay for it."""
    if report.get("ablation"):
        return ["ablation, the case under each backend:"] + table(ablation_rows(report), ABLATION_HEADER) + [
            "ablation reads: " + report["ablation"]["reading"]]
    if report["source"].startswith("torch.profiler") and report["verdict"] != "cannot_test":
        return ["ablation: not run (it compiles f once per backend); --ablation or --markdown runs it"]
    return []


def trace_said(report, where):
    """What the TORCH_TRACE logs hold, and where this run's words on a skip are (where: the place
    its Dynamo lines are shown)."""
    n = len(report["trace"]["logs"])
    return ("%d TORCH_TRACE log%s of Dynamo, AOTAutograd and Inductor, which `tlparse` reads. They hold what "
            "was compiled, not what Dynamo skipped: a skip is only in Dynamo's debug log (%s)." % (
                n, "" if n == 1 else "s", where if dynamo_lines(report) else "this run caught none"))


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
    if extern_mm_met(report) and second_finding_applies(report):
        out.append("inductor's output code calls: " + report["inductor_extern_mm"])
    out += ablation_lines(report)
    if report.get("trace"):
        out.append("trace: %s, to attach: %s" % (report["trace"]["path"], trace_said(report, "the `dynamo` lines")))
    if report["errors"].get("loops_error"):
        out.append("the report's loops raised Dynamo's error for a fullgraph=True function it skipped: "
                   + report["errors"]["loops_error"])
    out.append(verdict_line(report))
    if report["verdict"] == "reproduced" and report["scenarios"][CASE]["eager_calls"] and not dynamo_lines(report):
        out.append("hint: " + DYNAMO_HINT % script_command(report))
    return home_hidden("\n".join(out))  # whatever torch quoted: the home folder as ~


# ----------------------------------------------------------------------------- the paste
REPORTERS_PLACE = "<!-- Your own words first: what you were doing, what you expected. -->"
# who made it: the judged run of the bundle, linked where the bundle has an address, named without a path otherwise
GENERATED = "*Below: generated by one judged run of %s for pytorch/pytorch#161889.*"
BUNDLE_NAMED = "the repro bundle"
SCRIPT_NAME = "repro.py"  # what the paste asks a reader to save the script as
REVERT_FOLDER = "revert"  # and the revert's sitecustomize.py in
REVERT_FILE = os.path.join(BUNDLE, "sac_repro", "revert_fix", "sitecustomize.py")
FIX_HUNK = os.path.join(BUNDLE, "sac_repro", "revert_fix", "fix_hunk.diff")
SECOND_FINDING = "**A second finding, not #161889:**"


def bundle_url():
    return (os.environ.get(URL_VARIABLE) or "").rstrip("/")


def link(text, path):
    """text, linked to the bundle's file at path where the bundle's address is known (SAC_REPRO_URL);
    otherwise None: a reader of the issue cannot open the bundle's files."""
    return "[%s](%s/%s)" % (text, bundle_url(), path) if bundle_url() else None


def details(summary, body):
    """A collapsed block: GitHub shows its summary, and its body once opened. The summary is HTML,
    where Markdown is not read: its `code` is written as HTML's."""
    summary = re.sub(r"`([^`]*)`", lambda m: "<code>%s</code>" % m.group(1), html.escape(summary, quote=False))
    return ["", "<details><summary>%s</summary>" % summary, ""] + body + ["", "</details>"]


def render_markdown(report, command, script_path, collect_env):
    """The paste, in the form of PyTorch's torch.compile bug template: its three headings, the
    reporter's own words first, then what this run generated, labelled so. What GitHub shows of it
    with the blocks collapsed is its first screen; each detail is in one block."""
    out = ["### 🐛 Describe the bug", "", REPORTERS_PLACE, "",
           GENERATED % (link(BUNDLE_NAMED, "README.md") or BUNDLE_NAMED), "", headline(report), ""]
    if report["env"].get("torch"):  # a live run: the script answers on the reader's torch too
        out.append("%s. %s" % (torch_line(report, changes=False), run_it(report)))
        out += details("%s: the answering code, then the report's code, edits marked [changed]/[added]" % SCRIPT_NAME,
                       ["```python", report_code(script_path) + "```"])
        if shows_only_reverted(report):
            out += details("%s/sitecustomize.py (undoes the 2.10 fix)" % REVERT_FOLDER, [
                "SAC's two dispatch modes answer `ignore_compile_internals() -> False` again, as on 2.5-2.9, once "
                "`torch.utils.checkpoint` is imported:", "", "```python", report_code(REVERT_FILE) + "```"])
        out += details("The bundle's command", [command_line(report, command)] + (
            ["", "The bundle: %s" % bundle_url()] if bundle_url() else []))
    else:  # a capture alone, or a torch that never said its version: the command is what there is
        out.append("%s. %s" % (torch_line(report, changes=False), command_line(report, command)))
    out += ["", "- **Expected:** %s." % EXPECTED,
            "- **Actual:** %s." % actual(report),
            "- **Verdict:** `%s` (exit %d)" % (report["verdict"], report["exit_code"]),
            "- **Next step:** %s" % next_step(report)]
    out += second_finding(report)
    if report.get("ablation"):
        out += ["", "**Ablation** (what the template asks): %s." % ablation_said(report)]
        out += details("The case under each backend", markdown_table(ablation_rows(report), ABLATION_HEADER)
                       + not_counted_said(report))
    rows = scenario_rows(report)
    if rows:
        out += details("The %d scenarios" % len(rows), scenarios_said(report)
                       + [""] + markdown_table(rows, TABLE_HEADER))
    if report["verdict"] == "not_reproduced":
        out += details("The 2.10 fix, torch/utils/checkpoint.py",
                       ["```diff", fix_hunk().rstrip(), "```"])
    if report.get("plot"):
        out += details("The picture, `%s`" % os.path.basename(report["plot"]), [picture_caption(report)])
    out += ["", "### Error logs", ""] + error_logs(report)
    if report.get("trace"):
        out += details("The TORCH_TRACE logs, `%s`" % os.path.basename(report["trace"]["path"]),
                       [trace_said(report, "under Error logs")])
    out += ["", "### Versions", ""] + versions_details(report["env"], collect_env, paths=False)
    return home_hidden("\n".join(out))  # whatever torch quoted: the home folder as ~


def shows_only_reverted(report):
    """A run whose case ran eagerly with the 2.10 fix reverted: the script shows the bug on this
    torch only with the revert loaded."""
    return bool(report["scenarios"].get(CASE, {}).get("eager_calls")) and any(
        c["label"] == REVERTED for c in report.get("torch_changes") or [])


def run_it(report):
    """How a reader of the issue runs it: the script alone, saved from the paste."""
    if shows_only_reverted(report):
        return ("**To run it:** save the script below as `%s`. On a fixed torch it shows the bug only with the revert "
                "loaded: save the revert below as `%s/sitecustomize.py`, then run `PYTHONPATH=%s python3 %s` (exit 1); "
                "without it, `python3 %s` gives 0." % (SCRIPT_NAME, REVERT_FOLDER, REVERT_FOLDER, SCRIPT_NAME, SCRIPT_NAME))
    return ("**To run it:** save the script below as `%s`, then run `python3 %s` (needs only torch; exit 1: the bug, "
            "0: compiled under SAC, 125: cannot tell%s)." % (SCRIPT_NAME, SCRIPT_NAME, "; on torch as installed, "
                                                            "without what changed it here" if report.get("torch_changes") else ""))


def headline(report):
    """The paste's first words: whether this run shows pytorch/pytorch#161889, and what changed the
    torch it ran in-process, named here and nowhere else on the first screen."""
    changed = report.get("torch_changes")
    changes = " with %s" % changes_said(changed, paths=False) if changed else ""
    if report["verdict"] == "cannot_test":
        return "**This build cannot show pytorch/pytorch#161889%s**: %s." % (changes, report["reason"])
    case = report["scenarios"][CASE]
    if report["verdict"] == "reproduced" and not case["eager_calls"]:  # --strict-policy's reading
        return "**This run reproduces, as `--strict-policy` reads it%s**: %s." % (
            changes, report["reason"].replace("--strict-policy: ", "", 1))
    if case["eager_calls"]:
        return "**This run reproduces pytorch/pytorch#161889%s**: the compiled f %s." % (changes, under_sac(case, why=False))
    return "**This run does not reproduce pytorch/pytorch#161889%s**, which is fixed from torch 2.10.0." % changes


def actual(report):
    """What this run showed of the bug, in one sentence, with Dynamo's own first word on it."""
    if report["verdict"] == "cannot_test":
        return "this build could not be tested (the reason above)"
    case = report["scenarios"][CASE]
    if not case["eager_calls"]:  # the headline gave the answer, Expected what runs: the evidence, once
        kernels = [k for k in case["kernels"] if classify(k).family == "inductor"]
        return "as expected, in all %d calls%s" % (
            len(case["calls"]), " (Inductor's %s)" % ", ".join("`%s`" % k for k in kernels) if kernels else "")
    # "N of M calls under SAC ran eagerly (...)": Expected names the compiled f; Dynamo's words follow
    said = report["reason"].replace(RAISED_ONCE_RUN, "; then ")
    quoted = dynamo_lines(report)
    return said + ("; Dynamo said `%s`" % quoted[0].split(": ", 1)[1] if quoted else "")


# how the verdict's reason says that fullgraph's error came after f had run: the paste quotes Dynamo instead
RAISED_ONCE_RUN = "; Dynamo skipped f_compiled, and with fullgraph=True torch.compile raised once f had run: "


def next_step(report):
    """What a maintainer (or the reporter) does next, from this run's verdict and changes, in words
    that work without the bundle."""
    if report["verdict"] == "cannot_test":
        return "make this build testable (the reason above), then run it again; a bisect skips it (125)."
    test = link("a regression test", "sac_repro/upstream/test_sac_compile_upstream.py")
    if report["verdict"] == "not_reproduced":  # #161889 is closed upstream: what is left is the policy's
        return "keep #161889 closed%s%s." % (
            policy_next(report), "; %s for PyTorch's `test/dynamo/test_activation_checkpointing.py` keeps it fixed"
                                 % test if test else "")
    if shows_only_reverted(report):  # that a fixed torch gives 0 without the revert, "To run it" says
        return "none for torch: the 2.10 fix was undone on purpose."
    if report["scenarios"][CASE].get("eager_calls") and not report["env"].get("torch"):
        return ("run `python3 %s --markdown` with the Python of the torch that made this capture (in place of "
                "`python3`): it says which torch that is, and what changed it, which a capture alone cannot."
                % shell_path(os.path.join(BUNDLE, "sac_repro")))  # by its path, as the Command: from any folder
    if report["scenarios"][CASE].get("eager_calls"):
        return ("upgrade to torch 2.10.0 or later, where it is fixed; until then put the checkpoint inside "
                "the compiled function (`torch.compile(lambda x, y: checkpoint(f, x, y, use_reentrant=False, "
                "context_fn=context_fn))`, the `workaround` scenario).")
    if second_finding_stated(report):
        return "read the second finding below: it is not #161889 itself (`--strict-policy` counts it)."
    return "read the SAC policy's section below: backward ran the forward matmul again, which is not #161889 " \
           "itself (`--strict-policy` counts it)."


def policy_next(report):
    """What the policy's section below asks of a maintainer, as it measured it: a second finding to
    file only where it states one; where the policy applied (its matmul saved), nothing to file."""
    if not second_finding_applies(report):
        return ""
    recomputed = report["policy"].get("with_context_matmul_recomputed_in_backward")
    if second_finding_stated(report):
        return "; track the second finding below in an issue of its own"
    if recomputed:
        return "; track the SAC policy's section below (backward ran the forward matmul again) in an issue of its own"
    if recomputed is False:
        return "; under `sac(compile(f))` the policy applied in this run (the forward matmul was saved): no " \
               "second finding to track"
    return ""


def scenarios_said(report):
    """The scenarios' names, for a reader without the bundle."""
    names = report["scenarios"]
    said = ["`%s` is the report's case, `%s` its control (f compiled afresh, under a plain checkpoint)" % (CASE, CONTROL)]
    if WORKAROUND in names:
        said.append("`%s` is `compile(sac(f))`, the checkpoint inside the compiled function" % WORKAROUND)
    more = link("the others", "docs/output.md")
    return ["; ".join(said) + ("; %s." % more if more else ".")]


def fix_hunk():
    with open(FIX_HUNK) as fh:
        return fh.read()


def error_logs(report):
    """Dynamo's own words, what the run's process said, and the error a loop raised: the template's
    Error logs, collapsed where there are any."""
    logs = dynamo_lines(report) + said_lines(report) + (["the report's loops raised: " + report["errors"]["loops_error"]]
                                                         if report["errors"].get("loops_error") else [])
    if report["verdict"] == "cannot_test":
        logs.append(report["reason"])
    if not logs:
        return ["None: nothing raised, Dynamo logged no skip of f%s." % (
            ", no warning was shown, and nothing was printed but log records and the bundle's progress lines"
            if "said" in report else "")]
    return details("Dynamo's log, and what the run raised or printed (%d line%s)" % (
        len(logs), "" if len(logs) == 1 else "s"), ["```"] + logs + ["```"])[1:]


# ----------------------------------------------------------------------------- the second finding
def second_finding_applies(report):
    """The policy's finding, apart from the bug: only where the compiled f ran under SAC."""
    if report["verdict"] == "cannot_test":  # before any scenario, there may be none to read
        return False
    return not report["scenarios"][CASE]["eager_calls"] and bool(policy_lines(report["policy"]))


def second_finding_stated(report):
    """The policy's section states a second finding: the policy's MUST_SAVE went unmet, its matmul
    recomputed, because it was never asked about `aten.mm.default`."""
    return second_finding_applies(report) and bool(report["policy"].get("with_context_matmul_recomputed_in_backward")) \
        and "aten.mm.default" not in asked_ops(report, CASE)


NAMED_REGIONS = ('named regions (2.12+: `torch.compile(f, name=..., options={"wrap_inductor_compiled_regions": True})`) '
                 "let a policy save or recompute only the whole region (pytorch/pytorch#175229)")


def second_finding(report):
    """One sentence on the first screen, and one table of what the policy was asked and the matmuls
    of one backward, collapsed."""
    if not second_finding_applies(report):
        return []
    p = report["policy"]
    ignored = p.get("with_context_matmul_recomputed_in_backward")
    if second_finding_stated(report):  # in one sentence: what the policy asks, what it got, then upstream's
        said = "the report's policy saves `aten.mm.default` (`MUST_SAVE`), but under `sac(compile(f))` it was asked " \
               "only about %s, never `aten.mm.default`, so backward computed %d matmuls, against %s; %s" % (
                   ", ".join("`%s`" % op for op in asked_ops(report, CASE)), p["backward_matmuls"][CASE],
                   saved_by(report), NAMED_REGIONS)
        out = ["", "%s %s." % (SECOND_FINDING, said)]
    else:
        out = ["", "**The SAC policy under `sac(compile(f))`:** %s." % policy_actual(report)]
    body = markdown_table(policy_rows(report), POLICY_HEADER)
    if p.get("trusted"):
        body += ["", "Every row ran the report's f and policy (`MUST_SAVE` for `aten.mm.default`, recompute the rest). "
                 "Where the forward matmul is saved, one backward computes %d matmuls (as f compiled with no "
                 "checkpoint does); more means the forward matmul ran again." % p["baseline"]]
    if extern_mm_met(report):
        body += ["", "Inductor's generated code for f (this run's output code) calls the matmul as `%s`: that is "
                 "the op SAC's mode meets at run time." % report["inductor_extern_mm"]]
    if ignored:
        more = link("details", "docs/policy.md#named-regions-upstreams-mechanism")
        body += ["", "Named regions: %s; %s%s. %s." % (NAMED_REGIONS_NEED, NAMED_REGIONS_MEASURED,
                                                      " (%s)" % more if more else "", ISSUE_175229)]
    return out + details("The policy's table", body)


def saved_by(report):
    """'2 under `compile(sac(f))` and eager SAC': the matmuls of one backward where the forward matmul
    is saved, and the arrangements of this run that computed as many."""
    p = report["policy"]
    saved = [label for name, label in ((WORKAROUND, "`compile(sac(f))`"), (EAGER_SAC, "eager SAC"))
             if (p.get("backward_matmuls") or {}).get(name) == p["baseline"]]
    return "%d %s" % (p["baseline"], "under " + " and ".join(saved) if saved else "where the forward matmul is saved")


# ----------------------------------------------------------------------------- the ablation
def ablation_said(report):
    """The ablation's one-line reading as the paste gives it: where the second finding is stated above,
    which backends show it, without stating it again; otherwise the judge's reading."""
    reading = report["ablation"]["reading"]
    if reading != INDUCTOR_READING or not second_finding_stated(report):
        return reading
    others = ["`%s`" % r["backend"] for r in report["ablation"]["rows"]
              if r.get("frame_compiled") and not r["backend"].startswith("inductor")]
    return "only the `inductor` backend shows the second finding; %s %s not, so it is Inductor's" % (
        " and ".join([", ".join(others[:-1]), others[-1]] if len(others) > 1 else others), "do" if len(others) > 1 else "does")


def not_counted_said(report):
    """Why the ablation's last column is `-` where it is: each such call raised in its forward, so no
    backward ran; or, where some did not raise, that they were not counted."""
    rows = [r for r in report["ablation"]["rows"] if r.get("backward_matmuls") is None]
    if not rows:
        return []
    if all(r.get("refused") for r in rows):
        return ["", "`-`: the call raised in its forward (fullgraph=True), so no backward ran to count."]
    return ["", "`-`: no backward was counted for that backend (its second column says how its call ran)."]


# ----------------------------------------------------------------------------- the picture
def picture_caption(report):
    """What the attached picture shows, as plot.py draws it from this report."""
    colours = "green: compiled code; orange: f's eager ops and kernels; blue: matmuls; grey: the rest"
    if report["scenarios"].get(CONTROL, {}).get("ranges") is not None:
        return ("The report's two loops, one NVTX range per call (`without_context`: a plain checkpoint; "
                "`with_context`: SAC), each range's kernels by class (%s)." % colours)
    return ("Left: each scenario's 3 profiled calls, each on its own time axis, its ops and kernels by class (%s), "
            "the call's verdict above it. Right: the matmuls computed in one backward per scenario; the dashed "
            "line is the count where the forward matmul is saved, orange bars count more." % colours)


def release_table_markdown(rows):
    """bisect_torch.py's per-release table, to paste under a --markdown report."""
    return "\n".join(markdown_table(rows, ("torch", "git", "verdict", "exit", "evidence")))
