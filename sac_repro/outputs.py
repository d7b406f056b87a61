"""Where the entry points write: never onto an input, another output, a file of the bundle, git's
own files, a virtual environment in the bundle's folder or through a symlink out of the folder
named; and in one step, so that an interrupted write leaves the old file or none, never part of
one. The internal options write only the bundle's own temporary files.
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

from .exits import OutputError, UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# What the bundle ships, for a copy that git does not track (a tarball, a folder copied around).
BUNDLE_PARTS = ("torch_compile_selective_activation_checkpoint.py", "run_nsys.sh", "requirements.txt",
                "README.md", "expected_output.md", "sac_repro", "docs", "tests", ".ci")


def check_outputs(outputs, inputs=()):
    """Before any work. outputs: (option, path) pairs, path None where there is none (or it is
    stdout); inputs: (option, path, what it is). Each output must be a file its folder lets us
    write, and none of the inputs, the other outputs or what the bundle's folder holds that is not
    the user's (bundle_file), nor a symlink out of its folder. Real paths are compared: a symlink,
    `./x` or a hard link is the same file."""
    taken = [(option, path, what) for option, path, what in inputs if path]
    for option, path in outputs:
        if path is None:
            continue
        check_writable(path, option)
        for other, other_path, what in taken:
            if same_file(path, other_path):
                raise UsageError("%s %s is %s %s, %s: writing it would destroy that; name another file"
                                 % (option, path, other, other_path, what))
        part = bundle_file(path)
        if part:
            raise UsageError("%s %s is %s: writing it would destroy it; name a new file, or one outside the "
                             "bundle's folder" % (option, path, part))
        elsewhere = symlink_out(path)
        if elsewhere:
            raise UsageError("%s %s: is a symlink to %s, outside the folder named; name that file, or another"
                             % (option, path, elsewhere))
        taken.append((option, path, "another output"))


def check_writable(path, option):
    if not path:
        raise UsageError("%s was given an empty path (an unset shell variable?)" % option)
    closed = closed_std_stream(path)
    if closed:
        raise UsageError("%s %s: names %s, which is closed; name a file" % (option, path, closed))
    if os.path.isdir(path):
        raise UsageError("%s %s: is a folder; name a file in it" % (option, path))
    if path.endswith(os.sep):  # not there yet: open() would write a file of the folder's name
        raise UsageError("%s %s: ends in /, as a folder's name does; name a file" % (option, path))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UsageError("%s %s: folder %s does not exist or is not writable" % (option, path, folder))


def symlink_out(path):
    """Where a symlink at path leads out of its own folder (its target, real or not there yet), else
    None. Refused rather than replaced: the link is the user's (a results folder kept elsewhere, say),
    and writing through it writes a file that was never named. A link within the folder is written
    through; so is one to our own stdout or stderr (/dev/stdout, /dev/stderr), written as a stream."""
    if not os.path.islink(path) or std_stream_of(path) is not None:
        return None
    real = os.path.realpath(path)
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    return None if os.path.dirname(real) == folder else real


def same_file(a, b):
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: then only the real paths could tell
        return False


def bundle_file(path):
    """What the file at path is where it lies in the bundle's folder and is not the user's: one of
    the bundle's files (tracked by git, or one of the parts it ships), in git's own files (.git, a
    folder or a worktree's file), or in a virtual environment (a folder named .venv*, or holding
    pyvenv.cfg). None for a path outside the folder, or a file of the user's in it: a new one, or
    one an earlier run wrote (evidence.json), which a rerun writes over. Both the path's real folder
    with its own name, and its real path, are looked at: a venv's bin/python is a symlink out of the
    folder, and a symlink elsewhere may point in."""
    folder, name = os.path.split(os.path.abspath(path))
    for spelling in dict.fromkeys([os.path.join(os.path.realpath(folder), name), os.path.realpath(path)]):
        rel = os.path.relpath(spelling, ROOT)
        if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
            continue
        parts = rel.split(os.sep)
        if ".git" in parts:
            return "inside %s, git's own files" % os.path.join(*parts[:parts.index(".git") + 1])
        for i in range(1, len(parts)):
            if parts[i - 1].startswith(".venv") or os.path.exists(os.path.join(ROOT, *parts[:i], "pyvenv.cfg")):
                return "inside %s, a virtual environment" % os.path.join(*parts[:i])
        tracked = tracked_by_git(rel)
        if tracked or (tracked is None and parts[0] in BUNDLE_PARTS and os.path.isfile(spelling)):
            return "%s, a file of this bundle" % rel
    return None


def tracked_by_git(rel):
    """Whether git tracks rel in the bundle's folder; None where git cannot tell (no git, a copy of
    the bundle that is no checkout, or one inside another repository that does not track the
    bundle itself), and the parts it ships must say it."""
    this = os.path.join(os.path.basename(os.path.dirname(__file__)), os.path.basename(__file__))
    # GIT_DIR and the like, as `git bisect run` may leave them, name another repository
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        proc = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--", ":(literal)" + rel, ":(literal)" + this],
                              capture_output=True, env=env, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    listed = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    if proc.returncode != 0 or this not in listed:
        return None
    return rel in listed


def replace_atomically(path, write):
    """write(target) writes the file; target is a temporary file in path's real folder, which then
    takes path's place (os.replace), so that an interrupted or failed write leaves the old file.
    Its name keeps path's extension, from which matplotlib takes the format. A path that is no
    regular file (a FIFO, a device) cannot be replaced, and is written in place; neither can the
    file our stdout or stderr writes (/dev/stdout, redirected with > or >>, or a pipe): that one
    is written through the stream, where it stands, after what the stream already holds."""
    stream = std_stream_of(path)
    if stream is not None:
        with tempfile.TemporaryDirectory(prefix="sac_repro_") as folder:
            result = write(os.path.join(folder, os.path.basename(path)))
            with open(os.path.join(folder, os.path.basename(path)), "rb") as fh:
                stream.flush()
                stream.buffer.write(fh.read())
                stream.buffer.flush()
        return result
    real = os.path.realpath(path)
    if os.path.exists(real) and not os.path.isfile(real):
        return write(path)
    folder, name = os.path.split(real)
    # a short name, whatever path's length: a name may be as long as the folder allows
    fd, tmp = tempfile.mkstemp(prefix=".sac_repro.", suffix=".tmp" + os.path.splitext(name)[1][:16], dir=folder)
    os.close(fd)
    try:
        os.chmod(tmp, mode_of(real))
        result = write(tmp)
        os.replace(tmp, real)
        return result
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def closed_std_stream(path):
    """"stdout" or "stderr" where path names our own (/dev/stdout, /dev/fd/2, /proc/self/fd/1) and it
    is closed: its real path stops at /proc's link for the fd, which leads nowhere (an open one leads
    to the file, the pipe or the terminal)."""
    match = re.fullmatch(r"/proc/(?:self|%d)/fd/([12])" % os.getpid(), os.path.realpath(path))
    return ("stdout", "stderr")[int(match.group(1)) - 1] if match else None


def std_stream_of(path):
    """sys.stdout or sys.stderr where path is the very file it writes, else None."""
    try:
        named = os.stat(path)
    except OSError:
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            own = os.fstat(stream.fileno())
        except (AttributeError, OSError, ValueError):  # closed, or no file (a test's StringIO)
            continue
        if (named.st_dev, named.st_ino) == (own.st_dev, own.st_ino) and hasattr(stream, "buffer"):
            return stream
    return None


def mode_of(real):
    """The old file's permissions, or those that open() would have given a new one."""
    try:
        return os.stat(real).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path, text, option):
    def write(target):
        with open(target, "w") as fh:
            fh.write(text)
    try:
        replace_atomically(path, write)
    except OSError as e:
        raise OutputError("cannot write %s %s: %s" % (option, path, e.strerror or e))


# The files that the internal options write: the bundle's own temporary ones, never another file,
# whoever passes it. run_nsys.sh's mktemp of the hand-off, known by its name's (prefix, suffix); the
# measured child's result file, which run_child unlinks as soon as it is made and hands over as
# /dev/fd/N (an inherited descriptor), so that no run leaves it behind.
HANDOFF_TEMP = ("run_nsys_run.", "")


def not_our_result_file(path):
    """Why path is not the result file that run_child hands the measured child, or None where it is:
    /dev/fd/N of an inherited descriptor of a file that has no name left (nobody's file), ours,
    private and empty, as mkstemp made it before run_child unlinked it."""
    match = re.fullmatch(r"/dev/fd/(\d+)", path)
    if not match:
        return "not /dev/fd/N, the descriptor the judged run hands over"
    try:
        st = os.fstat(int(match.group(1)))
    except (OSError, OverflowError):
        return "no such descriptor"
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 0 or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return "not a private file of ours with no name left (mode 600, no link)"
    return "not empty" if st.st_size else None


def not_our_hand_off(path):
    return not_our_temp_file(path, HANDOFF_TEMP)


def not_our_temp_file(path, kind):
    """Why path is not one of the bundle's own temporary files of this kind, or None where it is one:
    a file of that name in the temporary folder, ours, of one link, empty and private, as mkstemp
    leaves it."""
    prefix, suffix = kind
    name = os.path.basename(path)
    if not (name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix)):
        return "not named %s...%s" % kind
    if os.path.realpath(os.path.dirname(os.path.abspath(path))) != os.path.realpath(tempfile.gettempdir()):
        return "not in the temporary folder (%s)" % tempfile.gettempdir()
    try:
        st = os.lstat(path)
    except OSError:
        return "not there"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return "not a private file of ours (mode 600, one link)"
    if st.st_size:
        return "not empty"
    return None


def write_trace(folder, path, scrub):
    """--trace: the child's TORCH_TRACE folder as one .tar.gz at path, each log's text through
    scrub (the judge's: the home folder as ~, which the logs quote in every file name, and the
    archive is made to attach to an issue); the folder removed. Returns what it holds."""
    import io
    import tarfile
    import time
    try:
        names = sorted(os.listdir(folder))
        def write(target):
            with tarfile.open(target, "w:gz") as tar:
                for name in names:
                    with open(os.path.join(folder, name), encoding="utf-8", errors="surrogateescape") as fh:
                        text = scrub(fh.read()).encode("utf-8", "surrogateescape")
                    member = tarfile.TarInfo(os.path.join("torch_trace", name))
                    member.size, member.mtime, member.mode = len(text), int(time.time()), 0o644
                    tar.addfile(member, io.BytesIO(text))
        replace_atomically(path, write)
    except OSError as e:
        raise OutputError("cannot write --trace %s: %s" % (path, e.strerror or e))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"path": path, "logs": names}
