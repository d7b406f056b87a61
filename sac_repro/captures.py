"""Reading profiler captures of the report's loops: nsys (.nsys-rep, its .sqlite export, or the
CSV of `nsys stats -r nvtx_kern_sum`) and ncu (`--nvtx --print-summary per-nvtx`). Each gives
(NVTX range, kernel name, instances) rows; a file that is not what it claims to be is a usage
error that names the file and what was expected.
"""
import csv
import os
import re
import shutil
import sqlite3
import subprocess

from .verdict import UsageError

NSYS_CSV = "an nvtx_kern_sum CSV (`nsys stats -r nvtx_kern_sum -f csv`)"
NCU_TEXT = "the output of `ncu --nvtx --print-summary per-nvtx`"


def rows_from_csv_text(text, path):
    """(range, kernel, instances) rows from `nsys stats -r nvtx_kern_sum -f csv`."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("NVTX Range")), None)
    if start is None:
        raise UsageError("%s: expected %s, found no 'NVTX Range' header line" % (path, NSYS_CSV))
    reader = csv.DictReader(lines[start:])
    missing = {"NVTX Range", "Kern Inst", "Kernel Name"} - set(reader.fieldnames or ())
    if missing:
        raise UsageError("%s: expected %s, the header lacks %s" % (path, NSYS_CSV, ", ".join(sorted(missing))))
    rows = []
    for r in reader:
        line = start + reader.line_num
        if None in r.values() or None in r:
            raise UsageError("%s line %d: expected %d columns as in its header" % (path, line, len(reader.fieldnames)))
        try:
            rows.append((r["NVTX Range"], r["Kernel Name"], int(r["Kern Inst"])))
        except ValueError:
            raise UsageError("%s line %d: expected a whole number of kernel instances, found %r"
                             % (path, line, r["Kern Inst"]))
    return rows


def rows_from_sqlite(path):
    """The nvtx_kern_sum join done on an nsys SQLite export with the stdlib: a kernel belongs to
    a push/pop range when its launch call began inside that range on the same thread."""
    # nsys stores the kernel's demangled name id in demangledName (shortName on some versions).
    query = """
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
    try:
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
        if "NVTX_EVENTS" not in tables:
            raise UsageError("%s: expected an nsys SQLite export, found an SQLite file without its "
                             "NVTX_EVENTS table" % path)
        if not {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
            return []  # nsys writes no kernel tables when no kernel ran
        return [(a or "", b or "", c) for a, b, c in db.execute(query)]
    except sqlite3.DatabaseError as e:
        raise UsageError("%s: expected a complete nsys SQLite export, SQLite says: %s "
                         "(truncated or damaged? export it again with nsys export --type sqlite)" % (path, e))


def rows_from_ncu_text(text, path):
    """(range, kernel, invocations) rows from `ncu --nvtx --print-summary per-nvtx` output."""
    rows, current = [], None
    kernel_line = re.compile(r"^\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), .*Invocations (\d+)")
    for line in text.splitlines():
        m = re.match(r"^\s{2}<(.*)>\s*$", line)
        if m:
            current = m.group(1)
            continue
        m = kernel_line.match(line)
        if m and current is not None:
            rows.append((current, m.group(1), int(m.group(2))))
    if not rows and "NVTX" not in text:
        raise UsageError("%s: expected %s, found no NVTX ranges or kernels" % (path, NCU_TEXT))
    return rows


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


def load_rows(path, kind):
    """kind: 'nsys' or 'ncu'. The format is read from the file, not trusted from its name."""
    if not os.path.isfile(path):
        raise UsageError("report file not found: %s" % path)
    if not os.access(path, os.R_OK):
        raise UsageError("report file not readable: %s" % path)
    with open(path, "rb") as fh:
        head = fh.read(16)
    if kind == "nsys" and head.startswith(b"SQLite format 3"):
        return rows_from_sqlite(path)
    if kind == "nsys" and (path.endswith(".nsys-rep") or path.endswith(".qdrep")):
        return rows_from_csv_text(nsys_stats_csv(path), path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise UsageError("%s: expected %s, found a binary file" % (
            path, NCU_TEXT if kind == "ncu" else "an .nsys-rep, an .sqlite export or " + NSYS_CSV))
    return rows_from_ncu_text(text, path) if kind == "ncu" else rows_from_csv_text(text, path)
