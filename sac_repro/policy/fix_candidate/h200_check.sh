#!/usr/bin/env bash
# The candidate fix (sac_repro/policy/fix_candidate) measured on one GPU, in one go: the bench without it and
# with it (step time, backward matmul kernels, peak memory of sac(compile(block)) beside
# compile(sac(block)), the workaround), the upstream block on CUDA under it, and the bench in warn
# mode where time is left. Every file it writes is under OUT; about 5 minutes on an H200.
#
#   OUT=FOLDER sac_repro/policy/fix_candidate/h200_check.sh          # or: sac_repro/policy/fix_candidate/h200_check.sh FOLDER
#   DEVICE=cpu BENCH_ARGS=--small OUT=FOLDER sac_repro/policy/fix_candidate/h200_check.sh   # a dry run on a CPU
#
# FOLDER: an empty folder, or one a check wrote before (it marks it so); any other is refused.
#
# PyTorch's test modules import expecttest, which a torch wheel lacks: where python3 has none, a
# wheel of it in .whl/ (expecttest-*.whl) is put on PYTHONPATH, and so is $SUPPORT_PATH (a folder
# with numpy, say, for a python that lacks it); a PYTHONPATH of the caller's is dropped (it could
# bring the candidate into the run meant to be without it). Python is $PYTHON (python3);
# BUDGET_S (570) caps the whole run: a step that would not fit is skipped, and says so. STEP_S
# sets every step's own limit (170 s for a bench, 150 s for the upstream test on an H200);
# TORCH_IMPORT_S (300) how long $PYTHON's torch may take to import, checked before any step.
#
# Exit codes: 0 every step ran and exited as expected (the summary says whether the numbers are
# the ones hoped for), 125 a step could not run here or failed, or PYTHON's torch fails as it
# imports, 128 usage error (PYTHON without torch too), 128+n interrupted by signal n (Ctrl-C: 130).
set -u
me=h200_check.sh
budget=${BUDGET_S:-570}
step_shows_command=yes
. "$(dirname "$0")/_check_steps.sh" || exit 128  # OUT and the options, the work folder, steps.txt, step, machine.txt
# an earlier run's files in OUT would be read as this run's
rm -f "$out"/{bench_fix,bench_plain,bench_warn}.{json,log} "$out"/upstream_fix.log "$out"/summary.txt

support=
if ! "$python" -c "import expecttest" 2>/dev/null; then
    support=$(ls .whl/expecttest-*.whl 2>/dev/null | head -1)
    [ -n "$support" ] && support=$PWD/$support
fi
support=$support${SUPPORT_PATH:+${support:+:}$SUPPORT_PATH}

step bench_fix 110 0 PYTHONPATH=sac_repro/policy/fix_candidate -- \
    "$python" sac_repro/bench/bench_sac_compile.py --device "$device" $bench_args --json "$out/bench_fix.json"
step bench_plain 110 0 -- \
    "$python" sac_repro/bench/bench_sac_compile.py --device "$device" $bench_args --json "$out/bench_plain.json"
if "$python" -c "import expecttest" 2>/dev/null || [ -n "$support" ]; then
    # the op-policy test is an expected failure in the block: under the candidate an unexpected
    # success, which unittest counts as a failure from Python 3.11 on (exit 1)
    step upstream_fix 240 1 PYTHONPATH="sac_repro/policy/fix_candidate${support:+:$support}" CUDA_VISIBLE_DEVICES=0 -- \
        "$python" sac_repro/upstream/test_sac_compile_upstream.py -v
else
    echo "upstream_fix skipped: no expecttest for $python and no .whl/expecttest-*.whl (carry .whl)" | tee -a "$steps"
    failed=1
fi
step bench_warn 110 0 PYTHONPATH=sac_repro/policy/fix_candidate SAC_FIX_CANDIDATE=warn -- \
    "$python" sac_repro/bench/bench_sac_compile.py --device "$device" $bench_args --json "$out/bench_warn.json"

"$python" - "$out" "$device" > "$out/summary.txt" 2>&1 <<'EOF'
import json, os, re, sys
out, device = sys.argv[1], sys.argv[2]
REPORTED, WORKAROUND = "sac(compile(block)) [reported]", "compile(sac(block)) [workaround]"



def gib(mem):  # the CPU has no peak memory to read
    return "-" if mem is None else "%.2f" % mem


runs = {}
for mode in ("plain", "fix", "warn"):
    path = os.path.join(out, "bench_%s.json" % mode)
    if os.path.exists(path):
        runs[mode] = json.load(open(path))
if runs:
    first = next(iter(runs.values()))
    print("torch %s (git %s) | %s | hidden %s, tokens %s, layers %s, %s" % (
        first["torch"], first["git"][:12], first["device"], first["hidden"], first["tokens"], first["layers"], first["dtype"]))
    print("%-6s %-52s %10s %7s %9s %8s" % ("run", "arrangement", "ms", "x time", "peak GiB", "bwd mm"))
for mode, run in runs.items():
    base = run["rows"][WORKAROUND]["median"]
    for name, r in run["rows"].items():
        print("%-6s %-52s %10.3f %7.2f %9s %8s" % (mode, name, r["median"], r["median"] / base, gib(r["mem"]),
                                               "-" if r["bwd_mm"] is None else r["bwd_mm"]))
    print("%-6s changes: %s" % (mode, "; ".join(c["label"] for c in run.get("changes", [])) or "none"))
if "fix" in runs:
    rows = runs["fix"]["rows"]
    ratio = rows[REPORTED]["median"] / rows[WORKAROUND]["median"]
    print("under the candidate, sac(compile(block)) / compile(sac(block)): %.3fx time (within 5%%: %s), "
          "%s against %s backward matmuls" % (ratio, "yes" if ratio <= 1.05 else "no",
                                              rows[REPORTED]["bwd_mm"], rows[WORKAROUND]["bwd_mm"]))
if "plain" in runs and "fix" in runs:
    p, f = runs["plain"]["rows"][REPORTED], runs["fix"]["rows"][REPORTED]
    print("sac(compile(block)) without -> with the candidate: %.3f -> %.3f ms, %s -> %s backward matmuls, "
          "peak %s -> %s GiB" % (p["median"], f["median"], p["bwd_mm"], f["bwd_mm"], gib(p["mem"]), gib(f["mem"])))
if "plain" in runs and "warn" in runs:
    same = all(runs["plain"]["rows"][n]["bwd_mm"] == r["bwd_mm"] and runs["plain"]["rows"][n]["mem"] == r["mem"]
               for n, r in runs["warn"]["rows"].items())
    print("warn mode: backward matmuls and peak memory as without the candidate: %s" % ("yes" if same else "no"))
    log = open(os.path.join(out, "bench_warn.log")).read()
    print("warn mode: warnings naming compile(sac(f)) in its log: %d" % log.count("compile(sac(f)): torch.compile"))
up = os.path.join(out, "upstream_fix.log")
if os.path.exists(up):
    # unittest -v: "test_name_cpu ... ok", torch's warnings maybe between a test's name and its outcome
    outcomes, current, ends = {}, None, ("unexpected success", "expected failure", "ok", "FAIL", "ERROR")
    for line in open(up):
        line = line.rstrip()
        m = re.match(r"(test_\w+) (?:\(\S+\) )?\.\.\. ?(.*)$", line)  # 3.11 names the class in parentheses
        if m:
            current, line = m.group(1), m.group(2)
        if current:
            hit = next((e for e in ends if line == e), "skipped" if line.startswith("skipped ") else None)
            if hit:
                outcomes[current], current = hit, None
        if re.match(r"Ran \d+ tests|(OK|FAILED)\b", line):
            print("upstream: " + line)
    for name, outcome in outcomes.items():
        print("upstream: %s ... %s" % (name, outcome))
    wanted = {n: "unexpected success" if n.startswith("test_sac_op_policy_applies_inside_compiled_fn") else "ok"
              for n in outcomes}
    devices = {n.rsplit("_", 1)[1] for n in outcomes}
    good = outcomes == wanted and len(outcomes) == 3 * len(devices) and {"cpu", device} <= devices
    print("upstream under the candidate: " + ("as expected on %s: the op-policy test an unexpected success, "
                                              "the other two ok" % ", ".join(sorted(devices)) if good else "NOT as expected"))
    sys.exit(0 if good else 3)
EOF
[ $? = 0 ] || failed=1
cat "$out/summary.txt"
echo "total $(( $(date +%s) - start ))s" | tee -a "$steps"
[ "$failed" = 0 ] && exit 0
exit 125
