"""The cache that bisect_torch.py keeps its builds in: where it is (--cache, $SAC_REPRO_CACHE, or
~/.cache/sac-compile-repro), its layout (venvs/, locks/, downloads/, hashes.json, and the uv or pip
store), the mark on each folder it makes there, its locks, its JSON files written whole, and the
free space under it.

The cache may be a folder of the user's (`--cache ~`, `--cache ~/.cache`, where CACHE/uv is uv's own
cache): a prune removes only a folder that carries the mark, or what lies inside a store that
carries it, never one that is merely named as this tool names its own.

Installs hold the cache's lock shared, a prune holds it exclusive; a process holds the lock of each
environment it uses, shared, so that a prune leaves it. Stdlib only.
"""
import errno
import fcntl
import json
import os
import shutil
import stat

from ..exits import say, UsageError

GB = 1e9
CACHE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS)
HELD = {}  # lock file -> its descriptor: one per file in this process, as flock's are per descriptor


# --------------------------------------------------------------------------- where it is
def cache_dir(arg, make=False):
    """The cache's folder: --cache, else $SAC_REPRO_CACHE, else ~/.cache/sac-compile-repro. A path
    that cannot be one (a file on its way, a symlink that loops or leads nowhere, a filesystem that
    holds no files, as /proc) is a usage error before any work, never an internal error at the first
    write. With `make`, the folder is made where it is not there yet, and its lock file opened: a
    cache that cannot be written fails here, before an index is read or a wheel hashed."""
    path = os.path.abspath(arg or os.environ.get("SAC_REPRO_CACHE")
                           or os.path.join(os.path.expanduser("~"), ".cache", "sac-compile-repro"))
    problem = cache_problem(path)
    if problem is None and make:
        try:
            os.makedirs(path, exist_ok=True)
            os.close(os.open(cache_lock(path), os.O_RDWR | os.O_CREAT, 0o644))
        except OSError as e:
            problem = "cannot be written (%s: %s)" % (e.filename, e.strerror or e)
    if problem:
        raise UsageError("the cache %s %s (--cache, or $SAC_REPRO_CACHE): name a folder you can write" % (
            path, problem))
    return path


def cache_problem(path):
    """What makes `path` no folder for the cache, or None; made or written nothing. A folder on its
    way that is not there yet is made by the first install."""
    at = path
    while True:
        try:
            st = os.stat(at)
            break
        except OSError as e:
            if e.errno == errno.ENOENT and os.path.islink(at):
                return where(path, at, "is a symlink to %s, which is not there" % os.readlink(at),
                             "a symlink to %s, which is not there" % os.readlink(at))
            if e.errno == errno.ELOOP and os.path.islink(at):
                return where(path, at, "is a symlink that loops", "a symlink that loops")
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return where(path, at, "cannot be read (%s)" % e.strerror, "which cannot be read (%s)" % e.strerror)
            at = os.path.dirname(at)
    if not stat.S_ISDIR(st.st_mode):
        return where(path, at, "is not a folder", "which is not a folder")
    if shutil.disk_usage(at).total == 0:  # /proc, /sys: no file can be made there
        return where(path, at, "is on a filesystem that holds no files", "on a filesystem that holds no files")
    return None


def where(path, at, itself, above):
    """The words for what is wrong: with the cache's own path, or with a folder on its way."""
    return itself if at == path else "lies under %s, %s" % (at, above)


def venvs_dir(cache):
    return os.path.join(cache, "venvs")


def downloads_dir(cache):
    return os.path.join(cache, "downloads")


def inside(root, path):
    root, path = os.path.realpath(root), os.path.realpath(path)
    return os.path.commonpath([root, path]) == root and path != root


def listing(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


# --------------------------------------------------------------------------- what is its own
MARK = ".sac-repro-own"  # a file in each folder this tool makes in its cache, written before anything else
MARK_TEXT = ("made by bisect_torch.py (the repro bundle of pytorch/pytorch#161889), which may remove this "
             "folder: `bisect_torch.py cache --prune`\n")


def is_own(path, also=()):
    """Whether a folder carries the mark (or one of the files named in `also`: an environment's
    build record), as a plain file, in a folder that is no symlink."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    for name in (MARK,) + tuple(also):
        try:
            if stat.S_ISREG(os.lstat(os.path.join(path, name)).st_mode):
                return True
        except OSError:
            pass
    return False


def mark(path):
    with open(os.path.join(path, MARK), "w") as fh:
        fh.write(MARK_TEXT)


def make_own(path):
    """A new folder, marked: never one that is there already, which is not ours to fill or remove."""
    os.mkdir(path)
    mark(path)
    return path


def remove_own(path, also=()):
    """Removes a marked folder (is_own), with the mark last: a removal cut short leaves it still
    marked, so the next prune finishes it. A folder without the mark is left as it is."""
    if not is_own(path, also):
        return
    try:
        entries = os.listdir(path)
    except FileNotFoundError:  # another process removed it meanwhile
        return
    for name in entries:
        if name not in (MARK,) + tuple(also):
            entry = os.path.join(path, name)
            if os.path.isdir(entry) and not os.path.islink(entry):
                shutil.rmtree(entry, ignore_errors=True)
            else:
                try:
                    os.unlink(entry)
                except FileNotFoundError:
                    pass
    for name in tuple(also) + (MARK,):
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass


def own_store(cache, kind):
    """CACHE/KIND, the installer's store: made and marked where it is not there yet (made whole under
    another name first, then renamed: a store is never seen unmarked); left as it is where it is,
    marked or not. Returns its path."""
    store = os.path.join(cache, kind)
    if not os.path.lexists(store):
        os.makedirs(cache, exist_ok=True)
        new = make_own("%s.%d.new" % (store, os.getpid()))
        try:
            os.rename(new, store)
        except OSError:  # another install made it meanwhile
            remove_own(new)
    return store


# --------------------------------------------------------------------------- locks
def lock(path, exclusive, waiting=None, wait=True, create=True):
    """Takes an flock on `path` (made if need be), kept until unlock() or the process ends; says
    `waiting` first where it must wait. With wait False: False where it would have to. With create
    False (a prune, which makes no file): None where there is no lock file to take."""
    fd = HELD.get(path)
    if fd is None:
        if not create:
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                return None
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        HELD[path] = fd
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


# --------------------------------------------------------------------------- files written whole, and free space
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
