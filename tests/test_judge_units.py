"""The judge's parts, in this process, at the boundaries that a mutation run found untouched: each
test here kills mutants of sac_repro/verdict.py or sac_repro/captures.py that could change an
answer (an exit code), and that no other fast test killed."""
import copy
import json
import os
import shutil
import sqlite3
import stat

import pytest

from conftest import data, judge
from sac_repro import captures, verdict

FIXED_CSV = data("h200-torch2.11", "full_nvtx_kern_sum.csv")


@pytest.mark.parametrize("name, kind", [
    ("triton_poi_fused_add_mul_0", "inductor"), ("triton_", "inductor"), ("graph_3_cpp_fused_add_mul_0", "inductor"),
    ("cpp_fused_mul_1", "inductor"),
    ("void gemmSN_NN_kernel<float>", "cublas"), ("sm80_xmma_gemm_f32f32", "cublas"), ("nvjet_tst_64x8", "cublas"),
    ("void CUTLASS_Gemm_Kernel<float>", "cublas"), ("Kernel2<cutlass_80_tensorop>", "cublas"), ("cublasLt::splitKreduce", "cublas"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>>", "eager_aten"),
    ("void at::vectorized_elementwise_kernel<4, at::MulFunctor<float>>", "eager_aten"), ("aten::mul", "eager_aten"),
    ("memcpy32_post", "other"), ("Torch-Compiled Region: 0/0", "other"),
])
def test_the_kernel_classifier(name, kind):
    assert verdict.classify_kernel(name) == kind


@pytest.mark.parametrize("name, eager", [
    ("aten::mul", True), ("aten::add", True), ("aten::mul.Tensor", True), ("aten::add.Scalar", True),
    ("aten::mm", False), ("aten::multiply_", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float>>>", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", True),
    ("triton_poi_fused_add_mul_0", False), ("MulFunctor_but_not_aten", False),
])
def test_f_s_eager_ops_and_kernels(name, eager):
    assert verdict.is_eager_pointwise(name) is eager


def test_only_fullgraphs_refusal_reads_as_eager():
    assert verdict.refused_to_run_eagerly(RuntimeError("torch.compile with fullgraph=True found no compiled frames."))
    assert not verdict.refused_to_run_eagerly(RuntimeError("CUDA error: an illegal memory access"))


RAW = json.load(open(data("cpu-torch2.13", "child_fixed.json")))


def test_one_refused_call_among_compiled_ones_reproduces():
    raw = copy.deepcopy(RAW)
    raw["scenarios"]["with_context"]["calls"][0] = {"names": [], "refused": "RuntimeError: found no compiled frames"}
    r = verdict.report_from_child(raw, "regression", False)
    assert r["exit_code"] == 1 and r["reason"].startswith("1 of 3 calls under SAC ran eagerly (Dynamo skipped")


def test_the_report_carries_the_torch_a_bisect_checks():
    """nightly-step compares torch_git_version with the commit under test: it must be the child's."""
    r = verdict.report_from_child(copy.deepcopy(RAW), "regression", False)
    assert r["torch_git_version"] == RAW["env"]["torch_git"] == "cf30153c4c131c8164ee7798e5022d810682e2cb"
    assert r["torch_version"] == "2.13.0+cpu" and r["device"] == "cpu"


def test_strict_policy_on_a_capture_cannot_test():
    """The loops run forward only: --strict-policy cannot be settled from a capture."""
    assert judge("--from-nsys", FIXED_CSV)[0] == 0
    rc, stdout, _ = judge("--from-nsys", FIXED_CSV, "--strict-policy")
    assert rc == 125 and "--strict-policy: the policy check was not measured" in stdout


def fixed_rows():
    with open(FIXED_CSV, newline="") as fh:
        return fh.read().splitlines()


def test_a_csv_with_only_the_three_columns_the_judge_needs(tmp_path):
    import csv
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


def test_the_picture_of_an_nsys_report_comes_from_its_sqlite_export(fake_nsys, tmp_path):
    pytest.importorskip("matplotlib")
    rc, stdout, stderr = fake_nsys("csv", "capture.nsys-rep", "--plot", tmp_path / "p.png")
    assert rc == 1, stderr
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
