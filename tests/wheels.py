"""Stand-ins for torch builds, for the bisect's plumbing only: stub wheels whose `torch` replays a
child that real torch recorded, or loads this environment's real torch (fixed, or with the 2.10 fix
reverted in-process); local indexes of both layouts, one index over HTTP, and nightly-branch
histories. Not a test file: the tests import it."""
import base64
import contextlib
import hashlib
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
import zipfile

import pytest

from conftest import data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BISECT = os.path.join(ROOT, "sac_repro", "bisecting", "bisect_torch.py")
PYTAG = "cp%d%d" % sys.version_info[:2]
DEP = "sacstubdep"

# A stub torch that runs this environment's real torch: the whole repro runs on each step (slow:
# an import of torch and Inductor's compiles, about 10 s on 2 cores)
STUB_INIT = '''
import os, signal, sys
BEHAVIOUR = {behaviour!r}
if BEHAVIOUR == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
import importlib.util
sys.path.append({real_site!r})  # the real torch's own dependencies
_spec = importlib.util.spec_from_file_location(
    "torch", os.path.join({real_site!r}, "torch", "__init__.py"),
    submodule_search_locations=[os.path.join({real_site!r}, "torch")])
_real = importlib.util.module_from_spec(_spec)
sys.modules["torch"] = _real
_spec.loader.exec_module(_real)
if BEHAVIOUR == "broken":
    import torch.utils.checkpoint as _cp
    for _mode in (_cp._CachingTorchDispatchMode, _cp._CachedTorchDispatchMode):
        _mode.ignore_compile_internals = classmethod(lambda cls: False)
_real.version.git_version = {git_version!r}  # what a nightly wheel reports: the commit it was built from
sys.modules["torch"] = _real
'''

# A stub torch for what the plumbing decides (which wheel, which environment, which exit code): the
# script's parent runs as it is, and the measured child, as it imports torch, writes what a real
# child of torch 2.13 wrote on the CPU (tests/data/cpu-torch2.13), fixed or with the fix reverted,
# as this wheel's torch and commit. The parent judges it, so the verdict names the wheel that ran.
REPLAY_INIT = '''
import json, os, signal, sys
if {behaviour!r} == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
if "--_child" not in sys.argv:
    raise ImportError("a stub torch for the bisect's tests: only the repro's measured child imports it")
with open(os.path.join(os.path.dirname(__file__), "recorded_child.json")) as _fh:
    _result = json.load(_fh)
_result["env"].update(torch={version!r}, torch_git={git_version!r})
with open(sys.argv[sys.argv.index("--_child") + 1], "w") as _fh:
    json.dump(_result, _fh)
os._exit(0)
'''
RECORDED = {"fixed": "child_fixed.json", "broken": "child_fix_reverted.json"}


def write_wheel(path, files):
    """A wheel file as pip and uv accept it: the files, and a RECORD with their hashes."""
    dist = next(p.split("/")[0] for p in files if p.endswith(".dist-info/METADATA"))
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
            z.writestr(name, data)
        record.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(record) + "\n")


def build_stub_wheel(folder, day, behaviour, git_version, version=None, requires=(), extra="", real_torch=False):
    """A torch wheel whose torch is this environment's, fixed or (behaviour "broken") with the fix
    reverted (real_torch), or else replays a recorded child of that behaviour; a nightly of
    2025-09-DAY unless `version` says otherwise. `extra` changes the wheel's content and nothing
    else (a rebuild under the same name). Returns the file name."""
    real_site = os.path.dirname(os.path.dirname(importlib.util.find_spec("torch").origin))
    version = version or "2.10.0.dev202509%s+cpu" % day
    requires = list(requires) + (["no-such-package-anywhere-xyz"] if behaviour == "uninstallable" else [])
    name = "torch-%s-%s-%s-linux_x86_64.whl" % (version, PYTAG, PYTAG)
    dist = "torch-%s.dist-info" % version
    init = STUB_INIT if real_torch else REPLAY_INIT
    files = {
        "torch/__init__.py": init.format(behaviour=behaviour, real_site=real_site, version=version,
                                         git_version=git_version) + extra,
        # what a real wheel holds, and what bisect_torch.py reads before and after installing
        "torch/version.py": "__version__ = %r\ngit_version = %r\n" % (version, git_version),
        dist + "/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: %s\n%s" % (
            version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: %s-%s-linux_x86_64\n" % (PYTAG, PYTAG),
    }
    if not real_torch and behaviour in RECORDED:
        with open(data("cpu-torch2.13", RECORDED[behaviour])) as fh:
            files["torch/recorded_child.json"] = fh.read()
    write_wheel(os.path.join(folder, name), files)
    return name


def dependency_wheel(folder):
    """A package of its own that the stub torch requires: found only if the index is read right."""
    dist = "%s-1.0.dist-info" % DEP
    write_wheel(os.path.join(folder, "%s-1.0-py3-none-any.whl" % DEP), {
        DEP + "/__init__.py": "",
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % DEP,
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"})


def make_index(root, layout):
    """Nightlies of 2025-09-06 (broken) and 2025-09-07 (fixed), a wheel of another commit for
    2025-09-08 (the latest), and releases 2.9.1 (broken) and 2.12.0 (fixed): flat, or one folder per
    package (PEP 503)."""
    torch_dir = root / "torch" if layout == "pep503" else root
    dep_dir = root / DEP if layout == "pep503" else root
    torch_dir.mkdir(parents=True, exist_ok=True)
    dep_dir.mkdir(parents=True, exist_ok=True)
    dependency_wheel(str(dep_dir))
    builds = {"06": ("broken", "a" * 40, None), "07": ("fixed", "b" * 40, None), "08": ("fixed", "c" * 40, None),
              "r291": ("broken", "d" * 40, "2.9.1+cpu"), "r2120": ("fixed", "e" * 40, "2.12.0+cpu")}
    for day, (behaviour, sha, version) in builds.items():
        build_stub_wheel(str(torch_dir), day, behaviour, sha, version=version, requires=[DEP])
    return root


def sha256_of(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


class Index(http.server.SimpleHTTPRequestHandler):
    """A PEP 503 index over HTTP, made from a flat folder of wheels: one page per package, each link
    with its `#sha256=` as PyTorch's and PyPI's give it (none with `hashes` False), or the folder's
    PACKAGE/index.html where there is one. With `hold` (an Event), a wheel's download is held open
    until it is set, then refused (served, with `refuse` False); `asked` (an Event) is set when a
    wheel is asked for."""
    hold = asked = None
    hashes = refuse = True

    def do_GET(self):
        parts = [p for p in self.path.split("/") if p]
        if len(parts) == 1:
            page = os.path.join(self.directory, parts[0], "index.html")
            if os.path.exists(page):
                with open(page, "rb") as fh:
                    body = fh.read()
            else:
                files = sorted(f for f in os.listdir(self.directory) if f.endswith(".whl") and (
                    f.lower().startswith(parts[0].replace("-", "_") + "-") or f.startswith(parts[0] + "-")))
                body = "".join('<a href="/files/%s%s">%s</a>\n' % (
                    f, "#sha256=" + sha256_of(os.path.join(self.directory, f)) if self.hashes else "", f)
                    for f in files).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.asked is not None:
            self.asked.set()
        if self.hold is not None:
            self.hold.wait(120)
            if self.refuse:
                self.send_error(503)
                return
        self.path = "/" + parts[-1]
        super().do_GET()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve_index(folder, hold=None, asked=None, hashes=True, refuse=True):
    """The URL of an Index of `folder` on a loopback port, for the `with` block."""
    handler = type("Held", (Index,), {"hold": hold, "asked": asked, "hashes": hashes, "refuse": refuse})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a, **k: handler(*a, directory=str(folder), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d/" % server.server_port
    finally:
        if hold is not None:
            hold.set()
        server.shutdown()


SLOW_VENV = """import os, subprocess, sys
target = sys.argv[-1]
os.makedirs(target, exist_ok=True)  # as venv does: the bisect makes and marks the folder first
# as ensurepip does, a child of its own that writes into the new environment, late
late = subprocess.Popen([sys.executable, "-c", "import os, sys, time; time.sleep(2); "
                         "os.makedirs(os.path.join(sys.argv[1], 'bin'), exist_ok=True); time.sleep(60)", target])
with open(os.environ["SLOW_VENV_STARTED"], "w") as fh:
    fh.write("%d %d" % (os.getpid(), late.pid))
late.wait()
"""


def slow_venv(folder):
    """A `venv` module, for PYTHONPATH, that makes an environment slowly through a child of its own
    (ensurepip is one); it writes its pid and the child's to $SLOW_VENV_STARTED once both run.
    Returns the PYTHONPATH."""
    os.makedirs(os.path.join(folder, "venv"))
    with open(os.path.join(folder, "venv", "__init__.py"), "w"):
        pass
    with open(os.path.join(folder, "venv", "__main__.py"), "w") as fh:
        fh.write(SLOW_VENV)
    return str(folder)


@pytest.fixture(autouse=True)
def quick_venvs(request, quick_venv, monkeypatch):
    """Autouse in the modules that import it: every environment the bisect makes in their tests is
    a copy (conftest.py's quick_venv), except in tests marked real_venv."""
    if request.node.get_closest_marker("real_venv") is None:
        for name, value in quick_venv.items():
            monkeypatch.setenv(name, value)


def repro_python(folder, rc, report=None):
    """The python of an environment whose repro answers without running: it writes `report` (a
    dict) where --json says, then exits `rc` (negative: killed by that signal). For what the bisect
    makes of the repro's answer; returns its path."""
    os.makedirs(os.path.join(folder, "bin"))
    script = "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --json ] && out=$2; shift; done\n"
    if report is not None:
        with open(os.path.join(folder, "report.json"), "w") as fh:
            json.dump(report, fh)
        script += 'cp "%s" "$out"\n' % os.path.join(folder, "report.json")
    script += "kill -%d $$\n" % -rc if rc < 0 else "exit %d\n" % rc
    path = os.path.join(folder, "bin", "python")
    with open(path, "w") as fh:
        fh.write(script)
    os.chmod(path, 0o755)
    return path


# ----------------------------------------------------------- a nightly branch
def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo)] + list(args), check=True, capture_output=True,
                          text=True).stdout.strip()


def main_sha(day):
    return hashlib.sha1(day.encode()).hexdigest()


def nightly_repo(repo, days):
    """A git history shaped like pytorch's nightly branch: one commit per (day, main sha); returns
    {day: commit}."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "nightly")
    commits = {}
    for day, main in days:
        git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m",
            "2025-09-%s nightly release (%s)" % (day, main))
        commits[day] = git(repo, "rev-parse", "HEAD")
    return commits


# date -> what that day's stub wheel does; 04 has no wheel, 08's wheel cannot be installed,
# 11's wheel was built from another commit than the nightly under test. All replay a recorded
# child but 12, outside the history's bisected range (01 to 10), which runs this environment's
# real torch with the fix reverted: the whole repro runs on its step.
NIGHTLIES = {"01": "broken", "02": "broken", "03": "broken", "04": None, "05": "crash",
             "06": "broken", "07": "fixed", "08": "uninstallable", "09": "fixed", "10": "fixed",
             "11": "fixed", "12": "broken"}
REAL_TORCH = ("12",)
OTHER_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def nightly_world(tmp_path_factory):
    """A nightly-style git history, a folder of stub wheels, and a venv cache of its own."""
    root = tmp_path_factory.mktemp("nightly")
    wheels = root / "wheels"
    wheels.mkdir()
    commits = nightly_repo(root / "pytorch", [(day, main_sha(day)) for day in NIGHTLIES])
    for day, behaviour in NIGHTLIES.items():
        # A nightly's git version is the nightly-branch commit or the main-branch one: both occur
        git_version = {"09": commits[day], "11": OTHER_COMMIT}.get(day, main_sha(day))
        if behaviour:
            build_stub_wheel(str(wheels), day, behaviour, git_version, real_torch=day in REAL_TORCH)
    return {"repo": root / "pytorch", "wheels": wheels, "cache": root / "cache", "commits": commits}


def bisect(*args, cache, cwd=None, env=None, timeout=900):
    """bisect_torch.py as a user runs it: (exit code, stdout and stderr together)."""
    proc = subprocess.run([sys.executable, BISECT] + list(args) + ["--cache", str(cache)], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, env=dict(os.environ, **(env or {})))
    return proc.returncode, proc.stdout + proc.stderr


def children_of(pid):
    """The pids of a process's descendants, read from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def tagged(tag):
    """The pids of the live processes whose environment holds SAC_TEST_TREE=tag: a process and
    everything it started, whatever their parent is now (an orphan's is 1) and whichever session
    they moved to. A zombie has no environment left to read: it is dead."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/environ" % entry, "rb") as fh:
                    if ("SAC_TEST_TREE=%s" % tag).encode() in fh.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found
