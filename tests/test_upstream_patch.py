"""sac_repro/upstream/warn_policy_sees_compiled_calls.patch, the warning as PyTorch could take it:
it applies with `patch -p1` to a copy of this environment's torch (2.13) and of PyTorch's
test/dynamo/test_activation_checkpointing.py (tests/data/pytorch-0069a418), and its tests pass on
the patched torch, where the unpatched one fails the one that asks for the warning."""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT

PATCH = os.path.join(ROOT, "sac_repro", "upstream", "warn_policy_sees_compiled_calls.patch")
PYTORCH_TEST = os.path.join(ROOT, "tests", "data", "pytorch-0069a418", "test_activation_checkpointing.py")
# As read at that commit the file uses requires_cuda_and_triton without importing it (its README)
ITS_IMPORT = "from torch.testing._internal.triton_utils import requires_gpu_and_triton\n"
TESTS = "SelectiveCheckpointCompiledRegionWarningTests"

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1) on this machine")


def torch_folder():
    out = subprocess.run([sys.executable, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def tree(tmp_path, whole_torch):
    """A folder holding torch/ (the three patched files only, or the whole package, hard-linked
    where it can be: patch(1) writes a new file, so the installed one is never touched) and
    test/dynamo/test_activation_checkpointing.py."""
    root = tmp_path / "pytorch"
    (root / "test" / "dynamo").mkdir(parents=True)
    shutil.copy(PYTORCH_TEST, root / "test" / "dynamo")
    src = torch_folder()
    if whole_torch:
        if subprocess.run(["cp", "-al", src, str(root / "torch")], capture_output=True).returncode != 0:
            shutil.rmtree(root / "torch", ignore_errors=True)
            shutil.copytree(src, root / "torch", symlinks=True)
    else:
        for rel in ("utils/checkpoint.py", "_inductor/output_code.py"):
            os.makedirs(root / "torch" / os.path.dirname(rel), exist_ok=True)
            shutil.copy(os.path.join(src, rel), root / "torch" / rel)
    return root


def apply(root, *extra):
    return subprocess.run(["patch", "-p1", "--forward", "--batch", *extra, "-i", PATCH], cwd=str(root),
                          capture_output=True, text=True, timeout=120)


def test_the_patch_applies_cleanly_to_this_torchs_files(tmp_path):
    root = tree(tmp_path, whole_torch=False)
    proc = apply(root, "--dry-run")
    assert proc.returncode == 0 and "FAILED" not in proc.stdout and "offset" not in proc.stdout \
        and "fuzz" not in proc.stdout, proc.stdout + proc.stderr


def run_warning_tests(root, torch_on_path):
    test = root / "test" / "dynamo" / "test_activation_checkpointing.py"
    text = test.read_text(encoding="utf-8")
    test.write_text(text.replace(ITS_IMPORT, ITS_IMPORT.replace("import ", "import requires_cuda_and_triton, ", 1)),
                    encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SAC_FIX_CANDIDATE")}
    env.update(CUDA_VISIBLE_DEVICES="", TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"))
    if torch_on_path:
        env["PYTHONPATH"] = str(root)
    where = subprocess.run([sys.executable, "-c", "import torch; print(torch.__file__)"], capture_output=True,
                           text=True, env=env, cwd=str(root / "test"), timeout=300)
    assert where.stdout.startswith(str(root) + os.sep) == torch_on_path, where.stdout  # the torch meant
    xml = root / ("out-%s.xml" % torch_on_path)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "--junitxml",
                           str(xml), "-k", TESTS, str(test)], capture_output=True, text=True, env=env,
                          cwd=str(root / "test"), timeout=1200)
    assert xml.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    outcomes = {}
    for case in ET.parse(str(xml)).iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = kinds[0] if kinds else "passed"
    return outcomes, proc.stdout


@pytest.mark.release  # a copy of torch, and PyTorch's test file imported twice: about two minutes
def test_the_patchs_tests_pass_on_the_patched_torch_and_ask_for_what_it_adds(tmp_path):
    root = tree(tmp_path, whole_torch=True)
    proc = apply(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    patched, out = run_warning_tests(root, torch_on_path=True)
    assert patched == {"test_sac_of_inductor_compiled_fn_warns_once": "passed",
                       "test_no_warning_where_the_policy_is_honoured": "passed",
                       "test_no_warning_for_a_fallback_op_that_sac_caches": "passed",
                       "test_no_warning_with_wrap_inductor_compiled_regions": "passed"}, out[-3000:]
    # the same tests on the torch as installed: the one that asks for the warning fails
    unpatched, _ = run_warning_tests(root, torch_on_path=False)
    assert unpatched["test_sac_of_inductor_compiled_fn_warns_once"] == "failure", unpatched
