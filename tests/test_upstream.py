"""test_sac_compile_upstream.py, the regression tests written for PyTorch, run against real torch:
this environment's fixed torch 2.13, plainly and with the 2.10 fix reverted in-process (fast tier),
and PyPI's 2.9.1 and 2.12.0 (release tier)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

UPSTREAM = "test_sac_compile_upstream"
TESTS = {"compiled": "test_compiled_fn_runs_compiled_under_sac",
         "policy under sac(compile(f))": "test_sac_policy_applies_to_compiled_fn",
         "policy under compile(sac(f))": "test_sac_policy_applies_inside_compile"}
# Runs the file's tests with unittest in the Python under test and prints each outcome as JSON:
# the file's own output interleaves torch's warnings with unittest's lines.
RUNNER = """
import json, sys, unittest
sys.argv = sys.argv[:1]
import {module} as m
result = unittest.TestResult()
unittest.defaultTestLoader.loadTestsFromModule(m).run(result)
out = {{t.id().split(".")[-1]: ["fail", msg] for t, msg in result.failures + result.errors}}
out.update({{t.id().split(".")[-1]: ["skip", msg] for t, msg in result.skipped}})
print("OUTCOMES " + json.dumps({{"run": result.testsRun, "not_passed": out}}))
""".format(module=UPSTREAM)


def support_path(tmp_path):
    """expecttest and numpy, which PyTorch's test modules import, from this environment only:
    a folder with just those two, so that a release environment keeps its own torch."""
    import expecttest
    import numpy
    folder = tmp_path / "support"
    folder.mkdir()
    numpy_dir = os.path.dirname(numpy.__file__)
    for path in (os.path.dirname(expecttest.__file__), numpy_dir, numpy_dir + ".libs"):
        if os.path.exists(path):
            os.symlink(path, folder / os.path.basename(path))
    return str(folder)


def outcomes(python, tmp_path, extra_path=()):
    """{test: 'pass' | ('fail', message) | ('skip', reason)} for the CPU tests, run in `python`."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tools"), support_path(tmp_path)] + list(extra_path)))
    proc = subprocess.run([python, "-c", RUNNER], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("OUTCOMES ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    got = json.loads(line[len("OUTCOMES "):])
    assert got["run"] == 3, got
    result = {}
    for short, name in TESTS.items():
        kind = got["not_passed"].get(name + "_cpu")
        result[short] = "pass" if kind is None else (kind[0], kind[1])
    return result


def reverted_fix(tmp_path):
    """A sitecustomize.py that reverts the 2.10 fix in-process: SAC's dispatch modes stop opting
    in with ignore_compile_internals(), as they were on 2.5-2.9."""
    folder = tmp_path / "revert"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import torch.utils.checkpoint as _cp\n"
        "for _mode in (_cp._CachingTorchDispatchMode, _cp._CachedTorchDispatchMode):\n"
        "    _mode.ignore_compile_internals = classmethod(lambda cls: False)\n")
    return str(folder)


def test_on_the_fixed_torch_only_the_policy_under_sac_of_compile_fails(tmp_path):
    got = outcomes(sys.executable, tmp_path)
    assert got["compiled"] == "pass"
    assert got["policy under compile(sac(f))"] == "pass"
    kind, message = got["policy under sac(compile(f))"]
    assert kind == "fail", message
    assert "backward computed 3 matmuls, against 2 where the forward matmul is saved" in message
    assert "asked about aten.mm.out -> PREFER_RECOMPUTE, never aten.mm.default" in message


def test_with_the_fix_reverted_the_compiled_f_runs_eagerly_under_sac(tmp_path):
    got = outcomes(sys.executable, tmp_path, [reverted_fix(tmp_path)])
    kind, message = got["compiled"]
    assert kind == "fail", message
    assert "3 of 3 calls under SAC ran eagerly" in message and "aten.mm.default -> MUST_SAVE" in message
    assert got["policy under sac(compile(f))"][0] == "skip"
    assert got["policy under compile(sac(f))"] == "pass"


@pytest.mark.release
def test_on_2_9_1_the_compiled_f_runs_eagerly_under_sac(release_python, tmp_path):
    got = outcomes(release_python("2.9.1"), tmp_path)
    assert got["compiled"][0] == "fail" and "3 of 3 calls under SAC ran eagerly" in got["compiled"][1]
    assert got["policy under sac(compile(f))"][0] == "skip"
    assert got["policy under compile(sac(f))"] == "pass"


@pytest.mark.release
def test_on_2_12_0_the_compiled_f_runs_compiled_under_sac(release_python, tmp_path):
    got = outcomes(release_python("2.12.0"), tmp_path)
    assert got["compiled"] == "pass"
    assert got["policy under sac(compile(f))"][0] == "fail"
    assert got["policy under compile(sac(f))"] == "pass"
