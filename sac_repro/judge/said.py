"""What the measured child's own Python code said besides the bundle: each line printed to its
stdout or stderr and each warning shown, with the file whose code said it and where in the run it
came. An in-process change of torch (sac_repro/policy/fix_candidate says why it declines or is not
loaded, in warnings and lines) speaks so; the parent keeps the child's output for a crash report
only, so the reports quote what this caught. Stdlib only, so that it can be installed before torch
is imported: a change that speaks while torch imports is caught too.
"""
import logging
import os
import sys
import warnings

PROGRESS = "sac-repro: "  # render.PROGRESS: the child's own lines, which the parent passes on
WARNINGS_FILE = os.path.splitext(warnings.__file__)[0]
# Not caught: the bundle's own lines, and logs (torch's, Dynamo's: DynamoSkips reads what matters
# of those), which a handler made before install() writes past this anyway
KEPT = 40  # a process that prints on every call would fill the paste: the first ones, and a count
QUIET = (os.path.dirname(os.path.realpath(__file__)) + os.sep, os.path.splitext(os.path.realpath(logging.__file__))[0])


class Said:
    def __init__(self):
        self.where = "before the report's code"
        self.seen = []  # {"where", "kind": "warning" | "stdout" | "stderr", "file", "text"}, each once
        self.left_out = 0
        self.showing = False
        self.open = {}  # stream -> what was written of its line so far

    def install(self):
        """From now on, in this process. The warnings filter stays as it was: only a warning that
        it lets through is shown, and only that is caught."""
        self.shown = warnings.showwarning
        warnings.showwarning = self.showwarning
        if sys.stdout is not None:  # none to write to, none to catch
            sys.stdout = Tee(sys.stdout, "stdout", self)
        if sys.stderr is not None:
            sys.stderr = Tee(sys.stderr, "stderr", self)
        return self

    def showwarning(self, message, category, filename, lineno, file=None, line=None):
        self.add("warning", speaker(), "%s: %s" % (category.__name__, message))
        self.showing = True
        try:
            self.shown(message, category, filename, lineno, file, line)
        finally:
            self.showing = False

    def wrote(self, kind, text, code_file):
        if self.showing or (code_file or "").startswith(QUIET):  # a warning being shown is caught whole already
            return
        line = self.open.pop(kind, ("", code_file))
        text = line[0] + text
        *done, rest = text.split("\n")
        for one in done:
            if one.strip() and not one.startswith(PROGRESS):
                self.add(kind, line[1], one)
        if rest:
            self.open[kind] = (rest, line[1])

    def finish(self):
        """A last line written without its newline."""
        for kind, (text, code_file) in list(self.open.items()):
            if text.strip() and not text.startswith(PROGRESS):
                self.add(kind, code_file, text)
        self.open.clear()
        if self.left_out:
            self.seen.append({"where": self.where, "kind": "more", "file": None,
                              "text": "%d more lines and warnings, not kept" % self.left_out})
            self.left_out = 0
        return self.seen

    def add(self, kind, code_file, text):
        entry = {"where": self.where, "kind": kind, "file": code_file, "text": " ".join(str(text).split())}
        if any(e["kind"] == kind and e["file"] == code_file and e["text"] == entry["text"] for e in self.seen):
            return
        if len(self.seen) < KEPT:
            self.seen.append(entry)
        else:
            self.left_out += 1


def speaker(depth=2):
    """The file of the code that called warnings.warn (or print): the first frame outside the
    warnings module and this file."""
    frame = sys._getframe(depth)
    while frame is not None and (os.path.splitext(frame.f_code.co_filename)[0] in (WARNINGS_FILE, os.path.splitext(__file__)[0])
                                 or frame.f_code.co_filename.startswith("<frozen")):
        frame = frame.f_back
    return os.path.realpath(frame.f_code.co_filename) if frame is not None and not \
        frame.f_code.co_filename.startswith("<") else None


class Tee:
    """A stream that writes through, and tells Said each line written by Python code."""

    def __init__(self, stream, kind, said):
        self.stream, self.kind, self.said = stream, kind, said

    def write(self, text):
        n = self.stream.write(text)
        try:
            self.said.wrote(self.kind, str(text), speaker())
        except Exception:  # never the measurement's failure
            pass
        return n

    def __getattr__(self, name):  # fileno, flush, encoding, buffer, isatty...
        return getattr(self.stream, name)
