"""Inputs and failures at the edges of the main script: each must end in a judged verdict or in
128 with one line saying what was wrong, never in a 0 or 1 that nothing judged.

Each test here failed on the code before this file existed, unless its docstring says otherwise."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from conftest import data, judge, ROOT, run, SCRIPT

FIXED_SQLITE = data("h200-torch2.11", "full_capture.sqlite")
REVERTED_SQLITE = data("h200-torch2.11-fix-reverted", "capture.sqlite")
FIXED_CSV = data("h200-torch2.11", "full_nvtx_kern_sum.csv")
REVERTED_CSV = data("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv")
NCU_FIXED = data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt")


def one_line_error(rc, stdout, stderr, *words):
    assert rc == 128, (rc, stdout, stderr)
    assert stdout == "", stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ----------------------------------------------------------------- 1: an empty path is no input
@pytest.mark.parametrize("option", ["--from-nsys", "--from-ncu", "--json"])
def test_an_empty_path_is_a_usage_error(option):
    """`--from-nsys "$UNSET"` once measured the local torch instead of reading a capture."""
    rc, stdout, stderr = judge(option, "")
    one_line_error(rc, stdout, stderr, "usage error", option, "empty")


# ------------------------------------------------------------------ 2: file names are not URIs
@pytest.mark.parametrize("name", ["run#1.sqlite", "cap%41.sqlite", "q?x.sqlite", "sp ace.sqlite"])
def test_sqlite_file_names_are_read_as_names(tmp_path, name):
    """A name with URI characters is the file of that name: never `run`, `capA.sqlite` or a new
    empty `q`. capA.sqlite here holds the opposite verdict, to catch a read of the wrong file."""
    shutil.copy(FIXED_SQLITE, tmp_path / name)
    shutil.copy(REVERTED_SQLITE, tmp_path / "capA.sqlite")
    shutil.copy(REVERTED_SQLITE, tmp_path / "run")
    before = set(os.listdir(tmp_path))
    rc, stdout, stderr = judge("--from-nsys", str(tmp_path / name))
    assert rc == 0, (stdout, stderr)
    assert set(os.listdir(tmp_path)) == before


# ------------------------------------------------------------------------ 3: exact ranges
def csv_rows(path):
    with open(path, newline="") as fh:
        return fh.read().splitlines()


def test_a_range_that_only_contains_a_loops_name_is_not_a_call(tmp_path):
    """A fixed capture plus a range of the user's own, eager, whose name contains the loop's."""
    lines = csv_rows(FIXED_CSV)
    eager = [l.replace("f_compiled_with_context 3,", "warmup_f_compiled_with_context 99,", 1)
             for l in csv_rows(REVERTED_CSV) if l.startswith("f_compiled_with_context 3,")]
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines + eager) + "\n")
    rc, stdout, stderr = judge("--from-nsys", str(path))
    assert rc == 0, stdout + stderr
    assert "1 other NVTX range was ignored" in stdout


def test_a_missing_range_is_not_hidden_by_a_stray_one(tmp_path):
    lines = [l.replace("f_compiled_with_context 49,", "f_compiled_with_context 50,")
             for l in csv_rows(FIXED_CSV)]
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines) + "\n")
    rc, stdout, _ = judge("--from-nsys", str(path))
    assert rc == 125, stdout
    assert "f_compiled_with_context: missing 49" in stdout and "stray 50" in stdout


def test_a_doubled_range_is_incomplete_evidence(tmp_path):
    lines = csv_rows(FIXED_CSV)
    doubled = [l.replace(",PushPop,864,864,1,", ",PushPop,864,864,2,") if l.startswith("f_compiled_with_context 7,") else l
               for l in lines]
    path = tmp_path / "k.csv"
    path.write_text("\n".join(doubled) + "\n")
    rc, stdout, _ = judge("--from-nsys", str(path))
    assert rc == 125, stdout
    assert "doubled 7" in stdout


# ------------------------------------------------- 4: failures outside the verdict are not "bad"
def test_the_script_copied_without_its_package_aborts(tmp_path):
    copy = tmp_path / "repro.py"
    shutil.copy(SCRIPT, copy)
    proc = subprocess.run([sys.executable, str(copy), "--from-nsys", FIXED_CSV], capture_output=True, text=True)
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "sac_repro")


def no_sqlite3(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['sqlite3'] = None\n")
    return {"PYTHONPATH": str(tmp_path)}


def test_a_python_without_sqlite3_still_reads_csv_and_ncu(tmp_path):
    env = no_sqlite3(tmp_path)
    assert run(sys.executable, "--from-nsys", REVERTED_CSV, env=env)[0] == 1
    assert run(sys.executable, "--from-ncu", NCU_FIXED, env=env)[0] == 0
    rc, stdout, stderr = run(sys.executable, "--from-nsys", FIXED_SQLITE, env=env)
    one_line_error(rc, stdout, stderr, "sqlite3", "nvtx_kern_sum")


def closed_pipes(args, **kw):
    """Runs the script with stdout and stderr on pipes whose readers have gone."""
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    os.close(r_out)
    os.close(r_err)
    try:
        proc = subprocess.run([sys.executable, SCRIPT] + args, stdout=w_out, stderr=w_err, **kw)
    finally:
        os.close(w_out)
        os.close(w_err)
    return proc.returncode


@pytest.mark.parametrize("args", [["--from-nsys", REVERTED_CSV], ["--from-nsys", FIXED_CSV],
                                  ["--from-nsys", "/no/such/file.csv"]])
def test_output_on_a_closed_pipe_is_no_verdict(args):
    """The verdict was judged but could not be delivered: 128, whatever it was."""
    assert closed_pipes(args) == 128


# --------------------------------------------------------- the child's own import failing
def test_a_failing_import_of_the_bundle_in_the_child_aborts(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "if '--_child' in sys.argv:\n"
        "    sys.modules['sac_repro.measure'] = None\n")
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", env={"PYTHONPATH": str(tmp_path)}, timeout=300)
    assert rc == 128, (rc, stdout, stderr)
    assert "sac_repro.measure" in stderr


# --------------------------------------------------------------------- bad input accepted
@pytest.mark.parametrize("args, words", [
    (["--timeout", "nan"], ["--timeout", "finite"]),
    (["--timeout", "inf"], ["--timeout", "finite"]),
    (["--_c", "x.json"], ["unrecognized arguments: --_c"]),
    (["--from-n", FIXED_CSV], ["unrecognized arguments: --from-n"]),
    (["--from-ncu", FIXED_CSV], ["expected the output of `ncu", "NVTX State"]),
    (["--from-ncu", data("nsys-2023.4.4-profile-help.txt")], ["NVTX State"]),
])
def test_bad_input_is_refused(args, words):
    rc, stdout, stderr = judge(*args)
    one_line_error(rc, stdout, stderr, *words)


# -------------------------------------------------------------------------- misworded errors
def test_json_into_a_folder_says_so(tmp_path):
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", str(tmp_path))
    line = one_line_error(rc, stdout, stderr, "--json", "is a folder")
    assert "bug" not in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_json_onto_a_full_disk_says_so():
    rc, stdout, stderr = judge("--from-nsys", FIXED_CSV, "--json", "/dev/full")
    line = one_line_error(rc, stdout, stderr, "cannot write --json /dev/full")
    assert "bug" not in line


def test_a_folder_or_a_fifo_is_named_as_such(tmp_path):
    rc, stdout, stderr = judge("--from-nsys", str(tmp_path))
    one_line_error(rc, stdout, stderr, "is a folder")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, stdout, stderr = judge("--from-ncu", str(fifo))
    one_line_error(rc, stdout, stderr, "not a regular file")


def test_a_csv_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + open(REVERTED_CSV, "rb").read())
    rc, stdout, _ = judge("--from-nsys", str(path))
    assert rc == 1, stdout


# ------------------------------------------------------------------------------------ --json
def test_json_has_a_schema_version_and_dash_is_stdout():
    rc, stdout, stderr = judge("--from-nsys", REVERTED_CSV, "--json", "-")
    assert rc == 1, stderr
    report = json.loads(stdout)
    assert report["schema"] == 2 and report["verdict"] == "reproduced"


def test_json_onto_the_capture_being_judged_is_refused(tmp_path):
    path = tmp_path / "k.csv"
    shutil.copy(FIXED_CSV, path)
    before = path.read_bytes()
    rc, stdout, stderr = judge("--from-nsys", str(path), "--json", str(path))
    one_line_error(rc, stdout, stderr, "--json", "capture")
    assert path.read_bytes() == before


def test_the_sqlite_reader_opens_read_only(tmp_path):
    """Passes on the old code too: kept because a writable open could change the capture."""
    path = tmp_path / "c.sqlite"
    shutil.copy(FIXED_SQLITE, path)
    os.chmod(path, 0o444)
    before = path.read_bytes()
    assert judge("--from-nsys", str(path))[0] == 0
    assert path.read_bytes() == before
    sqlite3.connect(str(path)).close()


@pytest.mark.parametrize("cmd", [
    ["tools/bisect_torch.py", "releases", "2.12.0", "2.8.0"],
    ["tools/bisect_torch.py", "--help"],
    ["run_nsys.sh", "--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv")],
    ["run_nsys.sh", "--help"],
], ids=["bisect-usage-error", "bisect-help", "wrapper-verdict", "wrapper-help"])
def test_the_other_entry_points_on_closed_pipes(cmd):
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    os.close(r_out)
    os.close(r_err)
    runner = ["bash"] if cmd[0].endswith(".sh") else [sys.executable]
    try:
        proc = subprocess.run(runner + [os.path.join(ROOT, cmd[0])] + cmd[1:], stdout=w_out, stderr=w_err,
                              env=dict(os.environ, PYTHON=sys.executable), timeout=120)
    finally:
        os.close(w_out)
        os.close(w_err)
    assert proc.returncode == 128


@pytest.mark.parametrize("entry", ["tools/bisect_torch.py", "run_nsys.sh"])
def test_the_other_entry_points_copied_alone_abort(tmp_path, entry):
    alone = tmp_path / os.path.basename(entry)
    shutil.copy(os.path.join(ROOT, entry), alone)
    runner = ["bash"] if entry.endswith(".sh") else [sys.executable]
    proc = subprocess.run(runner + [str(alone), "--help"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHON=sys.executable))
    if entry.endswith(".sh"):
        proc = subprocess.run(runner + [str(alone), "--report", "x.csv"], capture_output=True, text=True,
                              env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 128 and "copy the bundle's whole folder" in proc.stderr, proc.stderr
