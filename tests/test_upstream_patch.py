"""sac_repro/upstream's patch series of PyTorch's own files (0001 the warning, 0002 the rewrite behind
torch.utils.checkpoint._sac_policy_applies_to_compiled_fn), as PyTorch could take it:

- fast: make_series.py writes the same patches again from the candidate's code (one
  implementation), and the series applies with `patch -p1`, each patch on the one before, without
  offset or fuzz, to this environment's torch (2.13) files and to PyTorch's test file at 0069a418
  (tests/data/pytorch-0069a418), the module it adds being the candidate's file byte for byte;
- release: on a patched copy of the whole torch, PyTorch's SAC tests in that file have the outcomes
  they have unpatched (the op-policy test of the regression block passing where it was an expected
  failure), the series' tests pass, and fail where they should on the unpatched torch; and the hard
  cases (tests/fix_cases.py) give with the switch on what the in-process candidate gives, and with
  it off what the unpatched torch gives."""
import ast
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT

UPSTREAM = os.path.join(ROOT, "sac_repro", "upstream")
CANDIDATE = os.path.join(ROOT, "sac_repro", "policy", "fix_candidate")
sys.path.insert(0, UPSTREAM)
import make_series  # noqa: E402

PATCHES = [os.path.join(UPSTREAM, name) for name in make_series.PATCHES]
PYTORCH_TEST = make_series.PYTORCH_TEST
# As read at that commit the file uses requires_cuda_and_triton without importing it (its README)
ITS_IMPORT = "from torch.testing._internal.triton_utils import requires_gpu_and_triton\n"
NEW_CLASSES = ("SelectiveCheckpointCompiledRegionWarningTests", "SelectiveCheckpointOfCompiledFnTestsCPU",
               "SelectiveCheckpointOfCompiledFnSwitchTests")
OP_POLICY = "SelectiveCheckpointOfCompiledFnTestsCPU.test_sac_op_policy_applies_inside_compiled_fn_cpu"
# the series' tests that a torch without it passes: no warning, and the wrap option left alone
NO_CHANGE = ("test_no_warning_where_the_policy_is_honoured", "test_no_warning_for_a_fallback_op_that_sac_caches",
             "test_no_warning_with_wrap_inductor_compiled_regions", "test_wrap_inductor_compiled_regions_is_left_as_it_is")

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1) on this machine")


def tree(tmp_path, whole_torch, name="pytorch"):
    """A folder holding torch/ (the patched files only, or the whole package, hard-linked where it
    can be: patch(1) writes a new file, so the installed one is never touched) and
    test/dynamo/test_activation_checkpointing.py."""
    root = tmp_path / name
    (root / "test" / "dynamo").mkdir(parents=True)
    shutil.copy(PYTORCH_TEST, root / "test" / "dynamo")
    src = make_series.torch_dir()
    if whole_torch:
        if subprocess.run(["cp", "-al", src, str(root / "torch")], capture_output=True).returncode != 0:
            shutil.rmtree(root / "torch", ignore_errors=True)
            shutil.copytree(src, root / "torch", symlinks=True)
    else:
        for rel in make_series.TORCH_FILES:
            os.makedirs(root / os.path.dirname(rel), exist_ok=True)
            shutil.copy(os.path.join(src, rel[len("torch/"):]), root / rel)
    return root


def apply(root, patch, *extra):
    return subprocess.run(["patch", "-p1", "--forward", "--batch", *extra, "-i", patch], cwd=str(root),
                          capture_output=True, text=True, timeout=120)


def apply_series(root, patches=PATCHES):
    """Each patch dry-run, then applied, on the one before it: cleanly, or the test fails."""
    for patch in patches:
        for extra in (["--dry-run"], []):
            proc = apply(root, patch, *extra)
            assert proc.returncode == 0 and not any(word in proc.stdout for word in ("FAILED", "offset", "fuzz")), \
                (os.path.basename(patch), extra, proc.stdout + proc.stderr)


def test_the_series_is_written_from_the_candidates_code(capsys):
    """make_series.py --check: each patch on disk is what the candidate's module, its hook and the
    tests make today; an edit to either side alone fails here. It says so truly."""
    assert make_series.main(["--check"]) == 0
    assert capsys.readouterr().out == "up to date: %s\n" % ", ".join(make_series.PATCHES)


def test_the_series_applies_cleanly_and_adds_the_candidates_module(tmp_path):
    root = tree(tmp_path, whole_torch=False)
    apply_series(root)
    added = (root / make_series.MODULE).read_bytes()
    assert added == open(os.path.join(CANDIDATE, "_sac_compiled_fn.py"), "rb").read()
    checkpoint = (root / make_series.CHECKPOINT).read_text()
    assert make_series.candidate_hook() in checkpoint and "%s: bool = False\n" % make_series.SWITCH in checkpoint
    # the switch is documented where users read checkpoint(): its docstring
    [doc] = [ast.get_docstring(f) for f in ast.parse(checkpoint).body
             if isinstance(f, ast.FunctionDef) and f.name == "checkpoint"]
    assert "torch.utils.checkpoint.%s = True" % make_series.SWITCH in " ".join(doc.split()), doc[-600:]


def test_patch_0001s_module_is_the_candidates_warning_alone():
    """Patch 0001 adds the warning alone (_sac_compiled_fn_0001.py), which 0002 grows into the
    candidate's module: what the two share is one text, so an edit to the warning, its once-only
    table or the counter of Inductor's code on one side alone fails here."""
    def parts(path):
        tree = ast.parse(open(path, encoding="utf-8").read())
        out = {}
        for node in tree.body:
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if isinstance(node, ast.AnnAssign):
                names = [node.target.id]
            for name in names + [getattr(node, "name", None)]:
                if name:
                    out[name] = node
        return out

    def warning(function):  # the text of on_policy_query's _warn_once, less the switch's note
        [call] = [n for n in ast.walk(function) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_warn_once"]
        text = call.args[1]
        return ast.dump(text.left if isinstance(text, ast.BinOp) else text)

    first = parts(os.path.join(UPSTREAM, "_sac_compiled_fn_0001.py"))
    whole = parts(os.path.join(CANDIDATE, "_sac_compiled_fn.py"))
    shared = ("_InductorCodeRunning", "inductor_code_running", "_said", "_POLICY_SEES_COMPILED_CALLS", "_warn_once")
    for name in shared:
        assert ast.dump(first[name]) == ast.dump(whole[name]), name
    assert set(first) == set(shared) | {"reset", "on_policy_query"}, sorted(first)
    assert warning(first["on_policy_query"]) == warning(whole["on_policy_query"])


def test_each_line_the_series_adds_fits_pytorchs_88_columns():
    """PyTorch's ruff config: line-length 88 (E501), which `ruff format` keeps to but for comments
    and strings; and no str.format where ruff's UP032 wants an f-string."""
    for patch in PATCHES:
        added = [l[1:].rstrip("\n") for l in open(patch, encoding="utf-8") if l.startswith("+") and not l.startswith("+++")]
        assert added and [l for l in added if len(l) > 88] == [], os.path.basename(patch)
        assert [l for l in added if '".format(' in l] == [], os.path.basename(patch)


# ------------------------------------------------------------------------- on a patched copy of torch
def clean_env(root, torch_on_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SAC_FIX_CANDIDATE")}
    env.update(CUDA_VISIBLE_DEVICES="", TORCHINDUCTOR_CACHE_DIR=str(root / ("inductor-%s" % torch_on_path)))
    if torch_on_path:
        env["PYTHONPATH"] = str(root)
    where = subprocess.run([sys.executable, "-c", "import torch; print(torch.__file__)"], capture_output=True,
                           text=True, env=env, cwd=str(root / "test"), timeout=300)  # root itself holds torch/
    assert where.stdout.startswith(str(root) + os.sep) == torch_on_path, where.stdout  # the torch meant
    return env


def pytorch_tests(root, torch_on_path, label):
    """PyTorch's test file as it lies in root, run whole: {class.test: outcome}, a failure by other
    than an assertion named by its error ("failure (AttributeError)")."""
    test = root / "test" / "dynamo" / "test_activation_checkpointing.py"
    text = test.read_text(encoding="utf-8")
    if ITS_IMPORT in text:
        test.write_text(text.replace(ITS_IMPORT, ITS_IMPORT.replace("import ", "import requires_cuda_and_triton, ", 1)),
                        encoding="utf-8")
    env = clean_env(root, torch_on_path)
    xml = root / ("out-%s.xml" % label)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "--junitxml",
                           str(xml), str(test)], capture_output=True, text=True, env=env, cwd=str(root / "test"),
                          timeout=2400)
    assert xml.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    outcomes = {}
    for case in ET.parse(str(xml)).iter("testcase"):
        kinds = [c for c in case if c.tag in ("failure", "error", "skipped")]
        outcome = kinds[0].tag if kinds else "passed"
        error = (kinds[0].get("message") or "").split(":", 1)[0] if kinds else ""
        if outcome == "failure" and error != "AssertionError":
            outcome = "failure (%s)" % error
        outcomes[case.get("classname").rsplit(".", 1)[-1] + "." + case.get("name")] = outcome
    return outcomes


@pytest.mark.release  # a copy of torch, and PyTorch's test file run whole three times: several minutes
def test_on_the_patched_torch_pytorchs_sac_tests_keep_their_outcomes_and_the_series_tests_pass(tmp_path):
    root = tree(tmp_path, whole_torch=True)
    # unpatched: the pinned file with the regression block, as patch 0001's test hunks give it
    before = tree(tmp_path, whole_torch=False, name="before")
    apply_series(before, PATCHES[:1])
    shutil.copy(before / "test" / "dynamo" / "test_activation_checkpointing.py", root / "test" / "dynamo")
    unpatched = pytorch_tests(root, False, "unpatched")
    shutil.copy(PYTORCH_TEST, root / "test" / "dynamo")
    apply_series(root)
    patched = pytorch_tests(root, True, "patched")
    assert list(unpatched.values()).count("passed") >= 16, unpatched  # the file ran, not only failed to import
    ours = {t for t in patched if t.startswith(NEW_CLASSES)}
    # PyTorch's own tests, and the block's: as unpatched, but the op-policy test, an expected failure there
    assert unpatched[OP_POLICY] == "skipped" and patched[OP_POLICY] == "passed"
    block = {t: o for t, o in unpatched.items() if t.startswith(NEW_CLASSES[1]) and t != OP_POLICY}
    assert len(block) == 2 and set(block.values()) == {"passed"}, block
    assert {t: o for t, o in patched.items() if t not in ours} == \
        {t: o for t, o in unpatched.items() if not t.startswith(NEW_CLASSES)}
    assert {t: o for t, o in patched.items() if t in ours and o != "passed"} == {}
    assert len([t for t in ours if "SwitchTests" in t]) == 9 and len([t for t in ours if "Warning" in t]) == 4
    # the patched file on the unpatched torch: each test of what the series adds fails on what it
    # measures, none on a name the series adds (AttributeError); those that ask for no change pass
    missing = pytorch_tests(root, False, "series-tests-unpatched-torch")
    series = {t: o for t, o in missing.items() if t in ours and not t.startswith(NEW_CLASSES[1])}
    assert series == {t: "passed" if t.split(".")[1] in NO_CHANGE else "failure" for t in series}, series
    assert missing[OP_POLICY] == "failure"


CASES_PROBE = os.path.join(ROOT, "tests", "fix_cases.py")


def hard_cases(root, tmp_path, how, *options):
    """fix_cases.py's JSON for sac(compile(f)) in a child: how is "patched" (the copy's torch),
    "candidate" (the in-process candidate, fix mode) or "plain" (the torch as installed)."""
    env = clean_env(root, how == "patched")
    if how == "candidate":
        env.update(PYTHONPATH=CANDIDATE, SAC_FIX_CANDIDATE="fix")
    out = tmp_path / ("cases-%s-%s.json" % (how, "-".join(o.strip("-") for o in options)))
    proc = subprocess.run([sys.executable, CASES_PROBE, str(out), "--reported-only"] + list(options),
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=1800)
    assert proc.returncode == 0 and out.exists(), (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    result = json.loads(out.read_text())
    return {case: rows["sac(compile(f))"] for case, rows in result.items() if case not in ("torch", "label", "switch")}


WARNING = "the out= call that Inductor's compiled code makes"


@pytest.mark.release  # every hard case four times: about ten minutes on 2 cores
def test_on_the_patched_torch_the_hard_cases_are_the_candidates_with_the_switch_and_todays_without(tmp_path):
    root = tree(tmp_path, whole_torch=True)
    apply_series(root)
    switched, candidate = hard_cases(root, tmp_path, "patched", "--switch"), hard_cases(root, tmp_path, "candidate")
    # one implementation: every number, and every decline said, the same
    assert switched == candidate
    off, plain = hard_cases(root, tmp_path, "patched"), hard_cases(root, tmp_path, "plain")
    # the switch off: today's numbers; what is said is the warning of patch 0001 alone
    assert {c: r["got"] for c, r in off.items()} == {c: r["got"] for c, r in plain.items()}
    assert all(all(WARNING in m for m in r["said"]) for r in off.values()), off
    assert all(r["said"] == [] for r in plain.values()), plain
