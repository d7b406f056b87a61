"""Where torch wheels are listed and picked, for bisect_torch.py: --index read as a folder (flat, or
one folder per package) or an http(s) URL, PyPI's and PyTorch's per-variant and nightly indexes, a
nightly's date, and the wheels an index lists for a date or a release, for this Python on Linux
x86_64. An index that cannot be read, or holds no torch, is a usage error here (every step of a
bisect would be skipped); a reachable index without the wheel asked for skips that build. Stdlib only.
"""
import datetime
import html
import http.client
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

from ..exits import Untestable, UsageError

PYTORCH_INDEX = "https://download.pytorch.org/whl"
# Where a release "from PyPI" is found: its simple index gives each file's sha256 in the link
PYPI = "https://pypi.org/simple"
DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # ASCII: \d would take any script's digits


# --------------------------------------------------------------------------- what the user named
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
        raise UsageError("--index %s: %s (an index is an http(s):// URL or a folder of wheels)" % (
            index, "is a file, not a folder" if os.path.exists(index) else "no such folder"))
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


# --------------------------------------------------------------------------- what an index lists
def torch_wheel_files(index):
    """{file name: path or URL} of the torch wheels an index holds (None: PyPI's)."""
    index = index or PYPI
    if not is_url(index):
        found = {}
        for folder in index_folders(index):
            for f in os.listdir(folder):
                if f.endswith(".whl") and urllib.parse.unquote(f) != f:
                    # uv 0.13.9 and pip 26 pass over such a file in --find-links (pip 23 takes it)
                    raise UsageError("--index %s: %s is a wheel name percent-encoded (as a browser or wget "
                                     "saves it), which uv and pip do not read as a wheel: rename it %s" % (
                                         index, f, urllib.parse.unquote(f)))
                path = os.path.join(folder, f)
                if f.startswith("torch-") and f.endswith(".whl") and os.path.isfile(path):  # a folder so named is none
                    found.setdefault(f, path)
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


def link_hashes(index):
    """{file name: sha256} of the torch wheels whose link on an index URL's page carries `#sha256=`
    (None: PyPI's)."""
    url = (index or PYPI).rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            page = resp.read().decode("utf-8", "replace")
    except Exception as e:
        raise Untestable("could not read the index %s: %s" % (url, e))
    return {urllib.parse.unquote(html.unescape(href).rsplit("/", 1)[-1]): sha.lower()
            for href, sha in re.findall(r'href="([^"#]+\.whl)#sha256=([0-9a-fA-F]{64})"', page)}


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


# --------------------------------------------------------------------------- picking
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
    """Release versions with a wheel for this Python on Linux x86_64 on an index: PyPI's (None), read
    as any index URL is, never through pip (whose configuration may list other sources, and so
    still answer with the network down: a missing release where the index was out of reach), a URL
    or a folder."""
    out = set()
    for name in torch_wheel_files(index):
        parts = wheel_parts(name)
        if parts and runs_here(parts[1], parts[2]):
            out.add(parts[0].split("+")[0])
    return sorted(out, key=version_key)
