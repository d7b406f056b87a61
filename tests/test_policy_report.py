"""--policy-report: the open half of the bug (the policy under sac(compile(f))) as a paste-ready
report of its own, built from the run's evidence; its code block runs on its own and shows what
the report says."""
import copy
import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from conftest import data, judge, recorded, ROOT, run
from sac_repro.judge import cli, verdict

from sac_repro import exits
from sac_repro.policy import policy_report
FIXED = recorded(data("cpu-torch2.13", "child_fixed.json"))
REVERTED = recorded(data("cpu-torch2.13", "child_fix_reverted.json"))
AFFECTED = recorded(data("cpu-torch2.9.1", "child.json"))
BENCH = {"schema": 1, "torch": "2.11.0+cu130", "device": "NVIDIA H200", "world": 1, "fsdp": False, "layers": 4,
         "hidden": 4096, "tokens": 16384, "dtype": "bfloat16", "baseline": "compile(sac(block)) [workaround]",
         "rows": {"compiled, no checkpoint": {"median": 83.9, "mem": 6.13, "bwd_mm": 16},
                  "sac(compile(block)) [reported]": {"median": 113.2, "mem": 1.75, "bwd_mm": 24},
                  "compile(sac(block)) [workaround]": {"median": 85.7, "mem": 3.63, "bwd_mm": 16},
                  "sac(compile(block, wrap_inductor_compiled_regions))": {"median": 84.5, "mem": 6.25, "bwd_mm": 16}}}


def markdown(raw, bench=None):
    report = verdict.report_from_child(copy.deepcopy(raw), "regression", False)
    return policy_report.render_policy_markdown(report, "python x.py --policy-report", "collect_env output", bench)


def code_block(text):
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def table_row(text, starts):
    return next(l for l in text.splitlines() if l.startswith("| " + starts))


def test_the_policy_report_says_what_the_policy_saw_and_what_backward_ran():
    md = markdown(FIXED)
    lines = md.splitlines()
    assert lines[0].startswith("### ") and "follow-up to pytorch/pytorch#161889" in lines[0]
    assert lines[2].startswith("torch 2.13.0+cpu (git cf30153c4c13) on cpu. Command: `python x.py --policy-report`")
    actual = next(l for l in lines if l.startswith("- **Actual:**"))
    assert "the policy was asked about `aten.mm.out` only, never `aten.mm.default`" in actual
    assert "backward computed 3 matmuls, against 2 where the forward matmul is saved" in actual
    assert table_row(md, "`sac(compile(f))`, the report's") .endswith("| `aten.mm.out -> PREFER_RECOMPUTE` | 3 | **recomputed** |")
    assert table_row(md, "`compile(sac(f))`").endswith("| 2 | saved |")
    assert "`aten.mm.default -> MUST_SAVE`" in table_row(md, "`compile(sac(f))`")
    wrapped = table_row(md, "`sac(compile(f))` with `wrap_inductor_compiled_regions=True`")
    assert "`inductor_compiled_code -> PREFER_RECOMPUTE`" in wrapped and wrapped.endswith("| 3 | **recomputed** |")
    assert code_block(md) == policy_report.policy_snippet()
    assert "collect_env output" in md and "What it costs" not in md


def sections(md):
    """The report's paragraphs from "What PyTorch supports today" to before the cost, as one string."""
    start = md.index("**What PyTorch supports today**")
    return md[start:md.index("**What it costs**", start) if "**What it costs**" in md else md.index("<details>")]


def test_what_pytorch_supports_and_what_stays_open_come_from_the_run():
    text = sections(markdown(FIXED))
    assert ("- `compile(sac(f))`, the checkpoint inside the compiled region (Dynamo traces SAC as a higher-order "
            "op): the policy was asked about `aten.add.Tensor`, `aten.mm.default`, `aten.mul.Tensor`, and backward "
            "computed 2 matmuls: the forward matmul was saved.") in text
    assert ("the policy was asked about `inductor_compiled_code`, the compiled region as one op "
            "(`torch.ops.higher_order.inductor_compiled_code`). The report's policy does not name it, so backward "
            "computed 3 matmuls: the forward matmul ran again") in text
    assert ("**What stays open:** a policy written for the model's ops, under `sac(compile(f))`, was asked about "
            "`aten.mm.out`, and backward computed 3 matmuls: the forward matmul ran again.") in text
    assert "*Map the op*" in text and "*Warn*" in text


def test_named_regions_are_said_as_upstream_has_them():
    """Issue 46: the bullet said SAC asks about a named region 'once per step' (once per call), did
    not say that `name=` needs `wrap_inductor_compiled_regions` too, nor what #175229 is, and began a
    sentence 'Pytorch/pytorch#175229'."""
    named = next(l for l in sections(markdown(FIXED)).splitlines() if l.startswith("- Named regions"))
    for words in ("`torch.compile(f, name=...)` (pytorch/pytorch#175390, implemented by pytorch/pytorch#179003, 2.12 "
                  "and later)", "`options={\"wrap_inductor_compiled_regions\": True}` (off by default through 2.15)",
                  "once per call", "pytorch/pytorch#175229 is ezyang's open issue"):
        assert words in named, (words, named)
    assert "per step" not in named and "Pytorch/" not in named


def test_those_paragraphs_change_with_the_evidence():
    """Another run's evidence, another text: nothing in them is written in advance."""
    raw = copy.deepcopy(FIXED)
    del raw["scenarios"]["with_context_wrapped"]  # a torch without the option
    report = verdict.report_from_child(raw, "regression", False)
    report["policy"]["ops_seen"]["workaround"] = [["aten.bmm.default", "PREFER_RECOMPUTE", 2]]
    report["policy"]["backward_matmuls"]["workaround"] = 3
    report["policy"]["workaround_matmul_recomputed_in_backward"] = True
    text = sections(policy_report.render_policy_markdown(report, "x", None))
    assert "the policy was asked about `aten.bmm.default`, and backward computed 3 matmuls: the forward matmul ran again." in text
    assert "- `wrap_inductor_compiled_regions` (2.10 and later) is not in this torch: not measured." in text
    assert "inductor_compiled_code" not in text


def test_where_the_policy_was_not_measured_the_report_does_not_say_the_run_shows_nothing():
    """Controls that do not separate (the recomputing one counts no more than the baseline): whether
    the forward matmul ran again is unknown, and what the policy was asked about was measured, so the
    report says that and "not measured", never "This run does not show it"."""
    raw = copy.deepcopy(FIXED)
    raw["scenarios"]["without_context"]["backward_matmuls"] = raw["scenarios"]["compiled_no_checkpoint"]["backward_matmuls"]
    text = markdown(raw)
    assert "This run does not show it" not in text
    assert "only, never `aten.mm.default`; whether the forward matmul ran again was not measured (not measured: the " \
           "controls do not separate" in text


def test_the_bench_adds_the_cost_and_what_saving_the_region_whole_takes():
    md = markdown(FIXED, BENCH)
    assert "**What it costs** (`bench_sac_compile.py`, NVIDIA H200, torch 2.11.0+cu130, 4 blocks of hidden 4096" in md
    assert table_row(md, "sac(compile(block)) [reported]") == "| sac(compile(block)) [reported] | 113.2 | 1.32 | 1.75 | 24 |"
    assert "takes 6.25 GiB at its peak, as much as no checkpoint at all (6.13 GiB), against 3.63 GiB" in md


@pytest.mark.parametrize("raw, ran", [(AFFECTED, "ran eagerly under SAC in 3 of 3 calls: that is pytorch/pytorch#161889 "
                                                "itself, fixed in 2.10. SAC then sees f's own ops, and the policy "
                                                "applies to them. Run it on torch 2.10 or later."),
                                      # Dynamo raised (fullgraph=True, 2.12+), in a recording that kept no
                                      # events of the raising calls; the policy was asked about f's ops.
                                      # The revert named, not its path in a bundle the reader lacks
                                      (REVERTED, "ran no compiled code under SAC in 3 of 3 calls: that is "
                                                 "pytorch/pytorch#161889 itself, brought back here by the 2.10 fix "
                                                 "reverted in-process. SAC then "
                                                 "sees f's own ops, and the policy applies to them. Run it without "
                                                 "the in-process revert.")],
                         ids=["2.9.1", "2.13-fix-reverted"])
def test_where_f_never_compiles_under_sac_the_report_says_it_cannot_be_shown(raw, ran):
    md = markdown(raw)
    assert "This part cannot be shown on this build: the compiled f " + ran in md
    assert "```python" not in md and "**Actual:**" not in md


@pytest.mark.release  # four compiles from an empty Inductor cache: the release tier
def test_the_reports_code_runs_on_its_own_and_shows_what_it_says(tmp_path):
    path = tmp_path / "policy.py"
    path.write_text(code_block(markdown(FIXED)))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["sac(compile(f))", "matmuls", "in", "backward:", "3;", "the", "policy", "was",
                                "asked", "about:", "aten.mm.out"]
    assert lines[1].startswith("compile(sac(f))                matmuls in backward: 2; the policy was asked about: ")
    assert "aten.mm.default" in lines[1]
    assert lines[2].startswith("compile(f), no checkpoint      matmuls in backward: 2")
    assert lines[3] == ("sac(compile(f)), region saved  matmuls in backward: 2; the policy was asked about: "
                        "inductor_compiled_code")
    assert len(lines) == 4


@pytest.mark.parametrize("args, says", [
    (["--policy-report", "--from-nsys", data("h200-torch2.11", "full_nvtx_kern_sum.csv")], "needs a backward"),
    (["--bench-json", data("cpu-torch2.13", "child_fixed.json")], "goes with --policy-report"),
    (["--policy-report", "--bench-json", data("cpu-torch2.13", "child_fixed.json")], "expected the JSON that"),
    (["--policy-report", "--json", "-"], "both want stdout"),
])
def test_policy_report_usage_errors(args, says):
    rc, stdout, stderr = judge(*args)
    assert rc == 128 and says in stderr and stdout == "", stderr


@pytest.mark.release  # a whole run of the script of its own, and collect_env: the release tier
def test_the_policy_report_of_a_real_run(tmp_path):
    """The whole path: the child runs the extra scenario, the parent renders the report."""
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(BENCH))
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", "--policy-report", "--bench-json", str(bench))
    assert rc == 0, stderr[-2000:]
    assert "`sac(compile(f))` with `wrap_inductor_compiled_regions=True`" in stdout
    assert "- **Actual:** under `sac(compile(f))` the policy was asked about `aten.mm.out` only" in stdout
    assert "**What it costs**" in stdout and "PyTorch version:" in stdout


# ------------------------------------------- --bench-json: checked in full before any measurement
RECORDED_BENCH = json.load(open(data("h200-torch2.11", "bench.json")))
GONE = object()  # the field is left out
WRAPPED_ROW = "sac(compile(block, wrap_inductor_compiled_regions))"


def set_field(bench, path, value):
    """path: keys from the top, e.g. ("rows", "eager", "median")."""
    inner = bench
    for key in path[:-1]:
        inner = inner[key]
    if value is GONE:
        del inner[path[-1]]
    else:
        inner[path[-1]] = value


def field_name(path):
    return path[0] + "".join('["%s"]' % k if i == 0 else ".%s" % k for i, k in enumerate(path[1:]))


@pytest.mark.parametrize("path, value", [
    (("device",), GONE), (("rows", "compile(sac(block)) [workaround]", "median"), "86.0"),
    (("rows", "compile(sac(block)) [workaround]", "median"), 0),
], ids=["no-device", "string-median", "zero-baseline"])
def test_a_broken_bench_json_is_refused_before_any_measurement(tmp_path, monkeypatch, path, value):
    bench = copy.deepcopy(RECORDED_BENCH)
    set_field(bench, path, value)
    (tmp_path / "b.json").write_text(json.dumps(bench))
    monkeypatch.setattr(cli, "run_child", lambda *a: pytest.fail("measured before --bench-json was checked"))
    rc, stdout, stderr = judge("--policy-report", "--bench-json", tmp_path / "b.json")
    assert rc == 128 and stdout == "" and len(stderr.strip().splitlines()) == 1, stderr
    assert "usage error: --bench-json" in stderr and field_name(path) in stderr, stderr


NOT_TEXT = st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=2),
                     st.just(""), st.just(GONE))
NOT_A_COUNT = st.one_of(st.none(), st.text(max_size=3), st.booleans(), st.integers(max_value=0),
                        st.floats(), st.just(GONE))
NOT_A_TIME = st.one_of(st.none(), st.text(max_size=3), st.booleans(), st.integers(max_value=0),
                       st.floats(max_value=0), st.just(float("nan")), st.just(float("inf")), st.just(GONE))
NOT_MEMORY = st.one_of(st.text(max_size=3), st.booleans(), st.floats(max_value=-1e-9),
                       st.just(float("nan")), st.lists(st.integers(), max_size=1))
NOT_KERNELS = st.one_of(st.text(max_size=3), st.booleans(), st.integers(max_value=-1), st.floats())
ROW = st.sampled_from(sorted(RECORDED_BENCH["rows"]))


def broken_fields():
    """(the path of a field, a value that is wrong there): one field of the recorded table broken."""
    return st.one_of(
        st.tuples(st.sampled_from(["device", "torch", "dtype"]).map(lambda k: (k,)), NOT_TEXT),
        st.tuples(st.sampled_from(["layers", "hidden", "tokens"]).map(lambda k: (k,)), NOT_A_COUNT),
        st.tuples(st.just(("fsdp",)), st.one_of(st.none(), st.integers(), st.text(max_size=3))),
        st.tuples(st.just(("rows",)), st.one_of(st.none(), st.just({}), st.lists(st.integers(), max_size=2),
                                                st.text(max_size=3), st.just(GONE))),
        st.tuples(ROW.map(lambda r: ("rows", r)), st.one_of(st.none(), st.integers(), st.text(max_size=3))),
        st.tuples(ROW.map(lambda r: ("rows", r, "median")), NOT_A_TIME),
        st.tuples(ROW.map(lambda r: ("rows", r, "mem")), NOT_MEMORY),
        st.tuples(ROW.map(lambda r: ("rows", r, "bwd_mm")), NOT_KERNELS),
        st.tuples(st.just(("baseline",)), st.one_of(st.none(), st.integers(), st.just("no such row"), st.just(GONE))),
        # the memory of the wrapped row is compared with these two: they need theirs
        st.tuples(st.sampled_from(["compiled, no checkpoint", "compile(sac(block)) [workaround]"]).map(
            lambda r: ("rows", r, "mem")), st.sampled_from([None, GONE])),
    )


@settings(max_examples=300, deadline=None)
@given(broken_fields())
def test_every_broken_field_of_a_bench_json_is_named(tmp_path_factory, broken):
    path, value = broken
    bench = copy.deepcopy(RECORDED_BENCH)
    set_field(bench, path, value)
    f = tmp_path_factory.mktemp("bench") / "b.json"
    f.write_text(json.dumps(bench))
    with pytest.raises(exits.UsageError) as refused:
        cli.load_bench(str(f))
    assert field_name(path) in str(refused.value), (path, value, str(refused.value))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["fsdp-and-world", "no-fsdp", "no-mem", "mem-none", "no-bwd_mm", "bwd_mm-none",
                                 "extra-key", "one-row"]), unique=True))
def test_what_the_bench_writes_and_what_render_does_without_is_accepted(tmp_path_factory, changes):
    bench = copy.deepcopy(RECORDED_BENCH)
    rows = bench["rows"]
    for change in changes:
        if change == "fsdp-and-world":
            bench.update(fsdp=True, world=2)
        elif change == "no-fsdp":
            bench.pop("fsdp")
        elif change in ("no-mem", "no-bwd_mm"):
            for r in rows.values():
                r.pop(change[3:], None)
        elif change in ("mem-none", "bwd_mm-none"):
            for r in rows.values():
                r[change[:-5]] = None
        elif change == "extra-key":
            bench["from the future"] = {"x": [1]}
        elif change == "one-row":
            bench["rows"] = rows = {bench["baseline"]: rows[bench["baseline"]]}
    f = tmp_path_factory.mktemp("bench") / "b.json"
    f.write_text(json.dumps(bench))
    assert cli.load_bench(str(f)) == bench
    report = verdict.report_from_child(copy.deepcopy(FIXED), "regression", False)
    policy_report.render_policy_markdown(report, "x", None, bench)  # renders what was accepted


@pytest.mark.release  # a whole run under the candidate fix in warn mode, and collect_env
def test_the_candidates_warning_reaches_the_policy_report(tmp_path):
    """Issue 45: in warn mode the candidate warned, and --policy-report said 'Nothing says so'."""
    rc, stdout, stderr = run(sys.executable, "--device", "cpu", "--policy-report",
                             env={"PYTHONPATH": os.path.join(ROOT, "sac_repro", "policy", "fix_candidate"), "SAC_FIX_CANDIDATE": "warn"})
    assert rc == 0, stderr[-2000:]
    stays = next(l for l in stdout.splitlines() if l.startswith("**What stays open:**"))
    assert "Nothing said" not in stays and "Nothing says so" not in stays
    assert "What this run's process printed or warned, besides the bundle: `said (the report's loops; warning from " \
           "sac_repro/policy/fix_candidate/" in stays
    assert "UserWarning: torch.utils.checkpoint: a selective activation checkpointing policy was asked about " \
           "aten.mm.out" in stays


EMPTY_LOG_LINE = {"where": "workaround, first call", "kind": "stderr", "file": "/t/torch/_logging/_internal.py",
                  "text": "W1206 01:33:11.593000 4650 torch/_logging/_internal.py:1407] [2/0]"}


@pytest.mark.parametrize("said", [[], [EMPTY_LOG_LINE]], ids=["nothing", "an-empty-log-line"])
def test_a_run_that_said_nothing_says_so_and_quotes_nothing(said):
    """With nothing said (or only a torch log line with nothing after its prefix, which the reports
    leave out), 'What stays open' ended '... besides the bundle: .'."""
    report = {"said": said}
    got = policy_report.silence(report)
    assert got.startswith("Nothing said so in this run: no warning was shown, and nothing but logs was printed.")
    assert "besides the bundle" not in got
    quoted = policy_report.silence({"said": [dict(EMPTY_LOG_LINE, text=EMPTY_LOG_LINE["text"] + " Detected that")]})
    assert quoted.startswith("What this run's process printed or warned, besides the bundle: `said (") and \
        quoted.endswith("[2/0] Detected that`.")
