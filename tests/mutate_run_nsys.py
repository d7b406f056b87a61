"""Hand-made mutants of run_nsys.sh, each run against the fast tests of the wrapper: a mutant that
no test kills is a line no test guards. Not a test itself: the release tier runs it
(tests/test_nsys.py), or by hand:

    .venv-test/bin/python tests/mutate_run_nsys.py     # prints one line per mutant, then the score

Each mutant is one textual change to a copy of the bundle; the copy's tests/test_nsys.py runs on it.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (what it breaks, the text in run_nsys.sh, what it becomes)
MUTANTS = [
    ("a report written before this capture is judged",
     'if [ "$(identity "$name.nsys-rep")" != "$before_rep" ]', 'if [ -e "$name.nsys-rep" ]'),
    ("a stale .qdrep is judged",
     'elif [ "$(identity "$name.qdrep")" != "$before_qdrep" ]', 'elif [ -e "$name.qdrep" ]'),
    ("the capture run's 125 is not passed on (nsys)",
     '[ $rc -eq 125 ] && { note "the capture run says cannot_test (exit 125): not judged"; exit 125; }\n  if [',
     'if ['),
    ("the capture run's 125 is not passed on (ncu)",
     '  [ $rc -eq 125 ] && { note "the capture run says cannot_test (exit 125): not judged"; exit 125; }\n  [ -s',
     '  [ -s'),
    ("the judge's 0 and 1 are swapped", '0|1) judged=$code; exit "$code" ;;', '0|1) judged=$((1 - code)); exit $((1 - code)) ;;'),
    ("the judge's options are dropped",
     'judge --from-nsys "$report" ${judge_opts[@]+"${judge_opts[@]}"}', 'judge --from-nsys "$report"'),
    ("--hunt-fix and --strict-policy go to the capture run",
     '--hunt-fix|--strict-policy|--markdown|--json=*|--plot=*) judge_opts+=("$1") ;;',
     '--hunt-fix|--strict-policy|--markdown|--json=*|--plot=*) capture+=("$1") ;;'),
    ("the capture options are not checked first", "\ncheck_capture_options\n", "\n"),
    ("-o NAME.nsys-rep is taken as the name", 'name=${2%.nsys-rep}; name=${name%.qdrep}; shift 2', 'name=$2; shift 2'),
    ("-o into a missing folder is not refused",
     '[ -d "$folder" ] && [ -w "$folder" ] || die', '[ -d "$folder" ] || [ -w "$folder" ] || true ||  die'),
    ("a bad PYTHON is not refused", 'die "PYTHON=$py: $what;', 'true "PYTHON=$py: $what;'),
    ("a symlink to the wrapper is not followed", 'while [ -L "$self" ]; do', 'while false; do'),
    ("the outermost guard is gone", "trap 'rc=$?", "true 'rc=$?"),
    ("the report's '-s cpu' is never kept", "if grep -q \"'cpu'\" <<<\"$(section sample)\"; then",
     "if false; then"),
    ("-x true is passed where nsys lacks it", 'if [ -n "$(section stop-on-exit)" ]; then', 'if true; then'),
    ("the capture runs the whole script, not the loops",
     'run_bg nsys profile "${flags[@]}" "$py" "$script" --loops-only', 'run_bg nsys profile "${flags[@]}" "$py" "$script"'),
    ("Inductor's compile workers are not limited", "export TORCHINDUCTOR_COMPILE_THREADS=1", ":"),
    ("ncu ignores the script's capture range", "ncu --nvtx --print-summary per-nvtx --profile-from-start off \\",
     "ncu --nvtx --print-summary per-nvtx \\"),
    ("an empty ncu output is judged", '[ -s "$name.ncu.txt" ] || {', 'true || {'),
    ("usage errors exit 1", 'die() { echo "run_nsys.sh: $*" >&2; exit 128; }', 'die() { echo "run_nsys.sh: $*" >&2; exit 1; }'),
    ("a signal leaves the capture running", 'kill -TERM -- "-$running" 2>/dev/null || kill -TERM "$running" 2>/dev/null',
     'true'),
    ("a signal exits 0", 'echo "run_nsys.sh: interrupted by $1: stopped the capture it had started, no verdict" >&2\n  exit "$2"',
     'echo "run_nsys.sh: interrupted by $1: stopped the capture it had started, no verdict" >&2\n  exit 0'),
    ("--report passes an empty path on", '[ -n "$2" ] || die "--report was given an empty path', 'true || die "--report was given an empty path'),
    ("a % in -o reaches nsys", 'case "$2" in *%*) die "-o $2: nsys expands', 'case "$2" in *%*) true "-o $2: nsys expands'),
    ("SIGHUP is not trapped", "trap 'on_signal SIGHUP 129' HUP\n", "\n"),
    ("SIGQUIT is not trapped", "trap 'on_signal SIGQUIT 131' QUIT\n", "\n"),
    ("the guard turns SIGHUP's 129 into 128", "        125|128|129|130|131|143) ;;", "        125|128|130|131|143) ;;"),
    ("the guard turns SIGQUIT's 131 into 128", "        125|128|129|130|131|143) ;;", "        125|128|129|130|143) ;;"),
    ("a judge ended by SIGHUP or SIGQUIT is called a bug", '    125|128|129|130|131|143) exit "$code" ;;',
     '    125|128|130|143) exit "$code" ;;'),
    ("the judge's options are taken without --",
     '[ "$1" = "--" ] || die "$1: options for the script go after -- (see --help)"\n  shift',
     '[ "$1" != "--" ] || shift'),
    ("--report takes the capture's options and ignores them",
     '[ ${#capture[@]} -eq 0 ] || die "--report judges', 'true || die "--report judges'),
    ("an option it does not know is passed to the judge",
     '      *) die "$1: not an option run_nsys.sh passes on', '      *) judge_opts+=("$1"); : "$1: not an option run_nsys.sh passes on'),
]


def main():
    original = open(os.path.join(ROOT, "run_nsys.sh")).read()
    survived = []
    for what, old, new in MUTANTS:
        if original.count(old) != 1:
            print("STALE   %s: the text to change is not in run_nsys.sh once" % what)
            survived.append(what)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "bundle")
            shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv*", ".git", "__pycache__", ".whl", ".devrun"))
            with open(os.path.join(copy, "run_nsys.sh"), "w") as fh:
                fh.write(original.replace(old, new))
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                   "-n", "2", os.path.join(copy, "tests", "test_nsys.py")],
                                  capture_output=True, text=True, cwd=copy)
        killed = proc.returncode != 0
        print("%-7s %s" % ("killed" if killed else "SURVIVED", what), flush=True)
        if not killed:
            survived.append(what)
    print("%d of %d mutants of run_nsys.sh killed" % (len(MUTANTS) - len(survived), len(MUTANTS)))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
