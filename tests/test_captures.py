"""Captures of the report's loops read and judged in this process: nsys's nvtx_kern_sum CSV, its
SQLite export and an .nsys-rep (through a stand-in nsys), and ncu's per-nvtx summary. Every call
is judged on its own, and only a capture that holds exactly the report's 2 x 50 calls; a file that
is not what it claims is a usage error. Synthetic captures use the kernel names nsys printed on an
H200 (torch 2.11); their ranges vary in order, instance counts and extra kernels."""
import csv
import os
import random
import shutil
import sqlite3
import sys

import pytest

from conftest import (ADD, data, FIXED_CSV, FIXED_SQLITE, GEMM, judge, MUL, NCU_FIXED, NCU_REVERTED, one_line_error,
                      REVERTED_CSV, REVERTED_SQLITE, run, TRITON)

pytestmark = pytest.mark.unit  # no torch: the inner loop, `pytest -m unit tests`


HEADER = ("NVTX Range,Style,PID,TID,NVTX Inst,Kern Inst,Total Time (ns),Avg (ns),Med (ns),Min (ns),"
          "Max (ns),StdDev (ns),Kernel Name")


COMPILED, EAGER, GEMM_ONLY, BOTH = "compiled", "eager", "gemm-only", "both"


def call_kernels(kind, rng):
    """The kernels of one call, as (name, instances), in a shuffled order."""
    if kind == COMPILED:
        ks = [(k, 1) for k in TRITON]
    elif kind == EAGER:
        ks = [(MUL, 2), (ADD, 2)]
    elif kind == BOTH:
        ks = [(TRITON[0], 1), (MUL, 1), (ADD, 1)]
    else:
        ks = []
    ks.append((GEMM, 1))
    rng.shuffle(ks)
    return ks


def capture_csv(without, with_, seed=0):
    """An nvtx_kern_sum CSV; `without`/`with_` give each range's kind (a list of 50, or one kind)."""
    rng = random.Random(seed)
    rows = [HEADER]
    for loop, kinds in (("f_compiled_without_context", without), ("f_compiled_with_context", with_)):
        kinds = [kinds] * 50 if isinstance(kinds, str) else kinds
        order = list(range(50))
        rng.shuffle(order)  # nsys sorts by range name, not by time
        for i in order:
            if kinds[i] is None:
                continue
            for name, inst in call_kernels(kinds[i], rng):
                t = rng.randint(600, 2600) * inst
                rows.append('%s %d,PushPop,%d,%d,1,%d,%d,%.1f,%.1f,%d,%d,0.0,"%s"' % (
                    loop, i, 864, 864, inst, t, t / inst, t / inst, t // inst, t // inst, name))
    return "\n".join(rows) + "\n"


def judge_csv(tmp_path, text, *extra, name="nvtx_kern_sum.csv"):
    path = tmp_path / name
    path.write_text(text)
    return judge("--from-nsys", str(path), *extra)


def mixed(n_eager, seed):
    kinds = [EAGER] * n_eager + [COMPILED] * (50 - n_eager)
    random.Random(seed).shuffle(kinds)
    return kinds


# ------------------------------------------------------------------- defect 1: any compiled call
@pytest.mark.parametrize("n_eager", [25, 1, 49])
def test_some_eager_calls_under_sac_reproduce(tmp_path, n_eager):
    rc, stdout, _ = judge_csv(tmp_path, capture_csv(COMPILED, mixed(n_eager, n_eager)))
    assert rc == 1, stdout
    assert "VERDICT: reproduced (exit 1)" in stdout
    assert "%d of 50 calls under SAC ran eagerly" % n_eager in stdout


def test_a_weak_control_cannot_test(tmp_path):
    """The control compiled in 1 of its 50 ranges: it does not show that f compiles here."""
    rc, stdout, _ = judge_csv(tmp_path, capture_csv(mixed(49, 7), COMPILED))
    assert rc == 125, stdout
    assert "VERDICT: cannot_test (exit 125)" in stdout
    assert "1 of 50" in stdout


def test_every_call_compiled_is_not_reproduced(tmp_path):
    rc, stdout, _ = judge_csv(tmp_path, capture_csv(COMPILED, COMPILED, seed=3))
    assert rc == 0 and "VERDICT: not_reproduced (exit 0)" in stdout, stdout


def test_every_call_eager_is_reproduced(tmp_path):
    rc, stdout, _ = judge_csv(tmp_path, capture_csv(COMPILED, EAGER, seed=4))
    assert rc == 1 and "50 of 50 calls under SAC ran eagerly" in stdout, stdout


# ------------------------------------------------------------- defect 4b: unknown is no verdict
def test_ranges_that_show_neither_kind_of_kernel_cannot_test(tmp_path):
    """Under SAC only the matmul's cuBLAS kernel ran: neither compiled nor eager pointwise code
    can be seen, so nothing is known about f's code; never read as reproduced."""
    rc, stdout, _ = judge_csv(tmp_path, capture_csv(COMPILED, GEMM_ONLY, seed=5))
    assert rc == 125, stdout


def test_ranges_that_show_both_kinds_cannot_test(tmp_path):
    """Inductor kernels and f's eager kernels in the same range: which ran f is not known."""
    rc, stdout, _ = judge_csv(tmp_path, capture_csv(COMPILED, BOTH, seed=6))
    assert rc == 125, stdout
    assert "50 of 50 calls under SAC showed both compiled code and f's eager ops" in stdout


# ------------------------------------------------------------------ defect 5: malformed files
@pytest.fixture
def truncated_sqlite(tmp_path):
    raw = open(data("h200-torch2.11", "full_capture.sqlite"), "rb").read()
    path = tmp_path / "truncated.sqlite"
    path.write_bytes(raw[: len(raw) // 3])
    return path


def test_a_truncated_sqlite_export_is_a_usage_error(truncated_sqlite):
    rc, stdout, stderr = judge("--from-nsys", str(truncated_sqlite))
    assert rc == 128 and stdout == "", (rc, stdout, stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("usage error: ") and str(truncated_sqlite) in stderr


@pytest.mark.parametrize("text", [
    "",                                                             # empty
    "NVTX Range,Kernel Name\nf_compiled_with_context 0,triton_\n",  # no Kern Inst column
    HEADER + '\nf_compiled_with_context 0,PushPop,1,1,1,many,1,1,1,1,1,0,"triton_"\n',  # not a number
    HEADER + "\nf_compiled_with_context 0,PushPop\n",               # a short row
], ids=["empty", "missing-column", "non-numeric", "short-row"])
def test_a_malformed_csv_is_a_usage_error(tmp_path, text):
    rc, stdout, stderr = judge_csv(tmp_path, text, name="bad.csv")
    assert rc == 128 and stdout == "", (rc, stdout, stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("usage error: ") and "bad.csv" in stderr


def test_a_malformed_ncu_file_is_a_usage_error(tmp_path):
    path = tmp_path / "bad_ncu.txt"
    path.write_text("==PROF== Connected to process 1\nsomething else entirely\n")
    rc, stdout, stderr = judge("--from-ncu", str(path))
    assert rc == 128 and stdout == "", (rc, stdout, stderr)
    assert len(stderr.strip().splitlines()) == 1 and "bad_ncu.txt" in stderr, stderr


def test_strict_policy_on_a_capture_cannot_test():
    """The loops run forward only: --strict-policy cannot be settled from a capture."""
    assert judge("--from-nsys", FIXED_CSV)[0] == 0
    rc, stdout, _ = judge("--from-nsys", FIXED_CSV, "--strict-policy")
    assert rc == 125 and "--strict-policy: the policy check was not measured" in stdout


def fixed_rows():
    with open(FIXED_CSV, newline="") as fh:
        return fh.read().splitlines()


def test_a_csv_with_only_the_three_columns_the_judge_needs(tmp_path):
    path = tmp_path / "minimal.csv"
    with open(FIXED_CSV, newline="") as fh, open(path, "w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["NVTX Range", "Kern Inst", "Kernel Name"])
        for row in csv.DictReader(fh):
            w.writerow([row["NVTX Range"], row["Kern Inst"], row["Kernel Name"]])
    assert judge("--from-nsys", path)[0] == 0


@pytest.mark.parametrize("column", [2, 3], ids=["another-process", "another-thread"])
def test_a_call_seen_on_two_threads_or_processes_is_doubled(tmp_path, column):
    lines = fixed_rows()
    extra = []
    for line in lines:
        if line.startswith("f_compiled_with_context 5,"):
            cells = line.split(",")
            cells[column] = "999"
            extra.append(",".join(cells))
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines + extra) + "\n")
    rc, stdout, _ = judge("--from-nsys", path)
    assert rc == 125 and "doubled 5" in stdout


def test_a_call_seen_twice_in_an_sqlite_export_is_doubled(tmp_path):
    path = tmp_path / "doubled.sqlite"
    shutil.copy(data("h200-torch2.11-fix-reverted", "capture.sqlite"), path)
    db = sqlite3.connect(str(path))
    textid = db.execute("select textId from NVTX_EVENTS where text = 'f_compiled_with_context 9' or textId in "
                        "(select id from StringIds where value = 'f_compiled_with_context 9')").fetchone()
    cols = [r[1] for r in db.execute("pragma table_info(NVTX_EVENTS)")]
    row = db.execute("select * from NVTX_EVENTS where eventType = 59 and (text = 'f_compiled_with_context 9' or "
                     "textId = ?)", (textid[0] if textid else -1,)).fetchone()
    copy_row = dict(zip(cols, row), start=1, end=2)  # a second range of the same name, with no kernels
    db.execute("insert into NVTX_EVENTS (%s) values (%s)" % (",".join(cols), ",".join("?" * len(cols))),
               [copy_row[c] for c in cols])
    db.commit()
    db.close()
    assert judge("--from-nsys", data("h200-torch2.11-fix-reverted", "capture.sqlite"))[0] == 1
    rc, stdout, _ = judge("--from-nsys", path)
    assert rc == 125 and "doubled 9" in stdout


def test_a_range_that_ncus_summary_lists_twice_is_doubled(tmp_path):
    """A range heading that ncu's per-nvtx summary holds twice is two ranges of one name: a doubled
    call, incomplete evidence as in nsys's captures, never one call with twice the kernels."""
    lines = open(NCU_FIXED).read().splitlines()
    start = lines.index("  <f_compiled_with_context 7>")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("  <", "<")))
    path = tmp_path / "ncu.txt"
    path.write_text("\n".join(lines + lines[start:end]) + "\n")
    rc, stdout, _ = judge("--from-ncu", path)
    assert rc == 125 and "f_compiled_with_context: doubled 7" in stdout, stdout
    assert judge("--from-ncu", NCU_FIXED)[0] == 0


def test_a_range_in_which_no_kernel_ran_is_missing(tmp_path):
    """A range of the loops that ncu lists with no kernel under it holds no evidence of that call: the
    capture is incomplete (125), never judged on the 49 other calls as though it were the report's 50."""
    lines = open(NCU_REVERTED).read().splitlines()
    start = lines.index("  <f_compiled_with_context 7>")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("  <", "<")))
    path = tmp_path / "ncu.txt"
    path.write_text("\n".join(lines[:start + 1] + lines[end:]) + "\n")
    rc, stdout, _ = judge("--from-ncu", path)
    assert rc == 125 and "f_compiled_with_context: missing 7" in stdout, stdout
    assert judge("--from-ncu", NCU_REVERTED)[0] == 1


# ----------------------------------------------------------- .nsys-rep through nsys stats
@pytest.mark.parametrize("name", ["capture.nsys-rep", "old.qdrep"])
def test_an_nsys_report_is_read_through_nsys_stats(fake_nsys, name):
    rc, stdout, _ = fake_nsys("csv", name)
    assert rc == 1 and "50 of 50 calls under SAC ran eagerly" in stdout


def test_an_nsys_report_whose_ranges_ran_no_kernels_cannot_test(fake_nsys):
    rc, stdout, _ = fake_nsys("empty")
    assert rc == 125 and "missing 0-49" in stdout


def test_an_nsys_report_that_nsys_cannot_read_aborts(fake_nsys):
    rc, stdout, stderr = fake_nsys("fail")
    assert rc == 128 and "nsys stats could not read it: ERROR: cannot open the report" in stderr


def test_a_row_of_zero_instances_counts_nothing(tmp_path):
    """nsys never writes one, but a zero is a count, not malformed: it adds no kernel to its range."""
    lines = fixed_rows()
    extra = [l.replace(",PushPop,864,864,1,1,", ",PushPop,864,864,1,0,", 1).replace("triton_poi_fused_add_mul_0", "other_kernel")
             for l in lines if l.startswith("f_compiled_with_context 5,") and "triton_poi_fused_add_mul_0" in l]
    assert extra and ",1,0," in extra[0]
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines + extra) + "\n")
    assert judge("--from-nsys", path)[0] == 0


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


def no_sqlite3(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['sqlite3'] = None\n")
    return {"PYTHONPATH": str(tmp_path)}


def test_a_python_without_sqlite3_still_reads_csv_and_ncu(tmp_path):
    env = no_sqlite3(tmp_path)
    assert run(sys.executable, "--from-nsys", REVERTED_CSV, env=env)[0] == 1
    assert run(sys.executable, "--from-ncu", NCU_FIXED, env=env)[0] == 0
    rc, stdout, stderr = run(sys.executable, "--from-nsys", FIXED_SQLITE, env=env)
    one_line_error(rc, stdout, stderr, "sqlite3", "nvtx_kern_sum")


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


def test_the_sqlite_reader_opens_read_only(tmp_path):
    """Passes on the old code too: kept because a writable open could change the capture."""
    path = tmp_path / "c.sqlite"
    shutil.copy(FIXED_SQLITE, path)
    os.chmod(path, 0o444)
    before = path.read_bytes()
    assert judge("--from-nsys", str(path))[0] == 0
    assert path.read_bytes() == before
    sqlite3.connect(str(path)).close()
