"""What a user pastes into a GitHub issue (--markdown), and every canonical transcript of
expected_output.md (and every output the README shows) against what today's code prints."""
import copy
import json
import os
import re
import subprocess

import pytest

from conftest import data, judge, recorded as recorded_child, REVERTED_CSV, ROOT, SCRIPT
from sac_repro.judge import render, verdict

EXPECTED_OUTPUT = os.path.join(ROOT, "expected_output.md")
TRANSCRIPTS = os.path.join(ROOT, "docs", "transcripts")
RUN_NSYS_TRANSCRIPT = os.path.join(TRANSCRIPTS, "h200-run-nsys-hunt-fix.md")
REVERTED_PASTE_TRANSCRIPT = os.path.join(TRANSCRIPTS, "cpu-reverted-markdown.md")
SEED_LINES = ["ops_to_save = [", "torch.ops.aten.mm.default,", "def policy_fn(ctx, op, *args, **kwargs):",
              "return CheckpointPolicy.MUST_SAVE", "f_compiled = torch.compile(f, fullgraph=True, dynamic=True)",
              "checkpoint_fn_with_context(f_compiled, x, y)"]


@pytest.fixture
def fixed_markdown(fixed_run):
    return fixed_run[4]


def code_block(markdown):
    return re.search(r"```python\n(.*?)```", markdown, re.S).group(1)


def test_markdown_carries_the_script_byte_for_byte(fixed_markdown):
    """The paste's code is the script file that ran, so it cannot drift from it; run alone, it
    answers by itself (test_standalone.py)."""
    code = code_block(fixed_markdown)
    with open(SCRIPT, newline="") as fh:
        assert code == fh.read()
    for line in SEED_LINES:
        assert line in code
    assert "[changed]" in code and "[added]" in code


def test_markdown_says_expected_and_actual(fixed_markdown):
    lines = fixed_markdown.splitlines()
    assert "torch 2." in lines[8] and "`python3 repro.py`" in lines[8]  # the one command a reader of the issue runs
    command = next(l for l in lines if l.startswith("Command: `"))  # the bundle's, collapsed
    assert "sac_repro --device cpu --markdown" in command
    expected = next(l for l in lines if l.startswith("- **Expected:**"))
    assert expected == "- **Expected:** %s." % render.EXPECTED and "compiled code (Inductor kernels) under SAC" in expected
    actual = next(l for l in lines if l.startswith("- **Actual:**"))
    assert "ran Inductor kernels under SAC in all 3 calls" in actual
    assert "- **Verdict:** `not_reproduced` (exit 0)" in lines
    policy = next(l for l in lines if l.startswith(render.SECOND_FINDING))
    assert "the policy was asked only about `aten.mm.out`, never `aten.mm.default`" in policy
    assert "backward computed 3 matmuls against 2;" in policy


def test_markdown_shows_what_the_policy_saw(fixed_markdown):
    """One table: each arrangement, what the policy was asked and answered, the matmuls of one backward."""
    rows = [l for l in fixed_markdown.splitlines() if l.startswith("| `sac(compile(f))`, the report's pattern |")
            or l.startswith("| eager SAC, no compile |")]
    assert rows[0] == "| `sac(compile(f))`, the report's pattern | `aten.mm.out -> PREFER_RECOMPUTE` | 3 | **recomputed** |"
    assert rows[1].startswith("| eager SAC, no compile | `aten.mm.default -> MUST_SAVE`, ") and rows[1].endswith("| 2 | saved |")


def test_markdown_takes_the_form_of_pytorchs_bug_template(fixed_markdown):
    """The template's three headings; the reporter's place first (an HTML comment, invisible once
    posted), then a label on what the bundle generated; no instruction and no link into the bundle."""
    lines = fixed_markdown.splitlines()
    assert [l for l in lines if l.startswith("### ")] == ["### 🐛 Describe the bug", "### Error logs", "### Versions"]
    assert lines[2] == render.REPORTERS_PLACE and lines[2].startswith("<!--") and lines[4] == render.GENERATED % "sac_repro"
    assert not re.search(r"\]\((?!https?://)", fixed_markdown), "a relative link, which an issue cannot follow"
    generated = re.sub(r"```.*?```", "", fixed_markdown.split("### Versions")[0], flags=re.S)  # not the script's words
    assert not re.search(r"\b(attach|paste|here:)\b", generated, re.I), "an instruction to the one pasting"


def test_a_fixed_torch_paste_gives_the_status_the_fix_and_the_next_step(fixed_markdown):
    lines = fixed_markdown.splitlines()
    assert lines[6] == "**This run does not reproduce pytorch/pytorch#161889**, which is fixed from torch 2.10.0."
    step = next(l for l in lines if l.startswith("- **Next step:**"))
    assert step == "- **Next step:** none for #161889; the second finding below needs its own issue (#161889 is closed)."
    diff = re.search(r"```diff\n(.*?)```", fixed_markdown, re.S).group(1)
    assert diff == render.fix_hunk()
    assert diff.count("+    def ignore_compile_internals(cls):") == 2 and diff.count("+        return True") == 2
    assert "class _CachingTorchDispatchMode(TorchDispatchMode):" in diff and "class _CachedTorchDispatchMode" in diff


# --------------------------------------------------------------------- expected_output.md drift
def recorded_section(heading, path=EXPECTED_OUTPUT):
    """The whole block of expected_output.md (or of a transcript) under `heading`."""
    text = open(path).read()
    section = text[text.index(heading):]
    return section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section


def recorded_block(heading, path=EXPECTED_OUTPUT):
    """(header lines, transcript lines) of the block of expected_output.md (or a transcript) under `heading`."""
    header, transcript = recorded_section(heading, path).split("```\n", 1)
    return header.splitlines(), transcript.split("\n```", 1)[0].splitlines()


def drift_lines(lines):
    """What must not drift between a transcript and today's code: the verdict and policy lines,
    Expected and Actual, the per-loop kernel lines of a capture, and the table's shape (kernel name
    prefixes and timings may differ), and what changed the torch in-process. Nothing from
    collect_env, which is the machine's."""
    lines = lines[:next((i for i, l in enumerate(lines) if l.startswith("<details><summary>Versions")), len(lines))]
    kept = [l for l in lines if l.startswith(("VERDICT:", "policy (MUST_SAVE", "policy was asked about:",
                                                "f_compiled_with", "- **", "**This ", "#### ", "Not pytorch/",
                                                "dynamo (", "the report's loops raised", "hint:", render.SECOND_FINDING,
                                                "**Ablation**", "| `sac(compile", "| `compile(sac", "| eager SAC",
                                                "| eager |", "| aot_eager", "| inductor", "Named regions, ",
                                                "The report's policy in every row", "Inductor's generated code",
                                                "`with_context` is the report's case", "None: ", "<details><summary>"))
            or "**To run it:**" in l or re.match(r"\s+\d+ x \S", l)]
    # the environment is the machine's, but not what changed its torch in-process
    kept += ["changed: " + l.partition(" | changed: ")[2] for l in lines if l.startswith("environment:")]
    return kept, table_shape(lines)


def table_shape(lines):
    """(scenario, compiled calls, eager pointwise ops) of each row of the text or markdown table."""
    rows = []
    for l in lines:
        cells = [c.strip() for c in l.strip().strip("|").split("|")] if l.startswith("|") else re.split(r"\s{2,}", l.strip())
        if cells and (cells[0] in verdict.SCENARIOS or cells[0] == "scenario"):
            rows.append(tuple(cells[:3]))
    return rows


def judged_text(raw, *, drop=()):
    raw = copy.deepcopy(raw)
    for name in drop:
        raw["scenarios"].pop(name, None)
    return render.render_text(verdict.report_from_child(raw, "regression", False)).splitlines()


def transcript_runs(lines):
    """A transcript of several runs, split where each judged report starts: at its `environment:`
    line, or its `evidence:` line where it knows no environment."""
    runs, current = [], []
    for l in lines:
        after_environment = bool(current) and current[-1].startswith("environment:")
        if current and (l.startswith("environment:") or (l.startswith("evidence:") and not after_environment)):
            runs.append(current)
            current = []
        current.append(l)
    return runs + [current]


def test_the_cpu_fixed_transcript_is_what_the_code_prints_today(fixed_run):
    _, recorded = recorded_block("## Fixed torch (2.13.0), CPU")
    _, report, text, _, _ = fixed_run
    if not report["torch_version"].startswith("2.13.0"):
        pytest.skip("the recorded block is of torch 2.13.0; this is %s" % report["torch_version"])
    assert drift_lines(recorded) == drift_lines(text.splitlines())


def test_the_cpu_reverted_transcript_is_what_the_code_prints_today(reverted_run):
    """Issue 45: with the fix reverted, 2.13's calls under SAC ran eagerly, then raised."""
    _, recorded = recorded_block("## Fixed torch (2.13.0) with the fix reverted in-process, CPU")
    _, report, text, _, _ = reverted_run
    if not report["torch_version"].startswith("2.13.0"):
        pytest.skip("the recorded block is of torch 2.13.0; this is %s" % report["torch_version"])
    assert drift_lines(recorded) == drift_lines(text.splitlines())
    assert any(l.startswith("VERDICT: reproduced (exit 1): 3 of 3 calls under SAC ran eagerly, then raised")
               for l in recorded)


@pytest.mark.unit
@pytest.mark.parametrize("heading, child, drop", [
    ("## Affected torch (2.9.1), CPU", ("cpu-torch2.9.1", "child.json"), ()),
    # recorded with --policy-report, which adds the wrapped scenario that the plain run has not
    ("## H200, torch 2.11: not reproduced", ("h200-torch2.11", "child_fixed.json"), (verdict.WRAPPED,)),
])
def test_the_recorded_transcripts_are_what_the_code_prints_today(heading, child, drop):
    _, recorded = recorded_block(heading)
    raw = recorded_child(data(*child))
    assert drift_lines(recorded) == drift_lines(judged_text(raw, drop=drop))


@pytest.mark.unit
def test_the_h200_run_nsys_transcript_is_what_the_code_prints_today(tmp_path):
    """The transcript judged its capture twice, with --hunt-fix and plainly; the recorded capture
    of the same kind (tests/data/h200-torch2.11-fix-reverted/) must read the same today."""
    _, recorded = recorded_block("# H200, torch 2.11 with the fix reverted in-process: `run_nsys.sh", RUN_NSYS_TRANSCRIPT)
    runs = transcript_runs([l for l in recorded if not l.startswith(("run_nsys", "+ ", "sac-repro:"))])
    assert len(runs) == 3  # the capture run's own lines, then the two judged reports
    # the capture's own judge gets the capture run's hand-off (recorded beside the capture); the
    # second, `--report` on the file alone, gets none
    handoff = tmp_path / "capture_run.json"
    # recorded at c54df5a, when the revert lay in tools/revert_fix; the transcript is of today's layout
    recorded_handoff = json.dumps(recorded_child(data("h200-torch2.11-fix-reverted", "capture_run.json")))
    handoff.write_text(recorded_handoff.replace("/tools/revert_fix/", "/sac_repro/revert_fix/"))
    for extra, run_lines in zip((["--hunt-fix", "--_env", handoff], []), runs[1:]):
        rc, stdout, _ = judge("--from-nsys", REVERTED_CSV, *extra)
        assert drift_lines(run_lines) == drift_lines(stdout.splitlines())
        assert "(exit %d)" % rc in next(l for l in run_lines if l.startswith("VERDICT:"))


def test_the_markdown_transcript_is_what_the_code_prints_today(fixed_run):
    section = recorded_section("## `--markdown` (fixed 2.13.0, CPU)")  # pasted markdown, not fenced
    recorded = section.splitlines()
    _, report, _, _, markdown = fixed_run
    if not report["torch_version"].startswith("2.13.0"):
        pytest.skip("the recorded block is of torch 2.13.0; this is %s" % report["torch_version"])
    printed = markdown.splitlines()
    assert drift_lines(recorded) == drift_lines(printed)
    # the collapsed code is the script file (test_markdown_carries_the_script_byte_for_byte): the
    # transcript cuts it, and says how long it is
    cut = re.fullmatch(r"\[\.\.\. torch_compile_selective_activation_checkpoint\.py, the script file, "
                       r"(\d+) lines, cut here \.\.\.\]\n", code_block(section))
    assert cut and int(cut.group(1)) == len(code_block(markdown).splitlines()), code_block(section)[:300]


def test_the_reverted_markdown_transcript_is_what_the_code_prints_today(reverted_run):
    """docs/transcripts/cpu-reverted-markdown.md: the paste of 2.13 with the fix reverted, its revert inline."""
    recorded = recorded_section("# `--markdown` (2.13.0 with the fix reverted", REVERTED_PASTE_TRANSCRIPT).splitlines()
    _, report, _, _, markdown = reverted_run
    if not report["torch_version"].startswith("2.13.0"):
        pytest.skip("the recorded block is of torch 2.13.0; this is %s" % report["torch_version"])
    assert drift_lines(recorded) == drift_lines(markdown.splitlines())
    revert = re.search(r"revert/sitecustomize.py \(undoes the 2.10 fix\).*?```python\n(.*?)```", "\n".join(recorded), re.S)
    assert revert and revert.group(1) == render.report_code(render.REVERT_FILE)


@pytest.mark.unit
def test_every_output_shown_in_the_readme_was_printed_by_a_recorded_run():
    """The README's sample output is cut from transcripts, never written by hand."""
    transcripts = open(EXPECTED_OUTPUT).read() + "".join(
        open(os.path.join(ROOT, "docs", "transcripts", f)).read() for f in os.listdir(os.path.join(ROOT, "docs", "transcripts")))
    readme = open(os.path.join(ROOT, "README.md")).read()
    blocks, fence = [], None  # output blocks are the fences that name no language
    for line in readme.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:]
            if fence == "":
                blocks.append([])
        elif fence == "":
            blocks[-1].append(line)
    assert len(blocks) >= 2
    for block in blocks:
        for line in block:
            assert not line.strip() or line in transcripts, line


@pytest.mark.unit
def test_every_transcript_names_a_commit_of_this_history():
    """expected_output.md's blocks and each file of docs/transcripts/: where each ran is named."""
    folder = os.path.join(ROOT, "docs", "transcripts")
    blocks = open(EXPECTED_OUTPUT).read().split("\n## ")[1:] + [
        open(os.path.join(folder, f)).read() for f in sorted(os.listdir(folder)) if f != "README.md"]
    assert len(blocks) >= 20
    for block in blocks:
        m = re.search(r"bundle commit ([0-9a-f]{7,40})", block)
        assert m, "no bundle commit named under: " + block.splitlines()[0]
        for what in ("- machine:", "- date:", "- command:"):
            assert what in block, "%s: no %s line" % (block.splitlines()[0], what)
        if os.path.isdir(os.path.join(ROOT, ".git")):
            rc = subprocess.run(["git", "-C", ROOT, "merge-base", "--is-ancestor", m.group(1), "HEAD"],
                                capture_output=True).returncode
            assert rc == 0, "%s names %s, not a commit of this history" % (block.splitlines()[0], m.group(1))


@pytest.mark.unit
@pytest.mark.parametrize("raw", [
    {"status": "cannot_test", "reason": "torch failed to import: No module named 'torch'"},
    {"status": "cannot_test", "reason": "--device cuda was asked for, but this torch sees no CUDA device",
     "env": {"torch": "2.13.0+cpu", "device": "cuda (not available)"}},
    {"status": "cannot_test", "reason": "torch 2.4.1 lacks the public SAC API", "env": {"torch": "2.4.1"}},
], ids=["no-torch", "no-cuda", "no-sac-api"])
def test_a_paste_of_a_build_that_cannot_be_tested_says_so(raw):
    """A cannot-test result from before any scenario ran: the paste says 125 and why. It crashed
    with KeyError 'with_context' (an internal error, 128: a bisect aborted where it should skip)."""
    report = verdict.report_from_child(raw, "regression", False)
    markdown = render.render_markdown(report, "python3 -m sac_repro --markdown", SCRIPT, None)
    lines = markdown.splitlines()
    assert lines[6] == "**This build cannot show pytorch/pytorch#161889**: %s." % raw["reason"]
    assert "- **Verdict:** `cannot_test` (exit 125)" in lines
    assert "#### " not in markdown  # no policy heading: nothing compiled to speak of


def test_the_paste_places_each_finding_by_ablation(fixed_run, reverted_run):
    """PyTorch's template asks which backend causes it. As shipped (2.13): the policy is asked
    about aten.mm.default up to aot_eager_decomp_partition, about aten.mm.out with inductor: the
    second finding is Inductor's, and the paste quotes Inductor's own line. Reverted: Dynamo skips
    f whatever the backend: #161889 is Dynamo's."""
    _, report, text, _, markdown = fixed_run
    rows = {r["backend"]: r for r in report["ablation"]["rows"]}
    assert "aten.mm.default" in rows["aot_eager"]["policy_saw"] and rows["aot_eager"]["frame_compiled"]
    assert rows["inductor"]["policy_saw"] == ["aten.mm.out"] and rows["inductor"]["backward_matmuls"] == 3
    reading = ("Inductor: only with inductor does the policy see `aten.mm.out` instead of `aten.mm.default` "
               "(the second finding is Inductor's)")
    assert report["ablation"]["reading"] == reading
    assert "**Ablation** (what the template asks): %s." % reading in markdown
    assert "| aot_eager | yes | aten.add.Tensor, aten.mm.default, aten.mul.Tensor, aten.t.default | 2 |" in markdown
    assert report["inductor_extern_mm"].startswith("extern_kernels.mm(") and "out=" in report["inductor_extern_mm"]
    assert "calls the matmul as `%s`" % report["inductor_extern_mm"] in markdown
    _, reverted, _, _, reverted_markdown = reverted_run
    assert reverted["ablation"]["reading"] == "Dynamo: it skipped f under SAC whatever the backend (#161889 is Dynamo's)"
    assert not any(r["frame_compiled"] for r in reverted["ablation"]["rows"])
    assert "calls the matmul as" not in reverted_markdown


def test_the_cpu_counts_backward_matmuls_for_every_backend_and_scenario(fixed_run):
    """Issue 46: on the CPU three of five ablation rows, and eager SAC's scenario, said '-': only
    matmuls inside Inductor's graphs were counted. An aten::mm that computes nothing (SAC's cache,
    or checkpoint's early stop: only aten::detach under it) is told from one that computes, so every
    backend counts: 2 (the forward matmul not run again) up to aot_eager_decomp_partition, 3 with
    inductor, where the compiled region is recomputed whole."""
    _, report, _, _, _ = fixed_run
    counts = {r["backend"]: r["backward_matmuls"] for r in report["ablation"]["rows"]}
    assert counts == {"eager": 2, "aot_eager": 2, "aot_eager_decomp_partition": 2, "inductor": 3,
                      "inductor + wrap_inductor_compiled_regions": 3}, counts
    assert report["scenarios"][verdict.EAGER_SAC]["backward_matmuls"] == report["policy"]["baseline"] == 2


def test_the_plain_run_offers_the_ablation(fixed_run):
    report = dict(fixed_run[1])
    report.pop("ablation")
    assert "ablation: not run (it compiles f once per backend); --ablation or --markdown runs it" in \
        render.render_text(report).splitlines()


@pytest.mark.unit
def test_the_docs_say_what_a_call_that_raised_ran():
    """Issue 45: docs/output.md, nsys.md and json.md said such calls ran nothing; their words are the
    outputs' own."""
    docs = {name: open(os.path.join(ROOT, "docs", name)).read() for name in ("output.md", "nsys.md", "json.md")}
    for name, text in docs.items():
        flat = " ".join(text.split())
        for wrong in ("ran nothing", "nothing ran", "instead of running eagerly", "raised instead of running",
                      "nothing to capture", "none: Dynamo raised"):
            assert wrong not in flat, (name, wrong)
    output = " ".join(docs["output.md"].split())
    for words in (render.THEN_RAISED.strip(", "), render.NONE_SEEN, "no: %s (fullgraph=True)" % verdict.RAN_THEN_RAISED):
        assert words in output, words
    for key in ("eager_then_raised_calls", "calls_refused", "`said`", "`eager_ops`"):
        assert key in docs["json.md"], key


@pytest.mark.unit
def test_the_files_the_docs_ask_a_user_to_make_here_are_ignored_by_git():
    """Issue 46: evidence.png and trace.tar.gz, made in the bundle's folder as the README says,
    showed up as new files to commit."""
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    docs = [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                                                if f.endswith(".md")]
    made = set()
    for path in docs:
        made |= set(re.findall(r"(?:--plot|--trace|--json|--bench-json) ([a-z][\w.-]*\.(?:png|svg|json|tar\.gz))", open(path).read()))
    assert {"evidence.png", "trace.tar.gz", "bench.json"} <= made, made
    for name in sorted(made):
        rc = subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", name], capture_output=True).returncode
        assert rc == 0, "%s, which the docs ask a user to make in this folder, is not in .gitignore" % name
