# The part h200_check.sh and series_check.sh share, sourced by each after `set -u` and these:
#   me                  the script's name, which begins each of its messages
#   budget              ${BUDGET_S:-the script's own default}
#   step_shows_command  where set, steps.txt gives each step's command after its outcome
# It reads the options (OUT or the first argument, PYTHON, DEVICE, BENCH_ARGS, STEP_S,
# TORCH_IMPORT_S: how long PYTHON's torch may take to import, 300 s; a wrong
# one, BUDGET_S's too, exits 128 with one line; so do an OUT that holds what no check wrote and a
# PYTHON without torch; a PYTHON whose torch fails as it imports exits 125 with one line),
# goes to the bundle's folder, marks OUT as a check's (.sac-repro-check), makes the work
# folder in OUT (removed on exit), empties OUT/steps.txt and writes OUT/machine.txt. It sets out,
# python, device, bench_args, step_s, start, work, steps and failed=0, and defines step, last so
# that sourcing it returns 0: `. _check_steps.sh || exit 128` exits only where it is missing.
out=${1:-${OUT:-}}
if [ -z "$out" ] || [ ! -d "$out" ] || [ ! -w "$out" ]; then
    echo "$me: '${out}' is not a writable folder: set OUT=FOLDER or give it as the argument" >&2
    exit 128
fi
out=$(cd "$out" && pwd) || exit 128
python=${PYTHON:-python3}
# a path given from the caller's folder, as OUT is: every step runs from the bundle's
case "$python" in */*) [ "${python#/}" = "$python" ] && python=$PWD/$python ;; esac
cd "$(dirname "$0")/../../.." || exit 128  # the bundle's folder
device=${DEVICE:-cuda}
bench_args=${BENCH_ARGS:-}
step_s=${STEP_S:-}
case "$device" in cuda|cpu) ;; *) echo "$me: DEVICE=$device is not cuda or cpu" >&2; exit 128 ;; esac
for v in "BUDGET_S=$budget" "STEP_S=${step_s:-0}" "TORCH_IMPORT_S=${TORCH_IMPORT_S:-300}"; do
    case "${v#*=}" in ''|*[!0-9]*) echo "$me: $v is not a whole number of seconds" >&2; exit 128 ;; esac
done
if [ $((10#${TORCH_IMPORT_S:-300})) -lt 1 ]; then  # timeout 0 is no limit at all
    echo "$me: TORCH_IMPORT_S=$TORCH_IMPORT_S is not a whole number of seconds of 1 or more" >&2
    exit 128
fi
# in decimal: bash's arithmetic reads 08 as octal, and fails on it
budget=$((10#$budget)) step_s=${step_s:+$((10#$step_s))}
# OUT is the user's folder: a check writes only into an empty one, or one a check marked before
if [ ! -e "$out/.sac-repro-check" ] && [ -n "$(ls -A "$out")" ]; then
    echo "$me: '$out' holds files that no check wrote: give an empty folder, or one a check wrote before" >&2
    exit 128
fi
# where PYTHON is refused below, OUT is left as it was
if [ -e "$out/.sac-repro-check" ]; then unmark() { :; }; else unmark() { rm -f "$out/.sac-repro-check"; }; fi
: > "$out/.sac-repro-check"
start=$(date +%s)
# Inductor's and Triton's caches too: nothing outside OUT, and nothing of them comes back
work=$(mktemp -d "$out/.work.XXXXXX") || exit 128
trap 'rm -rf "$work"' EXIT
# Ctrl-C reaches this script, not a step: timeout(1) runs each in a process group of its own, and
# would let it run on to its end. A signal ends the step (timeout passes SIGTERM on) and the check.
step_pid=
on_signal() {
    trap '' INT TERM HUP
    [ -n "$step_pid" ] && kill -TERM "$step_pid" 2>/dev/null && wait "$step_pid"
    echo "$me: interrupted by SIG$1: stopped the step it had started, no summary" >&2
    exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP
export TORCHINDUCTOR_CACHE_DIR=$work/inductor TRITON_CACHE_DIR=$work/triton
# each step names its own PYTHONPATH and mode: a caller's could bring the candidate, or another
# torch, into a step meant to have neither
unset SAC_FIX_CANDIDATE PYTHONPATH
# PyTorch's run_tests reads any non-empty CI (GitHub Actions and most CI set CI=true) as PyTorch's
# own CI, and then reports through xmlrunner, which is not installed here: its test module would
# exit 1 before a test ran, the very code the upstream block's expected unexpected success gives
export CI=
# PYTHON's torch: none is a wrong option; one that raises, crashes or exits as it imports is a
# build that cannot be checked
if ! "$python" -c pass 2>/dev/null; then
    echo "$me: PYTHON=$python does not run: set PYTHON to the Python whose torch to check" >&2
    unmark
    exit 128
fi
# the code on stdin: one argument for the test's stand-in Pythons, which log each call on a line;
# the answer on a line of its own that names this check, whatever torch prints, even as it exits
torch_import_s=$((10#${TORCH_IMPORT_S:-300}))
t0=$(date +%s)
torch_out=$(timeout --foreground "$torch_import_s" "$python" - 2>/dev/null <<'EOF'
import importlib.util, sys
spec = importlib.util.find_spec("torch")
if spec is None or spec.origin in (None, "namespace"):  # a torch/ folder with no module in it
    print("\nsac-repro-check: no torch", flush=True)
    sys.exit()
try:
    import torch
except BaseException as e:
    try:
        text = str(e).splitlines()[0] if str(e) else ""
    except Exception:  # an error whose text raises: its class says enough
        text = ""
    print("\nsac-repro-check: raised: " + type(e).__name__ + (": " + text if text else ""), flush=True)
    sys.exit()
print("\nsac-repro-check: imported", flush=True)
EOF
)
torch_rc=$?
# a torch that exits 124 itself did not time out
[ "$torch_rc" = 124 ] && [ $(( $(date +%s) - t0 )) -lt "$torch_import_s" ] && torch_rc=exit124
torch_said=$(printf '%s\n' "$torch_out" | sed -n 's/^sac-repro-check: //p' | tail -1)
case "$torch_rc:$torch_said" in
    0:imported) ;;
    '0:no torch') echo "$me: PYTHON=$python has no torch: set PYTHON to the Python whose torch to check" >&2; unmark; exit 128 ;;
    *) case "$torch_rc:$torch_said" in
           "0:raised: "*) said="raises as it imports (${torch_said#raised: })" ;;
           124:*) said="did not import within $torch_import_s s" ;;
           *) said="ends the process as it imports (exit ${torch_rc#exit})" ;;
       esac
       echo "$me: PYTHON=$python: its torch $said: that build cannot be checked" >&2
       unmark
       exit 125 ;;
esac
steps=$out/steps.txt
: > "$steps"
failed=0

{
    date -u +"date: %Y-%m-%d %H:%M UTC"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -4
    else
        echo "no nvidia-smi"
    fi
    nproc
    "$python" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.git_version, torch.version.cuda, torch.cuda.is_available())" 2>&1 | tail -1
} > "$out/machine.txt"
cat "$out/machine.txt"

# step NAME TIMEOUT_S EXPECTED_RC ENV... -- COMMAND...: run it with its output in OUT/NAME.log,
# unless what is left of the budget is less than TIMEOUT_S
step() {
    local name=$1 limit=${step_s:-$2} expected=$3 envs=()
    shift 3
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local left=$(( budget - ($(date +%s) - start) ))
    if [ "$left" -lt "$limit" ]; then
        echo "$name skipped: ${left}s of the budget left, it may take ${limit}s" | tee -a "$steps"
        failed=1
        return
    fi
    local t0=$(date +%s)
    env ${envs[@]+"${envs[@]}"} timeout "$limit" "$@" > "$out/$name.log" 2>&1 &
    step_pid=$!
    wait "$step_pid"
    local rc=$?
    step_pid=
    echo "$name rc=$rc (expected $expected) $(( $(date +%s) - t0 ))s${step_shows_command:+: $*}" | tee -a "$steps"
    [ "$rc" = "$expected" ] || failed=1
}
