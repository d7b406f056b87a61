#!/usr/bin/env bash
# The report's Nsight Systems command, made to capture, then judged with the repro's verdict.
#
#   ./run_nsys.sh [-o NAME] [-- OPTIONS]   profile the report's loops, print kernels per NVTX range
#                                        and the verdict (NAME defaults to the script's name)
#   ./run_nsys.sh --report FILE [OPTIONS]  judge an existing .nsys-rep, .sqlite or nvtx_kern_sum CSV
#
# OPTIONS are the script's. Two runs see them: the capture run (the report's code under nsys,
# with --loops-only) takes --device and --timeout; the judge (--from-nsys on the new report) takes
# --hunt-fix, --strict-policy, --json PATH and --markdown. Anything else is a usage error.
#
# The report's command was
#   nsys profile -w true -t cuda,nvtx,cudnn,cublas -s cpu --capture-range=cudaProfilerApi
#     --capture-range-end=stop --kill=none --force-overwrite true -x true -o NAME python3 SCRIPT
# As filed it captures nothing: the script never calls cudaProfilerStart. Ours does, around the two
# loops, after compiling. Flags the installed nsys does not know are respelled or dropped, as read
# from `nsys profile --help`: `-s cpu` is a legacy value (2023.4 lists process-tree|system-wide|none)
# and `-x true` (--stop-on-exit) is the default. Without nsys, ncu (Nsight Compute) is used instead.
#
# Exit codes are the repro's: 0 not reproduced, 1 reproduced, 125 cannot test (incl. a capture
# with missing ranges, or no new report), 128 usage or setup error (aborts a bisect).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script="$here/torch_compile_selective_activation_checkpoint.py"
py=${PYTHON:-python3}
name=torch_compile_selective_activation_checkpoint

die() { echo "run_nsys.sh: $*" >&2; exit 128; }
note() { echo "run_nsys.sh: $*" >&2; }

# Splits the script's options between the capture run and the judge (see the header).
capture=() judge=()
route() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --device|--timeout) [ $# -ge 2 ] || die "$1 needs a value"; capture+=("$1" "$2"); shift ;;
      --device=*|--timeout=*) capture+=("$1") ;;
      --json) [ $# -ge 2 ] || die "--json needs a PATH"; judge+=("$1" "$2"); shift ;;
      --hunt-fix|--strict-policy|--markdown|--json=*) judge+=("$1") ;;
      *) die "$1: not an option run_nsys.sh passes on (capture: --device, --timeout; judge: --hunt-fix, --strict-policy, --json, --markdown)" ;;
    esac
    shift
  done
}

case "${1:-}" in
  -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --report)
    [ $# -ge 2 ] || die "--report takes one FILE (a .nsys-rep, .sqlite or nvtx_kern_sum CSV)"
    file=$2; shift 2
    route "$@"
    [ ${#capture[@]} -eq 0 ] || die "--report judges an existing report: ${capture[0]} would change nothing"
    exec "$py" "$script" --from-nsys "$file" "${judge[@]}" ;;
  -o)
    [ $# -ge 2 ] && [ -n "$2" ] || die "-o needs a report NAME"
    name=$2; shift 2 ;;
esac
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || die "$1: options for the script go after -- (see --help)"
  shift
  route "$@"
fi

# The file's identity (inode, size, modification time): a report is judged only when this
# capture wrote it, never an older one that happens to lie here.
identity() { stat -c '%i %s %y' "$1" 2>/dev/null || echo none; }

# Inductor's compile workers make the raw capture about 2 GB; one thread keeps it to a few MB.
export TORCHINDUCTOR_COMPILE_THREADS=1

if command -v nsys >/dev/null 2>&1; then
  version=$(nsys --version 2>&1 | head -n 1)
  help=$(nsys profile --help 2>&1)
  # The text of one option in `nsys profile --help` (tab-indented "-s, --sample=" blocks).
  section() {
    awk -v opt="$1" '
      $0 ~ "^[[:space:]]*(-[a-zA-Z], )?--" opt "=" { p = 1; print; next }
      p && /^[[:space:]]*(-[a-zA-Z], )?--[a-zA-Z-]+=/ { exit }
      p' <<<"$help"
  }
  flags=()
  [ -n "$(section show-output)" ] && flags+=(-w true)
  # Trace only what this nsys can trace: a release may drop or rename a library tracer.
  traces=cuda,nvtx
  for t in cudnn cublas; do
    if grep -q "'$t'" <<<"$(section trace)"; then traces+=",$t"; else note "$version cannot trace $t; dropped from -t"; fi
  done
  flags+=(-t "$traces")
  if grep -q "'cpu'" <<<"$(section sample)"; then
    flags+=(-s cpu)
  elif grep -q "'process-tree'" <<<"$(section sample)"; then
    flags+=(-s process-tree)
    note "$version has no '-s cpu' (a legacy value): using -s process-tree, its spelling of it"
  fi
  flags+=(--capture-range=cudaProfilerApi --capture-range-end=stop --kill=none --force-overwrite true)
  if [ -n "$(section stop-on-exit)" ]; then flags+=(-x true); else note "$version has no -x/--stop-on-exit; it stops on exit by default"; fi
  flags+=(-o "$name")
  before_rep=$(identity "$name.nsys-rep") before_qdrep=$(identity "$name.qdrep")
  echo "+ nsys profile ${flags[*]} $py $script --loops-only ${capture[*]}" >&2
  nsys profile "${flags[@]}" "$py" "$script" --loops-only "${capture[@]}"
  rc=$?
  # The capture run could not run the report's code (or its loops raised): nothing to judge.
  [ $rc -eq 125 ] && { note "the capture run says cannot_test (exit 125): not judged"; exit 125; }
  if [ "$(identity "$name.nsys-rep")" != "$before_rep" ]; then report=$name.nsys-rep
  elif [ "$(identity "$name.qdrep")" != "$before_qdrep" ]; then report=$name.qdrep
  else
    echo "cannot_test: nsys ($version) wrote no report $name.nsys-rep (exit $rc): nothing was captured" \
         "$([ "$before_rep" != none ] && echo "(the $name.nsys-rep here is older: not judged)")" >&2
    exit 125
  fi
  exec "$py" "$script" --from-nsys "$report" "${judge[@]}"
elif command -v ncu >/dev/null 2>&1; then
  note "nsys is not on PATH; using Nsight Compute instead (replays every kernel: slower)"
  # --profile-from-start off honours the script's cudaProfilerStart/Stop, as the nsys capture range does;
  # one cheap metric instead of ncu's default sections keeps the replay short.
  echo "+ ncu --nvtx --print-summary per-nvtx --profile-from-start off --metrics gpu__time_duration.sum $py $script --loops-only ${capture[*]}" >&2
  # The shell empties $name.ncu.txt before ncu starts: what it holds afterwards is this capture's.
  ncu --nvtx --print-summary per-nvtx --profile-from-start off --metrics gpu__time_duration.sum \
    "$py" "$script" --loops-only "${capture[@]}" > "$name.ncu.txt"
  rc=$?
  [ $rc -eq 125 ] && { note "the capture run says cannot_test (exit 125): not judged"; exit 125; }
  [ -s "$name.ncu.txt" ] || { echo "cannot_test: ncu wrote nothing (exit $rc)" >&2; exit 125; }
  exec "$py" "$script" --from-ncu "$name.ncu.txt" "${judge[@]}"
else
  cat >&2 <<EOF
run_nsys.sh: neither nsys (Nsight Systems) nor ncu (Nsight Compute) is on PATH.
  Install Nsight Systems from NVIDIA (https://developer.nvidia.com/nsight-systems), or the
  nsight-systems package of your CUDA toolkit, and put its nsys on PATH.
  No profiler is needed for a verdict: $py $(basename "$script") judges from torch.profiler.
EOF
  exit 128
fi
