"""Reading profiler captures of the report's loops: nsys (.nsys-rep, its .sqlite export, or the
CSV of `nsys stats -r nvtx_kern_sum`) and ncu (`--nvtx --print-summary per-nvtx`).

Each gives the same thing: per NVTX range name, how many ranges of that name there were and the
kernels that ran inside them. A file that is not what it claims to be is a usage error that names
the file and what was expected; no guess is ever judged.
"""
import collections
import csv
import io
import os
import pathlib
import re
import shutil
import stat
import subprocess

from ..exits import UsageError

NSYS_CSV = "an nvtx_kern_sum CSV (`nsys stats -r nvtx_kern_sum -f csv`)"
NCU_TEXT = "the output of `ncu --nvtx --print-summary per-nvtx`"
NCU_MARKER = "== NVTX State =="  # the heading of ncu's per-nvtx summary


class Ranges(dict):
    """range name -> {"instances": how many ranges of that name, "kernels": Counter of kernel names}"""

    def add(self, name, kernel=None, count=0, instances=None):
        r = self.setdefault(name, {"instances": 0, "kernels": collections.Counter()})
        if instances is not None:
            r["instances"] = max(r["instances"], instances)
        if kernel is not None:
            r["kernels"][kernel] += count
        return r


def ranges_from_csv_text(text, path):
    """From `nsys stats -r nvtx_kern_sum -f csv`: one row per (range, thread, kernel). `NVTX Inst`
    counts the ranges of that name on that thread, so doubled calls stay visible."""
    text = text.lstrip("\ufeff")
    m = re.search(r"^NVTX Range[,\r\n]", text, re.M)
    if m is None:
        raise UsageError("%s: expected %s, found no 'NVTX Range' header line" % (path, NSYS_CSV))
    # csv reads the rest as one stream: kernel names may hold quoted commas and newlines
    reader = csv.DictReader(io.StringIO(text[m.start():], newline=""))
    missing = {"NVTX Range", "Kern Inst", "Kernel Name"} - set(reader.fieldnames or ())
    if missing:
        raise UsageError("%s: expected %s, the header lacks %s" % (path, NSYS_CSV, ", ".join(sorted(missing))))
    header_line = text[:m.start()].count("\n") + 1
    per_thread = collections.defaultdict(int)  # (range, PID, TID) -> NVTX Inst
    ranges = Ranges()
    for r in reader:
        line = header_line + reader.line_num - 1
        if None in r.values() or None in r:
            raise UsageError("%s line %d: expected %d columns as in its header" % (path, line, len(reader.fieldnames)))
        kern, inst = whole_number(r["Kern Inst"], path, line), whole_number(r.get("NVTX Inst", "1"), path, line)
        name = r["NVTX Range"]
        key = (name, r.get("PID"), r.get("TID"))
        per_thread[key] = max(per_thread[key], inst)
        ranges.add(name, r["Kernel Name"], kern)
    for (name, _, _), inst in per_thread.items():
        ranges[name]["instances"] += inst
    return ranges


def whole_number(text, path, line):
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError("%s line %d: expected a whole number of instances, found %r" % (path, line, text))
    return n


SQLITE_RANGES = """
    select coalesce(n.text, ns.value), count(*)
    from NVTX_EVENTS n left join StringIds ns on ns.id = n.textId
    where n.end is not null and n.eventType = 59
    group by 1"""
# A kernel belongs to a push/pop range when its launch call began inside that range on the same
# thread. nsys stores the kernel's demangled name id in demangledName (shortName on some versions).
SQLITE_KERNELS = """
    select coalesce(n.text, ns.value), coalesce(kd.value, ks.value), count(*)
    from NVTX_EVENTS n
    left join StringIds ns on ns.id = n.textId
    join CUPTI_ACTIVITY_KIND_RUNTIME r
      on r.globalTid = n.globalTid and r.start >= n.start and r.start <= n.end
    join CUPTI_ACTIVITY_KIND_KERNEL k on k.correlationId = r.correlationId
    left join StringIds kd on kd.id = k.demangledName
    left join StringIds ks on ks.id = k.shortName
    where n.end is not null and n.eventType = 59
    group by 1, 2"""


def open_sqlite(path):
    """Read-only, through a URI quoted from the path, so '#', '%' and '?' in a file name stay
    part of the name. The stdlib's sqlite3 is optional in a Python build: only this path needs it."""
    try:
        import sqlite3
    except ImportError:
        raise UsageError("%s: this Python has no sqlite3 module to read an nsys SQLite export; pass "
                         "%s instead" % (path, NSYS_CSV))
    uri = pathlib.Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    try:
        db = sqlite3.connect(uri, uri=True)
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    except sqlite3.DatabaseError as e:
        raise damaged(path, e)
    if "NVTX_EVENTS" not in tables:
        raise UsageError("%s: expected an nsys SQLite export, found an SQLite file without its "
                         "NVTX_EVENTS table" % path)
    return db, tables, sqlite3.DatabaseError


def damaged(path, e):
    return UsageError("%s: expected a complete nsys SQLite export, SQLite says: %s (truncated or "
                      "damaged? export it again with nsys export --type sqlite)" % (path, e))


def ranges_from_sqlite(path):
    """The nvtx_kern_sum join, done on an nsys SQLite export with the stdlib."""
    db, tables, db_error = open_sqlite(path)
    try:
        ranges = Ranges()
        for name, n in db.execute(SQLITE_RANGES):
            ranges.add(name or "", instances=n)
        if {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:  # absent when no kernel ran
            for name, kernel, n in db.execute(SQLITE_KERNELS):
                ranges.add(name or "", kernel or "", n)
        return ranges
    except db_error as e:
        raise damaged(path, e)
    finally:
        db.close()


SQLITE_TIMELINE = """
    select n.rowid, coalesce(n.text, ns.value), n.start, n.end, coalesce(kd.value, ks.value), k.start, k.end
    from NVTX_EVENTS n
    left join StringIds ns on ns.id = n.textId
    left join CUPTI_ACTIVITY_KIND_RUNTIME r
      on r.globalTid = n.globalTid and r.start >= n.start and r.start <= n.end
    left join CUPTI_ACTIVITY_KIND_KERNEL k on k.correlationId = r.correlationId
    left join StringIds kd on kd.id = k.demangledName
    left join StringIds ks on ks.id = k.shortName
    where n.end is not null and n.eventType = 59
    order by n.start, k.start"""


def timeline_from_sqlite(path, loop_range, loops):
    """For --plot: each range of the report's loops, with its span and its kernels' GPU times (ns),
    joined as ranges_from_sqlite joins them. loop_range and loops are the verdict's."""
    db, tables, db_error = open_sqlite(path)
    if not {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
        return []
    try:
        ranges = {}
        for rowid, name, start, end, kernel, kstart, kend in db.execute(SQLITE_TIMELINE):
            m = loop_range.fullmatch(name or "")
            if not m:
                continue
            r = ranges.setdefault(rowid, {"scenario": loops[m.group(1)], "index": int(m.group(2)),
                                          "start": start, "end": end, "kernels": []})
            if kernel is not None:
                r["kernels"].append((kernel, kstart, kend))
        return list(ranges.values())
    except db_error as e:
        raise damaged(path, e)
    finally:
        db.close()


def sqlite_of_nsys_rep(path, folder):
    """An .nsys-rep's SQLite export, written into folder (nsys export), for its timestamps."""
    nsys = shutil.which("nsys")
    if not nsys:
        raise UsageError("%s is an .nsys-rep; drawing it needs nsys on PATH (or pass its .sqlite export)" % path)
    out = os.path.join(folder, "export.sqlite")
    proc = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", out, path],
                          capture_output=True, text=True)
    if not os.path.exists(out):
        raise UsageError("%s: nsys export could not write its SQLite export: %s" % (
            path, " ".join((proc.stderr.strip() or proc.stdout.strip()).split())[:300]))
    return out


def ranges_from_ncu_text(text, path):
    """From `ncu --nvtx --print-summary per-nvtx`: `<domain>` lines, then `  <range>` lines, each
    followed by its kernels with their invocation counts. ncu merges ranges of one name, so a
    range heading that appears twice is two ranges."""
    if NCU_MARKER not in text:
        raise UsageError("%s: expected %s, found no '%s' section" % (path, NCU_TEXT, NCU_MARKER))
    ranges, current = Ranges(), None
    kernel_line = re.compile(r"^\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), .*Invocations (\d+)\s*$")
    for line in text[text.index(NCU_MARKER):].splitlines():
        m = re.match(r"^\s{2}<(.*)>\s*$", line)
        if m:
            current = m.group(1)
            ranges.add(current)["instances"] += 1
            continue
        if re.match(r"^<.*>\s*$", line):  # a domain heading: the ranges under it come next
            current = None
            continue
        m = kernel_line.match(line)
        if m and current is not None:
            ranges.add(current, m.group(1), int(m.group(2)))
    return ranges


def nsys_stats_csv(path):
    nsys = shutil.which("nsys")
    if not nsys:
        raise UsageError("%s is an .nsys-rep; reading it needs nsys on PATH (or pass the CSV of "
                         "`nsys stats -r nvtx_kern_sum -f csv`, or its .sqlite export)" % path)
    proc = subprocess.run([nsys, "stats", "-q", "-r", "nvtx_kern_sum", "-f", "csv", "-o", "-",
                           "--force-export=true", path], capture_output=True, text=True)
    if "NVTX Range" not in proc.stdout:
        if proc.returncode == 0:  # ranges with no kernels give an empty report, not an error
            return "NVTX Range,Kern Inst,Kernel Name\n"
        detail = " ".join((proc.stderr.strip() or proc.stdout.strip()).split())[:300]
        raise UsageError("%s: nsys stats could not read it: %s" % (path, detail))
    return proc.stdout


def check_input_file(path, option, what="a capture file"):
    """A path the user gave: not empty, a regular readable file. Says which it is not."""
    if not path:
        raise UsageError("%s was given an empty path (an unset shell variable?): name %s" % (option, what))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError("%s %s: report file not found" % (option, path))
    except OSError as e:
        raise UsageError("%s %s: cannot read it: %s" % (option, path, e.strerror))
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("%s %s: is a folder, not %s" % (option, path, what))
    if not stat.S_ISREG(st.st_mode):
        raise UsageError("%s %s: not a regular file (a FIFO or a device?): save it to a file first" % (option, path))
    if not os.access(path, os.R_OK):
        raise UsageError("%s %s: report file not readable" % (option, path))


def load_ranges(path, kind):
    """kind: 'nsys' or 'ncu'. The format is read from the file, not trusted from its name."""
    check_input_file(path, "--from-" + kind)
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
        if kind == "nsys" and head.startswith(b"SQLite format 3"):
            return ranges_from_sqlite(path)
        if kind == "nsys" and (path.endswith(".nsys-rep") or path.endswith(".qdrep")):
            return ranges_from_csv_text(nsys_stats_csv(path), path)
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise UsageError("%s: expected %s, found a binary file" % (
            path, NCU_TEXT if kind == "ncu" else "an .nsys-rep, an .sqlite export or " + NSYS_CSV))
    except OSError as e:
        raise UsageError("%s: cannot read it: %s" % (path, e.strerror or e))
    return ranges_from_ncu_text(text, path) if kind == "ncu" else ranges_from_csv_text(text, path)
