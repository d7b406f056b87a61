"""bench_sac_compile.py's smoke mode: every arrangement runs and matches eager's gradients."""
import os
import subprocess
import sys

from conftest import ROOT


def test_bench_smoke_runs_every_arrangement():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench_sac_compile.py"), "--device", "cpu", "--small"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("eager", "eager SAC", "compiled, no checkpoint", "sac(compile(block)) [reported]",
                 "compile(sac(block)) [workaround]"):
        assert "correctness %s" % name in proc.stdout
    assert "FAIL" not in proc.stdout
    assert "not a measurement" in proc.stdout
