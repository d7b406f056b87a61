"""A torch build under test, for bisect_torch.py: the wheel picked on an index, known by its sha256,
and the commit it says it was built from.

A build is known by its wheel's sha256 (from the index's link where it gives one, else from the
file, a folder's hashed once, or one downloaded into the cache): its environment is named after it
and records it (envs.py), so that a wheel of the same name from another index, or rebuilt, is never
taken for one already installed. Stdlib only.
"""
import collections
import hashlib
import http.client
import os
import re
import tempfile
import urllib.request
import zipfile

from .caches import (CACHE_ERRORS, check_free_space, downloads_dir, GB, inside, is_own, mark, MARK_TEXT, read_json,
                     remove_own, write_json)
from ..exits import say, Untestable, UsageError
from .indexes import describe, is_url, link_hashes, python_tag, runs_here, torch_wheel_files, wheel_parts


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
    sha = link_hashes(index).get(name)
    if sha:
        return Build(name, version, sha, link, None, index)
    path, sha = download(link, name, cache)
    return Build(name, version, sha, link, path, index)


def release_build(index, version, cache):
    """The wheel of a release for this Python on Linux x86_64, on a folder, an index URL or PyPI."""
    wheels = torch_wheel_files(index)
    names = sorted(n for n in wheels if wheel_parts(n) and wheel_parts(n)[0].split("+")[0] == version
                   and runs_here(*wheel_parts(n)[1:]))
    if not names:
        raise Untestable("no torch %s wheel for %s on Linux x86_64 on %s" % (version, python_tag(), describe(index)))
    if len(names) > 1:
        say("several wheels of torch %s; taking %s over %s" % (version, names[0], ", ".join(names[1:])))
    return wheel_build(names[0], wheels[names[0]], index, cache)


def file_sha256(path, cache):
    """A wheel file's sha256, kept in the cache by path, size, times and inode: a cached step does
    not read a multi-GB wheel again, and a wheel rebuilt in place is read again."""
    st = os.stat(path)
    key, stamp = os.path.realpath(path), [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    memo_path = os.path.join(cache, "hashes.json")
    memo = own_memo(memo_path)
    if memo is None:  # `--cache ~` with a ~/hashes.json of the user's: read it, never write it
        say("note: %s is not bisect_torch.py's, so no wheel's hash is kept in it: each step reads the wheel" % memo_path)
        return sha256_of(path)
    if memo.get(key, [None])[:-1] == stamp:
        return memo[key][-1]
    memo[key] = stamp + [sha256_of(path)]
    kept = {k: v for k, v in memo.items() if os.path.exists(k)}
    write_json(memo_path, dict(kept, **{"": MARK_TEXT}))
    return memo[key][-1]


def own_memo(path):
    """The hashes kept in `path`, where it is this tool's file: {} where there is none yet; None
    where it is another's. This tool's is marked (its key "" holds the mark's words), or, as the
    versions before the mark wrote it, holds nothing but entries of its shape."""
    if not os.path.lexists(path):
        return {}
    memo = read_json(path)
    if os.path.islink(path) or not isinstance(memo, dict):
        return None
    if memo.pop("", None) == MARK_TEXT or all(
            os.path.isabs(k) and isinstance(v, list) and len(v) == 5 and all(type(x) is int for x in v[:4])
            and isinstance(v[4], str) and re.fullmatch(r"[0-9a-f]{64}", v[4]) for k, v in memo.items()):
        return memo
    return None


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url, name, cache):
    """A wheel whose index gives no hash, fetched into the cache to be hashed, read and installed
    from; removed once installed (drop_download). Returns (path, sha256)."""
    folder = download_folder(cache)
    path, digest = os.path.join(folder, name), hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(path, "wb") as out:
            size = int(resp.headers.get("Content-Length") or 0)
            check_free_space(cache, 3 * size + 0.3 * GB, name)
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except BaseException as e:
        remove_own(folder)
        if isinstance(e, OSError) and e.errno in CACHE_ERRORS:
            raise UsageError("cannot write %s under %s (%s): free some space (bisect_torch.py cache --prune) "
                             "or pass --cache elsewhere" % (name, cache, e.strerror))
        if isinstance(e, (OSError, http.client.HTTPException)):  # the network's, or the index's
            raise Untestable("could not download %s: %s" % (url, e), name)
        raise
    return path, digest.hexdigest()


def download_folder(cache):
    """A new folder of this process's own under CACHE/downloads, named PID-RANDOM and marked before
    anything is written into it: a prune removes it once this process is gone, and never a folder
    that was there before (`--cache ~` holds the user's ~/downloads)."""
    os.makedirs(downloads_dir(cache), exist_ok=True)
    folder = tempfile.mkdtemp(prefix="%d-" % os.getpid(), dir=downloads_dir(cache))
    mark(folder)
    return folder


def drop_download(build, cache):
    folder = os.path.dirname(build.file or "")
    if build.file and inside(downloads_dir(cache), build.file) and is_own(folder):
        remove_own(folder)  # installed from, or refused: each step downloads it again


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
