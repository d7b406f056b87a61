"""The bundle's layout: the report's files and the tools at the top, the engine in one package, and
every entry point working from any folder, through a relative path or a symlink."""
import os
import subprocess
import sys

import pytest

from conftest import data, ROOT

# The report's five files, the engine, the tools, the docs and the tests: nothing else.
TOP_LEVEL = {"torch_compile_selective_activation_checkpoint.py", "run_nsys.sh", "requirements.txt",
             "README.md", "expected_output.md", "sac_repro", "tools", "docs", "tests", ".ci"}


def test_the_top_level_holds_the_report_files_the_tools_and_one_package():
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    top = {p.split("/")[0] for p in tracked.stdout.splitlines()} - {".gitignore"}
    assert top == TOP_LEVEL


def callers(tmp_path, name):
    """The same entry point three ways: in place, by a relative path from another folder, and
    through a symlink in another folder. Returns (argv prefix, cwd) pairs."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    link = elsewhere / ("link-" + os.path.basename(name))
    if not link.exists():
        os.symlink(os.path.join(ROOT, name), link)
    return [([os.path.join(ROOT, name)], ROOT),
            ([os.path.relpath(os.path.join(ROOT, name), elsewhere)], str(elsewhere)),
            ([str(link)], str(elsewhere))]


@pytest.mark.parametrize("capture, rc", [
    (("h200-torch2.11", "full_nvtx_kern_sum.csv"), 0),
    (("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv"), 1),
])
def test_the_main_script_gives_the_same_verdict_from_anywhere(tmp_path, capture, rc):
    for argv, cwd in callers(tmp_path, "torch_compile_selective_activation_checkpoint.py"):
        proc = subprocess.run([sys.executable] + argv + ["--from-nsys", data(*capture)], cwd=cwd,
                              capture_output=True, text=True)
        assert proc.returncode == rc, (argv, proc.stdout, proc.stderr)


def test_bisect_torch_runs_from_anywhere(tmp_path):
    for argv, cwd in callers(tmp_path, "tools/bisect_torch.py"):
        proc = subprocess.run([sys.executable] + argv + ["releases", "2.12.0", "2.8.0"], cwd=cwd,
                              capture_output=True, text=True)
        assert proc.returncode == 128 and "must be older" in proc.stderr, (argv, proc.stderr)


def test_the_bench_finds_its_package_from_anywhere(tmp_path):
    for argv, cwd in callers(tmp_path, "tools/bench_sac_compile.py"):
        proc = subprocess.run([sys.executable] + argv + ["--help"], cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == 0 and "--fsdp" in proc.stdout, (argv, proc.stderr)
