#!/usr/bin/env python3
"""Bisect PyTorch builds with the repro script's verdict (pytorch/pytorch#161889).

Nightlies, inside a clone of pytorch/pytorch on its `nightly` branch (one commit per nightly):

    git bisect start --term-old broken --term-new fixed <fixed-nightly> <broken-nightly>
    git bisect run python /path/to/bisect_torch.py nightly-step
    python /path/to/bisect_torch.py nightly-range        # the main-branch commits to read

Released versions, from PyPI, where nightlies have been pruned:

    python bisect_torch.py releases 2.8.0 2.12.0
    python bisect_torch.py matrix 2.4.1 2.5.1 2.9.1 2.10.0   # every one given, no search

`nightly-step` exits as `git bisect run` wants: 0 for the old term, 1 for the new, 125 to skip a
nightly that cannot be tested (no wheel for that date, install failure, repro says cannot_test),
and 128 on a usage error or a bug here, which aborts the bisect. Virtual environments are
cached per wheel under --cache (default ~/.cache/sac-compile-repro, or $SAC_REPRO_CACHE).
Stdlib only, besides pip, venv and the repro script beside it.
"""
import argparse
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

try:
    from sac_repro.cli import Parser, positive_float
    from sac_repro.exits import EXIT_CANNOT_TEST, guarded, TERMS, UsageError
    from sac_repro.render import release_table_markdown
    from sac_repro.verdict import CASE, classify_kernel, CONTROL
except Exception as e:  # copied without its package, say: abort a bisect, never pass as 1
    if __name__ != "__main__":
        raise
    try:
        print("error: cannot import sac_repro beside %s (%s): copy the bundle's whole folder" % (
            __file__, e), file=sys.stderr)
    finally:
        os._exit(128)

HERE = os.path.dirname(os.path.abspath(__file__))
REPRO = os.path.join(HERE, "torch_compile_selective_activation_checkpoint.py")
DEFAULT_NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly"
NIGHTLY_SUBJECT = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) nightly release \(([0-9a-f]{40})\)")


class Untestable(Exception):
    """This build cannot be tested: skip it (125), never guess."""


def say(msg):
    print(msg, flush=True)


def cache_dir(arg):
    path = os.path.abspath(arg or os.environ.get("SAC_REPRO_CACHE")
                           or os.path.join(os.path.expanduser("~"), ".cache", "sac-compile-repro"))
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError("the cache %s is not a folder (--cache, or $SAC_REPRO_CACHE): name a folder" % path)
    return path


# --------------------------------------------------------------------------- virtual environments
def venv_python(path):
    return os.path.join(path, "bin", "python")


def ensure_venv(name, pip_args, cache, label):
    """A cached virtual environment holding one torch. Built under NAME.partial and renamed when
    complete, so an interrupted install never leaves a half-built environment to be reused."""
    root = os.path.join(cache, "venvs")
    final, partial = os.path.join(root, name), os.path.join(root, name + ".partial")
    if os.path.exists(venv_python(final)):
        return venv_python(final)
    os.makedirs(root, exist_ok=True)
    shutil.rmtree(partial, ignore_errors=True)
    say("installing %s into %s (a CUDA build is several GB: minutes)" % (label, final))
    try:
        cmd = new_venv(partial) + ["install", "--disable-pip-version-check", "-q",
                                   "--no-cache-dir"] + pip_args  # the environments are the cache
        # A session of its own, ended as a whole on Ctrl-C, whatever pip has started
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        output = []
        reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
        reader.start()
        started = next_note = time.time()
        while proc.poll() is None:
            time.sleep(1)
            if time.time() >= next_note + 30:
                next_note = time.time()
                say("  still installing %s: %.1f GB so far, %ds" % (label, du_gb(partial), next_note - started))
        reader.join(5)
        if proc.returncode != 0:
            tail = "".join(l for l in output if "WARNING: Location" not in l)[-1500:]
            raise Untestable("pip could not install %s:\n%s" % (label, tail.rstrip()))
        os.rename(partial, final)
    except BaseException:
        if "proc" in locals() and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return venv_python(final)


def new_venv(path):
    """Makes a virtual environment as `python3 -m venv` makes one, pip included (and on Python 3.11
    setuptools, which torch 2.5's Inductor imports); returns the pip command that installs into it."""
    venv = subprocess.run([sys.executable, "-m", "venv", path], capture_output=True, text=True)
    if venv.returncode != 0:
        raise UsageError("%s -m venv failed, and each torch under test needs its own virtual "
                         "environment: on Debian or Ubuntu, install python3-venv (%s)" % (
                             sys.executable, " ".join(venv.stdout.split() + venv.stderr.split())[-200:]))
    return [venv_python(path), "-m", "pip"]


def du_gb(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total / 1e9


def release_venv(version, cache):
    return ensure_venv("torch-%s" % version, ["torch==%s" % version], cache, "torch==%s" % version)


# --------------------------------------------------------------------------- running the repro
def run_repro(python, args):
    """Runs the repro in one environment; returns (exit code, report dict or None). On a signal
    the repro is asked to stop (SIGTERM: it ends its own measured child), then killed."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        cmd = [python, REPRO, "--device", args.device, "--timeout", repr(args.timeout), "--json", out]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate()
        except BaseException:
            stop(proc)
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


def stop(proc, grace=30):
    """SIGTERM, time to clean up, then SIGKILL for whatever is left of its process group."""
    try:
        proc.terminate()
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def evidence(report):
    """One line of what ran: per scenario, how many calls ran compiled code, and what."""
    if report["verdict"] == "cannot_test":
        return report.get("reason", "")
    parts = []
    for name in (CONTROL, CASE):
        sc = report["scenarios"][name]
        ind = [k for k in sc["kernels"] if classify_kernel(k) == "inductor"]
        extra = ", ".join(ind[:2]) or ", ".join(sc["eager_pointwise"])
        parts.append("%s %d/%d compiled%s" % (name, sc["compiled_calls"], len(sc["calls"]),
                                             " (%s)" % extra if extra else ""))
    policy = (report.get("policy") or {}).get("with_context_matmul_recomputed_in_backward")
    parts[-1] += {True: "; policy ignored under with_context", False: "; policy applied under with_context",
                  None: ""}[policy]
    return "; ".join(parts)


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


def index_url(args):
    if args.index:
        return args.index
    return "%s/%s" % (DEFAULT_NIGHTLY_INDEX, args.variant)


def wheel_folder(index):
    """A local index: a folder with torch/ in it (PEP 503 layout), or a flat folder of wheels."""
    return os.path.join(index, "torch") if os.path.isdir(os.path.join(index, "torch")) else index


def is_url(index):
    return re.match(r"https?://|file://", index) is not None


def list_torch_wheels(index):
    """File names of torch wheels on a PEP 503 index (URL or folder) or in a flat folder of wheels."""
    if not is_url(index):
        if not os.path.isdir(index):
            raise UsageError("--index %s: no such folder (an index is an http(s):// URL or a folder of wheels)" % index)
        wheels = sorted(f for f in os.listdir(wheel_folder(index)) if f.startswith("torch-") and f.endswith(".whl"))
        if not wheels:
            raise UsageError("--index %s: no torch wheels in this folder (nor in its torch/)" % index)
        return wheels
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            page = resp.read().decode("utf-8", "replace")
    except Exception as e:
        raise Untestable("could not read the index %s: %s" % (url, e))
    names = re.findall(r'href="([^"#]+\.whl)', page)
    return sorted({html.unescape(urllib.parse.unquote(n.rsplit("/", 1)[-1])) for n in names})


def python_tag():
    return "cp%d%d" % sys.version_info[:2]


def wheel_for_date(wheels, day):
    """The wheel built on `day` for this Python and Linux x86_64. The version number changes at
    branch cuts, so it is read from the listing, never assumed. Several matches: the highest
    version, then the name, so the choice is deterministic."""
    stamp = "dev" + day.replace("-", "")
    tag = python_tag()
    matches = []
    for w in wheels:
        parts = w[:-4].split("-")
        if len(parts) < 5 or parts[0] != "torch":
            continue
        version, py, plat = parts[1], parts[2], parts[-1]
        if ("." + stamp) not in version or py != tag or not ("x86_64" in plat and "linux" in plat):
            continue
        matches.append((version_key(version), w, version))
    matches.sort(reverse=True)
    return [(w, v) for _, w, v in matches]


def version_key(v):
    return tuple(int(x) for x in re.match(r"\d+\.\d+\.\d+", v).group(0).split("."))


def nightly_step(args):
    day, main_sha = nightly_of("HEAD")
    head = git("rev-parse", "HEAD")
    index = index_url(args)
    wheel = "-"
    try:
        found = wheel_for_date(list_torch_wheels(index), day)
        if not found:
            raise Untestable("no torch wheel for %s and %s on %s (nightlies are pruned after about "
                             "60 days)" % (day, python_tag(), index))
        wheel, version = found[0]
        if len(found) > 1:
            say("several wheels for %s; taking %s over %s" % (day, wheel, ", ".join(w for w, _ in found[1:])))
        if not is_url(index):
            pip_args = ["--no-index", "--find-links", wheel_folder(index), "torch==%s" % version]
        else:
            pip_args = ["--pre", "--index-url", index, "torch==%s" % version]
        python = ensure_venv(wheel[:-4], pip_args, cache_dir(args.cache), wheel)
        _, report = run_repro(python, args)
        tested = report.get("torch_git_version") or ""
        # A nightly wheel reports the nightly-branch commit it was built from, or its main sha
        if report["verdict"] != "cannot_test" and tested not in (head, main_sha):
            raise Untestable("the installed wheel's torch.version.git_version %s is not the nightly "
                             "under test (HEAD %s, main %s): a wrong wheel would be a wrong step"
                             % (tested or "(none)", head, main_sha))
    except Untestable as e:
        say("%s  %-44s  %-12s  cannot_test -> skip (125): %s" % (day, wheel, main_sha[:12], e))
        return EXIT_CANNOT_TEST
    exit_code = TERMS[args.terms][report["verdict"]]
    say("%s  %-44s  %-12s  %s -> exit %d  [%s]" % (
        day, wheel, (report.get("torch_git_version") or "?")[:12], report["verdict"], exit_code,
        evidence(report)))
    return exit_code


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
def pypi_versions():
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch"],
                          capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", proc.stdout)
    if not m:
        raise UsageError("pip index versions torch gave no listing: %s" % proc.stderr.strip()[-300:])
    return [v.strip() for v in m.group(1).split(",")]


def parse_release(v):
    if not re.fullmatch(r"\d+\.\d+\.\d+", v):
        raise UsageError("%r is not a release version like 2.8.0" % v)
    return tuple(int(x) for x in v.split("."))


def releases_between(old, new, available):
    lo, hi = parse_release(old), parse_release(new)
    out = sorted({v for v in available if re.fullmatch(r"\d+\.\d+\.\d+", v)
                  and lo <= parse_release(v) <= hi}, key=parse_release)
    for v in (old, new):
        if v not in out:
            raise UsageError("torch %s is not among pip's listed releases" % v)
    return out


def test_release(version, cache, args, table):
    """Runs the repro on one PyPI release, prints one line of evidence, returns the verdict."""
    try:
        code, report = run_repro(release_venv(version, cache), args)
    except Untestable as e:
        say("torch %-8s cannot_test    %s" % (version, e))
        table.append((version, "-", "`cannot_test`", "125", str(e).splitlines()[0]))
        return "cannot_test"
    git_version = (report.get("torch_git_version") or "?")[:12]
    say("torch %-8s %-14s (git %s) exit %d; %s" % (version, report["verdict"], git_version, code, evidence(report)))
    table.append((version, git_version, "`%s`" % report["verdict"], str(code), evidence(report)))
    return report["verdict"]


def print_table(args, table):
    if args.markdown:
        say("")
        say(release_table_markdown(sorted(table, key=lambda row: parse_release(row[0]))))


def matrix(args):
    """The verdict of each release given, one line each: no search, every one tested."""
    for v in args.versions:
        parse_release(v)
    cache, table = cache_dir(args.cache), []
    for v in args.versions:
        test_release(v, cache, args, table)
    print_table(args, table)
    return 0


def releases(args):
    if parse_release(args.old) >= parse_release(args.new):  # before asking PyPI anything
        raise UsageError("OLD (%s) must be older than NEW (%s)" % (args.old, args.new))
    versions = releases_between(args.old, args.new, pypi_versions())
    say("releases from %s to %s: %s" % (args.old, args.new, ", ".join(versions)))
    cache, table = cache_dir(args.cache), []
    verdicts = {}

    def verdict(v):
        if v not in verdicts:
            verdicts[v] = test_release(v, cache, args, table)
        return verdicts[v]

    for end, which in ((args.old, "OLD"), (args.new, "NEW")):
        if verdict(end) == "cannot_test":  # a search from an untested end would answer unmeasured
            raise UsageError("%s %s cannot be tested (see its line above), so the search has nothing "
                             "to compare with: pick another %s" % (which, end, which))
    base = verdict(args.old)
    if verdict(args.new) == base:
        say("no release between %s and %s changes the verdict from %s" % (args.old, args.new, base))
        return 1
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


# --------------------------------------------------------------------------- command line
def env_choice(name, default, choices):
    """A default read from the environment is checked as the option itself would be."""
    value = os.environ.get(name, default)
    if value not in choices:
        raise UsageError("$%s is %r; it must be one of %s" % (name, value, ", ".join(sorted(choices))))
    return value


def parse_args(argv):
    p = Parser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    common = Parser(add_help=False)
    common.add_argument("--cache", help="where virtual environments are kept "
                        "(default $SAC_REPRO_CACHE or ~/.cache/sac-compile-repro)")
    common.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu",
                        help="passed to the repro (default cpu)")
    common.add_argument("--timeout", type=positive_float, default=900.0, help="passed to the repro (seconds)")
    common.add_argument("--markdown", action="store_true",
                        help="releases, matrix: also print the per-release table as markdown")
    step = sub.add_parser("nightly-step", parents=[common], help="one `git bisect run` step")
    step.add_argument("--terms", choices=sorted(TERMS), default=env_choice("SAC_BISECT_TERMS", "fix", TERMS),
                      help="fix: --term-old broken --term-new fixed (default); regression: good/bad")
    step.add_argument("--index", default=os.environ.get("SAC_BISECT_INDEX"),
                      help="PEP 503 index URL, or a folder of wheels (default: PyTorch's nightly "
                           "index for --variant)")
    step.add_argument("--variant", default=os.environ.get("SAC_BISECT_VARIANT", "cpu"),
                      help="nightly build variant: cpu (default), cu126, cu128, ...")
    rng = sub.add_parser("nightly-range", help="after the bisect: main-branch commits to read")
    rng.add_argument("rev", nargs="?", help="the first nightly on the new side (default: the bisect's)")
    rel = sub.add_parser("releases", parents=[common], help="binary search over PyPI releases")
    rel.add_argument("old")
    rel.add_argument("new")
    mat = sub.add_parser("matrix", parents=[common], help="the verdict of each release given")
    mat.add_argument("versions", nargs="+", metavar="VERSION")
    return p.parse_args(argv)


def main(argv=None):
    def body():
        args = parse_args(sys.argv[1:] if argv is None else argv)
        return {"nightly-step": nightly_step, "nightly-range": nightly_range,
                "releases": releases, "matrix": matrix}[args.command](args)
    return guarded(body, "bisect_torch.py")


if __name__ == "__main__":
    sys.exit(main())
