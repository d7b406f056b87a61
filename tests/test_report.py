"""What a user pastes into a GitHub issue (--markdown), and expected_output.md against what the
code prints today: both from the fixed torch run of test_verdict.py."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, SCRIPT

from sac_repro import render

EXPECTED_OUTPUT = os.path.join(ROOT, "expected_output.md")
SEED_LINES = ["ops_to_save = [", "torch.ops.aten.mm.default,", "def policy_fn(ctx, op, *args, **kwargs):",
              "return CheckpointPolicy.MUST_SAVE", "f_compiled = torch.compile(f, fullgraph=True, dynamic=True)",
              "checkpoint_fn_with_context(f_compiled, x, y)"]


@pytest.fixture
def fixed_markdown(fixed_run):
    return fixed_run[4]


def code_block(markdown):
    return re.search(r"```python\n(.*?)```", markdown, re.S).group(1)


def test_markdown_carries_the_code_that_ran(fixed_markdown):
    code = code_block(fixed_markdown)
    assert code == render.report_code(SCRIPT)
    for line in SEED_LINES:
        assert line in code
    assert "[changed]" in code and "[added]" in code


def test_the_markdown_code_runs_on_its_own(fixed_markdown, tmp_path):
    """Pasted into a file by a maintainer, on the CPU, with nothing of this bundle beside it."""
    path = tmp_path / "repro.py"
    path.write_text(code_block(fixed_markdown))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_markdown_says_expected_and_actual(fixed_markdown):
    lines = fixed_markdown.splitlines()
    assert "torch 2." in lines[2] and "Command: `python torch_compile_selective_activation_checkpoint.py" in lines[2]
    expected = next(l for l in lines if l.startswith("- **Expected:**"))
    assert "`MUST_SAVE` on `aten.mm.default` keeps the forward matmul out of backward" in expected
    actual = next(l for l in lines if l.startswith("- **Actual:**"))
    assert "ran Inductor kernels under SAC in all 3 calls" in actual
    assert "the policy was asked about `aten.mm.out`, never `aten.mm.default`" in actual
    assert "backward ran the forward matmul again (3 matmuls in backward against 2" in actual
    assert "- **Verdict:** `not_reproduced` (exit 0)" in lines


def test_markdown_shows_what_the_policy_saw(fixed_markdown):
    line = next(l for l in fixed_markdown.splitlines() if l.startswith("policy was asked about:"))
    assert "with_context aten.mm.out -> PREFER_RECOMPUTE" in line
    assert "eager_sac aten.mm.default -> MUST_SAVE" in line


def test_markdown_fits_on_one_screen_above_its_details(fixed_markdown):
    visible = fixed_markdown.split("<details>")[0]
    assert len(visible.splitlines()) <= 30, visible
    assert fixed_markdown.count("<details>") == 2 and fixed_markdown.count("</details>") == 2
    assert "PyTorch version:" in fixed_markdown  # python -m torch.utils.collect_env, as the template asks


# --------------------------------------------------------------------- expected_output.md drift
def recorded_block(heading):
    """(header lines, transcript lines) of the block of expected_output.md under `heading`."""
    text = open(EXPECTED_OUTPUT).read()
    section = text[text.index(heading):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    header, transcript = section.split("```\n", 1)
    return header.splitlines(), transcript.split("\n```", 1)[0].splitlines()


def table_shape(lines):
    """(scenario, compiled calls, eager pointwise ops) of each table row: what must not drift;
    kernel name prefixes and timings may."""
    start = next(i for i, l in enumerate(lines) if l.strip().startswith("scenario "))
    rows = []
    for l in lines[start + 1:]:
        if not l.startswith("  "):
            break
        rows.append(tuple(re.split(r"\s{2,}", l.strip())[:3]))
    return [re.split(r"\s{2,}", lines[start].strip())] + rows


def test_expected_output_shows_what_the_code_prints_today(fixed_run):
    header, recorded = recorded_block("## Fixed torch (2.13.0), CPU")
    _, report, text, _, _ = fixed_run
    if not report["torch_version"].startswith("2.13.0"):
        pytest.skip("the recorded block is of torch 2.13.0; this is %s" % report["torch_version"])
    printed = text.splitlines()
    for prefix in ("VERDICT:", "policy (MUST_SAVE", "policy was asked about:"):
        assert [l for l in recorded if l.startswith(prefix)] == [l for l in printed if l.startswith(prefix)], prefix
    assert table_shape(recorded) == table_shape(printed)


def test_every_block_of_expected_output_names_a_commit_of_this_history():
    text = open(EXPECTED_OUTPUT).read()
    blocks = text.split("\n## ")[1:]
    assert blocks
    for block in blocks:
        m = re.search(r"bundle commit ([0-9a-f]{7,40})", block)
        assert m, "no bundle commit named under: " + block.splitlines()[0]
        if os.path.isdir(os.path.join(ROOT, ".git")):
            rc = subprocess.run(["git", "-C", ROOT, "merge-base", "--is-ancestor", m.group(1), "HEAD"],
                                capture_output=True).returncode
            assert rc == 0, "%s names %s, not a commit of this history" % (block.splitlines()[0], m.group(1))
