"""bench_sac_compile.py's smoke mode: every arrangement runs and matches eager, on one device and
sharded with FSDP2 over two gloo processes."""
import importlib.util
import json
import os
import subprocess
import sys

from conftest import ROOT

BENCH = os.path.join(ROOT, "tools", "bench_sac_compile.py")
ARRANGEMENTS = ("eager", "eager SAC", "compiled, no checkpoint", "sac(compile(block)) [reported]",
                "compile(sac(block)) [workaround]", "sac(compile(block, wrap_inductor_compiled_regions))")


def check(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for name in ARRANGEMENTS:
        assert "correctness %s " % name in proc.stdout
        assert "\n%s " % name in proc.stdout  # a row of the table
    assert "FAIL" not in proc.stdout
    assert "not a measurement" in proc.stdout
    rows = {l[:55].strip(): l.split() for l in proc.stdout.splitlines() if l[:55].strip() in ARRANGEMENTS}
    # matmuls in one backward, counted inside compiled code on the CPU: the reported pattern runs
    # the forward's again, the workaround does not
    assert int(rows["sac(compile(block)) [reported]"][-1]) > int(rows["compile(sac(block)) [workaround]"][-1])


def test_bench_smoke_runs_every_arrangement(tmp_path):
    """Also its --json (the policy report's cost) and its --plot, drawn from that same table."""
    args = ["--json", str(tmp_path / "bench.json")]
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    if has_matplotlib:
        args += ["--plot", str(tmp_path / "bench.png")]
    proc = subprocess.run([sys.executable, BENCH, "--device", "cpu", "--small"] + args,
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    check(proc)
    table = json.loads((tmp_path / "bench.json").read_text())
    assert list(table["rows"]) == list(ARRANGEMENTS) and table["baseline"] == "compile(sac(block)) [workaround]"
    printed = {l[:55].strip(): l.split() for l in proc.stdout.splitlines() if l[:55].strip() in ARRANGEMENTS}
    for name, row in table["rows"].items():
        assert "%.3f" % row["median"] == printed[name][-6]
        assert printed[name][-1] == ("-" if row["bwd_mm"] is None else str(row["bwd_mm"]))
    if has_matplotlib:
        from sac_repro import plot
        assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG")
        assert plot.bench_series(table) == [(n, r["median"], r["mem"], r["bwd_mm"]) for n, r in table["rows"].items()]


def test_fsdp_smoke_runs_every_arrangement_on_two_processes():
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           BENCH, "--fsdp", "--device", "cpu", "--small"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(proc)
    assert "FSDP2: fully_shard per block and at the root" in proc.stdout
    assert "2 x cpu" in proc.stdout
    # --small: 2 blocks and the root; each of the 2 ranks holds half of 2 * (64 + 2 * 64 * 256)
    assert "FSDP2 layout: 3 fully_shard units, rank 0 holds 32832 of 65664 parameters" in proc.stdout
