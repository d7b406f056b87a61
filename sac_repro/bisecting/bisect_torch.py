#!/usr/bin/env python3
"""Bisect PyTorch builds with the repro script's verdict (pytorch/pytorch#161889).

One nightly, or today's, without a clone (the first question on any report):

    python sac_repro/bisecting/bisect_torch.py nightly latest               # or a date: nightly 2025-09-07

Nightlies, inside a clone of pytorch/pytorch on its `nightly` branch (one commit per nightly):

    git bisect start --term-old broken --term-new fixed <fixed-nightly> <broken-nightly>
    git bisect run python /path/to/sac_repro/bisecting/bisect_torch.py nightly-step --hunt-fix
    python /path/to/sac_repro/bisecting/bisect_torch.py nightly-range        # the main-branch commits to read

Released versions, where nightlies have been pruned (PyPI, or PyTorch's index with --variant):

    python sac_repro/bisecting/bisect_torch.py releases 2.8.0 2.12.0 [--variant cpu]
    python sac_repro/bisecting/bisect_torch.py matrix 2.4.1 2.9.1 2.10.0 latest   # every one given, no search

The cache of environments (one per build) and its shared store of packages:

    python sac_repro/bisecting/bisect_torch.py cache [--prune --keep N | --prune --older-than DAYS]

`nightly-step` exits as `git bisect run` wants (each command's --help lists its exit codes); with
--hunt-fix for the terms broken/fixed, without it for good/bad, and it refuses to run against the
bisect's terms. Environments are installed with uv where it is installed (one shared store of
packages, hard-linked), else pip (one shared wheel cache), under --cache (default
~/.cache/sac-compile-repro, or $SAC_REPRO_CACHE). Stdlib only, besides pip or uv, venv and the
repro script beside it.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

BUNDLE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, BUNDLE)  # where sac_repro/ is, wherever this is called from
try:
    from sac_repro.bisecting import builds, caches, envs, indexes
    from sac_repro.judge.cli import Parser, positive_float
    from sac_repro.exits import (command_codes_help, dies_with_parent, end_group, EXIT_CANNOT_TEST, EXIT_NO_CHANGE, EXIT_OK,
                                 guarded, say, TERMS, Untestable, UsageError)
    from sac_repro.judge.render import release_table_markdown
    from sac_repro.judge.verdict import CASE, classify, CONTROL
except Exception as e:  # copied without its package, say: abort a bisect, never pass as 1
    if __name__ != "__main__":
        raise
    try:
        print("error: cannot import sac_repro beside %s (%s): copy the bundle's whole folder" % (
            __file__, e), file=sys.stderr)
    finally:
        os._exit(128)

REPRO = os.path.join(BUNDLE, "sac_repro")  # the judged run, as `python3 PATH/sac_repro`
NIGHTLY_SUBJECT = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) nightly release \(([0-9a-f]{40})\)")
RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")  # ASCII: \d would take any script's digits


# --------------------------------------------------------------------------- running the repro
def run_repro(python, args):
    """Runs the repro in one environment; returns (exit code, report dict or None). On a signal
    the repro is asked to stop (SIGTERM: it ends its own measured child), then killed."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        cmd = [python, REPRO, "--device", args.device, "--timeout", repr(args.timeout), "--json", out]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, preexec_fn=dies_with_parent())
        try:
            output, _ = proc.communicate()
        except BaseException:
            end_group(proc, grace=30)  # SIGTERM: the repro ends its own measured child
            raise
        report = None
        if os.path.getsize(out):
            with open(out) as fh:
                report = json.load(fh)
        if proc.returncode not in (0, 1, 125) or report is None:
            raise RuntimeError("the repro script failed (exit %d); its output ends:\n%s" % (
                proc.returncode, output[-1500:]))
        return proc.returncode, report
    finally:
        os.unlink(out)


def evidence(report):
    """One line of what ran: per scenario, how many calls ran compiled code, and what."""
    if report["verdict"] == "cannot_test":
        return report.get("reason", "")
    parts = []
    for name in (CONTROL, CASE):
        sc = report["scenarios"][name]
        ind = [k for k in sc["kernels"] if classify(k).family == "inductor"]
        extra = ", ".join(ind[:2]) or ", ".join(sc["eager_pointwise"])
        parts.append("%s %d/%d compiled%s" % (name, sc["compiled_calls"], len(sc["calls"]),
                                             " (%s)" % extra if extra else ""))
    policy = (report.get("policy") or {}).get("with_context_matmul_recomputed_in_backward")
    parts[-1] += {True: "; policy ignored under with_context", False: "; policy applied under with_context",
                  None: ""}[policy]
    return "; ".join(parts)



def step_line(day, wheel, git_version, verdict, exit_code, detail):
    """One line per build: date, wheel, the commit the wheel says it was built from (- when no
    wheel was read), the verdict and its exit code, and why."""
    return "%s  %-44s  git %-12s  %s -> %s  [%s]" % (
        day, wheel, (git_version or "-")[:12], verdict, exit_code, detail)


# --------------------------------------------------------------------------- nightlies
def git(*args):
    proc = subprocess.run(["git"] + list(args), capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError("git %s failed: %s" % (" ".join(args), proc.stderr.strip()))
    return proc.stdout.strip()


def nightly_of(rev):
    subject = git("log", "-1", "--format=%s", rev)
    m = NIGHTLY_SUBJECT.match(subject)
    if not m:
        raise UsageError("%s is not a commit of pytorch's nightly branch (subject %r, expected "
                         "'YYYY-MM-DD nightly release (<sha>)'): run this inside a clone on the "
                         "nightly branch" % (rev, subject))
    return "%s-%s-%s" % m.group(1, 2, 3), m.group(4)


def install_nightly(day, args, expect=None):
    """(day, python, wheel, git version) of the nightly built on `day` (or the latest). With `expect` (the commits a
    bisect step may be), a wheel of another commit is rejected before the repro runs: before it is
    installed where the wheel is on disk (a folder, or a URL whose index gives no hash, downloaded
    first), else right after, and its environment removed."""
    index = indexes.nightly_index(args.variant, args.index)
    wheels = indexes.torch_wheel_files(index)
    if day == "latest":
        day = indexes.latest_date(wheels)
    found = indexes.wheels_for_date(wheels, day)
    if not found:
        raise Untestable("no torch wheel for %s and %s on %s (nightlies are pruned after about 60 "
                         "days)" % (day, indexes.python_tag(), index))
    wheel = found[0][0]
    if len(found) > 1:
        say("several wheels for %s; taking %s over %s" % (day, wheel, ", ".join(w for w, _ in found[1:])))
    cache = caches.cache_dir(args.cache, make=True)
    build = builds.wheel_build(wheel, wheels[wheel], index, cache)
    built_from = builds.wheel_git_version(build.file) if build.file else None
    if expect and build.file and built_from not in expect:
        builds.drop_download(build, cache)
        raise Untestable(wrong_wheel(built_from, expect), wheel, built_from)
    python = envs.ensure_venv(build, cache, args.installer,
                              envs.needed_bytes(build.file, args.variant or "cpu", index), pre=True)
    built_from = envs.installed_git_version(os.path.dirname(os.path.dirname(python))) or built_from
    if expect and built_from not in expect:
        envs.remove_venv(python)
        raise Untestable(wrong_wheel(built_from, expect), wheel, built_from)
    return day, python, wheel, built_from


def wrong_wheel(built_from, expect):
    return ("the wheel's torch.version.git_version %s is not the nightly under test (HEAD %s, main %s): "
            "a wrong wheel would be a wrong step" % (built_from or "(none)", expect[0], expect[1]))


# Words of `git bisect start --term-old OLD --term-new NEW`: OLD one of BAD_WORDS, or NEW one of
# GOOD_WORDS, hunts a fix; the other way round, a regression.
GOOD_WORDS = {"good", "fixed", "fix", "works", "working", "ok", "passes", "passing", "resolved", "unaffected"}
BAD_WORDS = {"bad", "broken", "buggy", "fails", "failing", "failed", "affected", "unfixed", "reproduced", "regressed"}


def terms_hunt(old, new):
    """What a bisect with these terms looks for: "fix", "regression", or None (words not known here:
    the flag is taken as given)."""
    old, new = old.lower(), new.lower()
    if (old, new) == ("old", "new"):
        return "regression"
    fix, regression = old in BAD_WORDS or new in GOOD_WORDS, old in GOOD_WORDS or new in BAD_WORDS
    return None if fix == regression else "fix" if fix else "regression"


def bisect_terms():
    """(old term, new term) of the bisect in progress here, or None where there is none."""
    terms = []
    for which in ("--term-old", "--term-new"):
        proc = subprocess.run(["git", "bisect", "terms", which], capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            return None
        terms.append(proc.stdout.strip())
    return tuple(terms)


def check_terms(hunt_fix):
    """Without this, a step run the wrong way round answers every nightly backwards, and the bisect
    ends on a wrong commit with nothing to show for it."""
    terms = bisect_terms()
    hunt = terms and terms_hunt(*terms)
    if hunt == "fix" and not hunt_fix:
        raise UsageError("the bisect's terms are %s/%s, which hunt the fix, and without --hunt-fix each step "
                         "would answer backwards: add --hunt-fix" % terms)
    if hunt == "regression" and hunt_fix:
        raise UsageError("the bisect's terms are %s/%s, which hunt a regression, and --hunt-fix answers for "
                         "broken/fixed: drop --hunt-fix or start the bisect with --term-old broken --term-new "
                         "fixed" % terms)


def nightly_step(args):
    day, main_sha = nightly_of("HEAD")
    check_terms(args.hunt_fix)
    head = git("rev-parse", "HEAD")
    try:
        # A nightly wheel reports the nightly-branch commit it was built from, or its main sha
        _, python, wheel, built_from = install_nightly(day, args, expect=(head, main_sha))
        _, report = run_repro(python, args)
    except Untestable as e:
        say(step_line(day, e.wheel, e.built_from, "cannot_test", "skip (125)", e.args[0]))
        return EXIT_CANNOT_TEST
    exit_code = TERMS["fix" if args.hunt_fix else "regression"][report["verdict"]]
    say(step_line(day, wheel, built_from, report["verdict"], "exit %d" % exit_code, evidence(report)))
    return exit_code


def nightly(args):
    """One nightly (a date, or the latest the index holds): its verdict, no clone needed."""
    table = []
    verdict = test_build(args.day, args, table)
    print_table(args, table)
    return TERMS["regression"][verdict]


def nightly_range(args):
    """From the first nightly on the new side to the main-branch commits it brought in."""
    rev = args.rev
    if rev is None:
        for ref in ("refs/bisect/fixed", "refs/bisect/bad", "refs/bisect/new"):
            if subprocess.run(["git", "rev-parse", "-q", "--verify", ref], capture_output=True).returncode == 0:
                rev = ref
                break
        else:
            raise UsageError("no finished bisect here: pass the first fixed nightly commit")
    day, sha = nightly_of(rev)
    prev_day, prev_sha = nightly_of(rev + "^")
    say("first nightly on the new side: %s (main %s)" % (day, sha))
    say("the nightly before it:         %s (main %s)" % (prev_day, prev_sha))
    say("the change is among these main-branch commits; in a clone of pytorch/pytorch's main:")
    say("    git log --oneline %s..%s" % (prev_sha, sha))
    return 0


# --------------------------------------------------------------------------- releases
def parse_release(v):
    if not RELEASE.fullmatch(v):
        raise UsageError("%r is not a release version like 2.8.0" % v)
    return tuple(int(x) for x in v.split("."))


def parse_build(v):
    """A build on matrix's command line: latest, a release, or a nightly's date (with a '-')."""
    if v == "latest":
        return v
    if "-" in v:
        return indexes.parse_day(v)
    parse_release(v)
    return v


def releases_between(old, new, available):
    lo, hi = parse_release(old), parse_release(new)
    out = sorted({v for v in available if RELEASE.fullmatch(v)
                  and lo <= parse_release(v) <= hi}, key=parse_release)
    for v in (old, new):
        if v not in out:
            raise UsageError("torch %s is not among the releases listed on that index" % v)
    return out


def test_build(version, args, table):
    """Runs the repro on one build (a release, a nightly date or `latest`), prints one line of
    evidence, adds a row to the table, returns the verdict."""
    wheel, built_from = "-", None
    try:
        if indexes.DAY.fullmatch(version) or version == "latest":
            version, python, wheel, built_from = install_nightly(version, args)
        else:
            index, cache = indexes.release_index(args.variant, args.index), caches.cache_dir(args.cache, make=True)
            build = builds.release_build(index, version, cache)
            python = envs.ensure_venv(build, cache, args.installer, envs.needed_bytes(build.file, args.variant, index))
            built_from = envs.installed_git_version(os.path.dirname(os.path.dirname(python)))
        code, report = run_repro(python, args)
    except Untestable as e:
        say("torch %-10s cannot_test    %s" % (version, e.args[0]))
        table.append((version, (built_from or "-")[:12], "`cannot_test`", "125", e.args[0].splitlines()[0]))
        return "cannot_test"
    git_version = (report.get("torch_git_version") or "?")[:12]
    say("torch %-10s %-14s (git %s) exit %d; %s" % (version, report["verdict"], git_version, code, evidence(report)))
    table.append((version, git_version, "`%s`" % report["verdict"], str(code), evidence(report)))
    return report["verdict"]


def print_table(args, table):
    if args.markdown:
        say("")
        say(release_table_markdown(sorted(table, key=lambda row: release_key(row[0]))))


def release_key(v):
    return (1, v) if indexes.DAY.fullmatch(v) else (0, parse_release(v))


def matrix(args):
    """The verdict of each build given (releases, nightly dates, `latest`): no search, every one tested."""
    say("releases from %s; nightlies from %s" % (indexes.describe(indexes.release_index(args.variant, args.index)),
                                                 indexes.nightly_index(args.variant, args.index)))
    table = []
    verdicts = [test_build(v, args, table) for v in args.versions]
    print_table(args, table)
    return EXIT_CANNOT_TEST if "cannot_test" in verdicts else EXIT_OK


def releases(args):
    if parse_release(args.old) == parse_release(args.new):  # before asking any index
        raise UsageError("OLD and NEW are the same release (%s): a search needs two, the older first" % args.old)
    if parse_release(args.old) > parse_release(args.new):
        raise UsageError("OLD (%s) must be older than NEW (%s)" % (args.old, args.new))
    index = indexes.release_index(args.variant, args.index)
    try:
        available = indexes.release_versions(index)
    except Untestable as e:  # before any build: a busy or flaky index leaves nothing to search or skip
        raise UsageError("%s: try again, or check --index" % e)
    versions = releases_between(args.old, args.new, available)
    say("releases from %s to %s on %s: %s" % (args.old, args.new, indexes.describe(index), ", ".join(versions)))
    table, verdicts = [], {}

    def verdict(v):
        if v not in verdicts:
            verdicts[v] = test_build(v, args, table)
        return verdicts[v]

    for end, which in ((args.old, "OLD"), (args.new, "NEW")):
        if verdict(end) == "cannot_test":  # a search from an untested end would answer unmeasured
            raise UsageError("%s %s cannot be tested (see its line above), so the search has nothing "
                             "to compare with: pick another %s" % (which, end, which))
    base = verdict(args.old)
    if verdict(args.new) == base:
        say("no release between %s and %s changes the verdict from %s" % (args.old, args.new, base))
        return EXIT_NO_CHANGE
    lo, hi = 0, len(versions) - 1  # versions[lo] gives the OLD verdict, versions[hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        # nearest testable release to the middle, as `git bisect skip` would do
        candidates = sorted(range(lo + 1, hi), key=lambda i: (abs(i - mid), i))
        probe = next((i for i in candidates if verdict(versions[i]) != "cannot_test"), None)
        if probe is None:
            break
        if verdict(versions[probe]) == base:
            lo = probe
        else:
            hi = probe
    untested = versions[lo + 1:hi]
    print_table(args, table)
    if untested:  # the change is in there, but where was not measured
        say("the verdict changes between %s (%s) and %s (%s); not testable in between: %s"
            % (versions[lo], base, versions[hi], verdicts[versions[hi]], ", ".join(untested)))
        return EXIT_CANNOT_TEST
    say("first release whose verdict differs from %s (%s): %s (%s)" % (
        args.old, base, versions[hi], verdicts[versions[hi]]))
    return 0


# --------------------------------------------------------------------------- the cache
def cache(args):
    """Lists the environments, and prunes them with --prune."""
    if args.prune and args.keep is None and args.older_than is None:  # before anything is read or made
        raise UsageError("--prune needs --keep N or --older-than DAYS")
    if not args.prune and (args.keep is not None or args.older_than is not None):
        raise UsageError("--keep and --older-than go with --prune")
    root = caches.cache_dir(args.cache)  # a prune makes nothing: not the cache's folder, nor its lock file
    if args.prune and os.path.exists(caches.cache_lock(root)):  # one that cannot be opened is a usage error
        caches.cache_dir(args.cache, make=True)
    if args.prune:
        envs.prune(root, args.keep, args.older_than)
    per_env, stores_only, total = envs.disk_usage(root)
    say("cache %s" % root)
    say("%-46s %-16s %-12s %9s %12s  %s" % ("environment", "torch", "git", "size", "only its own", "last used"))
    for name, path, version, git_version, used, record in envs.environments(root):
        size, only = per_env.get(name, (0, 0))
        say("%-46s %-16s %-12s %6.2f GB %9.2f GB  %s" % (
            name, version or "?", (git_version or "?")[:12], size / caches.GB, only / caches.GB,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(used))))
        # what it holds, in full: the environment is known by the wheel's sha256
        say("    %s sha256 %s git %s from %s" % (record.get("wheel", "?"), record.get("sha256", "? (no build record)"),
                                               git_version or "?", record.get("index", "?")))
    for store, only in sorted(stores_only.items()):
        say("%s store %s: %.2f GB that no environment links (%s)" % (store, os.path.join(root, store), only / caches.GB,
                                                                     store_fate(root, store)))
    say("total on disk: %.2f GB (each file counted once: environments share the store's files)" % (total / caches.GB))
    return 0


def store_fate(root, store):
    """What a prune does to a store: only to its own uv store, and only through uv."""
    if store == "pip":
        return "cache --prune keeps it: pip's wheel cache"
    if not caches.is_own(os.path.join(root, store)):
        return "cache --prune keeps it: not made by bisect_torch.py"
    return "cache --prune removes them, through uv" if envs.find_uv() else "cache --prune keeps them: uv is not on PATH"


# --------------------------------------------------------------------------- command line
def parse_args(argv):
    p = Parser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    def command(name, **kwargs):
        return sub.add_parser(name, epilog=command_codes_help(name), formatter_class=argparse.RawDescriptionHelpFormatter,
                              **kwargs)
    common = Parser(add_help=False)
    common.add_argument("--cache", help="where environments and the shared store are kept "
                        "(default $SAC_REPRO_CACHE or ~/.cache/sac-compile-repro)")
    builds_ = Parser(add_help=False)
    builds_.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu",
                         help="passed to the repro (default cpu)")
    builds_.add_argument("--timeout", type=positive_float, default=900.0, help="passed to the repro (seconds)")
    builds_.add_argument("--markdown", action="store_true", help="also print the per-build table as markdown")
    builds_.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto",
                         help="auto (default): uv where it is installed, else pip")
    builds_.add_argument("--variant", default=os.environ.get("SAC_BISECT_VARIANT"),
                         help="PyTorch's build variant: cpu, cu126, cu128, ... (releases: from "
                              "download.pytorch.org/whl/VARIANT instead of PyPI; nightlies: default cpu)")
    builds_.add_argument("--index", default=os.environ.get("SAC_BISECT_INDEX"),
                         help="a PEP 503 index (an http(s):// URL), or a local folder (a path or a file:// URL): "
                              "flat, or one folder per package")
    step = command("nightly-step", parents=[common, builds_], help="one `git bisect run` step")
    step.add_argument("--hunt-fix", action="store_true",
                      help="swap exits 0 and 1, for `git bisect start --term-old broken --term-new fixed`")
    step.add_argument("--terms", help=argparse.SUPPRESS)  # the old spelling: refused, naming the new one
    one = command("nightly", parents=[common, builds_], help="the verdict of one nightly, no clone needed")
    one.add_argument("day", nargs="?", default="latest", metavar="DATE|latest")
    rng = command("nightly-range", help="after the bisect: main-branch commits to read")
    rng.add_argument("rev", nargs="?", help="the first nightly on the new side (default: the bisect's)")
    rel = command("releases", parents=[common, builds_], help="binary search over releases")
    rel.add_argument("old")
    rel.add_argument("new")
    mat = command("matrix", parents=[common, builds_], help="the verdict of each build given")
    mat.add_argument("versions", nargs="+", metavar="VERSION|DATE|latest")
    cac = command("cache", parents=[common], help="list (or --prune) the cached environments")
    cac.add_argument("--prune", action="store_true")
    cac.add_argument("--keep", type=int, metavar="N", help="with --prune: keep the N most recently used")
    cac.add_argument("--older-than", type=positive_float, metavar="DAYS", help="with --prune: remove those unused for longer")
    args = p.parse_args(argv)
    if args.command == "nightly-step" and (args.terms is not None or os.environ.get("SAC_BISECT_TERMS")):
        raise UsageError("%s is no longer read: pass --hunt-fix to hunt the fix (terms broken/fixed), "
                         "nothing for a regression (good/bad)" % (
                             "--terms" if args.terms is not None else "$SAC_BISECT_TERMS"))
    if getattr(args, "day", "latest") != "latest":
        args.day = indexes.parse_day(args.day)
    if args.command == "matrix":
        args.versions = [parse_build(v) for v in args.versions]
    if getattr(args, "keep", None) is not None and args.keep < 0:
        raise UsageError("--keep must be 0 or more")
    for option in ("index", "cache", "variant"):
        if getattr(args, option, None) == "":
            raise UsageError("--%s was given an empty value (an unset shell variable?)" % option)
    if getattr(args, "variant", None) and not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", args.variant):
        raise UsageError("--variant %r is no variant of PyTorch's index: give one like cpu or cu128" % args.variant)
    if getattr(args, "index", None):
        args.index = indexes.parse_index(args.index)
    if hasattr(args, "cache"):
        caches.cache_dir(args.cache)  # a cache that cannot be one is a usage error before any work
    return args


def main(argv=None):
    def body():
        args = parse_args(sys.argv[1:] if argv is None else argv)
        return {"nightly-step": nightly_step, "nightly": nightly, "nightly-range": nightly_range,
                "releases": releases, "matrix": matrix, "cache": cache}[args.command](args)
    return guarded(body, "bisect_torch.py")


if __name__ == "__main__":
    sys.exit(main())
