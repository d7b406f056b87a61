"""Shared helpers: run the repro script as a user would, and cached torch environments.
The fast tier runs by default; `pytest --release` runs the release tier (real PyPI releases)."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "torch_compile_selective_activation_checkpoint.py")
DATA = os.path.join(ROOT, "tests", "data")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))



def run(python, *args, env=None, timeout=900):
    """Runs the script; returns (exit code, stdout, stderr)."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run([python, SCRIPT] + list(args), capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """An entry point run in this process (cli.main, bisect_torch.main) installs its signal
    handlers; the test process gets its own back afterwards."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for s, h in handlers.items():
        signal.signal(s, h)


def judge(*args):
    """The main script's command line in this process (fast, and visible to a mutation tool):
    (exit code, stdout, stderr). For what needs no torch: reading captures, usage errors."""
    from sac_repro import cli
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(SCRIPT, [str(a) for a in args])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    return rc, out.getvalue(), err.getvalue()


def run_json(python, tmp_path, *args, **kw):
    out = tmp_path / "report.json"
    rc, stdout, stderr = run(python, "--json", str(out), *args, **kw)
    assert out.exists(), "no JSON written; exit %d\n%s\n%s" % (rc, stdout, stderr)
    return rc, json.loads(out.read_text()), stdout, stderr


@pytest.fixture(scope="session")
def fixed_run(tmp_path_factory):
    """The torch of this environment (the test set-up pins a fixed release, 2.13.0), run once for
    all tests: (exit code, JSON report, its text as the script prints it, stderr, markdown)."""
    from sac_repro import render
    import torch
    assert tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 10), torch.__version__
    rc, report, markdown, stderr = run_json(sys.executable, tmp_path_factory.mktemp("fixed"),
                                            "--device", "cpu", "--markdown")
    return rc, report, render.render_text(report), stderr, markdown


@pytest.fixture(scope="session")
def release_python():
    """Python of a cached virtual environment with one PyPI torch release (built on first use)."""
    from sac_repro import builds

    def get(version):
        return builds.ensure_venv("torch-%s" % version, "torch==%s" % version, None, builds.cache_dir(None),
                                  "auto", builds.needed_bytes())
    return get


def data(*parts):
    """Files recorded on real hardware (see tests/data/README.md)."""
    return os.path.join(DATA, *parts)


def pytest_addoption(parser):
    parser.addoption("--release", action="store_true",
                     help="run the release tier only: real PyPI torch releases (downloads GBs)")


def pytest_configure(config):
    config.addinivalue_line("markers", "release: needs PyPI torch releases; run with --release")


def pytest_collection_modifyitems(config, items):
    """The fast tier by default; --release runs the release tier instead."""
    release = config.getoption("--release")
    keep = [i for i in items if (i.get_closest_marker("release") is not None) == release]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
