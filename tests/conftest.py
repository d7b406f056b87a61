"""Shared helpers: run the repro script as a user would, and cached torch environments.
The fast tier runs by default; `pytest --release` runs the release tier (real PyPI releases)."""
import contextlib
import io
import json
import os
import shutil
import stat
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "torch_compile_selective_activation_checkpoint.py")
JUDGED = os.path.join(ROOT, "sac_repro")  # the judged run, `python3 -m sac_repro`, called by path
DATA = os.path.join(ROOT, "tests", "data")
sys.path.insert(0, ROOT)
from sac_repro.exits import HANDLED_SIGNALS  # noqa: E402
# Recorded files, not tests: PyTorch's import header there is named like a test module, and
# collecting it would import torch into every run, the torch-free unit subset included
collect_ignore = ["data"]
# pytest started as a background job by a shell without job control (`cmd &` in a script, nohup)
# inherits SIGINT and SIGQUIT ignored, and so would every process a test starts; the bundle keeps
# an inherited ignore on purpose, so the signal tests would send signals that nothing hears. The
# tests start from what an interactive shell gives.
for _sig, _handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL)):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _handler)



def run(python, *args, env=None, timeout=900):
    """The judged run; returns (exit code, stdout, stderr)."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run([python, JUDGED] + list(args), capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """An entry point run in this process (cli.main, bisect_torch.main) installs its signal
    handlers; the test process gets its own back afterwards."""
    handlers = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    yield
    for s, h in handlers.items():
        signal.signal(s, h)


def judge(*args):
    """The judged run's command line in this process (fast, and visible to a mutation tool):
    (exit code, stdout, stderr). For what needs no torch: reading captures, usage errors."""
    from sac_repro.judge import cli
    handlers = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(SCRIPT, [str(a) for a in args])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def kept():
    """Files that a refused output must leave alone: put back as they were, whatever the test
    saw, so that a check that is missing fails the test without damaging the bundle."""
    saved = {}

    def keep(path):
        saved[path] = open(path, "rb").read()
        return path
    yield keep
    for path, content in saved.items():
        if open(path, "rb").read() != content:
            with open(path, "wb") as fh:
                fh.write(content)


def run_json(python, tmp_path, *args, **kw):
    out = tmp_path / "report.json"
    rc, stdout, stderr = run(python, "--json", str(out), *args, **kw)
    assert out.exists(), "no JSON written; exit %d\n%s\n%s" % (rc, stdout, stderr)
    return rc, json.loads(out.read_text()), stdout, stderr


def shared_run(tmp_path_factory, name, command):
    """A run of the script made once for the whole session, pytest-xdist's workers included (they
    share the parent of their temp folders): the first worker runs it, the others wait and read it.
    `command` is a shell command run in the bundle's folder, `python` being this environment's, with
    {json} for its --json path: (exit code, JSON report, stdout, stderr)."""
    import fcntl
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else \
        tmp_path_factory.getbasetemp()
    with open(shared / (name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = shared / (name + ".json")
        if not cached.exists():
            out = tmp_path_factory.mktemp(name) / "report.json"
            env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
            env.pop("PYTHONPATH", None)
            proc = subprocess.run(["bash", "-c", command.format(json=out)], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=900)
            assert out.exists(), "no JSON written; exit %d\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)
            cached.write_text(json.dumps([proc.returncode, json.loads(out.read_text()), proc.stdout, proc.stderr]))
        return json.loads(cached.read_text())


# As a user types them, in the bundle's folder: the markdown's Command must give them back.
FIXED_COMMAND = "python3 -m sac_repro --device cpu --markdown"
REVERTED_COMMAND = "PYTHONPATH=sac_repro/revert_fix " + FIXED_COMMAND


@pytest.fixture(scope="session")
def fixed_run(tmp_path_factory):
    """The torch of this environment (the test set-up pins a fixed release, 2.13.0), as shipped:
    (exit code, JSON report, its text as the script prints it, stderr, markdown)."""
    from sac_repro.judge import render
    rc, report, markdown, stderr = shared_run(tmp_path_factory, "fixed_run", FIXED_COMMAND + " --json {json}")
    assert tuple(int(v) for v in report["torch_version"].split(".")[:2]) >= (2, 10), report["torch_version"]
    return rc, report, render.render_text(report), stderr, markdown


@pytest.fixture(scope="session")
def reverted_run(tmp_path_factory):
    """The same torch with the 2.10 fix reverted in-process by sac_repro/revert_fix, as the README
    says to see the bug on a fixed torch: as fixed_run."""
    from sac_repro.judge import render
    rc, report, markdown, stderr = shared_run(tmp_path_factory, "reverted_run", REVERTED_COMMAND + " --json {json}")
    return rc, report, render.render_text(report), stderr, markdown


@pytest.fixture(scope="session")
def release_python():
    """Python of a cached virtual environment with one PyPI torch release (built on first use)."""
    from sac_repro.bisecting import builds, caches, envs

    def get(version):
        cache = caches.cache_dir(None)
        return envs.ensure_venv(builds.release_build(None, version, cache), cache, "auto", envs.needed_bytes())
    return get


@pytest.fixture(scope="session")
def matplotlib_config(tmp_path_factory):
    """An MPLCONFIGDIR whose font cache is built. A process that builds the cache says so on
    stderr, and fails to save it where its files may not grow (a full disk), so a test that wants
    only the bundle's own words gives matplotlib this one."""
    folder = tmp_path_factory.mktemp("matplotlib")
    env = dict(os.environ, MPLCONFIGDIR=str(folder))
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, check=True, capture_output=True)
    return {"MPLCONFIGDIR": str(folder)}


QUICK_VENV = """import os, shutil, sys
# `python -m venv PATH` as the bisect calls it, in a fraction of its time: a copy of one environment
# that the real venv made, with its own path written where venv writes it (pyvenv.cfg, bin/)
template = os.environ["QUICK_VENV_TEMPLATE"]
if len(sys.argv) != 2:
    sys.exit("the tests' quick venv takes one argument, a path; got %r" % sys.argv[1:])
target = os.path.abspath(sys.argv[1])
shutil.copytree(template, target, symlinks=True, dirs_exist_ok=True)  # as venv, into a folder that is there
for folder, names in ((target, ["pyvenv.cfg"]), (os.path.join(target, "bin"), os.listdir(os.path.join(target, "bin")))):
    for name in names:
        path = os.path.join(folder, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if template.encode() in data:
            with open(path, "wb") as fh:
                fh.write(data.replace(template.encode(), target.encode()))
"""


# In conftest.py, not in tests/wheels.py: a session fixture that two test modules import is made
# once per module.
@pytest.fixture(scope="session")
def quick_venv(tmp_path_factory):
    """{PYTHONPATH, QUICK_VENV_TEMPLATE} for a `venv` module that copies one environment that the
    real `python -m venv` made once per test process: the same files, in a tenth of a second instead
    of the seconds of ensurepip. For tests of the cache's plumbing; those of the environment itself,
    and the release tier, use the real venv."""
    root = tmp_path_factory.mktemp("quick-venv")
    template = root / "template"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "venv", str(template)], check=True, env=env)
    os.makedirs(root / "shim" / "venv")
    (root / "shim" / "venv" / "__init__.py").write_text("")
    (root / "shim" / "venv" / "__main__.py").write_text(QUICK_VENV)
    return {"PYTHONPATH": str(root / "shim"), "QUICK_VENV_TEMPLATE": str(template)}


def recorded(path):
    """A recorded child's (or capture run's) JSON, as read here: the recording machine's bundle
    folder, written `<repo>` in tests/data, is this checkout's."""
    with open(path) as fh:
        return json.loads(fh.read().replace("<repo>", ROOT))


def data(*parts):
    """Files recorded on real hardware (see tests/data/README.md)."""
    return os.path.join(DATA, *parts)


# Captures recorded on an H200 (torch 2.11, nsys 2023.4.4 and Nsight Compute 2025.3.1; tests/data/README.md)
FIXED_CSV = data("h200-torch2.11", "full_nvtx_kern_sum.csv")
FIXED_SQLITE = data("h200-torch2.11", "full_capture.sqlite")
REVERTED_CSV = data("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv")
REVERTED_SQLITE = data("h200-torch2.11-fix-reverted", "capture.sqlite")
NCU_FIXED = data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt")
NCU_REVERTED = data("h200-torch2.11-fix-reverted", "ncu_per_nvtx_run_nsys.txt")
# Kernel names as nsys printed them there: Inductor's, cuBLAS's, and the eager ATen kernels of f.
TRITON = ["triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_1"]
GEMM = ("void gemmSN_NN_kernel<float, (int)128, (int)2, (int)4, (int)8, (int)5, (int)4, (bool)0, "
        "cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, "
        "cublasGemvTensorStridedBatched<float>>(cublasGemmSmallNParams<T9, T10, T11, T1>)")
MUL = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, "
       "float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)")
ADD = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctorOnSelf_add<float>, "
       "std::array<char *, (unsigned long)2>>(int, T2, T3)")


def one_line_error(rc, stdout, stderr, *words):
    assert rc == 128, (rc, stdout, stderr)
    assert stdout == "", stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ----------------------------------------------------------- .nsys-rep through nsys stats
FAKE_NSYS = """#!/bin/sh
if [ "$1" = export ]; then  # nsys export --type sqlite --force-overwrite true -o OUT REPORT
  [ "$2 $3 $4 $5 $6" = "--type sqlite --force-overwrite true -o" ] || exit 3
  cp "$FAKE_NSYS_SQLITE" "$7"; exit 0
fi
[ "$1" = stats ] || exit 3
case "$FAKE_NSYS_MODE" in
  csv) cat "$FAKE_NSYS_CSV" ;;
  empty) ;;
  fail) echo "ERROR: cannot open the report" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "nsys"
    tool.write_text(FAKE_NSYS)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s%s%s" % (folder, os.pathsep, os.environ["PATH"]))
    report = tmp_path / "capture.nsys-rep"
    report.write_bytes(b"\x00binary nsys report\x00")

    def run(mode, name="capture.nsys-rep", *extra):
        monkeypatch.setenv("FAKE_NSYS_MODE", mode)
        monkeypatch.setenv("FAKE_NSYS_CSV", data("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv"))
        monkeypatch.setenv("FAKE_NSYS_SQLITE", data("h200-torch2.11-fix-reverted", "capture.sqlite"))
        if name != report.name:
            shutil.copy(report, tmp_path / name)
        return judge("--from-nsys", tmp_path / name, *extra)
    return run


def pytest_addoption(parser):
    parser.addoption("--release", action="store_true",
                     help="run the release tier only: real PyPI torch releases (downloads GBs), the whole runs "
                     "of the tools around the repro, and the mutants of run_nsys.sh")


def pytest_configure(config):
    config.addinivalue_line("markers", "release: needs PyPI torch releases, or is a whole run of a tool around the repro "
                            "(docs/testing.md); run with --release")
    config.addinivalue_line("markers", "real_venv: the bisect makes its environments with the real "
                            "`python -m venv`, not the tests' quick copy (quick_venv)")
    config.addinivalue_line("markers", "unit: imports no torch and runs no torch: `pytest -m unit tests`, "
                            "a contributor's inner loop")


# Tests that share a costly fixture run on one pytest-xdist worker (`--dist loadgroup`): one run of
# the script, one nightly history and one template environment, never one per worker, and no
# worker idle while another makes them.
SHARED = {"fixed_run": "fixed_run", "reverted_run": "reverted_run", "nightly_world": "nightlies",
          "quick_venv": "nightlies"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The fast tier by default; --release runs the release tier instead."""
    for item in items:
        for group in sorted({g for f, g in SHARED.items() if f in item.fixturenames}):
            item.add_marker(pytest.mark.xdist_group(group))
    release = config.getoption("--release")
    keep = [i for i in items if (i.get_closest_marker("release") is not None) == release]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
