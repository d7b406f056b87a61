"""The verdict judges every call, on every evidence path: mixed, weak-control and unknown
evidence, malformed files, stale nsys reports and the options that must reach the judge.

Synthetic captures use the kernel names that nsys printed on an H200 (torch 2.11); their ranges
vary in order, instance counts and extra kernels, so that no test rests on 50 identical rows."""
import random

import pytest

from conftest import data, judge

TRITON = ["triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_1"]
GEMM = ("void gemmSN_NN_kernel<float, (int)128, (int)2, (int)4, (int)8, (int)5, (int)4, (bool)0, "
        "cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, "
        "cublasGemvTensorStridedBatched<float>>(cublasGemmSmallNParams<T9, T10, T11, T1>)")
MUL = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, "
       "float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>"
       "(int, T2, T3)")
ADD = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctorOnSelf_add<float>, "
       "std::array<char *, (unsigned long)2>>(int, T2, T3)")
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
    assert "50 of 50 calls under SAC showed neither compiled code nor f's eager ops" in stdout


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
