"""Pictures of what the verdict was judged from (--plot), drawn from the judged report itself, so a
picture can show nothing the verdict did not use. matplotlib is needed for --plot only, and is
imported only when a picture is drawn.

Each evidence path has its picture, and each picture its series: what it draws, as data, which the
tests compare with what the verdict used.
  - torch.profiler: per scenario, each profiled call's ops (CPU) and kernels (GPU) along its time,
    coloured by class, with the call's verdict; beside it, matmuls in one backward per scenario.
  - nsys with timestamps (.nsys-rep, .sqlite): the two loops as bands, each range and its kernels
    on the GPU's time axis.
  - nsys CSV, ncu (counts only): per range, the kernels stacked by class.
"""
import os

from .verdict import B_REPORTED, CASE, CLASSES, classify, CONTROL, LOOPS, POLICY_SUBJECTS

COLOURS = {"compiled": "#2b8a3e", "eager": "#e8590c", "matmul": "#1c7ed6", "other": "#ced4da"}
LABELS = {"compiled": "compiled code (Inductor kernels, compiled regions)", "eager": "f's eager ops and kernels",
          "matmul": "matmul (cuBLAS, aten::mm)", "other": "other"}
KIND_COLOURS = {"compiled": COLOURS["compiled"], "eager": COLOURS["eager"], "unknown": "#495057"}
FORMATS = (".png", ".svg")


def plot_path_problem(path):
    """Before any work: what is wrong with --plot PATH here (None when nothing): a .png or .svg
    file, and matplotlib importable."""
    if not path.lower().endswith(FORMATS):
        return "--plot %s: name a .png or .svg file" % path
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib, which this Python lacks: pip install matplotlib"
    return None


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def title(report):
    """The torch, the device and the verdict, as the text output says them (a capture names its
    file and device: it records no torch version)."""
    env = report.get("env") or {}
    if env.get("torch"):
        where = "torch %s | %s" % (env["torch"], env.get("gpu") or env.get("device"))
        if report.get("torch_changes"):
            where += " | " + "; ".join(c["label"] for c in report["torch_changes"])
    else:
        kind, _, path = report["source"].partition(" ")
        where = "%s %s | device %s (a capture records no torch version)" % (kind, os.path.basename(path), report["device"])
    return "%s\nVERDICT: %s (exit %d)" % (where, report["verdict"], report["exit_code"])


def finish(fig, path, classes=CLASSES):
    """The legend under the plots, then the file."""
    import matplotlib.patches as mpatches
    fig.legend(handles=[mpatches.Patch(color=COLOURS[c], label=LABELS[c]) for c in classes],
               loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=90)
    pyplot().close(fig)


# ----------------------------------------------------------------------------- torch.profiler
def profiler_series(report):
    """{scenario: [(judged kind, {class: events drawn}, [(class, start us, duration us, lane)])]}"""
    out = {}
    for name, s in report["scenarios"].items():
        calls = []
        for kind, timeline in zip(s["calls"], s.get("timelines") or [None] * len(s["calls"])):
            segments = [(classify(n).cls, start, dur, lane) for n, start, dur, lane in (timeline or [])]
            counts = {}
            for c, _, _, _ in segments:
                counts[c] = counts.get(c, 0) + 1
            calls.append((kind, counts, segments))
        out[name] = calls
    return out


def draw_profiler(report, path):
    plt = pyplot()
    series = profiler_series(report)
    names = list(series)
    fig, (ax, side) = plt.subplots(1, 2, figsize=(11, 1.0 + 0.62 * len(names)),
                                   gridspec_kw={"width_ratios": [4, 1.2]})
    ax.set_title(title(report), fontsize=9, loc="left")
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        raised = report["scenarios"][name].get("calls_refused") or [False] * len(series[name])
        for i, (kind, _, segments) in enumerate(series[name]):
            span = max([s + d for _, s, d, _ in segments] or [1.0])
            for cls, start, dur, lane in sorted(segments, key=lambda s: -s[2]):  # nested ops over their parents
                x = i + 0.05 + 0.9 * start / span
                w = max(0.9 * dur / span, 0.003)
                ax.add_patch(plt.Rectangle((x, y + (0.05 if lane == "gpu" else 0.45)), w, 0.36,
                                           color=COLOURS[cls], lw=0))
            label, note = call_label(kind, raised[i], segments)
            ax.text(i + 0.5, y + 0.88, label, ha="center", va="bottom", fontsize=7, color=KIND_COLOURS[kind],
                    fontweight="bold")
            if note:
                ax.text(i + 0.5, y + 0.4, note, ha="center", va="center", fontsize=6.5, color=KIND_COLOURS[kind])
    ax.set_xlim(0, max(len(c) for c in series.values()) if series else 1)
    ax.set_ylim(0, len(names) + 0.1)
    ax.set_yticks([len(names) - 1 - r + 0.5 for r in range(len(names))])
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xticks([i + 0.5 for i in range(max((len(c) for c in series.values()), default=0))])
    ax.set_xticklabels(["call %d" % (i + 1) for i in range(max((len(c) for c in series.values()), default=0))],
                       fontsize=8)
    ax.set_xlabel(lanes_caption(report), fontsize=8)
    draw_policy_panel(side, report, names)
    finish(fig, path)
    return series


def call_label(kind, raised, segments):
    """The label over one call and the note in its place. A call that raised fullgraph's error
    (it counts as the bug, as the verdict counts it) is labelled for what its profile recorded:
    f's eager ops and then the error, or only the error."""
    if not raised:
        return kind, None
    if any(cls == "eager" for cls, _, _, _ in segments):
        return "eager, then raised", None
    if not segments:
        return "raised", "nothing recorded: Dynamo raised\n(fullgraph=True)"
    return "raised", "f's ops not seen: Dynamo raised\n(fullgraph=True)"


def lanes_caption(report):
    """The x axis, as the device has it: a CPU run has ops and no GPU kernels."""
    if report.get("device") == "cuda":
        return "each profiled call on its own time axis (upper half CPU ops, lower half GPU kernels)"
    return "each profiled call on its own time axis (CPU ops; a CPU run launches no GPU kernels)"


def policy_series(report):
    """{scenario: matmuls computed in one backward} and the baseline where the forward's is saved."""
    p = report.get("policy") or {}
    return {k: v for k, v in (p.get("backward_matmuls") or {}).items() if v is not None}, p.get("baseline")


def absent_bars(report, names):
    """{scenario: why it has no bar} for each scenario whose backward was not counted."""
    counts, _ = policy_series(report)
    out = {}
    for name in names:
        s = report["scenarios"].get(name, {})
        if name in counts:
            continue
        if s.get("backward_error"):
            out[name] = "not counted: backward raised"
        elif s.get("refused"):
            out[name] = "not counted: the calls raised"
        elif "backward_matmuls" in s and report.get("device") != "cuda":
            out[name] = "not counted: recorded when the CPU\ncounted matmuls in compiled code only"
        elif "backward_matmuls" in s:
            out[name] = "not counted on this device"
        else:
            out[name] = "not measured: forward only"
    return out


def draw_policy_panel(ax, report, names):
    counts, baseline = policy_series(report)
    ys = [len(names) - 1 - r + 0.5 for r in range(len(names))]
    notes = absent_bars(report, names)
    for y, name in zip(ys, names):
        if name in counts:
            recomputed = baseline is not None and name in POLICY_SUBJECTS and counts[name] > baseline
            ax.barh(y, counts[name], height=0.5, color=COLOURS["eager" if recomputed else "matmul"])
            ax.text(counts[name] + 0.05, y, str(counts[name]), va="center", fontsize=8)
        else:
            ax.text(0.05, y, notes[name], va="center", fontsize=6.5, color=KIND_COLOURS["unknown"],
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    if baseline is not None:
        ax.axvline(baseline, color="black", lw=1, ls="--")
        # inside the panel's top edge, right of its line: below the axis it sat on the tick of the same number
        ax.text(baseline, len(names) + 0.05, " saved: %d" % baseline, fontsize=7, ha="left", va="top")
    ax.set_ylim(0, len(names) + 0.1)
    ax.set_yticks([])
    ax.set_xlim(0, max(list(counts.values()) + [baseline or 0, 1]) + 1)
    ax.set_title("matmuls in one backward\n(orange: forward matmul recomputed)", fontsize=8)


# ----------------------------------------------------------------------------- captures
def loop_series(report):
    """{scenario: [(range index, judged kind, {class: kernel instances})]}, as the verdict counted them."""
    out = {}
    for scenario in LOOPS.values():
        s = report["scenarios"].get(scenario, {})
        out[scenario] = list(zip(s.get("ranges", []), s.get("calls", []), s.get("call_classes", [])))
    return out


def draw_counts(report, path):
    plt = pyplot()
    series = loop_series(report)
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.2), sharex=True)
    for ax, (scenario, loop) in zip(axes, ((CONTROL, "f_compiled_without_context"), (CASE, "f_compiled_with_context"))):
        bottom = {}
        for cls in CLASSES:
            xs = [i for i, _, counts in series[scenario]]
            hs = [counts.get(cls, 0) for _, _, counts in series[scenario]]
            ax.bar(xs, hs, bottom=[bottom.get(x, 0) for x in xs], color=COLOURS[cls], width=0.8)
            for x, h in zip(xs, hs):
                bottom[x] = bottom.get(x, 0) + h
        ax.set_ylabel("%s <i>\nkernels" % loop, fontsize=8)
    axes[0].set_title(title(report), fontsize=9, loc="left")
    axes[1].set_xlabel("NVTX range index i: one call each", fontsize=8)
    axes[1].set_xlim(-1, 50)
    finish(fig, path)
    return series


def timeline_series(timeline):
    """{scenario: [(index, range start, range end, [(class, kernel start, kernel end)])]}"""
    out = {s: [] for s in LOOPS.values()}
    for r in timeline:
        out[r["scenario"]].append((r["index"], r["start"], r["end"],
                                   [(classify(k).cls, ks, ke) for k, ks, ke in r["kernels"]]))
    return out


def draw_timeline(report, timeline, path):
    """The two loops as bands: each range's span (CPU, light) and its kernels (GPU time, coloured)."""
    plt = pyplot()
    series = timeline_series(timeline)
    t0 = min([r[1] for rs in series.values() for r in rs] or [0])
    end = max([r[2] for rs in series.values() for r in rs] + [k[2] for rs in series.values() for r in rs
                                                               for k in r[3]] or [t0 + 1])
    tick = (end - t0) / 1e6 / 600  # a kernel of a microsecond must still show
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for y, scenario in ((1, CONTROL), (0, CASE)):
        for _, start, end, kernels in series[scenario]:
            ax.add_patch(plt.Rectangle(((start - t0) / 1e6, y + 0.55), (end - start) / 1e6, 0.3,
                                       color="#e9ecef", lw=0.3, ec="#adb5bd"))
            for cls, ks, ke in kernels:
                ax.add_patch(plt.Rectangle(((ks - t0) / 1e6, y + 0.1), max((ke - ks) / 1e6, tick), 0.4,
                                           color=COLOURS[cls], lw=0))
    ax.set_xlim(0, (end - t0) / 1e6 * 1.01)
    ax.set_ylim(0, 2)
    ax.set_yticks([1.5, 0.5])
    ax.set_yticklabels(["f_compiled_without_context\n(plain checkpoint)", "f_compiled_with_context\n(SAC)"], fontsize=8)
    ax.set_xlabel("ms from the first range (upper strip: each NVTX range; lower strip: its kernels on the GPU)",
                  fontsize=8)
    ax.set_title(title(report), fontsize=9, loc="left")
    finish(fig, path)
    return series


# ----------------------------------------------------------------------------- the bench
def bench_series(table):
    """[(arrangement, fwd+bwd ms, peak GiB or None, backward matmul kernels or None)]"""
    return [(name, r["median"], r.get("mem"), r.get("bwd_mm")) for name, r in table["rows"].items()]


def draw_bench(table, path):
    plt = pyplot()
    series = bench_series(table)
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 0.6 + 0.5 * len(series)), sharey=True)
    ys = list(range(len(series)))[::-1]
    for y, (name, ms, mem, mm) in zip(ys, series):
        colour = COLOURS["eager"] if name == B_REPORTED else (
            COLOURS["compiled"] if table["baseline"] == name else COLOURS["matmul"])
        ax_t.barh(y, ms, color=colour)
        ax_t.text(ms, y, " %.1f ms, %s bwd matmuls" % (ms, "-" if mm is None else mm), va="center", fontsize=8)
        if mem is not None:
            ax_m.barh(y, mem, color=colour)
            ax_m.text(mem, y, " %.2f GiB" % mem, va="center", fontsize=8)
    ax_t.set_yticks(ys)
    ax_t.set_yticklabels([s[0] for s in series], fontsize=8)
    ax_t.set_xlabel("fwd+bwd ms (median)", fontsize=8)
    ax_m.set_xlabel("peak memory GiB" if any(s[2] is not None for s in series) else "peak memory: not measured on CPU",
                    fontsize=8)
    for ax in (ax_t, ax_m):
        ax.set_xlim(0, ax.get_xlim()[1] * 1.45)
    fig.suptitle("torch %s%s on %s%s: %d blocks, hidden %d, %d tokens, %s%s\norange: the reported "
                 "sac(compile(block)); green: compile(sac(block)), the workaround and the baseline" % (
        table["torch"], "".join(", " + c["label"] for c in table.get("changes") or []),
        "%d x " % table["world"] if table.get("fsdp") else "", table["device"], table["layers"],
        table["hidden"], table["tokens"], table["dtype"], " (--small: not a measurement)" if table.get("small") else ""),
        fontsize=9, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return series


def draw_report(report, path, timeline=None):
    """The picture of a judged report; returns its series. Which picture follows the evidence."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if timeline is not None:
        return draw_timeline(report, timeline, path)
    if "ranges" in report["scenarios"].get(CONTROL, {}):
        return draw_counts(report, path)
    return draw_profiler(report, path)
