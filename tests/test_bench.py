"""bench_sac_compile.py's smoke mode: every arrangement runs and matches eager, on one device and
sharded with FSDP2 over two gloo processes."""
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys

import pytest

from conftest import data, one_line_error, ROOT

BENCH = os.path.join(ROOT, "sac_repro", "bench", "bench_sac_compile.py")
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


@pytest.mark.release
def test_bench_smoke_runs_every_arrangement(tmp_path):
    """Also its --json (the policy report's cost) and its --plot, drawn from that same table. It
    compiles six arrangements, forward and backward: most of a minute from an empty Inductor
    cache, hence the release tier."""
    args = ["--json", str(tmp_path / "bench.json")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    if has_matplotlib:
        args += ["--plot", str(tmp_path / "bench.png")]
    proc = subprocess.run([sys.executable, BENCH, "--device", "cpu", "--small"] + args,
                          capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    check(proc)
    table = json.loads((tmp_path / "bench.json").read_text())
    assert table["changes"] == [] and "torch changed in-process" not in proc.stdout
    assert list(table["rows"]) == list(ARRANGEMENTS) and table["baseline"] == "compile(sac(block)) [workaround]"
    printed = {l[:55].strip(): l.split() for l in proc.stdout.splitlines() if l[:55].strip() in ARRANGEMENTS}
    for name, row in table["rows"].items():
        assert "%.3f" % row["median"] == printed[name][-6]
        assert printed[name][-1] == ("-" if row["bwd_mm"] is None else str(row["bwd_mm"]))
    if has_matplotlib:
        from sac_repro.judge import plot
        assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG")
        assert plot.bench_series(table) == [(n, r["median"], r["mem"], r["bwd_mm"]) for n, r in table["rows"].items()]


@pytest.mark.release  # a whole bench run, as the bench's smoke tests
def test_bench_with_the_fix_reverted_names_it(tmp_path):
    """With the fix reverted in-process the bench says so. From 2.12 its fullgraph=True
    sac(compile(block)) raises Dynamo's error instead of running eagerly: nothing to time (125),
    said in one line with Dynamo's reason; before 2.12 the whole table names the change."""
    import torch
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "sac_repro", "revert_fix"))
    proc = subprocess.run([sys.executable, BENCH, "--device", "cpu", "--small", "--json", str(tmp_path / "b.json")],
                          capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    said = "the 2.10 fix reverted in-process (sac_repro/revert_fix/sitecustomize.py)"
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 12):
        assert proc.returncode == 125, proc.stdout + proc.stderr
        assert proc.stderr.splitlines()[-1] == (
            "cannot_test: sac(compile(block)) [reported] cannot run compiled on torch %s (changed: %s): Dynamo "
            "refused it under fullgraph=True, skipping forward (reason: non-infra torch dispatch mode present, this "
            "is not supported today in torch.compile); nothing to time" % (torch.__version__, said))
        assert not (tmp_path / "b.json").exists()
    else:
        check(proc)
        assert "torch changed in-process: " + said in proc.stdout.splitlines()
        assert [c["label"] for c in json.loads((tmp_path / "b.json").read_text())["changes"]] == [
            "the 2.10 fix reverted in-process"]


@pytest.mark.release
def test_fsdp_smoke_runs_every_arrangement_on_two_processes():
    """The same on two processes: both cores for most of a minute from an empty Inductor cache."""
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           BENCH, "--fsdp", "--device", "cpu", "--small"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(proc)
    assert "FSDP2: fully_shard per block and at the root" in proc.stdout
    assert "2 x cpu" in proc.stdout
    # --small: 2 blocks and the root; each of the 2 ranks holds half of 2 * (64 + 2 * 64 * 256)
    assert "FSDP2 layout: 3 fully_shard units, rank 0 holds 32832 of 65664 parameters" in proc.stdout


# ------------------------------------------------------------- the bench's command line and exits
def bench(monkeypatch, *args):
    """The bench's command line in this process: (exit code, stdout, stderr). Exiting through
    SystemExit is how a script would have exited; a message instead of a code exits 1."""
    from sac_repro.bench import bench_sac_compile
    monkeypatch.setattr(sys, "argv", [BENCH] + [str(a) for a in args])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = bench_sac_compile.main()
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def no_work(monkeypatch):
    """The first thing the bench makes is its weights, from a torch.Generator: reaching it means
    the bench started measuring."""
    import torch
    from sac_repro.bench import bench as measured  # noqa: F401  (imported whole before torch is patched)
    monkeypatch.setattr(torch, "Generator", lambda *a: pytest.fail("the bench started measuring"))


def test_the_bench_on_a_machine_without_cuda_cannot_test(monkeypatch, no_work):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, stdout, stderr = bench(monkeypatch, "--device", "cuda")
    assert rc == 125 and stdout == "", (rc, stdout, stderr)
    assert len(stderr.strip().splitlines()) == 1 and "no CUDA device" in stderr


def test_fsdp_without_torchrun_is_a_usage_error(monkeypatch, no_work):
    monkeypatch.delenv("RANK", raising=False)
    rc, stdout, stderr = bench(monkeypatch, "--fsdp", "--device", "cpu", "--small")
    one_line_error(rc, stdout, stderr, "--fsdp", "torchrun")


@pytest.mark.parametrize("raise_it, rc, says", [
    (lambda torch: {}["a bug"], 128, "internal error (a bug in bench_sac_compile.py, not a verdict): KeyError"),
    (lambda torch: torch.ones(2, 3) @ torch.ones(2, 3), 125, "the torch under test raised RuntimeError"),
], ids=["ours", "torchs"])
def test_an_error_in_the_bench_is_told_apart_by_where_it_was_raised(monkeypatch, raise_it, rc, says):
    import torch
    from sac_repro.bench import bench as measured  # noqa: F401  (imported whole before torch is patched)
    monkeypatch.setattr(torch, "Generator", lambda *a: raise_it(torch))
    got, _, stderr = bench(monkeypatch, "--device", "cpu", "--small")
    assert got == rc, stderr
    assert len(stderr.strip().splitlines()) == 1 and says in stderr


def test_an_arrangement_that_differs_from_eager_cannot_be_measured(monkeypatch):
    from sac_repro.bench import bench as measured
    monkeypatch.setattr(measured, "max_rel_err", lambda got, ref: 1.0)
    rc, stdout, stderr = bench(monkeypatch, "--device", "cpu", "--small")
    assert rc == 125, (stdout, stderr)
    assert "correctness eager " in stdout and "FAIL" in stdout
    assert len(stderr.strip().splitlines()) == 1 and "differs from eager" in stderr


@pytest.mark.parametrize("args, says", [
    (["--json", "/nonexistent/b.json"], "--json /nonexistent/b.json: folder /nonexistent does not exist"),
    (["--json", ""], "--json was given an empty path"),
    (["--plot", "b.pdf"], "name a .png or .svg file"),
    (["--tolerance", "nan"], "must be a finite number > 0"),
    (["--iters", "many"], "not a whole number: 'many'"),
    (["--iters", "0"], "--iters: must be 1 or more, got '0'"),
    (["--hidden", "-64"], "--hidden: must be 1 or more"),
    (["--warmup", "-1"], "--warmup: must be 0 or more"),
])
def test_bench_usage_errors_come_before_any_work(monkeypatch, no_work, args, says):
    rc, stdout, stderr = bench(monkeypatch, "--device", "cpu", "--small", *args)
    one_line_error(rc, stdout, stderr, "usage error", says)


def test_the_bench_never_writes_over_itself_or_one_output_over_the_other(monkeypatch, no_work, kept, tmp_path):
    pytest.importorskip("matplotlib")
    kept(BENCH)
    rc, stdout, stderr = bench(monkeypatch, "--device", "cpu", "--small", "--json", BENCH)
    one_line_error(rc, stdout, stderr, "--json %s is sac_repro/bench/bench_sac_compile.py, a file of this bundle" % BENCH)
    both = tmp_path / "b.png"
    rc, stdout, stderr = bench(monkeypatch, "--device", "cpu", "--small", "--json", both, "--plot", both)
    one_line_error(rc, stdout, stderr, "--plot %s is --json %s" % (both, both))


def test_the_bench_help_states_its_exit_codes(monkeypatch):
    from sac_repro import exits
    rc, stdout, _ = bench(monkeypatch, "--help")
    assert rc == 0
    for code, name, meaning in exits.BENCH_CODES:
        assert "  %-4d %-15s %s" % (code, name, meaning.split()[0]) in stdout


@pytest.mark.parametrize("flags", [["-I"], ["-I", "-S"]], ids=["isolated", "isolated-no-site"])
def test_the_bench_finds_its_package_in_isolated_mode(tmp_path, flags):
    """-I drops the script's folder and PYTHONPATH from sys.path; -S also drops site-packages,
    as for a torch that only PYTHONPATH or the user's site made importable."""
    proc = subprocess.run([sys.executable] + flags + [BENCH, "--help"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "exit codes" in proc.stdout, proc.stderr


def test_the_bench_without_an_importable_torch_cannot_test(tmp_path):
    proc = subprocess.run([sys.executable, "-I", "-S", BENCH, "--device", "cpu", "--small"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 125 and proc.stdout == "", proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "torch failed to import" in proc.stderr


@pytest.mark.parametrize("option, name", [("json", "b.json"), ("plot", "b.png")])
def test_a_bench_output_that_fails_midway_leaves_the_old_file(tmp_path, option, name):
    """The table of the recorded H200 run, written as the bench writes it, by a process whose files
    may not grow past 500 bytes (as on a full disk): the write fails midway."""
    import resource
    if option == "plot":
        pytest.importorskip("matplotlib")
    out = tmp_path / name
    out.write_bytes(b"the old table\n")
    code = ("import argparse, json, sys; sys.path.insert(0, sys.argv[1]); import bench_sac_compile as b; "
            "args = argparse.Namespace(**dict({'json': None, 'plot': None}, **{sys.argv[3]: sys.argv[4]})); "
            "sys.exit(b.exits.guarded(lambda: b.write_outputs(json.load(open(sys.argv[2])), args), 'the test'))")
    proc = subprocess.run([sys.executable, "-c", code, os.path.dirname(BENCH), data("h200-torch2.11", "bench.json"),
                           option, str(out)], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (500, resource.RLIM_INFINITY)))
    assert proc.returncode == 128 and "cannot" in proc.stderr and "--" + option in proc.stderr, proc.stderr
    assert out.read_bytes() == b"the old table\n" and os.listdir(tmp_path) == [name]


def test_the_bench_builds_the_arrangements_of_the_one_table_and_the_recorded_table_names_them():
    from sac_repro.bench import bench
    from sac_repro.judge import verdict
    assert list(bench.arrangements()) == list(verdict.ARRANGEMENTS)
    recorded = json.load(open(data("h200-torch2.11", "bench.json")))
    assert set(recorded["rows"]) <= set(verdict.ARRANGEMENTS) and recorded["baseline"] == verdict.B_WORKAROUND


def test_the_bench_into_a_closed_pipe_is_not_the_torchs_failure():
    """Its own lines written to a pipe whose reader is gone: the BrokenPipeError came out of the
    measurement, and was read as the torch's (125, 'the torch under test raised'); output not
    delivered is 128."""
    proc = subprocess.run("%s %s --device cpu --small | head -c 0; exit ${PIPESTATUS[0]}" % (sys.executable, BENCH),
                          shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 and "torch under test" not in proc.stderr, proc.stderr
