"""Hand-made mutants of the bundle's files, each run against the fast tests that should kill it: a
mutant that no test kills is a line no test guards. Not a test itself: the release tier runs it
for run_nsys.sh (tests/test_nsys.py); the other tables take too long for CI, and are run by hand:

    .venv-test/bin/python tests/mutate.py [FILE ...]     # default: every file that has a table
    .venv-test/bin/python tests/mutate.py --only TEXT sac_repro/bisecting/builds.py   # the mutants saying TEXT

It prints one line per mutant (killed or SURVIVED, and its seconds), then a score per file, and
exits 0 only when every mutant not marked equivalent was killed. A mutant is one textual change to
a copy of the bundle; only the tests it names run on that copy (the whole tier once per mutant
would take hours). --baseline first runs each selection of tests on an unchanged copy: a test
that fails there would "kill" every mutant given to it.
"""
import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A mutant whose tests run longer has made them hang: that is a kill, but the run must go on.
MUTANT_TIMEOUT = 1800

Mutant = collections.namedtuple("Mutant", "what old new tests k equivalent")


def mutant(what, old, new, tests, k=None, equivalent=None):
    """tests: the test files (or node ids) that should kill it, space-separated, with pytest's
    options among them (--release where the killer is a release-tier test); k: pytest's -k over
    them; equivalent: why no realistic input tells this mutant from the code. An equivalent one
    stays in its table, so that the score counts it, and may survive."""
    return Mutant(what, old, new, tuple(tests.split()), k, equivalent)


# ----------------------------------------------------------------------------- run_nsys.sh
# (what it breaks, the text in run_nsys.sh, what it becomes[, the tests that kill it]): against
# tests/test_nsys.py's fast tests, unless the killer is a whole capture run (the release tier's)
CAPTURE_RUN = "--release tests/test_nsys.py::test_the_capture_runs_torch_reaches_the_judges_report"
RUN_NSYS = [mutant(what, old, new, *(tests or ["tests/test_nsys.py"])) for what, old, new, *tests in [
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
     'judge --from-nsys "$report" ${handed[@]+"${handed[@]}"} ${judge_opts[@]+"${judge_opts[@]}"}',
     'judge --from-nsys "$report" ${handed[@]+"${handed[@]}"}'),
    ("the judge is not handed the capture run's torch",
     'judge --from-nsys "$report" ${handed[@]+"${handed[@]}"} ', 'judge --from-nsys "$report" ', CAPTURE_RUN),
    ("the capture run's hand-off is left behind", '[ -n "${handoff:-}" ] && rm -f "$handoff"', ':', CAPTURE_RUN),
    ("--hunt-fix and --strict-policy go to the capture run",
     '--hunt-fix|--strict-policy|--markdown|--json=*|--plot=*) judge_opts+=("$1") ;;',
     '--hunt-fix|--strict-policy|--markdown|--json=*|--plot=*) capture+=("$1") ;;'),
    ("the options are not checked before the capture", "\ncheck_options\n", "\n"),
    ("the judge's options are not checked before the capture",
     '[ ${#judge_opts[@]} -eq 0 ] || parse_options "${from[@]}" "${judge_opts[@]}"', 'true'),
    ("an -o folder that holds no files is not refused",
     'die "-o $name: nsys cannot write a report in $folder', 'note "-o $name: nsys cannot write a report in $folder'),
    ("-o NAME.nsys-rep is taken as the name", 'name=${2%.nsys-rep}; name=${name%.qdrep}; shift 2', 'name=$2; shift 2'),
    ("an option after -o is taken for the report's NAME",
     'case "$2" in -*) die "-o needs a report NAME, and $2 is an option', 'case "$2" in -*) true "-o needs a report NAME, and $2 is an option'),
    ("-o into a missing folder is not refused",
     '[ -d "$folder" ] && [ -w "$folder" ] || die', '[ -d "$folder" ] || [ -w "$folder" ] || true ||  die'),
    ("a bad PYTHON is not refused", 'die "PYTHON=$py: $what;', 'true "PYTHON=$py: $what;'),
    ("a symlink to the wrapper is not followed", 'while [ -L "$self" ]; do', 'while false; do'),
    ("the outermost guard is gone", "trap 'rc=$?", "true 'rc=$?"),
    ("the report's '-s cpu' is never kept", "if grep -q \"'cpu'\" <<<\"$(section sample)\"; then",
     "if false; then"),
    ("-x true is passed where nsys lacks it", 'if [ -n "$(section stop-on-exit)" ]; then', 'if true; then'),
    ("the capture runs the whole script, not the loops",
     'run_bg nsys profile "${flags[@]}" "$py" "$engine" --loops-only', 'run_bg nsys profile "${flags[@]}" "$py" "$engine"'),
    ("Inductor's compile workers are not limited", "export TORCHINDUCTOR_COMPILE_THREADS=1", ":"),
    ("ncu ignores the script's capture range", "ncu --nvtx --print-summary per-nvtx --profile-from-start off \\",
     "ncu --nvtx --print-summary per-nvtx \\"),
    ("an empty ncu output is judged", '[ -s "$fresh" ] || {', 'true || {'),
    ("the ncu fallback drops the judge's options",
     '  judge --from-ncu "$name.ncu.txt" ${handed[@]+"${handed[@]}"} ${judge_opts[@]+"${judge_opts[@]}"}',
     '  judge --from-ncu "$name.ncu.txt" ${handed[@]+"${handed[@]}"}'),
    ("a failed ncu capture empties the earlier summary", 'fresh=$(mktemp "$(dirname "$name")/.ncu.XXXXXX")',
     'fresh="$name.ncu.txt"; : > "$fresh"'),
    ("the ncu summary keeps mktemp's mode 0600, not the umask's",
     'chmod "$(printf \'%o\' $(( 0666 & ~0$(umask) )))" "$fresh" && mv -f', 'mv -f'),
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
]]

# In the tables below, each mutant would change an exit code on a realistic input, but those that
# say "the answer right, the cost not" and those marked equivalent (the reason in the mark); each
# names the fast-tier tests that kill it.

# ----------------------------------------------------------------------------- sac_repro/judge/measure.py
SCRIPT_TESTS = "tests/test_script.py"
RELEASE_SCRIPT_TESTS = "--release tests/test_script.py"  # its whole runs of the child, moved out of the fast tier
MEASURE = [
    mutant("a profiled call profiles nothing",
           "entry[\"calls\"].append(profile_call(step, device, timeline, skips.from_error))",
           "entry[\"calls\"].append(profile_call(lambda: None, device, timeline, skips.from_error))",
           SCRIPT_TESTS, k="test_fixed_torch_runs_compiled_code_under_sac"),
    mutant("one profiled call per scenario: a compiled call hides the eager ones",
           "PROFILED_CALLS = 3", "PROFILED_CALLS = 1",
           SCRIPT_TESTS, k="test_some_eager_calls_under_sac_reproduce_in_the_profile"),
    mutant("a call that fullgraph refused raises, and the reproduced bug reads as a torch crash",
           "            refused = e\n", "            raise\n",
           SCRIPT_TESTS, k="test_a_profiled_call_that_raised_fullgraphs_refusal or test_calls_that_fullgraph_refuses"),
    mutant("any error in a profiled call reads as fullgraph's refusal: a torch crash reproduces",
           "            if not refused_to_run_eagerly(e):\n                raise\n            refused = e",
           "            if False:\n                raise\n            refused = e",
           SCRIPT_TESTS, k="test_a_profiled_call_that_raised_anything_else_raises"),
    mutant("the events of a call that raised are dropped: it is said to have run nothing (issue 45)",
           "    call = {\"names\": sorted([n, c] for n, c in collections.Counter(e.name for e in events).items())}\n    if refused",
           "    call = {\"names\": [] if refused else sorted([n, c] for n, c in collections.Counter(e.name for e in events).items())}\n    if refused",
           SCRIPT_TESTS, k="test_a_profiled_call_that_raised_fullgraphs_refusal"),
    mutant("the ablation drops each backend's compiled f before the next: an in-process change may run otherwise (issue 45)",
           "        kept.append(fn)\n", "\n",
           SCRIPT_TESTS, k="test_the_ablation_keeps_each_backends_compiled_f_to_its_end"),
    mutant("an error in the control or the case is kept as a side scenario's",
           "            if name in (CONTROL, CASE):\n                raise\n", "",
           RELEASE_SCRIPT_TESTS, k="test_a_bug_in_the_measured_part_aborts"),
    mutant("a side scenario's error hides the verdict",
           "            scenarios[name] = {\"calls\": [], \"error\": one_line(e)}",
           "            raise",
           SCRIPT_TESTS, k="test_some_eager_calls_under_sac_reproduce_in_the_profile"),
    mutant("our bug and the torch's are swapped",
           "status=\"our_bug\" if raised_by_this_bundle(e) else \"torch_error\"",
           "status=\"torch_error\" if raised_by_this_bundle(e) else \"our_bug\"",
           SCRIPT_TESTS, k="test_a_bug_in_the_measured_part_aborts or test_a_torch_error"),
    mutant("a child that failed writes no result",
           "        json.dump(result, fh)", "        json.dump(result, fh) if result[\"status\"] == \"ok\" else None",
           RELEASE_SCRIPT_TESTS, k="test_a_bug_in_the_measured_part_aborts"),
    mutant("the child's exit code says reproduced",
           "        json.dump(result, fh)\n    return EXIT_OK", "        json.dump(result, fh)\n    return 1",
           SCRIPT_TESTS, k="test_fixed_torch_runs_compiled_code_under_sac",
           equivalent="the parent judges the result the child wrote, never the child's exit code"),
    mutant("--device cuda without CUDA is measured on the CPU",
           "if device_arg == \"cuda\" and device != \"cuda\":", "if False:",
           SCRIPT_TESTS, k="test_missing_cuda_device_cannot_be_tested"),
    mutant("a torch without the public SAC API (< 2.5) is called a bug here",
           "            raise NoSacApi(e)", "            raise",
           SCRIPT_TESTS, k="test_a_torch_without_the_sac_api_cannot_test"),
    mutant("a loop that fullgraph refused is not recorded: --loops-only passes an incomplete capture",
           "        result[\"loops_error\"] = first_sentence(e)\n",
           "\n",
           RELEASE_SCRIPT_TESTS, k="test_loops_only_does_not_pass_when_a_loop_raised"),
    mutant("a backward that raises in the policy check reads as a torch crash",
           "            entry[\"backward_error\"] = one_line(e)", "            raise",
           SCRIPT_TESTS, k="test_a_backward_that_raises_leaves_the_verdict_and_no_policy"),
    mutant("the recorded policy answers PREFER_RECOMPUTE: on CUDA eager SAC recomputes, --strict-policy cannot test",
           "        return decision\n", "        return type(decision).PREFER_RECOMPUTE\n",
           SCRIPT_TESTS, k="test_the_recorded_policy_answers_as_the_reports_policy"),
    mutant("backward's lazy compile is profiled with it",
           "    forward().float().sum().backward()  # backward graphs", "    pass  # backward graphs",
           SCRIPT_TESTS, k="policy",
           equivalent="compiling the backward graph runs no matmul inside a compiled graph's call: the "
           "same count (CPU, torch 2.13)"),
    mutant("a matmul a dispatch mode intercepted is counted as well as the one it runs",
           "        if children & (set(CPU_MATMUL_OPS) | {\"PythonDispatchMode\"}):", "        if False:",
           SCRIPT_TESTS, k="policy"),
    mutant("a CPU matmul that computed nothing (SAC's cache, checkpoint's early stop) is counted",
           "        if children and children <= {\"aten::detach\"}:\n            continue",
           "        if False:\n            continue",
           "tests/test_report.py", k="test_the_cpu_counts_backward_matmuls"),
]

# ----------------------------------------------------------------------------- sac_repro/bisecting/bisect_torch.py
ARGS_TESTS = "tests/test_bisect_args.py"
BISECT_TESTS = "tests/test_bisect.py"
BUILDS_TESTS = "tests/test_builds.py"
REPRO_ANSWER = "test_the_repros_answer_is_the_nightlys_exit_code"
SEARCH = "test_the_search_finds_a_change_at_the_fourth_of_five or test_the_release_search_agrees_with_the_oracle"
BISECT = [
    mutant("the release search on a busy index ends as a bug of the bundle",
           "    except Untestable as e:  # before any build", "    except OSError as e:  # before any build",
           ARGS_TESTS, k="test_the_release_search_on_a_busy_index_aborts_saying_so"),
    mutant("a nightly's cache is not made and tried before the work",
           "    cache = caches.cache_dir(args.cache, make=True)", "    cache = caches.cache_dir(args.cache)",
           ARGS_TESTS, k="test_a_cache_that_cannot_be_one"),
    mutant("a release's cache is not made and tried before the work",
           "caches.cache_dir(args.cache, make=True)\n            build", "caches.cache_dir(args.cache)\n            build",
           ARGS_TESTS, k="test_a_cache_that_cannot_be_one"),
    mutant("a prune's lock file, there already, is not tried first",
           "is a usage error\n        caches.cache_dir(args.cache, make=True)",
           "is a usage error\n        caches.cache_dir(args.cache)",
           ARGS_TESTS, k="test_a_cache_that_cannot_be_one"),
    mutant("a repro that aborts (128) is a skip",
           "raise RuntimeError(\"the repro script failed", "raise Untestable(\"the repro script failed",
           ARGS_TESTS, k=REPRO_ANSWER),
    mutant("a repro killed after writing its report is judged by that report",
           "if proc.returncode not in (0, 1, 125) or report is None:", "if report is None:",
           ARGS_TESTS, k=REPRO_ANSWER),
    mutant("--hunt-fix does not swap the step's 0 and 1",
           "TERMS[\"fix\" if args.hunt_fix else \"regression\"]", "TERMS[\"regression\"]",
           BISECT_TESTS, k="test_hunt_fix_swaps_the_step"),
    mutant("a step that cannot test says good",
           "\"skip (125)\", e.args[0]))\n        return EXIT_CANNOT_TEST", "\"skip (125)\", e.args[0]))\n        return EXIT_OK",
           BISECT_TESTS, k="test_each_kind_of_nightly_maps_to_its_exit_code and 04"),
    mutant("nightly answers with the terms of a fix hunt",
           "    return TERMS[\"regression\"][verdict]", "    return TERMS[\"fix\"][verdict]",
           ARGS_TESTS, k=REPRO_ANSWER),
    mutant("the nightly's date is read with month and day swapped",
           "return \"%s-%s-%s\" % m.group(1, 2, 3), m.group(4)", "return \"%s-%s-%s\" % m.group(1, 3, 2), m.group(4)",
           BISECT_TESTS, k="test_each_kind_of_nightly_maps_to_its_exit_code and 06"),
    mutant("terms that hunt the fix pass without --hunt-fix",
           "    if hunt == \"fix\" and not hunt_fix:", "    if False:",
           ARGS_TESTS, k="test_terms_that_contradict_the_flag_abort_before_any_work"),
    mutant("--hunt-fix passes under terms that hunt a regression",
           "    if hunt == \"regression\" and hunt_fix:", "    if False:",
           ARGS_TESTS, k="test_terms_that_contradict_the_flag_abort_before_any_work"),
    mutant("old/new is not known to hunt a regression",
           "    if (old, new) == (\"old\", \"new\"):\n        return \"regression\"",
           "    if (old, new) == (\"old\", \"new\"):\n        return None",
           ARGS_TESTS, k="test_terms_that_contradict_the_flag_abort_before_any_work"),
    mutant("Broken/Fixed in capitals are words not known here",
           "    old, new = old.lower(), new.lower()", "    pass",
           ARGS_TESTS, k="test_what_the_terms_hunt"),
    mutant("terms not known here are taken for a regression",
           "return None if fix == regression else \"fix\" if fix else \"regression\"",
           "return \"fix\" if fix else \"regression\"",
           ARGS_TESTS, k="test_what_the_terms_hunt"),
    mutant("the old --terms and $SAC_BISECT_TERMS are ignored, not refused",
           "if args.command == \"nightly-step\" and (args.terms is not None or os.environ.get(\"SAC_BISECT_TERMS\")):",
           "if False:",
           BISECT_TESTS, k="test_terms_in_the_environment_abort_before_any_install"),
    mutant("nightly-range does not find a finished fix hunt",
           "for ref in (\"refs/bisect/fixed\", \"refs/bisect/bad\", \"refs/bisect/new\"):",
           "for ref in (\"refs/bisect/bad\", \"refs/bisect/new\"):",
           BISECT_TESTS, k="test_git_bisect_run_finds_the_fixing_nightly"),
    mutant("a nightly wheel of another commit on disk is installed, then rejected (the answer right, the cost not)",
           "    if expect and build.file and built_from not in expect:", "    if False:",
           BUILDS_TESTS, k="test_a_wheel_of_another_commit_is_rejected_before_it_is_installed"),
    mutant("a nightly wheel of another commit from a URL is judged",
           "    if expect and built_from not in expect:\n        envs.remove_venv(python)",
           "    if False:\n        envs.remove_venv(python)",
           BUILDS_TESTS, k="test_a_wheel_of_another_commit_from_a_url_is_removed_after_install"),
    mutant("a date with no wheel aborts the bisect",
           "        raise Untestable(\"no torch wheel for %s and %s on %s", "        raise UsageError(\"no torch wheel for %s and %s on %s",
           BISECT_TESTS, k="test_each_kind_of_nightly_maps_to_its_exit_code and 04"),
    mutant("matrix exits 0 with a build it could not judge",
           "return EXIT_CANNOT_TEST if \"cannot_test\" in verdicts else EXIT_OK", "return EXIT_OK",
           ARGS_TESTS, k="test_matrix_exits_125_when_a_build_could_not_be_judged"),
    mutant("releases OLD OLD is searched, and answers no change",
           "    if parse_release(args.old) == parse_release(args.new):  # before asking any index",
           "    if False:  # before asking any index",
           ARGS_TESTS, k="test_bad_ends_are_usage_errors_before_any_build"),
    mutant("a search from an end that cannot be tested answers",
           "        if verdict(end) == \"cannot_test\":", "        if False:",
           BISECT_TESTS, k="test_a_search_whose_new_end_cannot_be_tested_aborts"),
    mutant("no change between the ends exits 0, as found",
           "        return EXIT_NO_CHANGE", "        return 0",
           ARGS_TESTS, k="test_no_change_between_the_ends_has_a_code_of_its_own"),
    mutant("the search halves the wrong way",
           "        if verdict(versions[probe]) == base:", "        if verdict(versions[probe]) != base:",
           ARGS_TESTS, k=SEARCH),
    mutant("the search probes a release that cannot be tested as if it differed",
           "probe = next((i for i in candidates if verdict(versions[i]) != \"cannot_test\"), None)",
           "probe = next((i for i in candidates), None)",
           ARGS_TESTS, k=SEARCH),
    mutant("the search stops one release short",
           "    while hi - lo > 1:", "    while hi - lo > 2:",
           ARGS_TESTS, k=SEARCH),
    mutant("the search walks one release at a time (the answer right, the cost not)",
           "        mid = (lo + hi) // 2", "        mid = lo + 1",
           ARGS_TESTS, k=SEARCH),
    mutant("a change among untestable releases is named as found",
           "    if untested:  # the change is in there", "    if False:  # the change is in there",
           BISECT_TESTS, k="test_a_search_that_cannot_pin_the_release_says_so"),
    mutant("OLD is left out of the releases between",
           "and lo <= parse_release(v) <= hi}", "and lo < parse_release(v) <= hi}",
           ARGS_TESTS, k=SEARCH),
    mutant("the releases are searched in text order (2.10.0 before 2.7.0)",
           "and lo <= parse_release(v) <= hi}, key=parse_release)", "and lo <= parse_release(v) <= hi})",
           ARGS_TESTS, k=SEARCH),
    mutant("nightly takes a date that is no day: the index has no wheel for it, a skip",
           "    if getattr(args, \"day\", \"latest\") != \"latest\":\n        args.day = indexes.parse_day(args.day)",
           "    if False:\n        args.day = indexes.parse_day(args.day)",
           ARGS_TESTS, k="test_an_impossible_date_is_a_usage_error_in_one_line"),
    mutant("matrix takes a date that is no day",
           "    if \"-\" in v:\n        return indexes.parse_day(v)", "    if \"-\" in v:\n        return v",
           ARGS_TESTS, k="test_an_impossible_date_is_a_usage_error_in_one_line"),
    mutant("--index is not read as a URL or a folder: a file:// URL is no folder",
           "    if getattr(args, \"index\", None):\n        args.index = indexes.parse_index(args.index)",
           "    if False:\n        args.index = indexes.parse_index(args.index)",
           ARGS_TESTS, k="test_a_file_url_index_is_its_folder"),
]

# ----------------------------------------------------------------------------- sac_repro/bisecting/indexes.py
INDEXES = [
    mutant("a nightly of another day of the month is taken for the date",
           "    stamp = \".dev\" + day.replace(\"-\", \"\")", "    stamp = \".dev\" + day.replace(\"-\", \"\")[:6]",
           BISECT_TESTS, k="test_each_kind_of_nightly_maps_to_its_exit_code and 04"),
    mutant("a nightly for another Python or platform is taken for the date",
           "        if parts and stamp in parts[0] and runs_here(parts[1], parts[2]):", "        if parts and stamp in parts[0]:",
           BISECT_TESTS, k="test_wheels_are_read_from_a_pep503_index_over_http"),
    mutant("a wheel of another Python runs here",
           "    return py == python_tag() and \"linux\" in plat and \"x86_64\" in plat",
           "    return \"linux\" in plat and \"x86_64\" in plat",
           ARGS_TESTS, k="test_latest_is_the_newest_date_with_a_wheel_for_this_python_and_platform"),
    mutant("a wheel for aarch64 runs here",
           "    return py == python_tag() and \"linux\" in plat and \"x86_64\" in plat",
           "    return py == python_tag() and \"linux\" in plat",
           ARGS_TESTS, k="test_latest_is_the_newest_date_with_a_wheel_for_this_python_and_platform"),
    mutant("of two versions built on one date (a branch cut), the lower is taken",
           "in sorted(matches, reverse=True)]", "in sorted(matches)]",
           BISECT_TESTS, k="test_wheels_are_read_from_a_pep503_index_over_http"),
    mutant("latest is the oldest date on the index",
           "    d = days[-1]", "    d = days[0]",
           BUILDS_TESTS, k="test_one_nightly_in_one_command_from_either_layout and flat"),
    mutant("an index that answers 404 is a skip on every step",
           "        if 400 <= e.code < 500 and e.code not in (408, 429):", "        if False:",
           ARGS_TESTS, k="404"),
    mutant("an index that cannot be reached is a skip on every step",
           "        raise UsageError(\"cannot reach the index", "        raise Untestable(\"cannot reach the index",
           ARGS_TESTS, k="test_an_index_that_cannot_be_reached_aborts_naming_why"),
    mutant("an index page that lists no torch is a skip",
           "        raise UsageError(\"the index %s lists no torch wheels", "        raise Untestable(\"the index %s lists no torch wheels",
           ARGS_TESTS, k="test_a_reachable_index_without_torch_aborts"),
    mutant("a folder without torch wheels is a skip",
           "            raise UsageError(\"--index %s: no torch wheels in this folder", "            raise Untestable(\"--index %s: no torch wheels in this folder",
           BISECT_TESTS, k="test_an_index_folder_that_is_not_there_aborts"),
    mutant("a date after today is taken: a skip",
           "    if day > today:", "    if False:",
           ARGS_TESTS, k="test_a_date_after_today_is_a_usage_error"),
    mutant("a date in another script's digits is taken: a skip",
           "DAY = re.compile(r\"[0-9]{4}-[0-9]{2}-[0-9]{2}\")", "DAY = re.compile(r\"\\d{4}-\\d{2}-\\d{2}\")",
           ARGS_TESTS, k="test_an_impossible_date_is_a_usage_error_in_one_line or test_every_command_reads_a_date",
           equivalent="date.fromisoformat (Python 3.11) refuses any digit but ASCII's itself: a usage error still"),
    mutant("a file:// URL's path is not unquoted: a folder with a space is not found",
           "        return urllib.parse.unquote(url.path)", "        return url.path",
           ARGS_TESTS, k="test_a_file_url_of_a_folder_is_that_folder"),
    mutant("an index busy for a while (5xx, 429) aborts the bisect",
           "        if 400 <= e.code < 500 and e.code not in (408, 429):", "        if 400 <= e.code < 600:",
           ARGS_TESTS, k="test_an_index_that_answers_a_passing_error_skips"),
    mutant("a release without a wheel for this Python is listed: a step the search cannot test",
           "        if parts and runs_here(parts[1], parts[2]):\n            out.add", "        if parts:\n            out.add",
           ARGS_TESTS, k="test_the_releases_listed_are_those_with_a_wheel_for_this_python_here"),
    mutant("a link's hash in capitals is another wheel (the answer right, the cost not)",
           "sha.lower()\n", "sha\n", ARGS_TESTS, k="test_an_index_links_hash_is_read_in_either_case"),
    mutant("a PEP 503 folder's package folders are not read",
           "    return [index] + subs", "    return [index]",
           BUILDS_TESTS, k="test_one_nightly_in_one_command_from_either_layout and pep503"),
]

# ----------------------------------------------------------------------------- sac_repro/bisecting/caches.py
CACHE_CHECKS = "test_a_cache_that_cannot_be_one or test_a_cache_from_the_environment"
CACHES = [
    mutant("a cache under a file is taken: an internal error at its first write",
           "    if not stat.S_ISDIR(st.st_mode):", "    if False:", ARGS_TESTS, k=CACHE_CHECKS),
    mutant("a cache that is a symlink loop is taken",
           "            if e.errno == errno.ELOOP and os.path.islink(at):", "            if False:", ARGS_TESTS, k=CACHE_CHECKS),
    mutant("a cache that is a symlink to nothing is taken",
           "            if e.errno == errno.ENOENT and os.path.islink(at):", "            if False:", ARGS_TESTS, k=CACHE_CHECKS),
    mutant("a cache under /proc is taken",
           "    if shutil.disk_usage(at).total == 0:", "    if False:", ARGS_TESTS, k=CACHE_CHECKS),
    mutant("a cache is not checked before any work",
           "    problem = cache_problem(path)", "    problem = None", ARGS_TESTS, k=CACHE_CHECKS),
    mutant("a cache that cannot be written is found only at its first write",
           "            os.close(os.open(cache_lock(path), os.O_RDWR | os.O_CREAT, 0o644))", "            pass",
           ARGS_TESTS, k=CACHE_CHECKS),
    mutant("an install goes ahead with too little free space",
           "    if free < needed:", "    if free < 0:",
           BUILDS_TESTS, k="test_too_little_free_space_aborts_before_any_install"),
    mutant("every lock is shared: a prune removes what an install is making",
           "    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH", "    mode = fcntl.LOCK_SH",
           BUILDS_TESTS, k="test_a_prune_waits_for_an_install_and_leaves_an_environment_in_use"),
    mutant("a folder is inside itself",
           "    return os.path.commonpath([root, path]) == root and path != root",
           "    return os.path.commonpath([root, path]) == root",
           BUILDS_TESTS, k="prune",
           equivalent="each caller names something in the root (an environment, a leftover, a download, a store "
           "entry), never the root, and a symlink that could resolve to it is passed over first"),
]

# ----------------------------------------------------------------------------- sac_repro/bisecting/builds.py
BUILDS = [
    mutant("a wheel's git_version is not read: every nightly step is a wrong wheel",
           "    m = GIT_VERSION.search(text)\n    return m.group(1) if m else None", "    return None",
           BISECT_TESTS, k="test_each_kind_of_nightly_maps_to_its_exit_code and 06"),
    mutant("a wheel on an index URL is known by its name, not its content",
           "        return Build(name, version, sha, link, None, index)", "        return Build(name, version, name, link, None, index)",
           BUILDS_TESTS, k="test_same_named_nightlies_of_two_commits_from_two_indexes_are_two_builds"),
    mutant("a wheel rebuilt in place keeps its old hash: its old environment is judged",
           "    if memo.get(key, [None])[:-1] == stamp:", "    if key in memo:",
           BUILDS_TESTS, k="test_a_folder_wheels_hash_is_read_once_until_the_file_changes"),
    mutant("a download that fails aborts the bisect",
           "            raise Untestable(\"could not download %s: %s\" % (url, e), name)",
           "            raise UsageError(\"could not download %s: %s\" % (url, e))",
           ARGS_TESTS, k="download"),
    mutant("a release that is not on the index aborts the matrix",
           "        raise Untestable(\"no torch %s wheel for %s", "        raise UsageError(\"no torch %s wheel for %s",
           ARGS_TESTS, k="not_on_the_index"),
    mutant("a full disk during a download is a skip on every step",
           "        if isinstance(e, OSError) and e.errno in CACHE_ERRORS:", "        if False:",
           ARGS_TESTS, k="test_a_download_onto_a_full_disk_is_a_usage_error"),
    mutant("a wheel too big for the free space is downloaded (the answer right, the cost not)",
           "            check_free_space(cache, 3 * size + 0.3 * GB, name)", "            pass",
           ARGS_TESTS, k="test_a_wheel_too_big_for_the_free_space_is_refused_before_its_download"),
    mutant("a download is kept after its install",
           "        remove_own(folder)  # installed from, or refused: each step downloads it again", "        pass",
           BUILDS_TESTS, k="test_same_named_nightlies_of_two_commits_from_two_indexes_are_two_builds"),
    mutant("a folder index is recorded as given, relative to where the command ran",
           "    index = index if index is None or is_url(index) else os.path.abspath(index)", "    pass",
           BUILDS_TESTS, k="test_one_release_from_two_folders_of_one_name_is_two_builds"),
    mutant("a wheel without torch/version.py is an internal error",
           "    except (OSError, KeyError, zipfile.BadZipFile) as e:", "    except (OSError, zipfile.BadZipFile) as e:",
           ARGS_TESTS, k="test_a_wheel_without_its_version_file_is_a_skip"),
    mutant("of several wheels of a release, another than the one named is taken",
           "    return wheel_build(names[0], wheels[names[0]], index, cache)",
           "    return wheel_build(names[-1], wheels[names[-1]], index, cache)",
           ARGS_TESTS, k="test_of_several_wheels_of_a_release_the_one_named_is_taken"),
    mutant("a wheel whose index gives its hash is downloaded to be hashed (the answer right, the cost not)",
           "    if sha:\n        return Build(name, version, sha, link, None, index)",
           "    if False:\n        return Build(name, version, sha, link, None, index)",
           ARGS_TESTS, k="test_a_wheel_whose_index_gives_its_hash_is_not_downloaded_to_be_hashed"),
]

# ----------------------------------------------------------------------------- sac_repro/bisecting/envs.py
ENVS = [
    mutant("a local wheel's unpacked size is not asked for",
           "        return 3 * os.path.getsize(wheel_path) + 0.3 * GB", "        return os.path.getsize(wheel_path)",
           BUILDS_TESTS, k="test_too_little_free_space_aborts_before_any_install"),
    mutant("a failed install aborts the bisect",
           "            raise Untestable(\"%s could not install %s:\\n%s\"", "            raise UsageError(\"%s could not install %s:\\n%s\"",
           BISECT_TESTS, k="test_each_kind_of_nightly_maps_to_its_exit_code and 08"),
    mutant("an install is built in place, not under NAME.partial",
           "    partial = final + \".partial\"", "    partial = final",
           BISECT_TESTS + " " + BUILDS_TESTS, k="interrupted or sigterm or prune_never",
           equivalent="a half-built environment has no build record, which unusable() refuses: it is built again"),
    mutant("an environment without pyvenv.cfg is taken: its python is the base one, another torch",
           "    if not os.path.exists(os.path.join(path, \"pyvenv.cfg\")):\n        return \"has no pyvenv.cfg\"",
           "    if False:\n        return \"has no pyvenv.cfg\"",
           BUILDS_TESTS, k="test_an_incomplete_environment_is_built_again_and_judged"),
    mutant("an environment whose python no longer runs is taken: the repro cannot start",
           "    if not runs_its_python(path):", "    if False:",
           BUILDS_TESTS, k="test_an_incomplete_environment_is_built_again_and_judged"),
    mutant("an environment is taken for a wheel of another content",
           "    if record.get(\"sha256\") != build.sha256:", "    if False:",
           BUILDS_TESTS, k="test_same_named_nightlies_of_two_commits_from_two_indexes_are_two_builds",
           equivalent="environments are named by the sha256 too: another wheel's is never this one's (a 2^-64 chance)"),
    mutant("an environment without its build record is an internal error",
           "    if not isinstance(record, dict):\n        return", "    if False:\n        return",
           BUILDS_TESTS, k="test_an_environment_whose_torch_or_record_changed_is_not_taken"),
    mutant("an environment into which another torch was installed is judged as its build",
           "    if installed_git_version(path) != record.get(\"git_version\"):", "    if False:",
           BUILDS_TESTS, k="test_an_environment_whose_torch_or_record_changed_is_not_taken"),
    mutant("an environment without torch is taken",
           "    if installed_torch_version(path) is None:", "    if False:",
           BUILDS_TESTS, k="test_an_environment_whose_torch_or_record_changed_is_not_taken",
           equivalent="its commit (None) is then not the recorded one, and runs_its_python() finds no "
           "torch/version.py: refused by the next checks"),
    mutant("a prune removes an environment a process uses",
           "    if not held:", "    if False:",
           BUILDS_TESTS, k="test_a_prune_waits_for_an_install_and_leaves_an_environment_in_use"),
    mutant("a prune does not wait for the installs under way",
           "lock(cache_lock(cache), True, \"waiting for the installs under way",
           "lock(cache_lock(cache), False, \"waiting for the installs under way",
           BUILDS_TESTS, k="test_a_prune_waits_for_an_install_and_leaves_an_environment_in_use"),
    mutant("--keep N keeps one fewer", "(keep is not None and i >= keep)", "(keep is not None and i >= keep - 1)",
           BUILDS_TESTS, k="test_a_prune_never_counts_or_keeps_a_half_built_environment"),
    mutant("--keep keeps the least recently used", "key=lambda e: -e[4])", "key=lambda e: e[4])",
           BUILDS_TESTS, k="test_a_prune_keeps_the_most_recently_used_and_the_downloads_under_way"),
    mutant("--older-than removes the environments used since",
           "now - used > older_than_days * 86400", "now - used < older_than_days * 86400",
           BUILDS_TESTS, k="test_the_cache_lists_and_prunes_only_its_own_environments"),
    mutant("a use is not recorded: a prune goes by when it was installed",
           "    touch(final)\n    return venv_python(final)", "    return venv_python(final)",
           BUILDS_TESTS, k="test_the_cache_lists_and_prunes_only_its_own_environments"),
    mutant("a half-built environment is listed and counted",
           " or name.endswith(LEFTOVERS):\n", ":\n",
           BUILDS_TESTS, k="test_a_prune_never_counts_or_keeps_a_half_built_environment"),
    mutant("what an install or a removal cut short left stays",
           "            remove_own(path, also=(RECORD,))", "            pass",
           BUILDS_TESTS, k="test_a_prune_never_counts_or_keeps_a_half_built_environment"),
    mutant("a prune removes the download of a process under way",
           "            if not alive(e.split(\"-\")[0]):", "            if True:",
           BUILDS_TESTS, k="test_a_prune_keeps_the_most_recently_used_and_the_downloads_under_way"),
    mutant("--installer uv without uv installs with pip",
           "    if wanted == \"uv\" and not uv:", "    if False:",
           BUILDS_TESTS, k="test_installer_uv_without_uv_is_a_usage_error"),
]

# The tables from here on guard what the judged run, its reports and the script alone tell a user:
# an exit code, a verdict's word, a refusal of bad input, a check of ownership before a write, and
# which of two sentences a report says; each against the fast tests it names.

# ----------------------------------------------------------------------------- sac_repro/judge/verdict.py
JUDGE_TESTS = "tests/test_judge.py"
CAPTURE_TESTS = "tests/test_captures.py"
VERDICT = [
    mutant("a control that compiled in some calls counts as compiled",
           "    if control[\"compiled_calls\"] < n:", "    if not control[\"compiled_calls\"]:",
           JUDGE_TESTS, k="control"),
    mutant("a call under SAC that settles nothing is read as compiled",
           "    if case[\"compiled_calls\"] < m:", "    if False:",
           JUDGE_TESTS, k="settles_nothing"),
    mutant("--strict-policy where the policy was not measured is not_reproduced",
           "        if ignored is None:\n", "        if False:\n",
           JUDGE_TESTS, k="policy"),
    mutant("a 51st range (index 50) is neither a call nor stray",
           "sorted(i for i in by_index if i >= LOOP_CALLS)", "sorted(i for i in by_index if i > LOOP_CALLS)",
           CAPTURE_TESTS, k="stray"),
    mutant("a range numbered with a leading zero (07) is taken as the report's call 7",
           "(0|[1-9][0-9]*)", "([0-9]+)",
           CAPTURE_TESTS + " tests/test_captures_hypothesis.py"),
    mutant("a range of the loops in which no kernel ran is taken as a call",
           " and len(rs) == 1 and sum(rs[0].values())}", " and len(rs) == 1}",
           CAPTURE_TESTS, k="test_a_range_in_which_no_kernel_ran_is_missing"),
]

# ----------------------------------------------------------------------------- sac_repro/exits.py
EXITS = [
    mutant("--hunt-fix leaves 0 and 1 as they are",
           "\"fix\": {\"reproduced\": EXIT_NOT_REPRODUCED, \"not_reproduced\": EXIT_REPRODUCED,",
           "\"fix\": {\"reproduced\": EXIT_REPRODUCED, \"not_reproduced\": EXIT_NOT_REPRODUCED,",
           "tests/test_report.py", k="h200_run_nsys"),
    mutant("a signal exits 128, not 128+n",
           "        return EXIT_ABORT + e.signum", "        return EXIT_ABORT",
           "tests/test_signals.py", k="test_a_signal_to_the_script"),
    mutant("cannot_test exits 128: a skip aborts the bisect",
           "        say_error(\"cannot_test: %s\" % e)\n        return EXIT_CANNOT_TEST", "        say_error(\"cannot_test: %s\" % e)",
           "tests/test_bench.py", k="test_the_bench_on_a_machine_without_cuda_cannot_test"),
]

# ----------------------------------------------------------------------------- sac_repro/outputs.py
OWNERSHIP_TESTS = "tests/test_ownership.py"
OUTPUTS = [
    mutant("a hand-off hard-linked to a user's file is written over",
           "st.st_nlink != 1 or st.st_uid != os.getuid() or st.st_mode & 0o077:\n        return \"not a private file of ours (mode 600, one link)\"",
           "st.st_uid != os.getuid() or st.st_mode & 0o077:\n        return \"not a private file of ours (mode 600, one link)\"",
           OWNERSHIP_TESTS, k="hand_off"),
    mutant("a result file that still has a name (a user's) is written over",
           "st.st_nlink != 0 or st.st_uid", "st.st_uid",
           OWNERSHIP_TESTS, k="child"),
    mutant("an output inside the bundle's .git is written",
           "        if \".git\" in parts:", "        if parts[0] == \".git\" and len(parts) < 2:",
           "tests/test_cli.py", k="test_outputs_never_go_into_git or test_a_worktrees_git_file"),
    mutant("a hand-off named as run_nsys.sh names it but outside the temporary folder is written over",
           "    if os.path.realpath(os.path.dirname(os.path.abspath(path))) != os.path.realpath(tempfile.gettempdir()):",
           "    if False:",
           OWNERSHIP_TESTS, k="hand_off"),
    mutant("a hand-off that holds something already is written over",
           "    if st.st_size:\n        return \"not empty\"", "    if False:\n        return \"not empty\"",
           OWNERSHIP_TESTS, k="hand_off"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/cli.py
CLI = [
    mutant("the measured child's own abort (128) is a skip",
           "        if not content and rc == EXIT_ABORT:", "        if False:",
           "tests/test_cli.py", k="test_the_childs_own_abort_is_ours_not_a_skip"),
    mutant("--loops-only takes --hunt-fix and ignores it",
           "(\"--hunt-fix\", args.hunt_fix), (\"--strict-policy\", args.strict_policy),\n                                (\"--policy-report\"",
           "(\"--strict-policy\", args.strict_policy),\n                                (\"--policy-report\"",
           "tests/test_paste_truth.py", k="loops_only"),
    mutant("--loops-only exits 0 where the report's loops raised",
           "        for line in dynamo_lines(raw):\n            emit(line)\n        return EXIT_CANNOT_TEST",
           "        for line in dynamo_lines(raw):\n            emit(line)\n        return EXIT_OK",
           "tests/test_cli.py", k="test_loops_only_where_the_loops_raised_is_no_capture_to_judge"),
    mutant("--json - with --policy-report is taken: the JSON and the markdown share stdout",
           "    if args.json == \"-\" and (args.markdown or args.policy_report):", "    if args.json == \"-\" and args.markdown:",
           "tests/test_policy_report.py tests/test_cli.py", k="usage_error or bad_input"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/render.py
TRUTH_TESTS = "tests/test_paste_truth.py"
RENDER = [
    mutant("the hint to run the script is given where Dynamo's own words are already shown",
           " and not dynamo_lines(report):\n        out.append(\"hint: \"", ":\n        out.append(\"hint: \"",
           JUDGE_TESTS, k="test_the_text_shows_each_scenario_and_the_verdict"),
    mutant("the next step says the policy applied where it was not measured",
           "    if recomputed is False:", "    if not recomputed:",
           TRUTH_TESTS, k="next_step"),
    mutant("the second finding is stated where the policy was asked about aten.mm.default",
           "        and \"aten.mm.default\" not in asked_ops(report, CASE)", "",
           TRUTH_TESTS, k="policy or finding"),
    mutant("the paste's 'To run it' says the opposite of whether torch was changed in-process",
           "\"without what changed it here\" if report.get(\"torch_changes\") else \"\"",
           "\"without what changed it here\" if not report.get(\"torch_changes\") else \"\"",
           TRUTH_TESTS, k="to_run_it"),
    mutant("a backward not counted on a GPU is said to be the CPU's limit",
           "                                 if policy.get(\"device\") == \"cpu\" else \"\")",
           "                                 if policy.get(\"device\") != \"cpu\" else \"\")",
           TRUTH_TESTS, k="not_counted or missing_on_a_gpu"),
    mutant("a run that cannot test offers the ablation",
           "if report[\"source\"].startswith(\"torch.profiler\") and report[\"verdict\"] != \"cannot_test\":",
           "if report[\"source\"].startswith(\"torch.profiler\"):",
           TRUTH_TESTS + " tests/test_report.py", k="cannot"),
    mutant("Error logs of a quiet run claim no warning was shown where nothing was recorded of it",
           "            if \"said\" in report else \"\")]", "            if \"said\" not in report else \"\")]",
           TRUTH_TESTS + " tests/test_report.py", k="error_logs or said"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/said.py
SAID = [
    mutant("a warning is quoted twice: as a warning and as the stderr line that shows it",
           "        if self.showing or (code_file", "        if (code_file",
           SCRIPT_TESTS, k="test_what_the_child_says_is_caught"),
    mutant("the bundle's progress lines are quoted as what the run said",
           "            if one.strip() and not one.startswith(PROGRESS):", "            if one.strip():",
           SCRIPT_TESTS, k="test_what_the_child_says_is_caught"),
    mutant("the lines left out are not counted",
           "            self.left_out += 1", "            pass",
           SCRIPT_TESTS, k="test_a_process_that_says_much_fills_no_paste"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/changes.py
CHANGES_TESTS = "tests/test_changes.py"
CHANGES = [
    mutant("a torch that ships no fix (2.5-2.9) is said to have it reverted",
           "    if not set(SAC_MODES) <= shipped:\n        return False", "    if False:\n        return False",
           CHANGES_TESTS, k="test_a_torch_that_ships_no_fix_has_none_reverted"),
    mutant("a revert of one mode of two is no revert",
           "    return not all(getattr(checkpoint, m).ignore_compile_internals() for m in SAC_MODES)",
           "    return not any(getattr(checkpoint, m).ignore_compile_internals() for m in SAC_MODES)",
           CHANGES_TESTS, k="one_mode_of_two"),
    mutant("a change made by a file of the bundle is said to load again by itself",
           " and folder != BUNDLE \\\n            and not inside(folder, BUNDLE):", ":",
           CHANGES_TESTS, k="reload or the_folder_that"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/captures.py
CAPTURES = [
    mutant("ncu: a range heading seen twice is one range, so a doubled call is hidden",
           "ranges.add(current)[\"instances\"] += 1", "ranges.add(current)[\"instances\"] = 1",
           CAPTURE_TESTS, k="test_a_range_that_ncus_summary_lists_twice_is_doubled"),
    mutant("a count that is no whole number is read as -1 instances",
           "    if n < 0:\n        raise UsageError(\"%s line %d: expected a whole number",
           "    if n < -1:\n        raise UsageError(\"%s line %d: expected a whole number",
           CAPTURE_TESTS, k="malformed"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/inputs.py
BENCH_TESTS = "tests/test_policy_report.py"
INPUTS = [
    mutant("a bench row with a median of 0 ms is taken (x time divides by it)",
           "r[\"median\"] > 0):", "r[\"median\"] >= 0):",
           BENCH_TESTS, k="bench"),
    mutant("a hand-off whose capture options are not strings is taken",
           "    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):",
           "    if not isinstance(options, list):",
           "tests/test_nsys.py", k="test_a_hand_off_that_is_not_the_capture_runs_is_a_usage_error"),
    mutant("a bench whose baseline names no row is taken",
           "isinstance(bench.get(\"baseline\"), str) and bench[\"baseline\"] in rows)", "isinstance(bench.get(\"baseline\"), str))",
           BENCH_TESTS, k="bench"),
]

# ----------------------------------------------------------------------------- sac_repro/judge/command.py
COMMAND = [
    mutant("a URL with a user and a password is printed in the command",
           "SECRET_NAME.search(name) or URL_WITH_USER.search(value) or", "SECRET_NAME.search(name) or",
           CHANGES_TESTS, k="secret"),
    mutant("a change that Python loads by itself is said not to load again",
           "            if not c.get(\"pythonpath\") and c.get(\"reloaded_by\") != BY_INTERPRETER]",
           "            if not c.get(\"pythonpath\")]",
           CHANGES_TESTS, k="test_a_revert_that_python_loads_by_itself_is_not_said_to_be_lost"),
    mutant("a variable whose name holds PASS in a word (TORCHINDUCTOR_DISABLED_PASSES) is withheld",
           "(?<![A-Z])PASS(?![A-Z])", "PASS",
           CHANGES_TESTS, k="secret or listed or switches"),
    mutant("the judge of run_nsys.sh's capture carries TORCHINDUCTOR_COMPILE_THREADS, which run_nsys.sh sets itself",
           "        env.pop(\"TORCHINDUCTOR_COMPILE_THREADS\", None)  # run_nsys.sh sets it itself", "        pass",
           "tests/test_nsys.py", k="test_the_command_of_a_capture_leaves_out_what_run_nsys_sh_sets_itself"),
]

# ----------------------------------------------------------------------------- sac_repro/policy/policy_report.py
POLICY_REPORT = [
    mutant("a run whose policy was not measured reads 'This run does not show it'",
           "    if report[\"policy\"].get(\"with_context_matmul_recomputed_in_backward\") is False:",
           "    if not report[\"policy\"].get(\"with_context_matmul_recomputed_in_backward\"):",
           BENCH_TESTS + " " + TRUTH_TESTS, k="not_measured or matmul_was_saved"),
    mutant("under the in-process revert the advice is to upgrade",
           "advice = \"Run it without the in-process revert\" if reverted else",
           "advice = \"Run it on torch 2.10 or later\" if reverted else",
           TRUTH_TESTS, k="revert"),
]

# ----------------------------------------------------------------------------- torch_compile_selective_activation_checkpoint.py
PROGRAM_TESTS = "tests/test_script_as_program.py"
STANDALONE = [
    mutant("a control that ran f's eager ops beside compiled code counts as compiled",
           "    if ran(lambda: checkpoint_fn_without_context(f_control, x, y)) != (True, False, False):",
           "    if not ran(lambda: checkpoint_fn_without_context(f_control, x, y))[0]:",
           PROGRAM_TESTS, k="test_the_answer_to_each_evidence"),
    mutant("an option exits 1, read as reproduced",
           "file=sys.stderr) or 128)", "file=sys.stderr) or 1)",
           PROGRAM_TESTS, k="refuses_options"),
    mutant("an affected torch (no fix on disk) is said to have the fix reverted",
           "* (shipped and not all(m.ignore_compile_internals() for m in modes))",
           "* (not all(m.ignore_compile_internals() for m in modes))",
           PROGRAM_TESTS, k="reverted_in_process"),
]

TABLES = {
    "run_nsys.sh": RUN_NSYS,
    "sac_repro/judge/measure.py": MEASURE,
    "sac_repro/bisecting/bisect_torch.py": BISECT,
    "sac_repro/bisecting/indexes.py": INDEXES,
    "sac_repro/bisecting/caches.py": CACHES,
    "sac_repro/bisecting/builds.py": BUILDS,
    "sac_repro/bisecting/envs.py": ENVS,
    "sac_repro/judge/verdict.py": VERDICT,
    "sac_repro/exits.py": EXITS,
    "sac_repro/outputs.py": OUTPUTS,
    "sac_repro/judge/cli.py": CLI,
    "sac_repro/judge/render.py": RENDER,
    "sac_repro/judge/said.py": SAID,
    "sac_repro/judge/changes.py": CHANGES,
    "sac_repro/judge/captures.py": CAPTURES,
    "sac_repro/judge/inputs.py": INPUTS,
    "sac_repro/judge/command.py": COMMAND,
    "sac_repro/policy/policy_report.py": POLICY_REPORT,
    "torch_compile_selective_activation_checkpoint.py": STANDALONE,
}


# ----------------------------------------------------------------------------- running them
def copy_bundle(dest):
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "__pycache__", ".whl", ".devrun", ".hypothesis", ".pytest_cache", ".nsyskit"))


WORKERS = "2"  # pytest-xdist's -n for each selection; --workers 0 runs each in one process


def run_tests(copy, tests, k):
    """Runs the selection on the copy: "pass", "fail", "hang" or, for a selection that is wrong in
    the table (no such file, nothing selected), "error: ..."."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", WORKERS]
    # a test file or node id is the copy's; any other word is pytest's (an option, or its value)
    cmd += [os.path.join(copy, t) if os.path.exists(os.path.join(copy, t.split("::")[0])) else t for t in tests]
    cmd += ["-k", k] if k else []
    proc = subprocess.Popen(cmd, cwd=copy, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=MUTANT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "hang"
    # pytest: 1 a test failed, 2 a collection error (a mutated module that no longer imports)
    if proc.returncode in (0, 1, 2):
        return ("pass", "fail", "fail")[proc.returncode]
    return "error: pytest exited %d: %s" % (proc.returncode, " | ".join(out.strip().splitlines()[-3:]))


def apply(copy, path, m, original):
    text = original.replace(m.old, m.new)
    if path.endswith(".py"):
        compile(text, path, "exec")  # a mutant that does not compile is a mistake in its table
    with open(os.path.join(copy, path), "w") as fh:
        fh.write(text)


def run_table(path, mutants, out=sys.stdout):
    """Returns (killed, equivalent that survived, the others that survived)."""
    original = open(os.path.join(ROOT, path)).read()
    killed, equivalent, survived = 0, 0, 0
    started = time.time()
    for m in mutants:
        t0 = time.time()
        if original.count(m.old) != 1:
            result = "error: the text to change is not in %s once" % path
        else:
            with tempfile.TemporaryDirectory(prefix="mutant_") as tmp:
                copy = os.path.join(tmp, "bundle")
                copy_bundle(copy)
                try:
                    apply(copy, path, m, original)
                    result = run_tests(copy, m.tests, m.k)
                except SyntaxError as e:
                    result = "error: the mutant does not compile: %s" % e
        seconds = time.time() - t0
        if result in ("fail", "hang"):
            killed += 1
            label = "killed"
            note = " (its tests hung)" if result == "hang" else ""
            if m.equivalent:
                note += " (marked equivalent, yet killed: drop the mark)"
        elif result == "pass" and m.equivalent:
            equivalent += 1
            label, note = "equiv", " (equivalent: %s)" % m.equivalent
        else:
            survived += 1
            label, note = ("SURVIVED", "") if result == "pass" else ("ERROR", " (%s)" % result)
        print("%-8s %6.1fs  %s%s" % (label, seconds, m.what, note), file=out, flush=True)
    score = "%d of %d mutants of %s killed" % (killed, len(mutants), path)
    if equivalent:
        score += ", %d equivalent survived" % equivalent
    print("%s (%.0f s)" % (score, time.time() - started), file=out, flush=True)
    return killed, equivalent, survived


def baseline(mutants):
    """Each selection the mutants will run, on an unchanged copy: True when all of them pass."""
    selections = sorted({(m.tests, m.k) for m in mutants}, key=str)
    ok = True
    with tempfile.TemporaryDirectory(prefix="mutant_baseline_") as tmp:
        copy = os.path.join(tmp, "bundle")
        copy_bundle(copy)
        for tests, k in selections:
            t0 = time.time()
            result = run_tests(copy, tests, k)
            print("%-8s %6.1fs  baseline: %s%s" % (result.split(":")[0], time.time() - t0, " ".join(tests),
                                                   " -k %r" % k if k else ""), flush=True)
            ok = ok and result == "pass"
    return ok


def table_of(name):
    """A file as given: its path in the bundle, or its base name where that is one table's."""
    if name in TABLES:
        return name
    found = [p for p in TABLES if os.path.basename(p) == name or os.path.normpath(name).endswith(os.sep + p)]
    if len(found) != 1:
        raise SystemExit("mutate.py: %s: no table of mutants (tables: %s)" % (name, ", ".join(TABLES)))
    return found[0]


def main(argv=None):
    global WORKERS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", metavar="FILE", help="the files whose mutants run (default: all)")
    p.add_argument("--only", metavar="TEXT", help="only the mutants whose description holds TEXT")
    p.add_argument("--baseline", action="store_true", help="first check each selection passes unchanged")
    p.add_argument("--list", action="store_true", help="print the tables, run nothing")
    p.add_argument("--workers", default=WORKERS, metavar="N", help="pytest -n for each selection (default %(default)s; "
                   "0: one process, on a machine shared with others)")
    p.add_argument("--against", metavar="TESTS", help="run these tests (space-separated) on each mutant instead of "
                   "its own: which tests kill it, before a table names them")
    args = p.parse_args(argv)
    WORKERS = args.workers
    paths = [table_of(f) for f in args.files] or list(TABLES)
    if args.list:
        for path in paths:
            for m in TABLES[path]:
                print("%s: %s -> %s%s%s" % (path, m.what, " ".join(m.tests), " -k %r" % m.k if m.k else "",
                                            " [equivalent]" if m.equivalent else ""))
        return 0
    chosen = {path: [m._replace(tests=tuple(args.against.split()), k=None) if args.against else m
                     for m in TABLES[path] if not args.only or args.only in m.what] for path in paths}
    if args.baseline and not baseline([m for mutants in chosen.values() for m in mutants]):
        print("a selection fails on the unchanged bundle: its kills would mean nothing")
        return 2
    failed = False
    for path, mutants in chosen.items():
        _, _, survived = run_table(path, mutants)
        failed = failed or survived > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
