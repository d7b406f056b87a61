"""The script's verdict and exit codes, on real torch builds, on the CPU."""
import sys
import textwrap

import pytest

from conftest import run, run_json

import torch_compile_selective_activation_checkpoint as repro

REQUIRED_KEYS = {"verdict", "exit_code", "torch_version", "torch_git_version", "device",
                 "scenarios", "policy"}


def torch_version_of(python):
    import subprocess
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory):
    """The default torch of this environment; the bundle pins a fixed release (2.13.0) for it."""
    version = torch_version_of(sys.executable)
    major_minor = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    assert major_minor >= (2, 10), "the test environment must hold a fixed torch (>= 2.10), has %s" % version
    return run_json(sys.executable, tmp_path_factory.mktemp("fixed"), "--device", "cpu")


def test_fixed_torch_runs_compiled_code_under_sac(fixed_run):
    rc, report, stdout, _ = fixed_run
    assert rc == 0, stdout
    assert report["verdict"] == "not_reproduced" and report["exit_code"] == 0
    assert REQUIRED_KEYS <= set(report)
    for name in ("without_context", "with_context", "workaround"):
        s = report["scenarios"][name]
        assert s["compiled_region_ran"] is True, name
        # Inductor's C++ kernel for f's fused 3*x+1 / 2*y+1 ran, and no eager mul/add did
        assert any(k.endswith("cpp_fused_add_mul_0") for k in s["kernels"]), s["kernels"]
        assert s["eager_pointwise"] == {}
    assert "VERDICT: not_reproduced (exit 0)" in stdout


def test_fixed_torch_ignores_the_policy_under_sac_of_compile(fixed_run):
    """The fix's open end: the report's policy sees no aten.mm.default inside the compiled
    region, so backward runs the forward matmul again; the workaround saves it."""
    _, report, stdout, _ = fixed_run
    policy = report["policy"]
    assert policy["trusted"] is True, policy
    assert policy["with_context_matmul_recomputed_in_backward"] is True
    assert policy["workaround_matmul_recomputed_in_backward"] is False
    assert policy["backward_matmuls"]["with_context"] == policy["baseline"] + 1
    assert "with_context 3 -> RECOMPUTED (policy ignored); workaround 2 -> saved" in stdout


def test_affected_release_reproduces(release_python, tmp_path):
    rc, report, stdout, _ = run_json(release_python("2.9.1"), tmp_path, "--device", "cpu")
    assert rc == 1, stdout
    assert report["verdict"] == "reproduced" and report["torch_version"].startswith("2.9.1")
    assert report["scenarios"]["without_context"]["compiled_region_ran"] is True
    case = report["scenarios"]["with_context"]
    assert case["compiled_region_ran"] is False and case["kernels"] == []
    assert set(case["eager_pointwise"]) == {"aten::mul", "aten::add"}
    # the skip sticks to f's code object: after one SAC call, f_compiled runs eagerly everywhere
    assert report["scenarios"]["without_context_after_sac"]["compiled_region_ran"] is False
    assert report["scenarios"]["workaround"]["compiled_region_ran"] is True
    assert "TORCH_LOGS=+dynamo" in stdout


def test_affected_release_hunting_the_fix_swaps_exit_codes(release_python):
    rc, stdout, _ = run(release_python("2.9.1"), "--device", "cpu", "--hunt-fix")
    assert rc == 0 and "VERDICT: reproduced (exit 0)" in stdout


def test_fixed_torch_hunting_the_fix_exits_1():
    rc, stdout, _ = run(sys.executable, "--device", "cpu", "--hunt-fix")
    assert rc == 1 and "VERDICT: not_reproduced (exit 1)" in stdout


def test_strict_policy_counts_the_ignored_policy_as_reproduced():
    rc, stdout, _ = run(sys.executable, "--device", "cpu", "--strict-policy")
    assert rc == 1, stdout
    assert "VERDICT: reproduced (exit 1): --strict-policy" in stdout


def test_torch_without_the_sac_api_cannot_be_tested(release_python):
    rc, stdout, _ = run(release_python("2.4.1"), "--device", "cpu")
    assert rc == 125, stdout
    assert "lacks the public SAC API" in stdout and "CheckpointPolicy" in stdout


def test_missing_cuda_device_cannot_be_tested():
    rc, stdout, _ = run(sys.executable, "--device", "cuda")
    assert rc == 125
    assert "sees no CUDA device" in stdout


def write_sitecustomize(tmp_path, body):
    """Code that runs in the measured child only: stands in for a torch that crashes or hangs."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys
        if "--_child" in sys.argv:
        """) + textwrap.indent(textwrap.dedent(body), "    "))
    return {"PYTHONPATH": str(tmp_path)}


def test_child_killed_by_a_signal_cannot_be_tested(tmp_path):
    env = write_sitecustomize(tmp_path, """
        import os, signal
        os.kill(os.getpid(), signal.SIGSEGV)
        """)
    rc, stdout, _ = run(sys.executable, "--device", "cpu", env=env)
    assert rc == 125, stdout
    assert "crashed: killed by SIGSEGV" in stdout


def test_hung_child_times_out_as_cannot_test(tmp_path):
    env = write_sitecustomize(tmp_path, """
        import time
        time.sleep(600)
        """)
    rc, stdout, _ = run(sys.executable, "--device", "cpu", "--timeout", "3", env=env, timeout=120)
    assert rc == 125, stdout
    assert "hung" in stdout


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--device", "gpu"], "invalid choice: 'gpu'"),
    (["--timeout", "0"], "must be > 0"),
    (["--json", "/nonexistent-dir/report.json"], "does not exist or is not writable"),
    (["--from-nsys", "/nonexistent.nsys-rep"], "report file not found"),
])
def test_usage_errors_abort_a_bisect(args, message):
    rc, stdout, stderr = run(sys.executable, *args)
    assert rc >= 128 and rc != 125, (rc, stdout, stderr)
    assert stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and message in stderr


def test_a_bug_in_this_script_aborts_with_one_line(monkeypatch, capsys, tmp_path):
    csv = tmp_path / "k.csv"
    csv.write_text("NVTX Range,Kern Inst,Kernel Name\nf_compiled_with_context 0,1,triton_poi_fused_add_mul_0\n")

    def broken(rows):
        return {}["no such key"]
    monkeypatch.setattr(repro, "loop_evidence", broken)
    rc = repro.main(["--from-nsys", str(csv)])
    err = capsys.readouterr().err
    assert rc == repro.EXIT_ABORT
    assert len(err.strip().splitlines()) == 1 and "internal error" in err


def test_errors_are_told_apart_by_where_they_were_raised():
    import torch
    with pytest.raises(TypeError) as ours:
        repro.classify_kernel(None)  # a bug here: never entered torch
    assert repro.raised_by_this_script(ours.value)
    with pytest.raises(RuntimeError) as theirs:
        torch.ones(2, 3) @ torch.ones(2, 3)  # torch's C++ failing
    assert not repro.raised_by_this_script(theirs.value)
    with pytest.raises(Exception) as inside:
        torch.compile(lambda t: t.no_such_method(), backend="eager", fullgraph=True)(torch.ones(1))
    assert not repro.raised_by_this_script(inside.value)  # raised while torch was compiling


def test_markdown_report_fits_the_bug_template():
    rc, stdout, _ = run(sys.executable, "--device", "cpu", "--markdown")
    assert rc == 0
    assert stdout.startswith("### ")
    assert "| scenario | compiled region ran |" in stdout
    assert "<details><summary>Environment</summary>" in stdout and "</details>" in stdout
    assert "**not_reproduced** (exit 0)" in stdout
    assert "PyTorch version:" in stdout  # python -m torch.utils.collect_env, as the template asks
