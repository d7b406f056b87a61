"""run_nsys.sh and the nsys/ncu analysers: flags, error paths, exit codes, recorded data."""
import json
import lzma
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REVERTED_CSV, ROOT, data, judge, run
from sac_repro.exits import HANDLED_SIGNALS

WRAPPER = os.path.join(ROOT, "run_nsys.sh")

# Kernel names as nsys prints them for the report's f on an H200 (torch 2.11, cuBLAS of CUDA 13):
# the Inductor and cuBLAS names come from tests/data; the eager ATen ones are the kernels ATen
# launches for f's `3 * x + 1` and `2 * y + 1` (mul by a scalar, add a scalar in place of a copy).
TRITON = ["triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_1"]
GEMM = ("void gemmSN_NN_kernel<float, (int)128, (int)2, (int)4, (int)8, (int)5, (int)4, (bool)0, "
        "cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, "
        "cublasGemvTensorStridedBatched<float>>(cublasGemmSmallNParams<T9, T10, T11, T1>)")
EAGER = ["void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, "
         "float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>"
         "(int, T2, T3)",
         "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctorOnSelf_add<float>, "
         "std::array<char *, (unsigned long)2>>(int, T2, T3)"]
HEADER = ("NVTX Range,Style,PID,TID,NVTX Inst,Kern Inst,Total Time (ns),Avg (ns),Med (ns),Min (ns),"
          "Max (ns),StdDev (ns),Kernel Name")


def kern_sum_csv(with_context_kernels, prefix=""):
    rows = [HEADER]
    for loop, kernels in (("f_compiled_without_context", TRITON + [GEMM]),
                          ("f_compiled_with_context", with_context_kernels)):
        for i in range(50):
            for k in kernels:
                rows.append('%s%s %d,PushPop,445,445,1,%d,800,800.0,800.0,800,800,0.0,"%s"' % (
                    prefix, loop, i, 2 if k in EAGER else 1, k))
    return "\n".join(rows) + "\n"


FIXED_CSV = kern_sum_csv(TRITON + [GEMM])
AFFECTED_CSV = kern_sum_csv(EAGER + [GEMM])


@pytest.mark.parametrize("csv_text, rc, verdict", [
    (FIXED_CSV, 0, "not_reproduced"),
    (AFFECTED_CSV, 1, "reproduced"),
    (kern_sum_csv(TRITON + [GEMM], prefix=":"), 0, "not_reproduced"),  # ":range" (default domain)
], ids=["fixed", "affected", "colon-prefixed-ranges"])
def test_analyser_judges_per_range_kernels(tmp_path, csv_text, rc, verdict):
    path = tmp_path / "nvtx_kern_sum.csv"
    path.write_text(csv_text)
    got, stdout, _ = judge("--from-nsys", str(path))
    assert got == rc, stdout
    assert "VERDICT: %s" % verdict in stdout
    assert "f_compiled_with_context <0..49>: 50 ranges with kernels" in stdout


def test_affected_capture_lists_the_eager_kernels(tmp_path):
    path = tmp_path / "affected.csv"
    path.write_text(AFFECTED_CSV)
    _, stdout, _ = judge("--from-nsys", str(path))
    block = stdout.split("f_compiled_with_context <0..49>")[1]
    assert "0 ran compiled code, 50 ran eagerly" in block
    assert "100 x eager_aten" in block and "MulFunctor" in block and "CUDAFunctorOnSelf_add" in block
    assert "50 x cublas" in block


@pytest.mark.parametrize("name", ["stats_nvtx_kern_sum.csv", "capture.sqlite"])
def test_real_partial_nsys_capture_cannot_be_judged(name):
    """nsys 2023.4.4 stopped after the first without_context kernels on CUDA 13."""
    rc, stdout, _ = judge("--from-nsys", data("h200-torch2.11", name))
    assert rc == 125, stdout
    assert "f_compiled_without_context: missing 1-49 | f_compiled_with_context: missing 0-49" in stdout


def test_real_ncu_summary_of_the_fixed_torch():
    rc, stdout, _ = judge("--from-ncu", data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"))
    assert rc == 0, stdout
    assert "f_compiled_with_context <0..49>: 50 ranges with kernels, 50 ran compiled code, 0 ran eagerly" in stdout


def test_real_ncu_summary_with_default_sections(tmp_path):
    path = tmp_path / "seed.txt"
    path.write_bytes(lzma.open(data("h200-torch2.11", "seed_script_ncu_per_nvtx.txt.xz")).read())
    rc, stdout, _ = judge("--from-ncu", str(path))
    assert rc == 0, stdout
    assert "50 x inductor     triton_poi_fused_add_mul_0" in stdout


# ----------------------------------------------------------------------------- run_nsys.sh
LEGACY_HELP = textwrap.dedent("""\
    usage: nsys profile [<args>] [application] [<application args>]
    \t-s, --sample=
    \t   Possible values are 'cpu' or 'none'.
    \t-t, --trace=
    \t   Possible values are 'cuda', 'nvtx', 'osrt', 'cublas', 'cudnn', 'none'.
    \t-w, --show-output=
    \t   Possible values are 'true' or 'false'.
    """)  # synthetic: an older nsys spelling (sampling named 'cpu', no --stop-on-exit)

FAKE_NSYS = """#!/bin/bash
echo "nsys $* [TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-unset}]" >> "$FAKE_LOG"
if [ -n "${FAKE_HANG:-}" ] && [ "$1" = profile ] && [ "$2" != --help ]; then echo $$ > "$FAKE_HANG"; exec sleep 600; fi
case "$1" in
  --version) echo "NVIDIA Nsight Systems version $FAKE_VERSION" ;;
  profile)
    if [ "$2" = "--help" ]; then cat "$FAKE_HELP"; exit 0; fi
    out=""; prev=""
    for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
    [ -n "$FAKE_WRITE_REPORT" ] && echo fake > "$out.nsys-rep"
    exit "${FAKE_APP_RC:-0}" ;;
  stats) cat "$FAKE_CSV" ;;
esac
"""

FAKE_NCU = """#!/bin/bash
echo "ncu $*" >> "$FAKE_LOG"
cat "$FAKE_NCU_OUT"
"""


def system_tools(tmp_path):
    """A folder with only the programs run_nsys.sh needs, so that an nsys or ncu installed on the
    machine (in /usr/bin, say) never takes the place of the fakes."""
    folder = tmp_path / "system"
    if not folder.exists():
        folder.mkdir()
        for tool in ("bash", "sh", "sed", "awk", "grep", "head", "cat", "dirname", "stat", "mktemp", "rm", "touch",
                     "readlink", "setsid", "sleep", "chmod", "mv"):
            found = shutil.which(tool)
            if found:
                os.symlink(found, folder / tool)
    return folder


def default_signals():
    """In the wrapper's process, before bash starts: the signals it handles at their defaults. bash
    cannot trap a signal ignored when it starts, as SIGINT and SIGQUIT are for a command put in the
    background of a script (and SIGHUP under nohup), whichever way these tests were started."""
    for s in HANDLED_SIGNALS:
        signal.signal(s, signal.SIG_DFL)


@pytest.fixture
def fake_tools(tmp_path):
    """A bin folder with fake nsys/ncu that log their arguments; returns a runner."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"

    def install(name, text):
        p = bin_dir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)

    def wrapper(*args, **env):
        full = {"PATH": "%s:%s" % (bin_dir, system_tools(tmp_path)),
                "PYTHON": sys.executable, "FAKE_LOG": str(log), "HOME": str(tmp_path)}
        full.update({k: str(v) for k, v in env.items()})
        proc = subprocess.run(["bash", WRAPPER] + list(args), capture_output=True, text=True,
                              env=full, cwd=tmp_path, timeout=120, preexec_fn=default_signals)
        calls = log.read_text() if log.exists() else ""
        return proc.returncode, proc.stdout, proc.stderr, calls

    wrapper.install = install
    wrapper.tmp = tmp_path
    return wrapper


def csv_file(tmp_path, text):
    p = tmp_path / "stats.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize("csv_text, rc", [(FIXED_CSV, 0), (AFFECTED_CSV, 1)], ids=["fixed", "affected"])
def test_wrapper_respells_legacy_flags_for_nsys_2023(fake_tools, csv_text, rc):
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools(
        "--", "--device", "cuda", FAKE_VERSION="2023.4.4.54-234433681190v0",
        FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"), FAKE_WRITE_REPORT=1,
        FAKE_CSV=csv_file(fake_tools.tmp, csv_text))
    assert got == rc, stdout + stderr
    profile = next(l for l in calls.splitlines() if "--capture-range=" in l)
    assert "[TORCHINDUCTOR_COMPILE_THREADS=1]" in profile  # keeps the raw capture to a few MB
    assert "-w true -t cuda,nvtx,cudnn,cublas -s process-tree --capture-range=cudaProfilerApi " \
           "--capture-range-end=stop --kill=none --force-overwrite true -x true -o " \
           "torch_compile_selective_activation_checkpoint" in profile
    assert re.search(r"--loops-only --_env \S+ --device cuda$", profile.split(" [")[0])
    assert "has no '-s cpu'" in stderr
    assert "nsys stats -q -r nvtx_kern_sum -f csv -o - --force-export=true " \
           "torch_compile_selective_activation_checkpoint.nsys-rep" in calls


def test_wrapper_keeps_the_reports_spelling_where_nsys_has_it(fake_tools, tmp_path):
    help_file = tmp_path / "legacy_help.txt"
    help_file.write_text(LEGACY_HELP)
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools(
        "-o", "mine", FAKE_VERSION="2021.1", FAKE_HELP=help_file, FAKE_WRITE_REPORT=1,
        FAKE_CSV=csv_file(tmp_path, FIXED_CSV))
    assert got == 0, stdout + stderr
    profile = next(l for l in calls.splitlines() if "--capture-range=" in l)
    assert " -s cpu " in profile and " -x " not in profile and "-o mine " in profile
    assert "no -x/--stop-on-exit" in stderr


def test_wrapper_without_a_report_cannot_test(fake_tools):
    fake_tools.install("nsys", FAKE_NSYS)
    got, _, stderr, _ = fake_tools(FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"))
    assert got == 125
    assert "wrote no report" in stderr


def test_wrapper_passes_on_the_repros_cannot_test(fake_tools):
    """The capture run said cannot_test (125); even a report that nsys wrote must not be judged."""
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools(
        FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"), FAKE_APP_RC=125,
        FAKE_WRITE_REPORT=1, FAKE_CSV=csv_file(fake_tools.tmp, FIXED_CSV))
    assert got == 125, stdout + stderr
    assert "nsys stats" not in calls and "VERDICT" not in stdout


def test_wrapper_never_judges_a_report_this_capture_did_not_write(fake_tools):
    """An nsys that captured nothing, and a report of an earlier capture in the folder: inside
    `git bisect run` that older report would repeat an earlier step's answer."""
    fake_tools.install("nsys", FAKE_NSYS)
    old = fake_tools.tmp / "torch_compile_selective_activation_checkpoint.nsys-rep"
    old.write_text("an earlier capture")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    got, stdout, stderr, calls = fake_tools(
        FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
        FAKE_CSV=csv_file(fake_tools.tmp, FIXED_CSV))
    assert got == 125, stdout + stderr
    assert "nsys stats" not in calls and "VERDICT" not in stdout
    assert "wrote no report" in stderr
    assert old.read_text() == "an earlier capture"  # left where it was


@pytest.mark.parametrize("extra, rc, says", [
    (["--hunt-fix"], 0, "VERDICT: reproduced (exit 0)"),
    (["--device", "cuda", "--hunt-fix"], 0, "VERDICT: reproduced (exit 0)"),
    (["--markdown"], 1, "- **Verdict:** `reproduced` (exit 1)"),
], ids=["hunt-fix", "device-and-hunt-fix", "markdown"])
def test_verdict_options_reach_the_judge(fake_tools, extra, rc, says):
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools(
        "--", *extra, FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
        FAKE_WRITE_REPORT=1, FAKE_CSV=csv_file(fake_tools.tmp, AFFECTED_CSV))
    assert got == rc, stdout + stderr
    assert says in stdout
    profile = next(l for l in calls.splitlines() if "--capture-range=" in l)
    assert "--hunt-fix" not in profile and "--markdown" not in profile  # the capture run gives no verdict


def test_verdict_json_reaches_the_judge(fake_tools):
    fake_tools.install("nsys", FAKE_NSYS)
    out = fake_tools.tmp / "verdict.json"
    got, stdout, stderr, _ = fake_tools(
        "--", "--json", str(out), FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
        FAKE_WRITE_REPORT=1, FAKE_CSV=csv_file(fake_tools.tmp, AFFECTED_CSV))
    assert got == 1, stdout + stderr
    assert '"verdict": "reproduced"' in out.read_text()


def test_wrapper_help_says_which_options_reach_which_run(fake_tools):
    got, stdout, _, _ = fake_tools("--help")
    assert got == 0
    assert "--hunt-fix" in stdout and "--device" in stdout and "judge" in stdout


def test_wrapper_judges_a_partial_real_capture_as_cannot_test(fake_tools):
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, _, _ = fake_tools(FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                   FAKE_WRITE_REPORT=1, FAKE_CSV=data("h200-torch2.11", "stats_nvtx_kern_sum.csv"))
    assert got == 125 and "incomplete evidence" in stdout


def test_wrapper_falls_back_to_ncu(fake_tools):
    fake_tools.install("ncu", FAKE_NCU)
    got, stdout, stderr, calls = fake_tools(FAKE_NCU_OUT=data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"))
    assert got == 0, stdout + stderr
    assert "using Nsight Compute instead" in stderr
    assert "ncu --nvtx --print-summary per-nvtx --profile-from-start off" in calls
    assert re.search(r"--loops-only --_env \S+$", calls.rstrip())
    assert "f_compiled_with_context <0..49>: 50 ranges with kernels, 50 ran compiled code, 0 ran eagerly" in stdout


def test_wrapper_without_any_profiler_says_what_to_do(fake_tools):
    got, stdout, stderr, _ = fake_tools()
    assert got >= 128
    assert "neither nsys (Nsight Systems) nor ncu" in stderr
    assert "torch.profiler" in stderr and len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize("args, message", [
    (["--report"], "--report takes one FILE"),
    (["--report", "missing.nsys-rep"], "report file not found"),
    (["--report", data("nsys-2023.4.4-profile-help.txt")], "expected an nvtx_kern_sum CSV"),
    (["-o"], "-o needs a report NAME"),
])
def test_wrapper_bad_input_aborts(fake_tools, args, message):
    got, stdout, stderr, _ = fake_tools(*args)
    assert got >= 128, (stdout, stderr)
    assert message in stderr and len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--", "--json", os.path.join(ROOT, "README.md")], "a file of this bundle"),
    (["--", "--json", ""], "--json was given an empty path"),
    (["--", "--plot", "evidence.txt"], "--plot"),
    (["--", "--markdown", "--json", "-"], "both want stdout"),
    (["-o", "cap", "--", "--json", "cap.nsys-rep"], "the capture being judged"),
    (["-o", "/proc/cap"], "-o /proc/cap: nsys cannot write a report in /proc"),
])
def test_the_judges_options_and_the_reports_folder_are_refused_before_the_capture(fake_tools, args, message):
    """A usage error found only by the judge, after a capture of minutes, came out as 125 or as
    a verdict; it must stop the wrapper before nsys runs (128, one line)."""
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools(*args, FAKE_VERSION="2023.4.4", FAKE_WRITE_REPORT=1,
                                            FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                            FAKE_CSV=csv_file(fake_tools.tmp, AFFECTED_CSV))
    assert got == 128, (stdout, stderr)
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert calls == "" and stdout == ""  # nsys was never asked


def test_report_of_a_real_sqlite_export(fake_tools):
    got, stdout, _, _ = fake_tools("--report", data("h200-torch2.11", "capture.sqlite"))
    assert got == 125 and "f_compiled_with_context: missing 0-49" in stdout


def test_nsys_rep_without_nsys_is_a_usage_error(tmp_path):
    rep = tmp_path / "x.nsys-rep"
    rep.write_text("not really")
    rc, _, stderr = run(sys.executable, "--from-nsys", str(rep), env={"PATH": str(tmp_path)})
    assert rc >= 128 and "needs nsys on PATH" in stderr


@pytest.mark.parametrize("name", ["full_capture.sqlite", "full_nvtx_kern_sum.csv"])
def test_real_full_nsys_capture_of_the_fixed_torch(name):
    """run_nsys.sh's capture with nsys 2023.4.4 on the H200: all 100 ranges, Triton in both loops."""
    rc, stdout, _ = judge("--from-nsys", data("h200-torch2.11", name))
    assert rc == 0, stdout
    for loop in ("f_compiled_without_context", "f_compiled_with_context"):
        assert "%s <0..49>: 50 ranges with kernels, 50 ran compiled code, 0 ran eagerly" % loop in stdout


def test_real_ncu_summary_with_the_fix_reverted():
    """H200, torch 2.11 with SAC's ignore_compile_internals reverted in-process: the eager kernels
    an affected torch launches under SAC."""
    rc, stdout, _ = judge("--from-ncu",
                        data("h200-torch2.11-fix-reverted", "ncu_per_nvtx_run_nsys.txt"))
    assert rc == 1, stdout
    assert "f_compiled_without_context <0..49>: 50 ranges with kernels, 50 ran compiled code, 0 ran eagerly" in stdout
    assert "f_compiled_with_context <0..49>: 50 ranges with kernels, 0 ran compiled code, 50 ran eagerly" in stdout
    assert "100 x eager_aten   vectorized_elementwise_kernel<4, AUnaryFunctor<float, float, float, " \
           "binary_internal::MulFunctor" in stdout
    assert "eager MulFunctor kernel, CUDAFunctorOnSelf_add kernel" in stdout


@pytest.mark.parametrize("name", ["capture.sqlite", "nvtx_kern_sum.csv"])
def test_real_nsys_capture_with_the_fix_reverted(name):
    """run_nsys.sh with nsys 2023.4.4 on the H200, torch 2.11 with SAC's ignore_compile_internals
    reverted in-process: every range under SAC ran MulFunctor/CUDAFunctorOnSelf_add kernels."""
    rc, stdout, _ = judge("--from-nsys", data("h200-torch2.11-fix-reverted", name))
    assert rc == 1, stdout
    assert "f_compiled_with_context <0..49>: 50 ranges with kernels, 0 ran compiled code, 50 ran eagerly" in stdout
    assert "VERDICT: reproduced (exit 1): 50 of 50 calls under SAC ran eagerly" in stdout


def test_an_sqlite_export_under_another_extension_is_judged_by_its_content(fake_tools, tmp_path):
    """The format is read from the file's first bytes, never from its name: a .db is an SQLite export."""
    db = tmp_path / "x.db"
    shutil.copy(data("h200-torch2.11-fix-reverted", "capture.sqlite"), db)
    rc, stdout, _ = judge("--from-nsys", db)
    assert rc == 1 and "VERDICT: reproduced (exit 1): 50 of 50 calls under SAC ran eagerly" in stdout, stdout
    got, stdout, stderr, _ = fake_tools("--report", str(db))
    assert got == 1 and "50 ran eagerly" in stdout, stdout + stderr


def test_hunting_the_fix_on_a_real_affected_capture_exits_0(fake_tools):
    got, stdout, stderr, _ = fake_tools("--report", data("h200-torch2.11-fix-reverted", "capture.sqlite"), "--hunt-fix")
    assert got == 0, stdout + stderr
    assert "VERDICT: reproduced (exit 0)" in stdout


# ------------------------------------------------------------- the wrapper's own edges
def test_wrapper_through_a_symlink_judges_like_in_place(fake_tools, tmp_path):
    link = tmp_path / "elsewhere" / "run_nsys.sh"
    link.parent.mkdir()
    os.symlink(WRAPPER, link)
    proc = subprocess.run(["bash", str(link), "--report", data("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv")],
                          capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 1, proc.stdout + proc.stderr


@pytest.mark.parametrize("python", ["/missing/python3", "false", "sh"])
def test_wrapper_with_a_bad_python_aborts(fake_tools, python):
    got, stdout, stderr, _ = fake_tools("--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), PYTHON=python)
    assert got == 128, (stdout, stderr)
    assert "PYTHON" in stderr and len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--", "--timeout", "abc"], "--timeout"),
    (["--", "--timeout", "nan"], "finite"),
    (["--", "--device", "gpu"], "invalid choice"),
    (["-o", "/missing/dir/x"], "the folder /missing/dir does not exist"),
    (["--report", ""], "--report"),
    (["-o", ""], "-o needs a report NAME"),
    # an option where the name should be: once "the folder  does not exist", with dirname's own errors
    (["-o", "-x"], "-o needs a report NAME, and -x is an option"),
    (["-o", "--report"], "-o needs a report NAME, and --report is an option"),
    (["-o", "--hunt-fix"], "-o needs a report NAME, and --hunt-fix is an option"),
    (["-o", "--"], "-o needs a report NAME, and -- is an option"),
    # nsys expands %p, %h, %n, %q{VAR} and %% in -o: the report would be written under another name
    (["-o", "cap_%p"], "-o cap_%p: nsys expands %"),
    (["-o", "run_%q{HOME}.nsys-rep"], "-o run_%q{HOME}.nsys-rep: nsys expands %"),
    (["-o", "100%%"], "-o 100%%: nsys expands %"),
    # options for the judge go after --; capture options with --report would change nothing
    (["--hunt-fix"], "--hunt-fix: options for the script go after --"),
    (["-o", "mine", "--json", "v.json"], "--json: options for the script go after --"),
    (["--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), "--device", "cuda"], "--device would change nothing"),
    (["--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), "--timeout=5"], "--timeout=5 would change nothing"),
    (["--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), "-o", "mine"], "-o: not an option run_nsys.sh passes on"),
    (["--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), "--", "--hunt-fix"], "--: not an option"),
])
def test_wrapper_usage_errors_abort_before_any_capture(fake_tools, args, message):
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools(*args, FAKE_VERSION="2023.4.4", FAKE_WRITE_REPORT=1,
                                            FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                            FAKE_CSV=csv_file(fake_tools.tmp, FIXED_CSV))
    assert got == 128, (stdout, stderr)
    assert message in stderr and len(stderr.strip().splitlines()) == 1
    assert "profile -" not in calls  # nothing was captured


def test_wrapper_takes_a_name_with_the_reports_extension(fake_tools):
    fake_tools.install("nsys", FAKE_NSYS)
    got, stdout, stderr, calls = fake_tools("-o", "mine.nsys-rep", FAKE_VERSION="2023.4.4", FAKE_WRITE_REPORT=1,
                                            FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                            FAKE_CSV=csv_file(fake_tools.tmp, AFFECTED_CSV))
    assert got == 1, stdout + stderr
    assert "-o mine " in calls and "mine.nsys-rep" in calls


def test_wrapper_never_judges_a_stale_qdrep(fake_tools):
    """An older .qdrep (nsys before 2021.4) lies here and this capture wrote nothing."""
    fake_tools.install("nsys", FAKE_NSYS)
    old = fake_tools.tmp / "torch_compile_selective_activation_checkpoint.qdrep"
    old.write_text("an earlier capture")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    got, stdout, stderr, calls = fake_tools(FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                            FAKE_CSV=csv_file(fake_tools.tmp, FIXED_CSV))
    assert got == 125, stdout + stderr
    assert "nsys stats" not in calls and "VERDICT" not in stdout


def test_strict_policy_reaches_the_judge_through_the_wrapper(fake_tools):
    """The loops run forward only, so --strict-policy cannot be settled from a capture: 125."""
    fake_tools.install("nsys", FAKE_NSYS)
    common = dict(FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                  FAKE_WRITE_REPORT=1, FAKE_CSV=csv_file(fake_tools.tmp, FIXED_CSV))
    assert fake_tools(**common)[0] == 0
    got, stdout, _, _ = fake_tools("--", "--strict-policy", **common)
    assert got == 125 and "--strict-policy" in stdout


def test_wrapper_passes_on_ncus_cannot_test(fake_tools):
    fake_tools.install("ncu", FAKE_NCU + 'exit "${FAKE_APP_RC:-0}"\n')
    got, stdout, stderr, _ = fake_tools(FAKE_NCU_OUT=data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"), FAKE_APP_RC=125)
    assert got == 125, stdout + stderr
    assert "VERDICT" not in stdout


def test_a_failing_nsys_stats_aborts(fake_tools):
    fake_tools.install("nsys", FAKE_NSYS.replace('stats) cat "$FAKE_CSV" ;;', 'stats) echo "ERROR: broken export" >&2; exit 1 ;;'))
    got, stdout, stderr, _ = fake_tools(FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                        FAKE_WRITE_REPORT=1)
    assert got == 128, stdout + stderr
    assert "nsys stats could not read it" in stderr and "broken export" in stderr


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                     (signal.SIGQUIT, 131)])
def test_a_signal_to_the_wrapper_ends_the_capture(fake_tools, sig, rc):
    """The capture (here an nsys that hangs) runs in a session of its own; a signal to run_nsys.sh
    ends it, and nothing is judged."""
    fake_tools.install("nsys", FAKE_NSYS)
    pidfile = fake_tools.tmp / "nsys.pid"
    env = {"PATH": "%s:%s" % (fake_tools.tmp / "bin", system_tools(fake_tools.tmp)), "PYTHON": sys.executable,
           "FAKE_LOG": str(fake_tools.tmp / "calls.log"), "HOME": str(fake_tools.tmp), "FAKE_VERSION": "2023.4.4",
           "FAKE_HELP": data("nsys-2023.4.4-profile-help.txt"), "FAKE_HANG": str(pidfile)}
    proc = subprocess.Popen(["bash", WRAPPER], env=env, cwd=fake_tools.tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        deadline = time.time() + 60
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.time() < deadline, "the capture never started"
            time.sleep(0.1)
        nsys_pid = int(pidfile.read_text())
        time.sleep(0.3)
        proc.send_signal(sig)
        sent = time.time()
        out, err = proc.communicate(timeout=60)
        assert time.time() - sent < 5, "the capture was not asked to stop (SIGTERM), only killed at last"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == rc, (out, err)
    assert "interrupted" in err and "VERDICT" not in out
    deadline = time.time() + 15
    while os.path.exists("/proc/%d" % nsys_pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not os.path.exists("/proc/%d" % nsys_pid), "the capture still runs"


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                     (signal.SIGQUIT, 131)])
def test_a_judge_ended_by_a_signal_passes_it_on(fake_tools, tmp_path, sig, rc):
    """Only the judge got the signal (the wrapper got none): 128+n, neither a verdict nor a bug."""
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\ncase "$1" in -c) exec %s "$@" ;; esac\nkill -%d $$\n' % (sys.executable, sig))
    python.chmod(0o755)
    got, stdout, stderr, _ = fake_tools("--report", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), PYTHON=python)
    assert got == rc, (stdout, stderr)


def test_a_failure_inside_the_wrapper_is_no_verdict(fake_tools, tmp_path):
    """The outermost guard: a failure that no input reaches is injected here (through BASH_ENV, a
    function that exits 1 in place of a builtin the wrapper runs). It must leave as 128, never
    as 1, the code of `reproduced`."""
    fake_tools.install("nsys", FAKE_NSYS)
    injected = tmp_path / "inject.sh"
    injected.write_text("export() { exit 1; }\n")
    got, stdout, stderr, _ = fake_tools(FAKE_VERSION="2023.4.4", FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                        BASH_ENV=injected)
    assert got == 128, (stdout, stderr)
    assert "outside the verdict" in stderr


def test_an_ncu_that_wrote_nothing_cannot_test(fake_tools):
    fake_tools.install("ncu", '#!/bin/bash\necho "ncu $*" >> "$FAKE_LOG"\n')
    got, stdout, stderr, _ = fake_tools()
    assert got == 125, stdout + stderr
    assert "ncu wrote nothing" in stderr and "VERDICT" not in stdout


# An nsys that runs the application it is given, as the real one does, and reports a recorded capture.
APP_RUNNING_NSYS = """#!/bin/bash
case "$1" in
  --version) echo "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0" ;;
  profile)
    if [ "$2" = "--help" ]; then cat "$FAKE_HELP"; exit 0; fi
    shift; while [ "$1" != "-o" ]; do shift; done; out=$2; shift 2
    "$@"; rc=$?; echo fake > "$out.nsys-rep"; exit $rc ;;
  stats) cat "$FAKE_CSV" ;;
esac
"""


def with_compiler(fake_tools):
    """PATH for a capture run that really compiles on the CPU: Inductor's C++ compiler too (after the
    fakes, which a real nsys there cannot shadow)."""
    return "%s:%s:%s" % (fake_tools.tmp / "bin", system_tools(fake_tools.tmp), os.path.dirname(shutil.which("g++")))


@pytest.mark.release  # a capture run that compiles for real (29 s); the hand-off's parts are fast-tier tests
def test_the_capture_runs_torch_reaches_the_judges_report(fake_tools):
    """The judge of a capture names the torch the capture ran (run_nsys.sh's --_env hand-off),
    and the hand-off is gone afterwards."""
    fake_tools.install("nsys", APP_RUNNING_NSYS)
    rc, stdout, stderr, _ = fake_tools("--", "--device", "cpu", "--markdown", FAKE_CSV=REVERTED_CSV,
                                       FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"), TMPDIR=fake_tools.tmp,
                                       PATH=with_compiler(fake_tools))
    import torch
    assert rc == 1, stdout + stderr
    assert "ran the report's two loops on cpu (torch %s);" % torch.__version__ in stdout
    judged = "\n".join(stdout.splitlines()[1:])  # the judge's markdown, after the capture run's line
    assert "torch %s" % torch.__version__ in judged
    assert "--_env" not in judged
    assert "/run_nsys.sh -- --device cpu --markdown`" in judged and "Command: `PYTHON=" in judged  # what reruns the capture
    assert not [p for p in os.listdir(fake_tools.tmp) if p.startswith("run_nsys_run.")]


@pytest.mark.release  # a capture run that compiles (8 s); test_the_judge_names_what_changed_the_capture_runs_torch stays fast
def test_under_the_revert_the_capture_run_names_it_and_quotes_dynamo(fake_tools):
    """2.12 and later, with the fix reverted: the report's loops raise Dynamo's fullgraph error, so
    no capture is judged; the capture run says which torch ran and why Dynamo skipped f."""
    fake_tools.install("nsys", APP_RUNNING_NSYS)
    import torch
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 12):
        pytest.skip("the fullgraph error of the report's loops comes with 2.12")
    rc, stdout, stderr, _ = fake_tools("--", "--device", "cpu", FAKE_CSV=REVERTED_CSV,
                                       FAKE_HELP=data("nsys-2023.4.4-profile-help.txt"),
                                       PYTHONPATH=os.path.join(ROOT, "sac_repro", "revert_fix"), PATH=with_compiler(fake_tools))
    assert rc == 125, stdout + stderr
    first, dynamo = stdout.splitlines()
    assert "changed: the 2.10 fix reverted in-process (sac_repro/revert_fix/sitecustomize.py)" in first
    assert dynamo == ("dynamo (the report's loops): skipping: f (reason: non-infra torch dispatch mode present, "
                      "this is not supported today in torch.compile)")


def test_the_judge_names_what_changed_the_capture_runs_torch(tmp_path, monkeypatch):
    """What the capture run handed over is what the judge's text, markdown and JSON say."""
    from sac_repro.judge import render
    for k in [k for k in os.environ if render.RERUN_VARIABLES.fullmatch(k)]:  # this shell's own switches
        monkeypatch.delenv(k)
    change = {"label": "the 2.10 fix reverted in-process", "file": os.path.join(ROOT, "sac_repro", "revert_fix", "sitecustomize.py"),
              "pythonpath": os.path.join(ROOT, "sac_repro", "revert_fix"), "env": {}}
    handoff = tmp_path / "handoff.json"
    handoff.write_text(json.dumps({"env": {"torch": "2.11.0+cu130", "device": "cuda", "changes": [change]},
                                   "dynamo_skips": [{"where": "the report's loops", "frame": "f", "source": "log",
                                                     "reason": "non-infra torch dispatch mode present"}]}))
    rc, text, _ = judge("--from-nsys", REVERTED_CSV, "--_env", handoff)
    assert rc == 1
    assert "torch 2.11.0+cu130" in text and "| changed: the 2.10 fix reverted in-process (sac_repro/revert_fix/sitecustomize.py)" in text
    assert "dynamo (the report's loops): skipping: f (reason: non-infra torch dispatch mode present)" in text
    rc, markdown, _ = judge("--from-nsys", REVERTED_CSV, "--markdown", "--_env", handoff)
    assert "PYTHONPATH=%s %s %s --from-nsys" % (render.shell_value(change["pythonpath"]), render.shell_path(sys.executable),
                                                 render.shell_path(os.path.join(ROOT, "sac_repro"))) in markdown
    assert "--_env" not in markdown
    rc, as_json, _ = judge("--from-nsys", REVERTED_CSV, "--json", "-", "--_env", handoff)
    assert json.loads(as_json)["torch_changes"] == [change]
    # a hand-off of today's capture run also says how the capture was run: the paste reruns run_nsys.sh
    handoff.write_text(json.dumps(dict(json.loads(handoff.read_text()), capture_options=["--device", "cuda"])))
    rc, markdown, _ = judge("--from-nsys", REVERTED_CSV, "--markdown", "--hunt-fix", "--_env", handoff)
    command = re.search(r"Command: `([^`]*)`", markdown).group(1)
    assert command.startswith("PYTHONPATH=%s PYTHON=%s %s -o " % (render.shell_value(change["pythonpath"]), render.shell_path(
        sys.executable), render.shell_path(os.path.join(ROOT, "run_nsys.sh"))))
    assert command.endswith(" -- --device cuda --markdown --hunt-fix") and "--from-nsys" not in command


def test_the_command_of_a_capture_leaves_out_what_run_nsys_sh_sets_itself(tmp_path, monkeypatch):
    """run_nsys.sh exports TORCHINDUCTOR_COMPILE_THREADS=1 for its capture and its judge; the Command,
    which reruns run_nsys.sh, sets it again by itself: it carries the variables the user set, not that."""
    from sac_repro.judge import render
    for k in [k for k in os.environ if render.RERUN_VARIABLES.fullmatch(k)]:  # this shell's own switches
        monkeypatch.delenv(k)
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")  # as run_nsys.sh exports it
    monkeypatch.setenv("TORCHINDUCTOR_FREEZING", "1")  # the user's own
    handoff = tmp_path / "handoff.json"
    handoff.write_text(json.dumps({"env": {"torch": "2.11.0+cu130", "device": "cuda"}, "dynamo_skips": [],
                                   "capture_options": ["--device", "cuda"]}))
    rc, markdown, _ = judge("--from-nsys", REVERTED_CSV, "--markdown", "--_env", handoff)
    command = re.search(r"Command: `([^`]*)`", markdown).group(1)
    assert rc == 1 and command.startswith("TORCHINDUCTOR_FREEZING=1 PYTHON="), command
    assert "COMPILE_THREADS" not in command


@pytest.mark.parametrize("content", [
    "", "[]", '{"env": 3, "dynamo_skips": []}', "{",
    '{"env": {"changes": "abc"}, "dynamo_skips": []}', '{"env": {}, "dynamo_skips": ["str"]}',
    '{"env": {}, "dynamo_skips": [{"frame": 1}]}', '{"env": {"changes": [{"label": "L", "env": "x"}]}, "dynamo_skips": []}',
    '{"env": {"changes": [{"label": "L", "pythonpath": 5}]}, "dynamo_skips": []}', '{"env": {"torch": ["X"]}, "dynamo_skips": []}',
    '{"env": {}, "dynamo_skips": [], "capture_options": "--device cpu"}',
    '{"env": {}, "dynamo_skips": [], "capture_options": ["--device", 1]}'])
def test_a_hand_off_that_is_not_the_capture_runs_is_a_usage_error(tmp_path, content):
    handoff = tmp_path / "handoff.json"
    handoff.write_text(content)
    rc, stdout, stderr = judge("--from-nsys", REVERTED_CSV, "--_env", handoff)
    assert rc == 128 and stdout == ""
    assert "--_env %s:" % handoff in stderr and "leave it out" in stderr and len(stderr.strip().splitlines()) == 1


@pytest.mark.release
def test_every_mutant_of_the_wrapper_is_killed():
    """tests/mutate.py run_nsys.sh: each hand-made mutant of run_nsys.sh fails this file's tests. It
    runs this file once per mutant (over 15 minutes on 2 cores), hence the release tier."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "mutate.py"), "run_nsys.sh"], capture_output=True,
                          text=True, timeout=3 * 3600)
    lines = proc.stdout.strip().splitlines()
    assert lines and all(l.startswith("killed ") for l in lines[:-1]), proc.stdout + proc.stderr[-2000:]
    assert proc.returncode == 0 and lines[-1].startswith(
        "%d of %d mutants of run_nsys.sh killed (" % (len(lines) - 1, len(lines) - 1)), proc.stdout


def test_the_hand_off_is_never_written_over_a_file_of_the_bundle_or_the_judges_output(tmp_path):
    readme = os.path.join(ROOT, "README.md")
    before = open(readme, "rb").read()
    try:
        rc, _, stderr = judge("--loops-only", "--device", "cpu", "--_env", readme)
    finally:  # where the guard fails, the README must survive its test
        if open(readme, "rb").read() != before:
            open(readme, "wb").write(before)
            pytest.fail("--_env wrote over README.md (restored)")
    assert rc == 128 and "--_env %s is README.md, a file of this bundle" % readme in stderr
    out = tmp_path / "out.json"
    rc, _, stderr = judge("--from-nsys", REVERTED_CSV, "--json", out, "--_env", out)
    assert rc == 128 and "the capture run's hand-off" in stderr and not out.exists()


@pytest.mark.parametrize("ncu", ['#!/bin/bash\necho "ncu $*" >> "$FAKE_LOG"\n',  # writes nothing
                                 FAKE_NCU + 'exit 125\n'],  # the capture run could not test
                         ids=["ncu-wrote-nothing", "capture-cannot-test"])
def test_a_failed_ncu_capture_leaves_the_earlier_summary(fake_tools, ncu):
    """The ncu fallback emptied NAME.ncu.txt before ncu started, and left it empty when ncu failed."""
    fake_tools.install("ncu", ncu)
    earlier = fake_tools.tmp / "mine.ncu.txt"
    earlier.write_text("an earlier summary\n")
    got, stdout, stderr, _ = fake_tools("-o", "mine", FAKE_NCU_OUT=data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"))
    assert got == 125, stdout + stderr
    assert earlier.read_text() == "an earlier summary\n"
    assert not [p for p in os.listdir(fake_tools.tmp) if p.startswith(".") or p.endswith(".tmp")]


def test_an_ncu_capture_under_the_longest_legal_name(fake_tools):
    """A 250-character name: the temporary file it is written through must fit the same folder."""
    fake_tools.install("ncu", FAKE_NCU)
    name = "n" * (255 - len(".ncu.txt"))
    got, stdout, stderr, _ = fake_tools("-o", name, FAKE_NCU_OUT=data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"))
    assert got == 0, stdout + stderr
    assert (fake_tools.tmp / (name + ".ncu.txt")).stat().st_size > 0


def test_the_ncu_fallback_passes_the_judges_options_on(fake_tools):
    """--hunt-fix, --json and --markdown reach the judge of an ncu capture as they do nsys's."""
    fake_tools.install("ncu", FAKE_NCU)
    out = fake_tools.tmp / "verdict.json"
    got, stdout, stderr, _ = fake_tools("--", "--hunt-fix", "--json", str(out), "--markdown",
                                        FAKE_NCU_OUT=data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"))
    assert got == 1, stdout + stderr  # fixed, hunting the fix: the new term
    assert json.loads(out.read_text())["verdict"] == "not_reproduced"
    assert stdout.startswith("### ") and "ncu" in stdout
    assert "--hunt-fix" in stdout  # the paste's command reruns it so


def test_an_ncu_that_prints_no_summary_leaves_the_earlier_one(fake_tools):
    """ncu without the counters' permission runs the app and prints only ==PROF== lines: not empty,
    and no summary. It replaced a good NAME.ncu.txt with them, then failed as a usage error (128)."""
    fake_tools.install("ncu", '#!/bin/bash\necho "ncu $*" >> "$FAKE_LOG"\necho "==PROF== Connected to process 1"\n'
                              'echo "==ERROR== ERR_NVGPUCTRPERM - no permission to access NVIDIA GPU Performance Counters"\n')
    earlier = fake_tools.tmp / "mine.ncu.txt"
    earlier.write_text("an earlier summary\n")
    got, stdout, stderr, _ = fake_tools("-o", "mine")
    assert got == 125, stdout + stderr
    assert "ncu wrote no per-NVTX summary" in stderr and earlier.read_text() == "an earlier summary\n"


@pytest.mark.parametrize("umask, mode", [(0o002, 0o664), (0o027, 0o640)])
def test_the_ncu_summary_gets_the_mode_of_a_file_the_user_writes(fake_tools, umask, mode):
    """NAME.ncu.txt is written through a temporary file, which mktemp makes 0600: the summary gets
    the mode that `ncu ... > NAME.ncu.txt` would give it under the user's umask."""
    fake_tools.install("ncu", FAKE_NCU)
    before = os.umask(umask)
    try:
        got, stdout, stderr, _ = fake_tools("-o", "mine", FAKE_NCU_OUT=data("h200-torch2.11", "ncu_per_nvtx_run_nsys.txt"))
    finally:
        os.umask(before)
    assert got == 0, stdout + stderr
    assert stat.S_IMODE((fake_tools.tmp / "mine.ncu.txt").stat().st_mode) == mode
