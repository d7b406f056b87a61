#!/usr/bin/env bash
# The patch series of sac_repro/upstream (the fix as PyTorch would merge it) measured on one GPU:
# the series applied to a copy of this Python's torch/ tree (with fuzz allowed: the series is
# made for 2.13, the GPU machine may have another torch; steps.txt keeps what patch(1) said), then
# the bench with the series' switch on and off (step time, backward matmul kernels, peak memory of
# sac(compile(block)) beside compile(sac(block))), and the regression block of the patched
# PyTorch test file on CUDA, then what the series costs where it changes nothing (hot_path.py: eager
# SAC's step and a plain checkpoint's, on the CPU whatever DEVICE says, with and without the
# series). Where the series does not apply, the in-process candidate (the same
# module, sac_repro/policy/fix_candidate) stands in, and the summary says so. Every file it writes
# is under OUT; the installed torch is never changed (the copy is hard links or symlinks, and
# patch(1) writes new files).
#
#   OUT=FOLDER sac_repro/policy/fix_candidate/series_check.sh      # or: ... series_check.sh FOLDER
#   DEVICE=cpu BENCH_ARGS=--small OUT=FOLDER sac_repro/policy/fix_candidate/series_check.sh  # a CPU dry run
#
# FOLDER: an empty folder, or one a check wrote before (it marks it so); any other is refused.
#
# PYTHON (python3), BUDGET_S (540: a step that would not fit is skipped, and says so), STEP_S (each
# step's limit), TORCH_IMPORT_S (how long PYTHON's torch may take to import: 300), HOT_ARGS
# (hot_path.py's --rounds, --repeat, --ops, each with a whole number). PyTorch's test module
# imports expecttest: where python has none, a wheel of it in
# .whl/ (expecttest-*.whl) is put on PYTHONPATH.
# Exit codes: 0 every step ran as expected (the summary says whether the numbers are the ones hoped
# for), 125 a step could not run here or failed, or PYTHON's torch fails as it imports, 128 usage
# error (PYTHON without torch too), 128+n interrupted by signal n (Ctrl-C: 130).
set -u
me=series_check.sh
budget=${BUDGET_S:-540}
# hot_path.py's options, read before any step: its step comes last
read -ra hot_words <<< "${HOT_ARGS:-}"
for ((i = 0; i < ${#hot_words[@]}; i += 2)); do
    case "${hot_words[i]}:${hot_words[i + 1]:-}" in
        --rounds:*|--repeat:*|--ops:*) [[ "${hot_words[i + 1]:-}" =~ ^[1-9][0-9]*$ ]] && continue ;;
    esac
    echo "$me: HOT_ARGS='$HOT_ARGS': give --rounds, --repeat or --ops, each with a whole number of 1 or more" >&2
    exit 128
done
. "$(dirname "$0")/_check_steps.sh" || exit 128  # OUT and the options, the work folder, steps.txt, step, machine.txt
bundle=$PWD
# an earlier run's files in OUT would be read as this run's
rm -f "$out"/{bench_on,bench_off}.{json,log} "$out"/{block,hot_path,patch}.log "$out"/summary.txt

# The copy: site/ holds every entry of torch's site-packages as a symlink (CUDA's libraries are
# found beside torch), torch/ itself as hard links, or symlinks where that fails, with the files
# the series changes as copies of their own.
site_packages=$("$python" -c "import os, importlib.util; print(os.path.dirname(os.path.dirname(importlib.util.find_spec('torch').origin)))") || exit 125
site=$work/site
mkdir -p "$site/test/dynamo"
for entry in "$site_packages"/*; do
    [ "$(basename "$entry")" = torch ] || ln -s "$entry" "$site/$(basename "$entry")"
done
cp -al "$site_packages/torch" "$site/torch" 2>/dev/null || { rm -rf "$site/torch"; cp -rs "$site_packages/torch" "$site/torch"; } || exit 125
# torch's files that the series changes, as its diffs name them (a new file has none to copy)
changed=$(sed -n 's|^+++ b/torch/||p' sac_repro/upstream/000*.patch | sort -u)
for f in $changed; do
    [ -e "$site_packages/torch/$f" ] || continue
    cp --remove-destination "$site_packages/torch/$f" "$site/torch/$f" || exit 125
done
cp tests/data/pytorch-0069a418/test_activation_checkpointing.py "$site/test/dynamo/" || exit 125
applied=series
for p in sac_repro/upstream/000*.patch; do
    echo "== $p" >> "$out/patch.log"
    (cd "$site" && patch -p1 --forward --batch -F3 -i "$bundle/$p") >> "$out/patch.log" 2>&1 || applied=candidate
done
# a hunk placed by fuzz may break the file it lands in (2.11's output_code.py did): the copy must
# compile and import, or the candidate stands in
if [ "$applied" = series ] && ! PYTHONPATH="$site" "$python" -c "import py_compile, sys, torch
for f in sys.argv[2:]:
    py_compile.compile(torch.__path__[0] + '/' + f, doraise=True)
import torch._inductor.output_code, torch.utils._sac_compiled_fn
assert torch.__file__.startswith(sys.argv[1])" "$site" $changed >> "$out/patch.log" 2>&1; then
    applied=candidate
fi
echo "series applied to a copy of $site_packages/torch: $applied ($(grep -cE 'offset|fuzz' "$out/patch.log") hunks with an offset or fuzz, $(grep -c FAILED "$out/patch.log") failed)" | tee -a "$steps"
mv "$site/test" "$work/test"
sed -i 's/^from torch.testing._internal.triton_utils import requires_gpu_and_triton$/from torch.testing._internal.triton_utils import requires_cuda_and_triton, requires_gpu_and_triton/' \
    "$work/test/dynamo/test_activation_checkpointing.py"

bench=(sac_repro/bench/bench_sac_compile.py --device "$device" $bench_args)
if [ "$applied" = series ]; then
    # the switch set as a user sets it, before the bench imports its arrangements
    launch="import runpy, sys, torch.utils.checkpoint as c; c._sac_policy_applies_to_compiled_fn = sys.argv[1] == 'on'; \
sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    step bench_on 120 0 PYTHONPATH="$site" -- "$python" -c "$launch" on "${bench[@]}" --json "$out/bench_on.json"
    step bench_off 120 0 PYTHONPATH="$site" -- "$python" -c "$launch" off "${bench[@]}" --json "$out/bench_off.json"
else
    step bench_on 120 0 PYTHONPATH=sac_repro/policy/fix_candidate -- "$python" "${bench[@]}" --json "$out/bench_on.json"
    step bench_off 120 0 -- "$python" "${bench[@]}" --json "$out/bench_off.json"
fi
support=
if ! "$python" -c "import expecttest" 2>/dev/null; then
    support=$(ls .whl/expecttest-*.whl 2>/dev/null | head -1)
    [ -n "$support" ] && support=$bundle/$support
fi
if [ "$applied" = series ] && { "$python" -c "import expecttest" 2>/dev/null || [ -n "$support" ]; }; then
    step block 240 0 PYTHONPATH="$site${support:+:$support}" CUDA_VISIBLE_DEVICES=0 -- \
        "$python" "$work/test/dynamo/test_activation_checkpointing.py" -v -k SelectiveCheckpointOfCompiledFnTests
else
    echo "block skipped: $([ "$applied" = series ] && echo "no expecttest (carry .whl/)" || echo "the series did not apply")" | tee -a "$steps"
fi
if [ "$applied" = series ]; then
    step hot_path 120 0 -- "$python" sac_repro/upstream/hot_path.py --compare "$site" ${hot_words[@]+"${hot_words[@]}"}
else
    echo "hot_path skipped: the series did not apply" | tee -a "$steps"
fi

"$python" - "$out" "$applied" > "$out/summary.txt" 2>&1 <<'EOF'
import json, os, re, sys
out, applied = sys.argv[1], sys.argv[2]
REPORTED, WORKAROUND = "sac(compile(block)) [reported]", "compile(sac(block)) [workaround]"
what = {"series": "the series applied to a copy of torch, its switch on / off",
        "candidate": "the series did not apply, or its copy did not compile or import (patch.log): the in-process "
                     "candidate (the same module) / no candidate"}[applied]
print("what ran: " + what)
runs = {m: json.load(open(os.path.join(out, "bench_%s.json" % m))) for m in ("on", "off")
        if os.path.exists(os.path.join(out, "bench_%s.json" % m))}
good = bool(runs)
for mode, run in runs.items():
    print("%s: torch %s (git %s) | %s | hidden %s, tokens %s, layers %s, %s" % (
        mode, run["torch"], run["git"][:12], run["device"], run["hidden"], run["tokens"], run["layers"], run["dtype"]))
    base = run["rows"][WORKAROUND]["median"]
    for name, r in run["rows"].items():
        print("  %-52s %10.3f ms %6.3fx  peak %s GiB  bwd mm %s" % (
            name, r["median"], r["median"] / base, "-" if r["mem"] is None else "%.2f" % r["mem"], r["bwd_mm"]))
if "on" in runs:
    rows = runs["on"]["rows"]
    ratio = rows[REPORTED]["median"] / rows[WORKAROUND]["median"]
    same = rows[REPORTED]["bwd_mm"] == rows[WORKAROUND]["bwd_mm"]
    print("switch on: sac(compile(block)) / compile(sac(block)) = %.3fx (within 2%%: %s), %s against %s backward "
          "matmul kernels (equal: %s)" % (ratio, "yes" if ratio <= 1.02 else "no", rows[REPORTED]["bwd_mm"],
                                          rows[WORKAROUND]["bwd_mm"], "yes" if same else "no"))
if "off" in runs:
    rows = runs["off"]["rows"]
    print("switch off: sac(compile(block)) / compile(sac(block)) = %.3fx, %s against %s backward matmul kernels" % (
        rows[REPORTED]["median"] / rows[WORKAROUND]["median"], rows[REPORTED]["bwd_mm"], rows[WORKAROUND]["bwd_mm"]))
block = os.path.join(out, "block.log")
if os.path.exists(block):
    for line in open(block):
        if re.match(r"(test_\w+) .*\.\.\. ?(ok|FAIL|ERROR|skipped|expected failure|unexpected success)", line) or \
                re.match(r"Ran \d+ tests|(OK|FAILED)\b", line):
            print("block: " + line.rstrip())
hot = os.path.join(out, "hot_path.log")
if os.path.exists(hot):
    for line in open(hot):
        print("hot path: " + line.rstrip())
sys.exit(0 if good else 3)
EOF
[ $? = 0 ] || failed=1
cat "$out/summary.txt"
echo "total $(( $(date +%s) - start ))s" | tee -a "$steps"
[ "$failed" = 0 ] && exit 0
exit 125
