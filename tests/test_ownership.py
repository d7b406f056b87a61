"""What the judged run touches and leaves: outputs never written through a symlink onto a file
elsewhere, internal options that take only the bundle's own temporary files, no process left
behind by a SIGKILL, a `nohup` run that keeps running, and a stdout that cannot encode the paste.
None of them runs torch: a stand-in torch package, or a recorded child, plays its part."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import FIXED_CSV, JUDGED, one_line_error, REVERTED_CSV, ROOT, data, judge
from sac_repro.judge import cli

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------- symlinks out of the folder
def test_json_onto_a_symlink_to_a_file_elsewhere_is_refused(tmp_path):
    """`--json link` wrote the report through the link, onto a file in another folder."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "notes.txt"
    target.write_text("the user's notes\n")
    link = tmp_path / "here" / "report.json"
    link.symlink_to(target)
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", link)
    one_line_error(rc, stdout, stderr, "--json %s" % link, "symlink", str(target))
    assert target.read_text() == "the user's notes\n" and os.readlink(link) == str(target)


def test_a_dangling_symlink_out_of_the_folder_is_refused(tmp_path):
    """A link to a file not there yet would create that file in the other folder."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "here" / "plot.png"
    link.symlink_to(tmp_path / "elsewhere" / "new.png")
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", link)
    one_line_error(rc, stdout, stderr, "--json %s" % link, "symlink")
    assert os.listdir(tmp_path / "elsewhere") == []


def test_json_to_stderr_appended_to_a_file_keeps_what_it_held(tmp_path):
    """`--json /dev/stderr 2>> log`: stderr's file is written through the stream, after its earlier
    lines, as stdout's is; replaced, the log lost them."""
    log = tmp_path / "log.txt"
    log.write_text("an earlier line\n")
    proc = subprocess.run(["bash", "-c", '"$0" "$1" --from-nsys "$2" --json /dev/stderr 2>> "$3"',
                           sys.executable, JUDGED, REVERTED_CSV, str(log)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + log.read_text()
    text = log.read_text()
    assert text.startswith("an earlier line\n{") and json.loads(text.split("\n", 1)[1])["verdict"] == "reproduced"
    assert "VERDICT: reproduced (exit 1)" in proc.stdout and os.listdir(tmp_path) == ["log.txt"]


# ------------------------------------------------------------- internal options: ours alone
def run_judged(*args, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, JUDGED] + [str(a) for a in args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("which", ["a file of the bundle", "a file of the user's", "a new name"])
def test_the_child_option_writes_no_file_but_its_own_temporary_one(tmp_path, kept, which):
    """`--_child PATH` wrote the child's result over any file (README.md included) and exited 0."""
    path = {"a file of the bundle": kept(os.path.join(ROOT, "README.md")),
            "a file of the user's": str(tmp_path / "mine.json"), "a new name": str(tmp_path / "new.json")}[which]
    if which == "a file of the user's":
        open(path, "w").close()  # empty, as the child's own is
    before = open(path, "rb").read() if os.path.exists(path) else None
    proc = run_judged("--_child", path, "--device", "cpu")
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "usage error", "--_child", "internal")
    assert (open(path, "rb").read() if os.path.exists(path) else None) == before


def test_the_childs_own_temporary_file_is_taken():
    fd, path = tempfile.mkstemp(prefix="sac_repro_", suffix=".json")
    os.close(fd)
    try:
        assert cli.not_our_temp_file(path, cli.CHILD_TEMP) is None
        with open(path, "w") as fh:
            fh.write("{}")
        assert "not empty" in cli.not_our_temp_file(path, cli.CHILD_TEMP)
    finally:
        os.unlink(path)
    link = os.path.join(tempfile.gettempdir(), "sac_repro_%s.json" % os.getpid())
    os.symlink(os.path.join(ROOT, "README.md"), link)
    try:
        assert "symlink" in cli.not_our_temp_file(link, cli.CHILD_TEMP)
    finally:
        os.unlink(link)


def test_the_hand_off_is_written_only_into_run_nsys_shs_temporary_file(tmp_path):
    """--loops-only --_env FILE wrote the hand-off over any file of the user's."""
    mine = tmp_path / "mine.json"
    mine.write_text("")
    proc = run_judged("--loops-only", "--device", "cpu", "--_env", mine, env={"PYTHONPATH": "/nonexistent"})
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "--_env", "internal")
    assert mine.read_text() == ""
    fd, handoff = tempfile.mkstemp(prefix="run_nsys_run.")
    os.close(fd)
    try:
        assert cli.not_our_temp_file(handoff, cli.HANDOFF_TEMP) is None
    finally:
        os.unlink(handoff)
