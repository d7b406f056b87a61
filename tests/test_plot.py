"""--plot: a picture of what the verdict was judged from. Each evidence path writes a valid image;
what each picture draws equals what the verdict used, recounted here independently from the raw
evidence; without matplotlib, --plot is a usage error before any work; without --plot nothing
imports matplotlib."""
import collections
import copy
import csv
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import data, judge, JUDGED, recorded, ROOT
from sac_repro.judge import plot, verdict

pytestmark = pytest.mark.unit  # no torch: the inner loop, `pytest -m unit tests`

pytest.importorskip("matplotlib")

CHILDREN = {"2.13 fixed": data("cpu-torch2.13", "child_fixed.json"),
            "2.13 fix reverted": data("cpu-torch2.13", "child_fix_reverted.json"),
            "2.9.1": data("cpu-torch2.9.1", "child.json"),
            "H200 2.11 fixed": data("h200-torch2.11", "child_fixed.json"),
            "H200 2.11 fix reverted": data("h200-torch2.11-fix-reverted", "child.json")}
CAPTURES = [("--from-nsys", data("h200-torch2.11", "full_capture.sqlite")),
            ("--from-nsys", data("h200-torch2.11-fix-reverted", "capture.sqlite")),
            ("--from-nsys", data("h200-torch2.11", "full_nvtx_kern_sum.csv")),
            ("--from-nsys", data("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv")),
            ("--from-ncu", data("h200-torch2.11-fix-reverted", "ncu_per_nvtx_run_nsys.txt"))]


def independent_class(name):
    """The classes, written again from the README's words, not from the verdict's code."""
    if name.startswith(("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")) or \
            re.match(r"triton_|(graph_\d+_)?cpp_fused", name):
        return "compiled"
    if name in ("aten::mul", "aten::add") or re.search(r"MulFunctor|CUDAFunctorOnSelf_add", name):
        return "eager"
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm") or re.search(r"gemm|gemv|xmma|nvjet|cutlass", name, re.I):
        return "matmul"
    return "other"


def recount(names):
    out = collections.Counter()
    for name, n in names:
        out[independent_class(name)] += n
    return dict(out)


def is_image(path):
    head = open(path, "rb").read(512)
    return head.startswith(b"\x89PNG\r\n\x1a\n") or b"<svg" in head


# ------------------------------------------------------------------------------ legibility
def text_overlaps(fig):
    """Each pair of the figure's visible texts whose boxes overlap, as drawn (tick labels, titles,
    the notes and counts in the panels, the legend)."""
    import itertools
    import matplotlib.text
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip()]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


@pytest.fixture
def drawn_figures(monkeypatch):
    """The figures the pictures draw, kept open to be measured."""
    plt, figures = plot.pyplot(), []
    close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    yield figures
    for fig in figures:
        close(fig)


# ------------------------------------------------------------------------ torch.profiler path
@pytest.mark.parametrize("name", sorted(CHILDREN))
def test_the_profiler_picture_draws_each_call_as_judged(tmp_path, name, drawn_figures):
    """What it draws, and legibly: issue 46's "saved: 2" sat on the axis' tick "2"."""
    raw = recorded(CHILDREN[name])
    report = verdict.report_from_child(copy.deepcopy(raw), "regression", False)
    series = plot.draw_report(report, str(tmp_path / "p.png"))
    assert text_overlaps(drawn_figures[-1]) == []
    assert is_image(tmp_path / "p.png") and os.path.getsize(tmp_path / "p.png") < 200_000
    assert list(series) == list(raw["scenarios"])
    for scenario, calls in series.items():
        measured = raw["scenarios"][scenario]["calls"]
        assert [kind for kind, _, _ in calls] == report["scenarios"][scenario]["calls"]
        for (kind, drawn, segments), call in zip(calls, measured):
            assert drawn == recount(call["names"]), (scenario, drawn, call["names"])
            assert sum(drawn.values()) == len(segments)


def test_the_profiler_picture_of_a_refused_call_draws_nothing_for_it(tmp_path):
    report = verdict.report_from_child(recorded(CHILDREN["2.13 fix reverted"]), "regression", False)
    series = plot.draw_report(report, str(tmp_path / "p.svg"))
    assert is_image(tmp_path / "p.svg")
    assert [(kind, drawn) for kind, drawn, _ in series["with_context"]] == [("eager", {})] * 3  # nothing recorded


def test_a_refused_call_is_labelled_for_what_was_recorded_of_it():
    """Issue 40: a row labelled "eager" stood above "nothing ran: fullgraph=True raised". Issue 45:
    "nothing ran" where the call had run f eagerly; a recording that kept none of its events says so."""
    report = verdict.report_from_child(recorded(CHILDREN["2.13 fix reverted"]), "regression", False)
    case = report["scenarios"]["with_context"]
    assert case["calls"] == ["eager"] * 3  # the verdict's kind: a refusal counts as the bug
    label, note = plot.call_label("eager", True, [])
    assert label == "raised" and note.startswith("nothing recorded: Dynamo raised") and "nothing ran" not in note
    assert plot.call_label("compiled", False, [("compiled", 0, 1, "cpu")]) == ("compiled", None)
    assert plot.call_label("eager", True, [("other", 0, 1, "cpu")]) == ("raised", "f's ops not seen: Dynamo raised\n(fullgraph=True)")


def ran_then_raised(raw):
    """The reverted recording with each call under SAC as the child records it since issue 45:
    what ran before fullgraph's error, with its timeline."""
    raw = copy.deepcopy(raw)
    names = [["aten::mul", 4], ["aten::add", 4], ["aten::mm", 2], ["aten::detach", 1]]
    timeline = [["aten::mul", 0.0, 5.0, "cpu"], ["aten::add", 6.0, 4.0, "cpu"], ["aten::mm", 11.0, 9.0, "cpu"],
                ["aten::detach", 21.0, 1.0, "cpu"]]
    raw["scenarios"]["with_context"]["calls"] = [
        {"names": names, "timeline": timeline, "refused": "RuntimeError: torch.compile with fullgraph=True found no "
         "compiled frames."} for _ in range(3)]
    return raw


def test_a_call_that_ran_eagerly_then_raised_is_drawn_and_labelled_so(tmp_path):
    """Issue 45: the picture said "nothing ran: Dynamo raised" of calls that ran f eagerly first."""
    report = verdict.report_from_child(ran_then_raised(recorded(CHILDREN["2.13 fix reverted"])), "regression", False)
    series = plot.draw_report(report, str(tmp_path / "p.png"))
    assert [drawn for _, drawn, _ in series["with_context"]] == [{"eager": 2, "matmul": 1, "other": 1}] * 3
    for kind, _, segments in series["with_context"]:
        assert plot.call_label(kind, True, segments) == ("eager, then raised", None)
    assert plot.absent_bars(report, ["with_context"]) == {"with_context": "not counted: the calls raised"}


@pytest.mark.parametrize("name, device", [("2.13 fixed", "cpu"), ("H200 2.11 fixed", "cuda")])
def test_the_caption_fits_the_device(name, device):
    report = verdict.report_from_child(recorded(CHILDREN[name]), "regression", False)
    assert report["device"] == device
    caption = plot.lanes_caption(report)
    assert ("GPU kernels" in caption and "no GPU kernels" not in caption) == (device == "cuda")


def test_every_absent_backward_bar_says_why():
    """Issue 40: backward bars were missing with no note. A run recorded before the CPU told a
    matmul that computes from one SAC serves (issue 46) has no count of the eager regions; a
    scenario whose calls raised has no backward to count."""
    for name, why in (("2.9.1", {"with_context": "counted matmuls in compiled code only",
                                 "eager_sac": "counted matmuls in compiled code only"}),
                      ("2.13 fix reverted", {"with_context": "the calls raised"})):
        report = verdict.report_from_child(recorded(CHILDREN[name]), "regression", False)
        names = list(report["scenarios"])
        counts, _ = plot.policy_series(report)
        notes = plot.absent_bars(report, names)
        assert set(notes) == set(names) - set(counts) and notes, (name, notes)
        for scenario, words in why.items():
            assert words in notes[scenario], (name, scenario, notes)
    report = verdict.report_from_child(recorded(CHILDREN["H200 2.11 fixed"]), "regression", False)
    assert plot.absent_bars(report, list(report["scenarios"])) == {"without_context_after_sac": "not measured: forward only"}


def test_the_policy_panel_draws_the_judged_counts():
    report = verdict.report_from_child(recorded(CHILDREN["2.13 fixed"]), "regression", False)
    counts, baseline = plot.policy_series(report)
    raw = recorded(CHILDREN["2.13 fixed"])["scenarios"]
    assert counts == {k: v["backward_matmuls"] for k, v in raw.items() if v.get("backward_matmuls") is not None}
    assert baseline == 2


# ------------------------------------------------------------------------------ capture paths
def csv_recount(path):
    """{scenario: {index: {class: instances}}} straight from an nvtx_kern_sum CSV."""
    out = {s: collections.defaultdict(collections.Counter) for s in verdict.LOOPS.values()}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            loop, index = row["NVTX Range"].rsplit(" ", 1)
            out[verdict.LOOPS[loop]][int(index)][independent_class(row["Kernel Name"])] += int(row["Kern Inst"])
    return out


@pytest.mark.parametrize("option, path", CAPTURES, ids=[os.path.basename(os.path.dirname(p)) + "/" + os.path.basename(p) for _, p in CAPTURES])
def test_each_capture_path_draws_a_picture(tmp_path, option, path):
    for ext in (".png", ".svg"):
        out = tmp_path / ("p" + ext)
        rc, stdout, stderr = judge(option, path, "--plot", out)
        assert rc in (0, 1), stderr
        assert is_image(out) and os.path.getsize(out) < 200_000


@pytest.mark.parametrize("name", [("h200-torch2.11", "full_nvtx_kern_sum.csv"),
                                  ("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv")])
def test_the_counts_picture_stacks_what_each_range_ran(tmp_path, name, drawn_figures):
    report = verdict.report_from_loops(__import__("sac_repro.judge.captures").judge.captures.load_ranges(data(*name), "nsys"),
                                       "nsys x", "regression", False)
    series = plot.draw_report(report, str(tmp_path / "p.png"))
    assert text_overlaps(drawn_figures[-1]) == []
    expected = csv_recount(data(*name))
    for scenario, ranges in series.items():
        assert [i for i, _, _ in ranges] == list(range(50))
        for index, kind, drawn in ranges:
            assert drawn == dict(expected[scenario][index]), (scenario, index)


@pytest.mark.parametrize("capture, csv_twin", [
    (("h200-torch2.11", "full_capture.sqlite"), ("h200-torch2.11", "full_nvtx_kern_sum.csv")),
    (("h200-torch2.11-fix-reverted", "capture.sqlite"), ("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv"))])
def test_the_timeline_draws_each_ranges_kernels(tmp_path, capture, csv_twin, drawn_figures):
    """The SQLite export's kernels per range, on the GPU time axis, are the kernels that nsys's
    own nvtx_kern_sum of the same report counts."""
    from sac_repro.judge import captures
    timeline = captures.timeline_from_sqlite(data(*capture), verdict.LOOP_RANGE, verdict.LOOPS)
    report = verdict.report_from_loops(captures.load_ranges(data(*capture), "nsys"), "nsys x", "regression", False)
    series = plot.draw_report(report, str(tmp_path / "p.png"), timeline)
    assert text_overlaps(drawn_figures[-1]) == []
    expected = csv_recount(data(*csv_twin))
    for scenario, ranges in series.items():
        assert sorted(i for i, _, _, _ in ranges) == list(range(50))
        for index, start, end, kernels in ranges:
            assert start < end
            assert dict(collections.Counter(c for c, _, _ in kernels)) == dict(expected[scenario][index])


# ---------------------------------------------------------------------------- the bench and cli
def test_markdown_names_the_picture_to_attach_on_stderr_not_in_the_paste(tmp_path):
    """'attach evidence.png here' stayed in the issue: an instruction to the one pasting."""
    rc, stdout, stderr = judge("--from-nsys", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), "--plot",
                               tmp_path / "evidence.png", "--markdown")
    assert rc == 0 and "attach" not in stdout
    assert "attach %s to the issue" % (tmp_path / "evidence.png") in stderr


@pytest.mark.parametrize("args, says", [(["--plot", "x.jpg"], ".png or .svg"),
                                        (["--plot", "/missing/dir/x.png"], "does not exist")])
def test_bad_plot_paths_are_usage_errors(args, says):
    rc, stdout, stderr = judge("--from-nsys", data("h200-torch2.11", "full_nvtx_kern_sum.csv"), *args)
    assert rc == 128 and says in stderr and stdout == ""


def without_matplotlib(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    return dict(os.environ, PYTHONPATH=str(tmp_path))


def test_plot_without_matplotlib_is_a_usage_error_before_any_work(tmp_path):
    proc = subprocess.run([sys.executable, JUDGED, "--device", "cpu", "--plot", str(tmp_path / "p.png")],
                          capture_output=True, text=True, env=without_matplotlib(tmp_path), timeout=60)
    assert proc.returncode == 128, proc.stderr
    assert proc.stderr.strip() == "usage error: --plot needs matplotlib, which this Python lacks: pip install matplotlib"
    assert proc.stdout == "" and not (tmp_path / "p.png").exists()


def test_no_picture_asked_no_matplotlib_needed(tmp_path):
    proc = subprocess.run([sys.executable, JUDGED, "--from-nsys", data("h200-torch2.11-fix-reverted", "capture.sqlite")],
                          capture_output=True, text=True, env=without_matplotlib(tmp_path), timeout=60)
    assert proc.returncode == 1, proc.stderr
    code = "import sys; sys.path.insert(0, %r); from sac_repro.judge import cli, plot; print('matplotlib' in sys.modules)" % ROOT
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_the_bench_picture_draws_its_table(tmp_path):
    table = {"torch": "2.11.0", "device": "NVIDIA H200", "world": 1, "fsdp": False, "layers": 4, "hidden": 4096,
             "tokens": 16384, "dtype": "bfloat16", "small": False, "baseline": "compile(sac(block)) [workaround]",
             "rows": {"sac(compile(block)) [reported]": {"median": 113.2, "mem": 1.75, "bwd_mm": 24},
                      "compile(sac(block)) [workaround]": {"median": 85.7, "mem": 3.63, "bwd_mm": 16}}}
    series = plot.draw_bench(table, str(tmp_path / "b.png"))
    assert is_image(tmp_path / "b.png")
    assert series == [("sac(compile(block)) [reported]", 113.2, 1.75, 24), ("compile(sac(block)) [workaround]", 85.7, 3.63, 16)]


def test_the_picture_of_an_nsys_report_comes_from_its_sqlite_export(fake_nsys, tmp_path):
    pytest.importorskip("matplotlib")
    rc, stdout, stderr = fake_nsys("csv", "capture.nsys-rep", "--plot", tmp_path / "p.png")
    assert rc == 1, stderr
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
