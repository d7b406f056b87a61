"""The processes bisect_torch.py starts to make an environment (`python -m venv`, uv or pip, and
`uv cache clean`), each of which dies with it, its own children with it, however bisect_torch.py
ends: SIGKILL included, on Linux.

The death signal that the kernel sends when a parent dies (PR_SET_PDEATHSIG, exits.dies_with_parent)
reaches only a direct child; venv's ensurepip runs pip as a child of its own, and uv and pip may
start more. So each command runs under a small guard, a Python of a few lines in a session of its
own, that holds the death signal. The command runs in a process group of its own under the guard,
and the guard takes in whatever the command leaves orphaned (PR_SET_CHILD_SUBREAPER). On the death
signal, or any signal that ends it, the guard kills the command's group, then each process that
came to it, reaps them all, and exits 128+n; when the command ends by itself, the guard does the
same to what it left running. Nothing is left to PID 1, which in a container may never reap it.
Stdlib only.
"""
import os
import signal
import subprocess
import sys
import threading
import time

from ..exits import dies_with_parent, end_group

# argv: the command; exits with its code, or 128+n where a signal n ended it or the guard
GUARD = r"""
import ctypes, os, signal, subprocess, sys
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the command's orphans become this guard's children
except (OSError, AttributeError):
    prctl = None
guard = os.getpid()

def arm():  # in the command's process, before it runs
    os.setpgid(0, 0)  # a group of its own, so that the guard can end it and stay to reap it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    if prctl is not None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: should the guard itself be killed
        if os.getppid() != guard:
            os._exit(128 + signal.SIGKILL)

def children():
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open("/proc/%s/stat" % entry) as fh:
                if entry.isdigit() and int(fh.read().rsplit(")", 1)[1].split()[1]) == guard:
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return found

def end_all(pid):
    # pid has ended, unreaped, so its number still names its group: the group, then what came here
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        for other in children():
            if other != pid:
                try:
                    os.kill(other, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            done, status = os.wait()
        except ChildProcessError:
            return
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            end_all.code = code if code >= 0 else 128 - code

def on_signal(signum, frame):
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    end_all(child.pid)
    os._exit(128 + signum)

signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
child = subprocess.Popen(sys.argv[1:], preexec_fn=arm)
for s in SIGNALS:
    signal.signal(s, on_signal)
signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # the end below is the same whatever comes now
end_all.code = 128
end_all(child.pid)
os._exit(end_all.code)
"""


def start(cmd, **popen_kwargs):
    """The guard running cmd, in a session of its own, armed to end it all when this process dies.
    -I -S: no sitecustomize, no user site of the guard's own delays or changes it; the command gets
    the environment as it is."""
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", GUARD] + list(cmd), start_new_session=True,
                            preexec_fn=dies_with_parent(), **popen_kwargs)


def stop(proc):
    """Ends a guarded command with all it started: the guard does it on SIGTERM, and reaps them."""
    try:
        proc.terminate()
        proc.wait(10)
    except Exception:  # subprocess.TimeoutExpired: the guard itself does not answer
        pass
    end_group(proc)


def run(cmd, every=None, each=0.5, **popen_kwargs):
    """Runs cmd under its guard; returns (exit code, what it printed, stdout and stderr together).
    `every` is called each `each` seconds while it runs. Whatever ends this call early (a signal
    raises exits.Interrupted) ends the command with all it started first."""
    proc = start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", **popen_kwargs)
    output = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    try:
        reader.start()
        next_call = time.time() + each
        while proc.poll() is None:
            time.sleep(0.05)
            if every and time.time() >= next_call:
                next_call = time.time() + each
                every()
    except BaseException:
        stop(proc)
        raise
    reader.join(5)  # the guard has ended every process that held the pipe
    return proc.returncode, "".join(output)
