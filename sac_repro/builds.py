"""Torch builds under test, for bisect_torch.py: where their wheels are (PyPI, PyTorch's per-variant
and nightly indexes, a local folder), a checked wheel, and a cached virtual environment for each.

A build is known by its wheel's sha256 (from the index's link where it gives one, else from the
file): the environment is named after it and records it, so that a wheel of the same name from
another index, or rebuilt, is never taken for one already installed. Installs hold the cache's lock
shared, a prune holds it exclusive; a process holds the lock of each environment it uses, shared,
so that a prune leaves it.

Environments are installed with uv where it is there (one store of downloaded and unpacked
packages under the cache, hard-linked into every environment: a package several torches need is
downloaded once and stored once), else with pip and one shared wheel cache (downloaded once,
unpacked into each environment). Nothing here installs into the Python that runs it. Stdlib only.
"""
import collections
import datetime
import errno
import fcntl
import hashlib
import html
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

from .exits import end_group, UsageError

PYTORCH_INDEX = "https://download.pytorch.org/whl"
# Where a release "from PyPI" is found: its simple index gives each file's sha256 in the link
PYPI = "https://pypi.org/simple"
GB = 1e9
# Free space an install needs, where the wheels' own sizes are not known beforehand: the largest
# environment measured (PyPI's CUDA build of torch 2.10.0, 6.9 GB) with a margin; a CPU build
# from PyTorch's index is about 1 GB installed.
NEEDS = {"cuda": 8 * GB, "cpu": 1.5 * GB}
LAST_USED = ".last-used"
RECORD = ".sac-build.json"  # what an environment holds: the wheel, its sha256, index, torch and commit
LEFTOVERS = (".partial", ".removing")  # an install or a removal under way, or cut short: never an environment


class Untestable(Exception):
    """This build cannot be tested: skip it (125), never guess. `wheel` and `built_from` say which
    wheel it was and the commit it names, where they were read before the build was given up."""

    def __init__(self, message, wheel="-", built_from=None):
        super().__init__(message)
        self.wheel, self.built_from = wheel, built_from


def say(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------- the cache
def cache_dir(arg):
    path = os.path.abspath(arg or os.environ.get("SAC_REPRO_CACHE")
                           or os.path.join(os.path.expanduser("~"), ".cache", "sac-compile-repro"))
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError("the cache %s is not a folder (--cache, or $SAC_REPRO_CACHE): name a folder" % path)
    return path


def venvs_dir(cache):
    return os.path.join(cache, "venvs")


def venv_python(path):
    return os.path.join(path, "bin", "python")


HELD = {}  # lock file -> its descriptor: one per file in this process, as flock's are per descriptor


def lock(path, exclusive, waiting=None, wait=True):
    """Takes an flock on `path` (made if need be), kept until unlock() or the process ends; says
    `waiting` first where it must wait. With wait False: False where it would have to."""
    fd = HELD.get(path)
    if fd is None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = HELD[path] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        if not wait:
            return False
        if waiting:
            say(waiting)
        fcntl.flock(fd, mode)
    return True


def unlock(path):
    fd = HELD.pop(path, None)
    if fd is not None:
        os.close(fd)


def cache_lock(cache):
    return os.path.join(cache, "lock")


def env_lock(cache, name):
    # beside the environments, never inside one: it outlives the environment's renames
    return os.path.join(cache, "locks", name)


# --------------------------------------------------------------------------- indexes
def is_url(index):
    """Of an index as parse_index returns it: a file:// URL has become its folder by then."""
    return re.match(r"https?://", index) is not None


def parse_index(text):
    """--index as given: a folder (its path, or a file:// URL of it on this host) or an http(s)
    URL with a host. Returns the folder's path or the URL; anything else is a usage error here,
    before any work, never a skip on every step of a bisect."""
    if "://" not in text:
        return text
    if re.search(r"[\s\x00-\x1f\x7f]", text):  # urlsplit drops some of these silently
        raise UsageError("--index %r: a URL holds no spaces or control characters (quote them: %%20)" % text)
    try:
        url = urllib.parse.urlsplit(text)
        url.port  # raises for a port that is no number or out of range
    except ValueError as e:
        raise UsageError("--index %s is no URL (%s): give an http(s):// URL or a folder of wheels" % (text, e))
    if url.scheme == "file":
        if url.netloc not in ("", "localhost") or not url.path or url.query or url.fragment:
            raise UsageError("--index %s: a file:// URL names a folder on this machine (file:///path/to/wheels)" % text)
        return urllib.parse.unquote(url.path)
    if url.scheme in ("http", "https") and url.hostname:
        return url.geturl()
    raise UsageError("--index %s: an index is an http(s):// URL with a host, a file:// URL or a folder of wheels" % text)


DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # ASCII: \d would take any script's digits


def parse_day(text, today=None):
    """A nightly's date as given: YYYY-MM-DD, a day of the calendar, not after today (UTC).
    Anything else is a usage error: no index holds a wheel for it, and a skip would hide the typo."""
    try:
        day = datetime.date.fromisoformat(text) if DAY.fullmatch(text) else None
    except ValueError:
        day = None
    if day is None:
        raise UsageError("%r is not a date like 2025-09-07 (YYYY-MM-DD in ASCII digits, a day that "
                         "exists): give one, or latest" % text)
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    if day > today:
        raise UsageError("%s is after today (%s, UTC): no nightly of that day is built yet" % (text, today))
    return text


def release_index(variant, index):
    """None (PyPI), or the index a release comes from: --index, or PyTorch's for --variant."""
    return index or ("%s/%s" % (PYTORCH_INDEX, variant) if variant else None)


def nightly_index(variant, index):
    return index or "%s/nightly/%s" % (PYTORCH_INDEX, variant or "cpu")


def describe(index):
    return "PyPI" if index is None else index


def index_folders(index):
    """A local index's folders of wheels: a flat folder, or a PEP 503 folder (one per package)."""
    if not os.path.isdir(index):
        raise UsageError("--index %s: no such folder (an index is an http(s):// URL or a folder of wheels)" % index)
    subs = sorted(os.path.join(index, d) for d in os.listdir(index) if os.path.isdir(os.path.join(index, d)))
    return [index] + subs


def install_args(index, pre=False):
    """How pip and uv find the wheels: PyPI by default, an index URL, or a local folder."""
    if index is None:
        return []
    if is_url(index):
        return (["--pre"] if pre else []) + ["--index-url", index]
    args = ["--no-index"]
    for folder in index_folders(index):
        args += ["--find-links", folder]
    return args + (["--pre"] if pre else [])


def torch_wheel_files(index):
    """{file name: path or URL} of the torch wheels an index holds."""
    if not is_url(index):
        found = {}
        for folder in index_folders(index):
            for f in os.listdir(folder):
                if f.endswith(".whl") and urllib.parse.unquote(f) != f:
                    # uv 0.13.9 and pip 26 pass over such a file in --find-links (pip 23 takes it)
                    raise UsageError("--index %s: %s is a wheel name percent-encoded (as a browser or wget "
                                     "saves it), which uv and pip do not read as a wheel: rename it %s" % (
                                         index, f, urllib.parse.unquote(f)))
                if f.startswith("torch-") and f.endswith(".whl"):
                    found.setdefault(f, os.path.join(folder, f))
        if not found:
            raise UsageError("--index %s: no torch wheels in this folder (nor in its package folders)" % index)
        return found
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            page = resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        if 400 <= e.code < 500 and e.code not in (408, 429):  # it answered: there is no torch there
            raise UsageError("the index %s answered %d %s: no torch there (check --index or --variant)" % (
                url, e.code, e.reason))
        raise Untestable("could not read the index %s: %s" % (url, e))
    except urllib.error.URLError as e:  # nothing answered: every step of a bisect would be skipped
        raise UsageError("cannot reach the index %s (%s): check --index, --variant and the network" % (
            url, getattr(e.reason, "strerror", None) or e.reason))
    except (ValueError, http.client.InvalidURL) as e:  # a URL it cannot send: asking again would not help
        raise UsageError("--index %s: %s" % (index, e))
    except Exception as e:
        raise Untestable("could not read the index %s: %s" % (url, e))
    out = {}
    for href in re.findall(r'href="([^"]+\.whl)(?:#[^"]*)?"', page):
        href = html.unescape(href)
        out.setdefault(urllib.parse.unquote(href.rsplit("/", 1)[-1]), urllib.parse.urljoin(url, href))
    if not any(name.startswith("torch-") for name in out):
        raise UsageError("the index %s lists no torch wheels: check --index or --variant" % url)
    return out


def python_tag():
    return "cp%d%d" % sys.version_info[:2]


def wheel_parts(name):
    """(version, python tag, platform) of a wheel file name, or None."""
    parts = name[:-4].split("-")
    if len(parts) < 5 or parts[0] != "torch":
        return None
    return parts[1], parts[2], parts[-1]


def runs_here(py, plat):
    return py == python_tag() and "linux" in plat and "x86_64" in plat


def version_key(v):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", v)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def wheels_for_date(wheels, day):
    """The wheels built on `day` for this Python and Linux x86_64. The version number changes at
    branch cuts, so it is read from the listing, never assumed. Several: the highest version first."""
    stamp = ".dev" + day.replace("-", "")
    matches = []
    for name in wheels:
        parts = wheel_parts(name)
        if parts and stamp in parts[0] and runs_here(parts[1], parts[2]):
            matches.append((version_key(parts[0]), name, parts[0]))
    return [(name, version) for _, name, version in sorted(matches, reverse=True)]


def latest_date(wheels):
    days = sorted({m.group(1) for name in wheels for m in [re.search(r"\.dev(\d{8})", name)]
                   if m and wheel_parts(name) and runs_here(*wheel_parts(name)[1:])})
    if not days:
        raise Untestable("no nightly wheel for %s on Linux x86_64 in this index" % python_tag())
    d = days[-1]
    return "%s-%s-%s" % (d[:4], d[4:6], d[6:])


def release_versions(index):
    """Release versions on an index: PyPI (pip index versions), a URL or a folder."""
    if index is None:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch"],
                              capture_output=True, text=True)
        m = re.search(r"Available versions: (.*)", proc.stdout)
        if not m:
            raise UsageError("pip index versions torch gave no listing: %s" % proc.stderr.strip()[-300:])
        return [v.strip() for v in m.group(1).split(",")]
    out = set()
    for name in torch_wheel_files(index):
        parts = wheel_parts(name)
        if parts and runs_here(parts[1], parts[2]):
            out.add(parts[0].split("+")[0])
    return sorted(out, key=version_key)


# --------------------------------------------------------------------------- the build: a wheel and its sha256
Build = collections.namedtuple("Build", "wheel version sha256 link file index")
# wheel: its file name; link: its path or URL on the index; file: a copy on disk to read and install
# from (None: the installer downloads the link); index: absolute, None for PyPI


def wheel_build(name, link, index, cache):
    """The build a wheel of an index is: its sha256 from the index's link where the index gives one
    (PyPI's and PyTorch's do), else from the file, a folder's or one downloaded into the cache."""
    index = index if index is None or is_url(index) else os.path.abspath(index)
    version = wheel_parts(name)[0]
    if not is_url(link):
        return Build(name, version, file_sha256(link, cache), os.path.abspath(link), os.path.abspath(link), index)
    sha = link_hashes(index or PYPI).get(name)
    if sha:
        return Build(name, version, sha, link, None, index)
    path, sha = download(link, name, cache)
    return Build(name, version, sha, link, path, index)


def release_build(index, version, cache):
    """The wheel of a release for this Python on Linux x86_64, on a folder, an index URL or PyPI."""
    where = index or PYPI
    wheels = torch_wheel_files(where)
    names = sorted(n for n in wheels if wheel_parts(n) and wheel_parts(n)[0].split("+")[0] == version
                   and runs_here(*wheel_parts(n)[1:]))
    if not names:
        raise Untestable("no torch %s wheel for %s on Linux x86_64 on %s" % (version, python_tag(), describe(index)))
    if len(names) > 1:
        say("several wheels of torch %s; taking %s over %s" % (version, names[0], ", ".join(names[1:])))
    return wheel_build(names[0], wheels[names[0]], index, cache)


def link_hashes(index):
    """{file name: sha256} of the torch wheels whose link on an index URL's page carries `#sha256=`."""
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            page = resp.read().decode("utf-8", "replace")
    except Exception as e:
        raise Untestable("could not read the index %s: %s" % (url, e))
    return {urllib.parse.unquote(html.unescape(href).rsplit("/", 1)[-1]): sha.lower()
            for href, sha in re.findall(r'href="([^"#]+\.whl)#sha256=([0-9a-fA-F]{64})"', page)}


def file_sha256(path, cache):
    """A wheel file's sha256, kept in the cache by path, size, times and inode: a cached step does
    not read a multi-GB wheel again, and a wheel rebuilt in place is read again."""
    st = os.stat(path)
    key, stamp = os.path.realpath(path), [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    memo_path = os.path.join(cache, "hashes.json")
    memo = read_json(memo_path) or {}
    if memo.get(key, [None])[:-1] == stamp:
        return memo[key][-1]
    memo[key] = stamp + [sha256_of(path)]
    write_json(memo_path, {k: v for k, v in memo.items() if os.path.exists(k)})
    return memo[key][-1]


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write_json(path, data):
    """Whole or not at all: a reader never sees half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.%d" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def download(url, name, cache):
    """A wheel whose index gives no hash, fetched into the cache to be hashed, read and installed
    from; removed once installed (drop_download). Returns (path, sha256)."""
    folder = os.path.join(downloads_dir(cache), str(os.getpid()))
    path, digest = os.path.join(folder, name), hashlib.sha256()
    os.makedirs(folder, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(path, "wb") as out:
            size = int(resp.headers.get("Content-Length") or 0)
            check_free_space(cache, 3 * size + 0.3 * GB, name)
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except BaseException as e:
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in CACHE_ERRORS:
            raise UsageError("cannot write %s under %s (%s): free some space (bisect_torch.py cache --prune) "
                             "or pass --cache elsewhere" % (name, cache, e.strerror))
        if isinstance(e, (OSError, http.client.HTTPException)):  # the network's, or the index's
            raise Untestable("could not download %s: %s" % (url, e), name)
        raise
    return path, digest.hexdigest()


CACHE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS)


def downloads_dir(cache):
    return os.path.join(cache, "downloads")


def drop_download(build, cache):
    if build.file and inside(downloads_dir(cache), build.file):
        shutil.rmtree(os.path.dirname(build.file), ignore_errors=True)


def env_name(build):
    """torch-VERSION-<the first 16 hex of its sha256>: nothing cut short that tells builds apart."""
    return "torch-%s-%s" % (build.version, build.sha256[:16])


# --------------------------------------------------------------------------- the wheel's commit
GIT_VERSION = re.compile(r"""^git_version\s*=\s*['"]([0-9a-fA-F]+|Unknown)['"]""", re.M)


def wheel_git_version(path):
    """torch.version.git_version as a wheel file holds it (torch/version.py), without installing."""
    try:
        with zipfile.ZipFile(path) as z:
            text = z.read("torch/version.py").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        raise Untestable("cannot read torch/version.py in %s: %s" % (os.path.basename(path), e))
    m = GIT_VERSION.search(text)
    return m.group(1) if m else None


def installed_git_version(venv):
    """The same, read from an environment's site-packages, without importing torch."""
    for path in sorted(glob_version_files(venv)):
        with open(path) as fh:
            m = GIT_VERSION.search(fh.read())
        return m.group(1) if m else None
    return None


def glob_version_files(venv):
    lib = os.path.join(venv, "lib")
    for py in (os.listdir(lib) if os.path.isdir(lib) else []):
        path = os.path.join(lib, py, "site-packages", "torch", "version.py")
        if os.path.exists(path):
            yield path


def installed_torch_version(venv):
    for path in glob_version_files(venv):
        with open(path) as fh:
            m = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", fh.read(), re.M)
        return m.group(1) if m else None
    return None


# --------------------------------------------------------------------------- installing
def find_uv():
    """uv, where it is installed: on PATH, or beside the Python running this. None: use pip."""
    on_path = shutil.which("uv")
    if on_path:
        return on_path
    beside = os.path.join(os.path.dirname(sys.executable), "uv")
    return beside if os.access(beside, os.X_OK) else None


def choose_installer(wanted):
    if wanted == "pip":
        return "pip", None
    uv = find_uv()
    if wanted == "uv" and not uv:
        raise UsageError("--installer uv: uv is not on PATH (pip install uv, or leave --installer auto)")
    return ("uv", uv) if uv else ("pip", None)


def free_bytes(path):
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def check_free_space(cache, needed, what):
    """Before an install: too little space is a usage error (128), never a half-built environment
    or a skipped build."""
    free = free_bytes(cache)
    if free < needed:
        raise UsageError("installing %s needs about %.1f GB free under %s, and %.1f GB are free: free "
                         "some (bisect_torch.py cache --prune) or pass --cache elsewhere" % (
                             what, needed / GB, cache, free / GB))


def ensure_venv(build, cache, installer, needed, pre=False):
    """The cached environment of one build; returns its python. Reused only where it is whole and
    holds this very wheel, else removed and built again. Held in use (its lock, shared) until this
    process ends, so that a prune leaves it."""
    name = env_name(build)
    final = os.path.join(venvs_dir(cache), name)
    try:
        lock(env_lock(cache, name), False, "waiting for another process installing or removing %s" % name)
        if unusable(final, build):
            build_venv(build, final, cache, installer, needed, pre)
    finally:
        drop_download(build, cache)
    touch(final)
    return venv_python(final)


def unusable(path, build):
    """Why an environment cannot be taken for this build (None: it can): something missing, another
    wheel's sha256 in its record, another commit in its site-packages than the recorded one, or a
    Python that no longer runs, or is another version than its torch's."""
    if not os.path.lexists(path):
        return "absent"
    if not os.path.exists(os.path.join(path, "pyvenv.cfg")):
        return "has no pyvenv.cfg"
    record = read_json(os.path.join(path, RECORD))
    if not isinstance(record, dict):
        return "has no build record (%s)" % RECORD
    if record.get("sha256") != build.sha256:
        return "holds another wheel (sha256 %s)" % record.get("sha256")
    if installed_torch_version(path) is None:
        return "has no torch in its site-packages"
    if installed_git_version(path) != record.get("git_version"):
        return "holds torch of commit %s, not the recorded %s" % (installed_git_version(path), record.get("git_version"))
    if not runs_its_python(path):
        return "has a Python that does not run, or is not the one its torch was installed for"
    return None


def runs_its_python(path):
    """Whether the environment's Python starts (bare: milliseconds) and is the version whose
    site-packages holds torch."""
    try:
        proc = subprocess.run([venv_python(path), "-I", "-S", "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and os.path.exists(
        os.path.join(path, "lib", proc.stdout.strip(), "site-packages", "torch", "version.py"))


def build_venv(build, final, cache, installer, needed, pre):
    """Installs a build under the cache's lock, shared (installs of other builds go on at once, a
    prune waits for them), and its own, exclusive (a second install of it waits, then reuses it)."""
    name = os.path.basename(final)
    own = env_lock(cache, name)
    lock(cache_lock(cache), False, "waiting for a prune of %s to end" % cache)
    try:
        lock(own, True, "waiting for another install of %s" % name)
        try:
            why = unusable(final, build)  # another install of it may have ended meanwhile
            if why and os.path.lexists(final):
                say("the environment %s %s: removing it and installing it again" % (name, why))
                discard(final)
            if why:
                install(build, final, cache, installer, needed, pre)
        finally:
            lock(own, False)  # in use from here on
    finally:
        unlock(cache_lock(cache))


def install(build, final, cache, installer, needed, pre):
    """Built under NAME.partial and renamed when complete, so an interrupted install never leaves a
    half-built environment to be reused; a signal ends the installer and removes NAME.partial."""
    partial = final + ".partial"
    os.makedirs(os.path.dirname(final), exist_ok=True)
    shutil.rmtree(partial, ignore_errors=True)  # cut short before: no install of it runs (its lock)
    check_free_space(cache, needed, build.wheel)
    kind, uv = choose_installer(installer)
    say("installing %s from %s with %s into %s (%s)" % (build.wheel, describe(build.index), kind, final,
                                                         size_hint(needed)))
    proc = None
    try:
        pip = new_venv(partial)
        if kind == "uv":
            cmd = [uv, "pip", "install", "--python", venv_python(partial), "--cache-dir", os.path.join(cache, "uv")]
        else:
            cmd = pip + ["install", "--disable-pip-version-check", "--cache-dir", os.path.join(cache, "pip")]
        cmd += ["-q"] + install_args(build.index, pre) + [requirement(build)]
        # A session of its own, ended as a whole on a signal, whatever the installer has started
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        output = []
        reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
        reader.start()
        started = next_note = time.time()
        while proc.poll() is None:
            time.sleep(0.5)
            if time.time() >= next_note + 30:
                next_note = time.time()
                store = os.path.join(cache, kind)  # uv unpacks into its store, then links
                say("  still installing %s: %.1f GB in the environment and the %s store so far, %ds" % (
                    build.wheel, (du_bytes(partial) + du_bytes(store)) / GB, kind, next_note - started))
        reader.join(5)
        if proc.returncode != 0:
            tail = "".join(l for l in output if "WARNING: Location" not in l)[-1500:]
            raise Untestable("%s could not install %s:\n%s" % (kind, build.wheel, tail.rstrip()))
        write_record(partial, build)
        os.rename(partial, final)
    except BaseException:
        if proc is not None and proc.poll() is None:
            end_group(proc)
        shutil.rmtree(partial, ignore_errors=True)
        raise


def requirement(build):
    """That one wheel: its file, or its link with the sha256, which pip and uv check."""
    return build.file or "torch @ %s#sha256=%s" % (build.link, build.sha256)


def write_record(path, build):
    write_json(os.path.join(path, RECORD), {
        "wheel": build.wheel, "sha256": build.sha256, "index": build.index or PYPI, "link": build.link,
        "torch": installed_torch_version(path), "git_version": installed_git_version(path)})


def size_hint(needed):
    return "a CUDA build: several GB, minutes" if needed >= NEEDS["cuda"] else "about %.1f GB" % (needed / GB)


def needed_bytes(wheel_path=None, variant=None, index=None):
    """Free space to ask for: a local wheel's own size (x3: unpacked, with its dependencies), or
    what a build of that kind measured (PyPI's Linux torch is a CUDA build)."""
    if wheel_path and os.path.exists(wheel_path):
        return 3 * os.path.getsize(wheel_path) + 0.3 * GB
    if variant == "cpu" or (index and re.search(r"/cpu/?$", index)):
        return NEEDS["cpu"]
    return NEEDS["cuda"]


def new_venv(path):
    """Makes a virtual environment as `python3 -m venv` makes one, pip included (and on Python 3.11
    setuptools, which torch 2.5's Inductor imports); returns the pip command that installs into it.
    In a session of its own, ended as a whole on a signal: venv runs ensurepip as a child."""
    proc = subprocess.Popen([sys.executable, "-m", "venv", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        end_group(proc)
        raise
    if proc.returncode != 0:
        raise UsageError("%s -m venv failed, and each torch under test needs its own virtual "
                         "environment: on Debian or Ubuntu, install python3-venv (%s)" % (
                             sys.executable, " ".join(out.split() + err.split())[-200:]))
    return [venv_python(path), "-m", "pip"]


def remove_venv(python):
    """A rejected environment goes: it would stay in the cache for good."""
    discard(os.path.dirname(os.path.dirname(python)))


def discard(path):
    """Renamed out of the way first (NAME.removing is never taken for an environment), then
    deleted: a removal cut short leaves nothing that looks whole."""
    if os.path.islink(path):
        os.unlink(path)
        return
    gone = path + ".removing"
    shutil.rmtree(gone, ignore_errors=True)
    os.rename(path, gone)
    shutil.rmtree(gone)


def touch(folder):
    with open(os.path.join(folder, LAST_USED), "w") as fh:
        fh.write("%d\n" % time.time())


# --------------------------------------------------------------------------- sizes, listing, pruning
def du_bytes(path, seen=None):
    """Bytes on disk under path, each hard-linked file counted once (across calls sharing `seen`)."""
    seen = set() if seen is None else seen
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def disk_usage(cache):
    """(per environment {name: (bytes of all its files, bytes only it holds)}, bytes of the stores'
    files that no environment links, bytes of the whole cache): each file counted once, whatever
    links to it, as the disk holds it."""
    owners, sizes = {}, {}
    for name, path, *_ in environments(cache):
        for dirpath, _, files in os.walk(path):
            for f in files:
                st = os.lstat(os.path.join(dirpath, f))
                key = (st.st_dev, st.st_ino)
                owners.setdefault(key, set()).add(name)
                sizes[key] = st.st_blocks * 512
    per_env = {}
    for key, names in owners.items():
        for name in names:
            total, only = per_env.get(name, (0, 0))
            per_env[name] = (total + sizes[key], only + (sizes[key] if len(names) == 1 else 0))
    stores_only = 0
    for store in ("uv", "pip"):
        for dirpath, _, files in os.walk(os.path.join(cache, store)):
            for f in files:
                st = os.lstat(os.path.join(dirpath, f))
                if (st.st_dev, st.st_ino) not in owners:
                    stores_only += st.st_blocks * 512
    return per_env, stores_only, du_bytes(cache)


def environments(cache):
    """[(name, path, torch version, git version, last use, its build record or {})] of the cache's
    environments: never one being built or removed."""
    root = venvs_dir(cache)
    out = []
    for name in listing(root):
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isdir(path) or name.endswith(LEFTOVERS):
            continue
        stamp = os.path.join(path, LAST_USED)
        try:
            used = os.path.getmtime(stamp if os.path.exists(stamp) else path)
        except FileNotFoundError:  # removed by a prune meanwhile
            continue
        record = read_json(os.path.join(path, RECORD))
        out.append((name, path, installed_torch_version(path), installed_git_version(path), used,
                    record if isinstance(record, dict) else {}))
    return out


def inside(root, path):
    root, path = os.path.realpath(root), os.path.realpath(path)
    return os.path.commonpath([root, path]) == root and path != root


def prune(cache, keep=None, older_than_days=None, now=None):
    """Removes environments (the least recently used beyond `keep`, or those unused for longer than
    `older_than_days`), what installs and removals cut short left, then the store's unpacked packages
    that no environment links any more. Waits for the installs under way (the cache's lock,
    exclusive), and leaves an environment that a process uses. Never anything outside the cache.
    Returns the names removed."""
    now = time.time() if now is None else now
    lock(cache_lock(cache), True, "waiting for the installs under way in %s to end" % cache)
    try:
        envs = sorted(environments(cache), key=lambda e: -e[4])
        doomed = [(name, path) for i, (name, path, _, _, used, _) in enumerate(envs)
                  if (keep is not None and i >= keep) or (older_than_days is not None and now - used > older_than_days * 86400)]
        removed = [name for name, path in doomed if remove_unused(cache, name, path)]
        remove_leftovers(cache)
        prune_store(cache)
    finally:
        unlock(cache_lock(cache))
    return removed


def remove_unused(cache, name, path):
    if not inside(venvs_dir(cache), path):
        raise UsageError("refusing to remove %s: not inside the cache %s" % (path, cache))
    if not lock(env_lock(cache, name), True, wait=False):
        say("keeping %s: in use by another process" % name)
        return False
    try:
        discard(path)
    finally:
        unlock(env_lock(cache, name))
    return True


def remove_leftovers(cache):
    """NAME.partial and NAME.removing, and the downloads of processes that are gone: with the cache's
    lock held exclusive no install is under way, so these were cut short."""
    root, downloads = venvs_dir(cache), downloads_dir(cache)
    found = [os.path.join(root, e) for e in listing(root) if e.endswith(LEFTOVERS)]
    found += [os.path.join(downloads, e) for e in listing(downloads) if not alive(e)]
    for path in found:
        if os.path.isdir(path) and not os.path.islink(path) and inside(cache, path):
            shutil.rmtree(path, ignore_errors=True)


def listing(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def alive(pid):
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's
        pass
    return True


def prune_store(cache):
    """Empties uv's store of the packages that no environment links any more (a file linked into an
    environment has more than one link), through `uv cache clean PACKAGE`, which keeps uv's index of
    its store whole. Without uv, or for pip's wheel cache, nothing is removed."""
    archives = os.path.join(cache, "uv", "archive-v0")
    uv = find_uv()
    if not uv or not os.path.isdir(archives):
        return []
    linked = {}
    for entry in os.listdir(archives):
        path = os.path.join(archives, entry)
        if os.path.islink(path) or not os.path.isdir(path) or not inside(cache, path):
            continue
        names = [d[:-len(".dist-info")].rsplit("-", 1)[0] for d in os.listdir(path) if d.endswith(".dist-info")]
        in_use = any(os.lstat(os.path.join(d, f)).st_nlink > 1 for d, _, files in os.walk(path) for f in files)
        for name in names:
            key = re.sub(r"[-_.]+", "-", name).lower()
            linked[key] = linked.get(key, False) or in_use
    unused = sorted(name for name, in_use in linked.items() if not in_use)
    if unused:
        subprocess.run([uv, "cache", "clean", "--cache-dir", os.path.join(cache, "uv")] + unused,
                       capture_output=True, text=True)
    return unused
