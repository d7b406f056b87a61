"""A cached virtual environment for each torch build, for bisect_torch.py: made, checked, reused,
listed and pruned, under the cache (caches.py).

Environments are installed with uv where it is there (one store of downloaded and unpacked
packages under the cache, hard-linked into every environment: a package several torches need is
downloaded once and stored once), else with pip and one shared wheel cache (downloaded once,
unpacked into each environment). Nothing here installs into the Python that runs it. Stdlib only.
"""
import os
import re
import shutil
import shlex
import subprocess
import sys
import time

from . import children
from .builds import drop_download, GIT_VERSION
from .caches import (cache_lock, check_free_space, downloads_dir, env_lock, GB, inside, is_own, listing, lock, make_own,
                     mark, MARK, own_store, read_json, remove_own, unlock, venvs_dir, write_json)
from ..exits import dies_with_parent, say, Untestable, UsageError
from .indexes import describe, install_args, PYPI

# Free space an install needs, where the wheels' own sizes are not known beforehand: the largest
# environment measured (PyPI's CUDA build of torch 2.10.0, 6.9 GB) with a margin; a CPU build
# from PyTorch's index is about 1 GB installed.
NEEDS = {"cuda": 8 * GB, "cpu": 1.5 * GB}
LAST_USED = ".last-used"
RECORD = ".sac-build.json"  # what an environment holds: the wheel, its sha256, index, torch and commit
LEFTOVERS = (".partial", ".removing")  # an install or a removal under way, or cut short: never an environment


# --------------------------------------------------------------------------- an environment and what it holds
def venv_python(path):
    return os.path.join(path, "bin", "python")


def env_name(build):
    """torch-VERSION-<the first 16 hex of its sha256>: nothing cut short that tells builds apart."""
    return "torch-%s-%s" % (build.version, build.sha256[:16])


def installed_git_version(venv):
    """torch.version.git_version as an environment's site-packages holds it, without importing torch."""
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
                              capture_output=True, text=True, timeout=120, start_new_session=True,
                              preexec_fn=dies_with_parent())
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
                refuse_unless_own(final)
                say("the environment %s %s: removing it and installing it again" % (name, why))
                discard(final)
            if why:
                install(build, final, cache, installer, needed, pre)
        finally:
            lock(own, False)  # in use from here on
    finally:
        unlock(cache_lock(cache))


def install(build, final, cache, installer, needed, pre):
    """Built under NAME.partial, marked as this tool's before anything is written into it, and
    renamed when complete, so an interrupted install never leaves a half-built environment to be
    reused; a signal ends the installer and removes NAME.partial."""
    partial = final + ".partial"
    os.makedirs(os.path.dirname(final), exist_ok=True)
    # cut short before: no install of it runs (its lock), and its name holds this wheel's sha256
    shutil.rmtree(partial, ignore_errors=True)
    check_free_space(cache, needed, build.wheel)
    kind, uv = choose_installer(installer)
    say("installing %s from %s with %s into %s (%s)" % (build.wheel, describe(build.index), kind, final,
                                                         size_hint(needed)))
    try:
        pip = new_venv(make_own(partial))
        if kind == "uv":
            # uv's own default, whatever the user's UV_LINK_MODE or uv.toml say: an environment of
            # symlinks into the store would break when a prune empties what no hard link holds
            cmd = [uv, "pip", "install", "--python", venv_python(partial), "--cache-dir", own_store(cache, "uv"),
                   "--link-mode", "clone" if sys.platform == "darwin" else "hardlink"]
        else:
            cmd = pip + ["install", "--disable-pip-version-check", "--cache-dir", os.path.join(cache, "pip")]
        cmd += ["-q"] + install_args(build.index, pre) + [requirement(build)]
        started = time.time()

        def note():
            if time.time() - note.last >= 30:
                note.last = time.time()
                store = os.path.join(cache, kind)  # uv unpacks into its store, then links
                say("  still installing %s: %.1f GB in the environment and the %s store so far, %ds" % (
                    build.wheel, (du_bytes(partial) + du_bytes(store)) / GB, kind, note.last - started))
        note.last = started
        rc, output = children.run(cmd, every=note)
        if rc != 0:
            tail = "".join(l for l in output.splitlines(True) if "WARNING: Location" not in l)[-1500:]
            raise Untestable("%s could not install %s:\n%s" % (kind, build.wheel, tail.rstrip()))
        write_record(partial, build)
        os.rename(partial, final)
    except BaseException:
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
    Under a guard (children.py): venv runs ensurepip as a child, which must not outlive this."""
    rc, output = children.run([sys.executable, "-m", "venv", path])
    if rc != 0:
        raise UsageError("%s -m venv failed, and each torch under test needs its own virtual "
                         "environment: on Debian or Ubuntu, install python3-venv (%s)" % (
                             sys.executable, " ".join(output.split())[-200:]))
    return [venv_python(path), "-m", "pip"]


def remove_venv(python):
    """A rejected environment goes: it would stay in the cache for good."""
    discard(os.path.dirname(os.path.dirname(python)))


def discard(path):
    """Renamed out of the way first (NAME.removing is never taken for an environment), then
    deleted, its mark last: a removal cut short leaves nothing that looks whole, and a leftover
    that the next prune knows for this tool's. Only an environment this tool made (its build
    record, or the mark of one under way): anything else at its name is in the way, and kept."""
    if os.path.islink(path):
        os.unlink(path)
        return
    gone = path + ".removing"
    refuse_unless_own(path, gone)
    mark(path)
    if os.path.lexists(gone):
        remove_own(gone, also=(RECORD,))
    os.rename(path, gone)
    remove_own(gone, also=(RECORD,))


def refuse_unless_own(*folders):
    for folder in folders:
        if os.path.lexists(folder) and not is_own(folder, also=(RECORD,)):
            raise UsageError("%s is in the way, and not bisect_torch.py's (no %s or %s in it): move it out of %s" % (
                folder, RECORD, MARK, os.path.dirname(folder)))


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
    """(per environment {name: (bytes of all its files, bytes only it holds)}, per store there
    {"uv" or "pip": bytes of its files that no environment links}, bytes of the whole cache): each
    file counted once, whatever links to it, as the disk holds it."""
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
    stores_only = {}
    for store in ("uv", "pip"):
        if os.path.isdir(os.path.join(cache, store)):
            stores_only[store] = 0
        for dirpath, _, files in os.walk(os.path.join(cache, store)):
            for f in files:
                st = os.lstat(os.path.join(dirpath, f))
                if (st.st_dev, st.st_ino) not in owners:
                    stores_only[store] += st.st_blocks * 512
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


def prune(cache, keep=None, older_than_days=None, now=None):
    """Removes environments (the least recently used beyond `keep`, or those unused for longer than
    `older_than_days`), what installs and removals cut short left, then the store's unpacked packages
    that no environment links any more. Waits for the installs under way (the cache's lock,
    exclusive), and leaves an environment that a process uses. Never anything outside the cache.
    Returns the names removed."""
    now = time.time() if now is None else now
    # every install makes the cache's lock file before anything else: where there is none, nothing
    # here is this tool's, and the prune makes nothing (--cache may name a folder of the user's)
    if lock(cache_lock(cache), True, "waiting for the installs under way in %s to end" % cache, create=False) is None:
        say("nothing to prune in %s: no install of bisect_torch.py ran there (no %s); all of it is kept" % (
            cache, cache_lock(cache)))
        return []
    try:
        envs = []
        for env in sorted(environments(cache), key=lambda e: -e[4]):
            if env[5]:
                envs.append(env)
            else:  # a folder someone else put here: only what this tool built and recorded is its to remove
                say("keeping %s: not built by bisect_torch.py (no %s in it)" % (env[0], RECORD))
        doomed = [(name, path) for i, (name, path, _, _, used, _) in enumerate(envs)
                  if (keep is not None and i >= keep) or (older_than_days is not None and now - used > older_than_days * 86400)]
        removed = [name for name, path in doomed if remove_unused(cache, name, path)]
        say("removed %d environment%s: %s" % (len(removed), "" if len(removed) == 1 else "s", ", ".join(removed) or "-"))
        remove_leftovers(cache)
        prune_store(cache)
    finally:
        unlock(cache_lock(cache))
    return removed


def remove_unused(cache, name, path):
    if not inside(venvs_dir(cache), path):
        raise UsageError("refusing to remove %s: not inside the cache %s" % (path, cache))
    held = lock(env_lock(cache, name), True, wait=False, create=False)
    if held is None:  # its install made it: gone, a process that uses the environment could not be told
        say("keeping %s: its lock file %s is gone, so whether a process uses it cannot be told" % (
            name, env_lock(cache, name)))
        return False
    if not held:
        say("keeping %s: in use by another process" % name)
        return False
    try:
        discard(path)
    finally:
        unlock(env_lock(cache, name))
    return True


def remove_leftovers(cache):
    """What installs, removals and downloads cut short left, where it carries this tool's mark (an
    environment's build record counts as one): with the cache's lock held exclusive no install is
    under way, and a download is kept while the process that made it runs. What is named as this
    tool named such leftovers before it marked them, but unmarked, is kept, and named with the
    command that removes it: it may be the user's (`--cache ~` holds ~/downloads)."""
    root, downloads = venvs_dir(cache), downloads_dir(cache)
    for e in listing(root):
        path = os.path.join(root, e)
        if not (e.startswith("torch-") and e.endswith(LEFTOVERS)) or os.path.islink(path) or not os.path.isdir(path):
            continue
        if is_own(path, also=(RECORD,)) and inside(cache, path):
            say("removing %s: left by an install or a removal cut short" % path)
            remove_own(path, also=(RECORD,))
        else:
            unmarked(path, "a half-built or half-removed environment")
    for e in listing(downloads):
        path = os.path.join(downloads, e)
        if is_own(path) and inside(cache, path):
            if not alive(e.split("-")[0]):
                say("removing %s: a download whose process is gone" % path)
                remove_own(path)
        elif e.isdigit() and os.path.isdir(path) and not os.path.islink(path) and all(
                f.endswith(".whl") for f in os.listdir(path)):
            unmarked(path, "a download cut short (a folder named by its process id)")
    for e in listing(cache):  # a store made under another name, then renamed to CACHE/uv (caches.own_store)
        path = os.path.join(cache, e)
        if re.fullmatch(r"uv\.[0-9]+\.new", e) and is_own(path) and not alive(e.split(".")[1]):
            remove_own(path)


def unmarked(path, what):
    say("keeping %s: no %s in it, though it is named as versions of bisect_torch.py before the mark named %s; "
        "if it is one, remove it: rm -r -- %s" % (path, MARK, what, shlex.quote(path)))


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
    its store whole; only a store this tool made (its mark): CACHE/uv may be uv's own cache
    (`--cache ~/.cache`), used by uv for everything else. Says what it did. pip's wheel cache is
    never emptied."""
    store = os.path.join(cache, "uv")
    archives = os.path.join(store, "archive-v0")
    if os.path.islink(store) or not os.path.isdir(store):
        return []
    if not is_own(store):
        say("keeping uv's store %s: not made by bisect_torch.py (no %s in it: uv's own cache, or a store an "
            "older version made); if only bisect_torch.py used it, empty it with: uv cache clean --cache-dir %s" % (
                store, MARK, shlex.quote(store)))
        return []
    linked = {}
    for entry in listing(archives):
        path = os.path.join(archives, entry)
        if os.path.islink(path) or not os.path.isdir(path) or not inside(cache, path):
            continue
        names = [d[:-len(".dist-info")].rsplit("-", 1)[0] for d in os.listdir(path) if d.endswith(".dist-info")]
        in_use = any(os.lstat(os.path.join(d, f)).st_nlink > 1 for d, _, files in os.walk(path) for f in files)
        for name in names:
            key = re.sub(r"[-_.]+", "-", name).lower()
            linked[key] = linked.get(key, False) or in_use
    unused = sorted(name for name, in_use in linked.items() if not in_use)
    uv = find_uv()
    if not unused:
        say("bisect_torch.py's uv store %s: nothing to remove (each package in it is linked by an environment)" % store)
    elif not uv:
        say("bisect_torch.py's uv store %s: kept %d package%s that no environment links (%s): uv is not on PATH, "
            "and only uv cleans its store" % (store, len(unused), "" if len(unused) == 1 else "s", ", ".join(unused)))
    else:
        before = du_bytes(store)
        rc, output = children.run([uv, "cache", "clean", "--cache-dir", store] + unused)
        freed = (before - du_bytes(store)) / GB
        if rc != 0:
            say("bisect_torch.py's uv store %s: `uv cache clean` failed (exit %d), %.2f GB freed: %s" % (
                store, rc, freed, " ".join(output.split())[-300:]))
        else:
            say("removed %d package%s that no environment links from bisect_torch.py's uv store %s (%s): %.2f GB" % (
                len(unused), "" if len(unused) == 1 else "s", store, ", ".join(unused), freed))
    return unused
