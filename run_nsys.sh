#!/usr/bin/env bash
# The report's Nsight Systems command, made to capture, then judged with the repro's verdict.
#
#   ./run_nsys.sh [-o NAME] [-- OPTIONS]   profile the report's loops, print kernels per NVTX range
#                                        and the verdict (NAME defaults to the script's name)
#   ./run_nsys.sh --report FILE [OPTIONS]  judge an existing .nsys-rep, .sqlite or nvtx_kern_sum CSV
#
# OPTIONS are the judged run's (python3 -m sac_repro). Two runs see them: the capture run (the report's code under nsys,
# with --loops-only) takes --device and --timeout; the judge (--from-nsys on the new report) takes
# --hunt-fix, --strict-policy, --json PATH, --markdown and --plot PATH. Anything else is a usage
# error, found before anything is captured. PYTHON names the Python to run (default python3).
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
# with missing ranges, or no new report), 128 usage or setup error (aborts a bisect), 128+n when
# ended by signal n (the capture it started is ended too).
set -u

# The one guard: only the judge's verdict may leave this script as 0 or 1 (or --help as 0).
# Anything else that ends it, a bash error included, leaves as 125, 128 or 128+n.
judged=""
trap 'rc=$?
      [ -n "${handoff:-}" ] && rm -f "$handoff"
      [ -n "${fresh:-}" ] && rm -f "$fresh"
      case "$rc" in
        0|1) [ "$judged" = "$rc" ] || [ "$rc.${helped:-}" = 0.yes ] || { echo "run_nsys.sh: ended with $rc outside the verdict (a bug here, not a verdict)" >&2; exit 128; } ;;
        125|128|129|130|131|143) ;;
        *) echo "run_nsys.sh: ended with $rc (a bug here, not a verdict)" >&2; exit 128 ;;
      esac' EXIT

die() { echo "run_nsys.sh: $*" >&2; exit 128; }
note() { echo "run_nsys.sh: $*" >&2; }

# This file's real folder, through any symlinks: the script and its package sit beside it.
self=${BASH_SOURCE[0]}
while [ -L "$self" ]; do
  target=$(readlink "$self")
  case "$target" in /*) self=$target ;; *) self=$(dirname "$self")/$target ;; esac
done
here=$(cd "$(dirname "$self")" && pwd) || die "cannot find the folder of $self"
script="$here/torch_compile_selective_activation_checkpoint.py"
engine="$here/sac_repro"  # the judged run (python3 -m sac_repro), which runs the script
[ -f "$script" ] && [ -f "$engine/__main__.py" ] || die "$script or $engine is missing: copy the bundle's whole folder"
py=${PYTHON:-python3}
name=torch_compile_selective_activation_checkpoint

# The capture runs in a session of its own; a signal here ends it (and the script ends its own
# measured child on SIGTERM) before this script exits 128+n.
running=""
on_signal() {
  trap '' INT TERM HUP QUIT
  if [ -n "$running" ]; then
    kill -TERM -- "-$running" 2>/dev/null || kill -TERM "$running" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$running" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$running" 2>/dev/null
  fi
  echo "run_nsys.sh: interrupted by $1: stopped the capture it had started, no verdict" >&2
  exit "$2"
}
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGHUP 129' HUP
trap 'on_signal SIGQUIT 131' QUIT

# Runs "$@" in the background (so that a signal is handled at once), in its own session where
# setsid exists; sets rc to its exit code.
run_bg() {
  if command -v setsid >/dev/null 2>&1; then setsid "$@" & else "$@" & fi
  running=$!
  wait "$running"
  rc=$?
  running=""
}

# Passes the judge's exit code on: the verdict's codes only.
judge() {
  "$py" "$engine" "$@"
  local code=$?
  case $code in
    0|1) judged=$code; exit "$code" ;;
    125|128|129|130|131|143) exit "$code" ;;
    *) die "the judge ended with $code (not a verdict)" ;;
  esac
}

case "${1:-}" in
  -h|--help) sed -n '2,23p' "$self" | sed 's/^# \{0,1\}//' || exit 128; helped=yes; exit 0 ;;
esac

if [ "$("$py" -c 'import sys; print("python-ok" if sys.version_info >= (3, 8) else "old")' 2>/dev/null)" != python-ok ]; then
  what="not a Python 3.8 or later"; command -v "$py" >/dev/null 2>&1 || what="no such program"
  die "PYTHON=$py: $what; set PYTHON to the Python 3.8+ that holds the torch under test"
fi

# Splits the script's options between the capture run and the judge (see the header).
capture=() judge_opts=()
route() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --device|--timeout) [ $# -ge 2 ] || die "$1 needs a value"; capture+=("$1" "$2"); shift ;;
      --device=*|--timeout=*) capture+=("$1") ;;
      --json|--plot) [ $# -ge 2 ] || die "$1 needs a PATH"; judge_opts+=("$1" "$2"); shift ;;
      --hunt-fix|--strict-policy|--markdown|--json=*|--plot=*) judge_opts+=("$1") ;;
      *) die "$1: not an option run_nsys.sh passes on (capture: --device, --timeout; judge: --hunt-fix, --strict-policy, --json, --markdown, --plot)" ;;
    esac
    shift
  done
}
# Both runs' options, checked by the script's own parser before anything is captured: the judge's
# as the judge will get them, the capture this run writes as their input (an output onto it, or a
# --json into the bundle, found after minutes of capture, would end as 125).
check_options() {
  local from=(--from-nsys "$name.nsys-rep")
  command -v nsys >/dev/null 2>&1 || from=(--from-ncu "$name.ncu.txt")
  [ ${#capture[@]} -eq 0 ] || parse_options "${capture[@]}"
  [ ${#judge_opts[@]} -eq 0 ] || parse_options "${from[@]}" "${judge_opts[@]}"
}
parse_options() {
  "$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); from sac_repro.judge import cli; sys.exit(cli.check_options(sys.argv[2:]))' \
    "$here" "$@" || exit 128
}

case "${1:-}" in
  --report)
    [ $# -ge 2 ] || die "--report takes one FILE (a .nsys-rep, .sqlite or nvtx_kern_sum CSV)"
    [ -n "$2" ] || die "--report was given an empty path (an unset shell variable?): name a capture file"
    file=$2; shift 2
    route "$@"
    [ ${#capture[@]} -eq 0 ] || die "--report judges an existing report: ${capture[0]} would change nothing"
    judge --from-nsys "$file" ${judge_opts[@]+"${judge_opts[@]}"} ;;
  -o)
    [ $# -ge 2 ] && [ -n "$2" ] || die "-o needs a report NAME"
    case "$2" in -*) die "-o needs a report NAME, and $2 is an option: give the name first (-o NAME), or ./$2 for a name that starts with -" ;; esac
    case "$2" in *%*) die "-o $2: nsys expands %p, %h, %n, %q{VAR} and %% in a report's name, and would write a report this script never finds; name it without %" ;; esac
    name=${2%.nsys-rep}; name=${name%.qdrep}; shift 2
    folder=$(dirname "$name")
    [ -d "$folder" ] && [ -w "$folder" ] || die "-o $name: the folder $folder does not exist or is not writable"
    # a folder that takes no files (/proc, a read-only mount) would leave nsys's report nowhere
    probe=$(mktemp "$folder/.run_nsys_probe.XXXXXX" 2>/dev/null) && rm -f "$probe" ||
      die "-o $name: nsys cannot write a report in $folder: name a report in a folder that holds files" ;;
esac
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || die "$1: options for the script go after -- (see --help)"
  shift
  route "$@"
fi
check_options

# The file's identity (inode, size, modification time): a report is judged only when this
# capture wrote it, never an older one that happens to lie here.
identity() { stat -c '%i %s %y' "$1" 2>/dev/null || echo none; }

# The capture run writes here the torch it ran, what changed that torch in-process (the revert in
# sac_repro/revert_fix, say) and what Dynamo said; the judge of its capture names them.
handoff=$(mktemp "${TMPDIR:-/tmp}/run_nsys_run.XXXXXX") || die "cannot create a temporary file (TMPDIR=${TMPDIR:-/tmp})"
# The judge's --_env: only when the capture run wrote it.
handed() { handed=(); if [ -s "$handoff" ]; then handed=(--_env "$handoff"); fi; }

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
  echo "+ nsys profile ${flags[*]} $py $engine --loops-only --_env $handoff ${capture[*]+${capture[*]}}" >&2
  run_bg nsys profile "${flags[@]}" "$py" "$engine" --loops-only --_env "$handoff" ${capture[@]+"${capture[@]}"}
  # The capture run could not run the report's code (or its loops raised): nothing to judge.
  [ $rc -eq 125 ] && { note "the capture run says cannot_test (exit 125): not judged"; exit 125; }
  if [ "$(identity "$name.nsys-rep")" != "$before_rep" ]; then report=$name.nsys-rep
  elif [ "$(identity "$name.qdrep")" != "$before_qdrep" ]; then report=$name.qdrep
  else
    echo "cannot_test: nsys ($version) wrote no report $name.nsys-rep (exit $rc): nothing was captured" \
         "$([ "$before_rep" != none ] && echo "(the $name.nsys-rep here is older: not judged)")" >&2
    exit 125
  fi
  handed
  judge --from-nsys "$report" ${handed[@]+"${handed[@]}"} ${judge_opts[@]+"${judge_opts[@]}"}
elif command -v ncu >/dev/null 2>&1; then
  note "nsys is not on PATH; using Nsight Compute instead (replays every kernel: slower)"
  # --profile-from-start off honours the script's cudaProfilerStart/Stop, as the nsys capture range does;
  # one cheap metric instead of ncu's default sections keeps the replay short.
  echo "+ ncu --nvtx --print-summary per-nvtx --profile-from-start off --metrics gpu__time_duration.sum $py $engine --loops-only --_env $handoff ${capture[*]+${capture[*]}}" >&2
  # ncu writes a new file beside $name.ncu.txt (a short name: $name may be as long as a name may
  # be), which takes its place only once it holds a summary: a failed capture leaves the old one.
  fresh=$(mktemp "$(dirname "$name")/.ncu.XXXXXX") || die "cannot write in the folder of $name.ncu.txt"
  run_bg sh -c 'exec "$@" > "$0"' "$fresh" ncu --nvtx --print-summary per-nvtx --profile-from-start off \
    --metrics gpu__time_duration.sum "$py" "$engine" --loops-only --_env "$handoff" ${capture[@]+"${capture[@]}"}
  [ $rc -eq 125 ] && { note "the capture run says cannot_test (exit 125): not judged"; exit 125; }
  [ -s "$fresh" ] || { echo "cannot_test: ncu wrote nothing (exit $rc)" >&2; exit 125; }
  # ncu without the counters' permission runs the app and prints only its own ==PROF== lines
  grep -q '== NVTX State ==' "$fresh" || { echo "cannot_test: ncu wrote no per-NVTX summary (exit $rc); $name.ncu.txt left as it was" >&2; exit 125; }
  chmod "$(printf '%o' $(( 0666 & ~0$(umask) )))" "$fresh" && mv -f "$fresh" "$name.ncu.txt" || die "cannot write $name.ncu.txt"
  fresh=""
  handed
  judge --from-ncu "$name.ncu.txt" ${handed[@]+"${handed[@]}"} ${judge_opts[@]+"${judge_opts[@]}"}
else
  die "neither nsys (Nsight Systems) nor ncu (Nsight Compute) is on PATH: install Nsight Systems (https://developer.nvidia.com/nsight-systems, or your CUDA toolkit's nsight-systems) and put nsys on PATH; no profiler is needed for a verdict: $py ${script##*/} answers, and $py -m sac_repro judges, from torch.profiler"
fi
