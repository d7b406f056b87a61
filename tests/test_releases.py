"""The release tier: real PyPI releases, each in a cached virtual environment of its own
(several GB each, downloaded on first use). Run with `pytest --release`."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run, run_json

pytestmark = pytest.mark.release
BISECT = ROOT + "/sac_repro/bisecting/bisect_torch.py"


def test_torch_without_the_sac_api_cannot_be_tested(release_python):
    rc, stdout, _ = run(release_python("2.4.1"), "--device", "cpu")
    assert rc == 125, stdout
    assert "lacks the public SAC API" in stdout and "CheckpointPolicy" in stdout


def test_affected_release_reproduces(release_python, tmp_path):
    rc, report, stdout, _ = run_json(release_python("2.9.1"), tmp_path, "--device", "cpu")
    assert rc == 1, stdout
    assert report["verdict"] == "reproduced" and report["torch_version"].startswith("2.9.1")
    assert report["scenarios"]["without_context"]["calls"] == ["compiled"] * 3
    case = report["scenarios"]["with_context"]
    assert case["calls"] == ["eager"] * 3 and case["kernels"] == []
    assert set(case["eager_pointwise"]) == {"aten::mul", "aten::add"}
    assert "3 of 3 calls under SAC ran eagerly" in report["reason"]
    # the skip sticks to f's code object: after one SAC call, f_compiled runs eagerly everywhere
    assert report["scenarios"]["without_context_after_sac"]["calls"] == ["eager"] * 3
    assert report["scenarios"]["workaround"]["calls"] == ["compiled"] * 3
    # run eagerly, f's ops reach the policy as themselves: aten.mm.default is saved
    seen = {op: d for op, d, _ in report["policy"]["ops_seen"]["with_context"]}
    assert seen["aten.mm.default"] == "MUST_SAVE"
    # Dynamo's own reason, logged at debug level, which the child turns on for its logger alone
    assert ("dynamo (the report's loops): skipping: f (reason: non-infra torch dispatch mode present, "
            "this is not supported today in torch.compile)") in stdout.splitlines(), stdout
    assert "hint:" not in stdout and not report["torch_changes"]


def test_affected_release_markdown_names_the_torch(release_python):
    rc, stdout, _ = run(release_python("2.9.1"), "--device", "cpu", "--markdown")
    assert rc == 1
    assert "torch 2.9.1" in stdout and "- **Actual:** 3 of 3 calls under SAC ran eagerly (no compiled code, eager aten::add, aten::mul)" in stdout
    assert "**This run reproduces pytorch/pytorch#161889**" in stdout.splitlines()[6]
    assert "Dynamo said `skipping: f (reason: non-infra torch dispatch mode present" in stdout
    # the ablation: Dynamo skips f under SAC whatever the backend (#161889 is Dynamo's)
    assert "(what the template asks): Dynamo: it skipped f under SAC whatever the backend" in stdout


def test_release_search_finds_the_fix_in_2_10_0():
    proc = subprocess.run([sys.executable, BISECT, "releases", "2.8.0", "2.12.0"],
                          capture_output=True, text=True, timeout=3600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "first release whose verdict differs from 2.8.0 (reproduced): 2.10.0 (not_reproduced)" in out
    assert re.search(r"torch 2\.9\.1 +reproduced", out), out  # the release just before the fix was tested too




def test_matrix_gives_each_release_its_verdict():
    proc = subprocess.run([sys.executable, BISECT, "matrix", "2.4.1", "2.9.1", "2.12.0", "--markdown"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 125, proc.stdout + proc.stderr  # 2.4.1 could not be judged
    lines = [l for l in proc.stdout.splitlines() if l.startswith("torch ")]
    assert [l.split()[1:3] for l in lines] == [["2.4.1", "cannot_test"], ["2.9.1", "reproduced"],
                                               ["2.12.0", "not_reproduced"]]
    assert lines[2].endswith("policy ignored under with_context")
    table = proc.stdout[proc.stdout.index("| torch | git | verdict | exit | evidence |"):].splitlines()
    assert [row.split(" | ")[2] for row in table[2:5]] == ["`cannot_test`", "`reproduced`", "`not_reproduced`"]
