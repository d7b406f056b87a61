"""bisect_torch.py's input before any work: dates, indexes, the bisect's terms, the exit codes of
each command, and the release search, searched by hypothesis against oracles written from the
rules in docs/bisecting.md. No torch is installed or run: where a build would be, `test_build` or
the installer is replaced."""
import contextlib
import copy
import datetime
import http.server
import io
import json
import os
import re
import socket
import string
import subprocess
import sys
import threading
import urllib.parse
import zipfile

import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import data
from wheels import BISECT, nightly_repo, PYTAG, repro_python, ROOT, serve_index

from sac_repro.bisecting import bisect_torch
from sac_repro.bisecting import builds, caches, envs, indexes

from sac_repro import exits
from sac_repro.judge import verdict
pytestmark = pytest.mark.unit


def main(*args):
    """bisect_torch.py in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = bisect_torch.main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def one_line(rc, out, err, *words):
    assert rc == 128, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "bug" not in lines[0], lines[0]
    return lines[0]


def wheel_file(folder, name, git_version="b" * 40):
    """A file named as a wheel, holding only what is read before an install (torch/version.py)."""
    os.makedirs(folder, exist_ok=True)
    with zipfile.ZipFile(os.path.join(folder, name), "w") as z:
        z.writestr("torch/version.py", "__version__ = 'x'\ngit_version = %r\n" % git_version)
    return name


def nightly_name(day, py=PYTAG, plat="linux_x86_64"):
    return "torch-2.10.0.dev%s+cpu-%s-%s-%s.whl" % (day.replace("-", ""), py, py, plat)


@pytest.fixture
def folder(tmp_path):
    """A flat index of one nightly (2025-09-07) and one release (2.9.1)."""
    wheel_file(str(tmp_path / "idx"), nightly_name("2025-09-07"))
    wheel_file(str(tmp_path / "idx"), "torch-2.9.1+cpu-%s-%s-linux_x86_64.whl" % (PYTAG, PYTAG))
    return tmp_path / "idx"


def stop_at_install(monkeypatch, cache):
    """The installer is asked for nothing: the wheel it was asked to install is recorded, and the
    build ends there as untestable. What comes before it (the wheel's hash) is kept in `cache`."""
    asked = []
    monkeypatch.setenv("SAC_REPRO_CACHE", str(cache))

    def ensure_venv(build, *a, **k):
        asked.append(build.wheel)
        raise exits.Untestable("stopped before the install of %s" % build.wheel)
    monkeypatch.setattr(envs, "ensure_venv", ensure_venv)
    return asked


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def serve(handler):
    """The URL of a server of one handler class on a loopback port, for the `with` block."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d/" % server.server_port
    finally:
        server.shutdown()


# ----------------------------------------------------------------------------- dates
TODAY = datetime.datetime.now(datetime.timezone.utc).date()


def day_oracle(text):
    """A nightly's date: four, two and two ASCII digits joined by '-', naming a day of the
    calendar that is not after today (UTC). None: a usage error."""
    parts = text.split("-")
    if len(parts) != 3 or [len(p) for p in parts] != [4, 2, 2] or not all(
            c in "0123456789" for p in parts for c in p):
        return None
    y, m, d = (int(p) for p in parts)
    if not (1 <= y and 1 <= m <= 12):
        return None
    days_in_month = [31, 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28, 31, 30, 31, 30,
                     31, 31, 30, 31, 30, 31][m - 1]
    if not 1 <= d <= days_in_month or (y, m, d) > (TODAY.year, TODAY.month, TODAY.day):
        return None
    return text


FULL_WIDTH = {str(i): chr(0xFF10 + i) for i in range(10)}


@st.composite
def day_texts(draw):
    """Dates near the edges: real and impossible days, around today, years 0 and 9999, with a
    digit too many or too few, full-width or other non-ASCII digits, odd separators."""
    y = draw(st.one_of(st.integers(0, 9999), st.integers(TODAY.year - 1, TODAY.year + 1)))
    m = draw(st.integers(0, 13))
    d = draw(st.integers(0, 32))
    text = "%04d-%02d-%02d" % (y, m, d)
    if draw(st.booleans()):
        near = TODAY + datetime.timedelta(days=draw(st.integers(-3, 3)))
        text = near.isoformat()
    kind = draw(st.sampled_from(["plain", "plain", "full-width", "arabic", "extra digit", "short", "sep",
                                 "space", "compact"]))
    if kind == "full-width":
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + FULL_WIDTH.get(text[i], text[i]) + text[i + 1:]
    elif kind == "arabic":
        text = "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in text)
    elif kind == "extra digit":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from("0123456789")) + text[i:]
    elif kind == "short":
        i = draw(st.sampled_from([i for i, c in enumerate(text) if c.isdigit()]))
        text = text[:i] + text[i + 1:]
    elif kind == "sep":
        text = text.replace("-", draw(st.sampled_from(["/", ".", "", "--", "_"])), draw(st.integers(1, 2)))
    elif kind == "space":
        text = draw(st.sampled_from([" ", "\n", "\t"])).join(["", text] if draw(st.booleans()) else [text, ""])
    elif kind == "compact":
        text = text.replace("-", "")
    return text


@pytest.mark.parametrize("day", ["2026-02-30", "0000-00-00", "\uff12\uff10\uff12\uff15-\uff10\uff19-\uff10\uff17",
                                 "2025-09-071", "2025-13-01", "2025-9-07", "20250907", "2025-09-07 "])
@pytest.mark.parametrize("command", ["nightly", "matrix"])
def test_an_impossible_date_is_a_usage_error_in_one_line(folder, command, day):
    one_line(*main(command, day, "--index", folder), repr(day))


@pytest.mark.parametrize("command", ["nightly", "matrix"])
def test_a_date_after_today_is_a_usage_error(folder, command):
    tomorrow = (TODAY + datetime.timedelta(days=1)).isoformat()
    one_line(*main(command, tomorrow, "--index", folder), tomorrow, "after today")


@settings(max_examples=500, deadline=None)
@given(day_texts())
@example("2024-02-29")
@example("2023-02-29")
@example("\uff12025-09-07")
def test_every_command_reads_a_date_as_the_oracle_does(text):
    for command in ("nightly", "matrix"):
        # matrix also takes releases: 2025.09.07 is one
        want = text if command == "matrix" and re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", text) else day_oracle(text)
        try:
            args = bisect_torch.parse_args([command, text, "--index", "/no/such/folder"])
        except exits.UsageError as e:
            assert want is None, (command, text, e)
            assert "\n" not in str(e)
        else:
            assert want == text, (command, text)
            assert (args.day if command == "nightly" else args.versions[0]) == text


def test_today_and_latest_are_taken(monkeypatch, folder):
    asked = stop_at_install(monkeypatch, folder.parent / "cache")
    wheel_file(str(folder), nightly_name(TODAY.isoformat()))
    assert main("nightly", TODAY.isoformat(), "--index", folder)[0] == 125
    assert asked and "dev%s" % TODAY.strftime("%Y%m%d") in asked[-1]


# ----------------------------------------------------------------------------- indexes
def index_oracle(text):
    """--index: a folder, given as a path or as a file:// URL of this host (its path unquoted, no
    query); an http(s) URL with a host, an optional port, no whitespace; anything else (another
    scheme, no host, a broken host or port): None, a usage error. ('folder', path) or ('url', .)"""
    if "://" not in text:
        return ("folder", text)
    scheme = text.split("://", 1)[0].lower()
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        return None
    try:
        u = urllib.parse.urlsplit(text)
        port_ok = u.port is None or 0 <= u.port <= 65535
    except ValueError:
        return None
    if scheme == "file":
        if u.netloc in ("", "localhost") and u.path and not u.query and not u.fragment:
            return ("folder", urllib.parse.unquote(u.path))
        return None
    if scheme in ("http", "https") and u.hostname and port_ok:
        return ("url", None)
    return None


HOSTS = ["127.0.0.1", "localhost", "download.pytorch.org", "[::1]", "[::1", "::1]", "", "user@", "user@host",
         "h\u00e9st", "ex ample.com", "host:", "host:8080", "host:99999", "host:abc", "host:-1", "[fe80::1%25lo]"]


@st.composite
def index_texts(draw):
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "file", "File", "htp", "ftp", "", "http:", "hxxp"]))
    sep = draw(st.sampled_from(["://", "://", ":/", ":", "//"]))
    host = draw(st.sampled_from(HOSTS + ["localhost"] * 3))
    path = draw(st.sampled_from(["", "/", "/whl/nightly/cpu", "/my%20wheels/", "/a b", "/tmp/x?y=1", "/x#frag",
                                 "/\u00e9t\u00e9", "/x\ny"]))
    text = scheme + sep + host + path
    if draw(st.integers(0, 5)) == 0:
        text = draw(st.text(alphabet=string.printable + "\u00e9\uff10", max_size=20))
    return text


@settings(max_examples=2000, deadline=None)
@given(index_texts())
@example("http://[::1")
@example("htp://x")
@example("http://")
@example("file:///srv/wheels")
@example("file://localhost/srv/my%20wheels")
@example("file://otherhost/srv")
def test_the_index_is_read_as_the_oracle_reads_it(text):
    want = index_oracle(text)
    try:
        got = indexes.parse_index(text)
    except exits.UsageError as e:
        assert want is None, (text, e)
        assert "\n" not in str(e)
        return
    assert want is not None, (text, got)
    if want[0] == "folder":
        assert got == want[1] and not indexes.is_url(got), (text, got)
    else:
        assert indexes.is_url(got) and urllib.parse.urlsplit(got).hostname == urllib.parse.urlsplit(text).hostname


@given(st.lists(st.text(alphabet=string.ascii_letters + string.digits + " %+-_.\u00e9", min_size=1), min_size=1,
                max_size=4))
def test_a_file_url_of_a_folder_is_that_folder(parts):
    path = "/" + "/".join(parts)
    assert indexes.parse_index("file://" + urllib.parse.quote(path)) == path


@pytest.mark.parametrize("index", ["http://[::1", "htp://x", "http://", "https:///whl", "file://elsewhere/wheels",
                                   "http://host:99999/"])
def test_a_malformed_index_url_is_a_usage_error(folder, index):
    one_line(*main("nightly", "2025-09-07", "--index", index), index)


def test_a_file_url_index_is_its_folder(monkeypatch, folder):
    """As the folder itself: the wheel is found, checked before the install, and installed from
    the folder (today: 125 on every step)."""
    asked = stop_at_install(monkeypatch, folder.parent / "cache")
    rc, out, err = main("nightly", "2025-09-07", "--index", "file://" + urllib.parse.quote(str(folder)))
    assert rc == 125 and "stopped before the install" in out, (out, err)
    assert asked == [nightly_name("2025-09-07")]


def test_an_index_that_cannot_be_reached_aborts_naming_why():
    url = "http://127.0.0.1:%d/" % closed_port()
    one_line(*main("nightly", "2025-09-07", "--index", url), url, "cannot reach", "Connection refused")


@pytest.mark.parametrize("command", [["releases", "2.8.0", "2.12.0"], ["matrix", "2.8.0"]])
def test_pypi_out_of_reach_aborts_naming_it(monkeypatch, tmp_path, command):
    """With no network, the releases "from PyPI" were once those that pip's own configuration
    still listed (a --find-links folder, a local index): "torch 2.8.0 is not among the releases
    listed on that index". PyPI here is a loopback port nothing listens on, and pip is kept off
    the network too, with one wheel in a folder of its configuration."""
    url = "http://127.0.0.1:%d/simple" % closed_port()
    monkeypatch.setattr(indexes, "PYPI", url)
    wheel_file(str(tmp_path / "find-links"), "torch-2.13.0-%s-%s-linux_x86_64.whl" % (PYTAG, PYTAG))
    for name, value in (("PIP_CONFIG_FILE", os.devnull), ("PIP_INDEX_URL", url), ("PIP_RETRIES", "0"),
                        ("PIP_FIND_LINKS", str(tmp_path / "find-links")), ("PIP_NO_INPUT", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    stop_at_install(monkeypatch, tmp_path / "cache")
    one_line(*main(*command), "cannot reach the index %s/torch/" % url, "Connection refused", "the network")


def test_a_reachable_index_without_that_date_skips(tmp_path):
    wheel_file(str(tmp_path), nightly_name("2025-09-07"))
    with serve_index(tmp_path) as url:
        rc, out, err = main("nightly", "2025-09-01", "--index", url)
    assert rc == 125 and "no torch wheel for 2025-09-01" in out, (rc, out, err)


def test_a_reachable_index_without_torch_aborts(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<html><body></body></html>")
    with serve_index(tmp_path) as url:
        one_line(*main("nightly", "2025-09-01", "--index", url), "lists no torch wheels")


def test_an_index_that_answers_404_aborts(tmp_path):
    """As PyTorch's index answers for a variant it does not build: no torch there, a usage error at
    the first step, never a skip on every step."""
    with serve_index(tmp_path) as url:
        one_line(*main("nightly", "2025-09-07", "--index", url + "whl/cu999/"), "answered 404")


@pytest.mark.parametrize("code", [503, 429])
def test_an_index_that_answers_a_passing_error_skips(tmp_path, code):
    """An index busy or down for a while (5xx, 429 Too Many Requests) says nothing of the build:
    that step is skipped (125), as a download it refuses is, never the whole bisect aborted."""
    class Busy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(code)

        def log_message(self, *args):
            pass
    with serve(Busy) as url:
        rc, out, err = main("nightly", "2025-09-07", "--index", url, "--cache", tmp_path / "cache")
    assert rc == 125 and "could not read the index" in out and str(code) in out, (rc, out, err)


class Hangup(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # the connection ends before any answer, as a flaky proxy ends it
        self.close_connection = True
        self.connection.shutdown(2)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("code", [503, 429, "hang-up"])
def test_the_release_search_on_a_busy_index_aborts_saying_so(tmp_path, code):
    """The release search lists the index's releases before any build: a busy or flaky index
    there leaves nothing to search and no build to skip. It said 'internal error (a bug in
    bisect_torch.py)'; it is the index, and a usage error (128) that says so."""
    class Busy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(code)

        def log_message(self, *args):
            pass
    with serve(Hangup if code == "hang-up" else Busy) as url:
        rc, out, err = main("releases", "2.8.0", "2.12.0", "--index", url, "--cache", tmp_path / "cache")
    one_line(rc, out, err, "could not read the index", "try again")
    assert "internal error" not in err


def test_an_index_links_hash_is_read_in_either_case(tmp_path):
    """A wheel is known by its sha256, in lowercase hex as hashlib writes it: a link's hash in
    capitals names the same wheel as that file hashed on disk (its environment's name and record)."""
    name = nightly_name("2025-09-07")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text('<a href="/files/%s#sha256=%s">%s</a>\n' % (name, "AB" * 32, name))
    with serve_index(tmp_path) as url:
        assert indexes.link_hashes(url) == {name: "ab" * 32}


def test_the_releases_listed_are_those_with_a_wheel_for_this_python_here(tmp_path):
    """A release without a wheel for this Python on Linux x86_64 (an older torch on a newer Python,
    or one built for aarch64 only) is not listed: the release search would step onto a build that
    it cannot test."""
    for version, py, plat in (("2.8.0", PYTAG, "linux_x86_64"), ("2.9.0", "cp39", "linux_x86_64"),
                              ("2.9.1", PYTAG, "manylinux_2_28_aarch64"), ("2.10.0", PYTAG, "manylinux_2_28_x86_64")):
        wheel_file(str(tmp_path), "torch-%s+cpu-%s-%s-%s.whl" % (version, py, py, plat))
    assert indexes.release_versions(str(tmp_path)) == ["2.8.0", "2.10.0"]


# What a folder given as --index may hold besides torch's wheels: none of it is a torch wheel.
NOT_TORCH_WHEELS = {
    "another package's wheel": "sacstubdep-1.0-py3-none-any.whl",
    "a package named torch-something": "torchvision-0.21.0+cpu-%s-%s-linux_x86_64.whl" % (PYTAG, PYTAG),
    "a download under way": "torch-2.12.0+cpu-%s-%s-linux_x86_64.whl.part" % (PYTAG, PYTAG),
    "a wheel's checksum": "torch-2.12.0+cpu-%s-%s-linux_x86_64.whl.sha256" % (PYTAG, PYTAG),
    "torch's sources": "torch-2.12.0.tar.gz",
    "a folder named as a wheel": "torch-2.12.0+cpu-%s-%s-linux_x86_64.whl/" % (PYTAG, PYTAG),
}


@pytest.mark.parametrize("kind", sorted(NOT_TORCH_WHEELS))
def test_a_folder_index_lists_its_torch_wheel_files_and_nothing_else(tmp_path, kind):
    """Beside a torch wheel, something that is not one is not listed, nor its release; and alone in
    the folder, the folder holds no torch: a usage error, never a skip on every step."""
    name = NOT_TORCH_WHEELS[kind]
    for folder in ("both", "alone"):
        if name.endswith("/"):
            (tmp_path / folder / name).mkdir(parents=True)
        else:
            wheel_file(str(tmp_path / folder), name)
    torch = wheel_file(str(tmp_path / "both"), "torch-2.9.1+cpu-%s-%s-linux_x86_64.whl" % (PYTAG, PYTAG))
    assert indexes.torch_wheel_files(str(tmp_path / "both")) == {torch: str(tmp_path / "both" / torch)}
    assert indexes.release_versions(str(tmp_path / "both")) == ["2.9.1"]
    with pytest.raises(exits.UsageError, match="no torch wheels in this folder"):
        indexes.torch_wheel_files(str(tmp_path / "alone"))


def test_a_wheel_whose_download_fails_is_a_skip(tmp_path):
    """An index that gives no hashes has its wheel downloaded to be hashed: a download it refuses
    (503) skips this build, as a failed install does, and leaves no file behind."""
    wheel_file(str(tmp_path / "idx"), nightly_name("2025-09-07"))
    refused = threading.Event()
    refused.set()
    with serve_index(tmp_path / "idx", hold=refused, hashes=False) as url:
        rc, out, err = main("nightly", "2025-09-07", "--index", url, "--cache", tmp_path / "cache")
    assert rc == 125 and "could not download" in out and "503" in out, (rc, out, err)
    assert not [f for _, _, files in os.walk(tmp_path / "cache" / "downloads") for f in files]


def test_a_wheel_too_big_for_the_free_space_is_refused_before_its_download(tmp_path, monkeypatch):
    """Its size is read from the answer's header, before the body: a 10 GB wheel on a disk with
    1 GB free is a usage error at once, never a download that fills the disk (here the body ends
    early, so a download would end in a skip)."""
    name = nightly_name("2025-09-07")

    class Big(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'<a href="/files/%s">%s</a>' % (name.encode(), name.encode())
            self.send_response(200)
            self.send_header("Content-Length", str(10 ** 10 if "/files/" in self.path else len(body)))
            self.end_headers()
            self.wfile.write(b"PK" if "/files/" in self.path else body)

        def log_message(self, *args):
            pass
    monkeypatch.setattr(caches, "free_bytes", lambda path: int(caches.GB))
    with serve(Big) as url:
        one_line(*main("nightly", "2025-09-07", "--index", url, "--cache", tmp_path / "cache"),
                 "installing %s needs about 30.3 GB free" % name, "--cache elsewhere")
    assert not [f for _, _, files in os.walk(tmp_path / "cache" / "downloads") for f in files]


def test_a_download_onto_a_full_disk_is_a_usage_error(tmp_path, monkeypatch):
    """A disk that fills during the download says nothing of the build: 128, free some space,
    never a skip on every step. The download's file is /dev/full, which answers every write with
    ENOSPC."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    name, cache = nightly_name("2025-09-07"), tmp_path / "cache"
    wheel_file(str(tmp_path / "idx"), name)
    folder = builds.download_folder(str(cache))
    os.symlink("/dev/full", os.path.join(folder, name))  # where this process downloads it
    monkeypatch.setattr(builds, "download_folder", lambda cache: folder)
    with serve_index(tmp_path / "idx", hashes=False) as url:
        one_line(*main("nightly", "2025-09-07", "--index", url, "--cache", cache),
                 "cannot write %s under %s (No space left on device)" % (name, cache), "cache --prune")
    assert not os.path.exists(folder)


def test_a_wheel_whose_index_gives_its_hash_is_not_downloaded_to_be_hashed(tmp_path):
    name, asked = nightly_name("2025-09-07"), threading.Event()
    wheel_file(str(tmp_path / "idx"), name)
    with serve_index(tmp_path / "idx", asked=asked) as url:
        build = builds.wheel_build(name, url + "files/" + name, url, str(tmp_path / "cache"))
    assert build.file is None and build.sha256 == builds.sha256_of(str(tmp_path / "idx" / name))
    assert not asked.is_set()


def test_a_release_that_is_not_on_the_index_is_not_judged_in_a_matrix(folder):
    """One build of a matrix missing is that build not judged (125), never the whole matrix aborted."""
    rc, out, err = main("matrix", "2.8.0", "--index", folder, "--cache", folder.parent / "cache")
    assert rc == 125 and "no torch 2.8.0 wheel for %s" % PYTAG in out, (rc, out, err)


def test_a_wheel_without_its_version_file_is_a_skip(monkeypatch, tmp_path):
    """A wheel that holds no torch/version.py (cut short, or no torch) says nothing of the bug:
    that step is skipped, never an internal error."""
    name = nightly_name("2025-09-07")
    (tmp_path / "idx").mkdir()
    with zipfile.ZipFile(tmp_path / "idx" / name, "w") as z:
        z.writestr("torch/__init__.py", "")
    stop_at_install(monkeypatch, tmp_path / "cache")
    rc, out, err = main("nightly", "2025-09-07", "--index", tmp_path / "idx")
    assert rc == 125 and "cannot read torch/version.py in %s" % name in out, (rc, out, err)


def test_of_several_wheels_of_a_release_the_one_named_is_taken(monkeypatch, folder, tmp_path):
    wheel_file(str(folder), "torch-2.9.1-%s-%s-manylinux_2_28_x86_64.whl" % (PYTAG, PYTAG))
    asked = stop_at_install(monkeypatch, tmp_path / "cache")
    rc, out, err = main("matrix", "2.9.1", "--index", folder)
    taken = re.search(r"several wheels of torch 2\.9\.1; taking (\S+) over (\S+)", err + out)
    assert rc == 125 and taken and asked == [taken.group(1)], (rc, out, err)


@pytest.mark.parametrize("command", [["nightly", "2025-09-07"], ["matrix", "2.9.1"], ["releases", "2.9.1", "2.12.0"]])
def test_a_percent_encoded_wheel_name_must_be_renamed(monkeypatch, tmp_path, command):
    """As a browser or wget saves a wheel: `%2B` for `+`. uv (0.13.9) and pip (26.2.1) ignore such a
    file in --find-links (pip 23.2.1 reads it), so it is named with what to rename it to."""
    stop_at_install(monkeypatch, tmp_path / "cache")
    for name in (nightly_name("2025-09-07"), "torch-2.9.1+cpu-%s-%s-linux_x86_64.whl" % (PYTAG, PYTAG),
                 "torch-2.12.0+cpu-%s-%s-linux_x86_64.whl" % (PYTAG, PYTAG)):
        wheel_file(str(tmp_path), name.replace("+", "%2B"))
    line = one_line(*main(*command, "--index", tmp_path), "%2B", "rename it")
    named, renamed = re.search(r" (torch-\S+\.whl) is .* rename it (torch-\S+\.whl)$", line).groups()
    assert urllib.parse.unquote(named) == renamed and "+cpu-" in renamed


@pytest.mark.parametrize("args, says", [
    (["nightly", "--variant", "cu 128"], "--variant"),
    (["nightly", "--variant", "../cpu"], "--variant"),
])
def test_a_variant_that_is_no_index_name_is_a_usage_error(args, says):
    one_line(*main(*args), says)


# ----------------------------------------------------------------------------- the cache
def broken_cache(tmp_path, kind):
    """A cache path that cannot be one, as a user may give it: (the path, the words that name what
    is wrong with it)."""
    if kind == "under a file":
        (tmp_path / "a-file").write_text("")
        return tmp_path / "a-file" / "cache", "%s, which is not a folder" % (tmp_path / "a-file")
    if kind in ("a symlink loop", "under a symlink loop"):
        os.symlink(tmp_path / "loop-b", tmp_path / "loop-a")
        os.symlink(tmp_path / "loop-a", tmp_path / "loop-b")
        if kind == "a symlink loop":
            return tmp_path / "loop-a", "is a symlink that loops"
        return tmp_path / "loop-a" / "cache", "%s, a symlink that loops" % (tmp_path / "loop-a")
    if kind == "a symlink to nothing":
        os.symlink(tmp_path / "gone" / "cache", tmp_path / "link")
        return tmp_path / "link", "is a symlink to %s, which is not there" % (tmp_path / "gone" / "cache")
    if kind == "under /proc":
        return "/proc/sac-compile-repro", "/proc, on a filesystem that holds no files"
    assert kind == "its lock a folder"  # a cache that looks whole, and cannot be written
    (tmp_path / "cache" / "lock").mkdir(parents=True)
    return tmp_path / "cache", "cannot be written (%s: Is a directory)" % (tmp_path / "cache" / "lock")


CACHE_KINDS = ["under a file", "a symlink loop", "under a symlink loop", "a symlink to nothing", "under /proc"]


@pytest.mark.parametrize("kind", CACHE_KINDS + ["its lock a folder"])
@pytest.mark.parametrize("command", [["cache", "--prune", "--keep", "0"], ["nightly", "2025-09-07"], ["matrix", "2.9.1"],
                                     ["cache"]])
def test_a_cache_that_cannot_be_one_is_a_usage_error(monkeypatch, folder, tmp_path, kind, command):
    """Once an internal error (FileExistsError, NotADirectoryError, FileNotFoundError) at the first
    write, after the index was read; a listing showed an empty cache. The lock's folder is found
    only by the commands that write."""
    stop_at_install(monkeypatch, tmp_path / "unused")
    cache, says = broken_cache(tmp_path, kind)
    args = command + (["--index", folder] if command[0] in ("nightly", "matrix") else []) + ["--cache", cache]
    if kind == "its lock a folder" and command == ["cache"]:
        assert main(*args)[0] == 0  # nothing is written: nothing to refuse
        return
    one_line(*main(*args), "the cache %s" % cache, says, "name a folder")


def test_a_cache_from_the_environment_is_checked_as_the_option_is(monkeypatch, tmp_path):
    cache, says = broken_cache(tmp_path, "under a file")
    monkeypatch.setenv("SAC_REPRO_CACHE", str(cache))
    one_line(*main("cache", "--prune", "--keep", "0"), "the cache %s" % cache, says, "$SAC_REPRO_CACHE")


# ----------------------------------------------------------------------------- latest
def test_latest_is_the_newest_date_with_a_wheel_for_this_python_and_platform(monkeypatch, tmp_path):
    for name in (nightly_name("2025-09-07"), nightly_name("2025-09-08", py="cp39"),
                 nightly_name("2025-09-08", plat="manylinux_2_28_aarch64")):
        wheel_file(str(tmp_path), name)
    assert indexes.latest_date(indexes.torch_wheel_files(str(tmp_path))) == "2025-09-07"
    asked = stop_at_install(monkeypatch, tmp_path / "cache")
    assert main("nightly", "latest", "--index", tmp_path)[0] == 125
    assert asked == [nightly_name("2025-09-07")]


# ----------------------------------------------------------------------------- exit codes
def codes_of(command):
    return [(code, meaning) for cmd, code, meaning in exits.BISECT_CODES if cmd == command]


def test_each_command_states_its_exit_codes_in_its_help_and_in_the_docs():
    docs = open(os.path.join(ROOT, "docs", "bisecting.md")).read()
    rows = re.findall(r"^\| `([a-z-]+)` \| (\d+) \| (.*) \|$", docs, re.M)
    assert [(c, int(code), m) for c, code, m in rows] == list(exits.BISECT_CODES)
    for command in ("nightly-step", "nightly", "nightly-range", "releases", "matrix", "cache"):
        assert codes_of(command), command
        help_text = " ".join(subprocess.run([sys.executable, BISECT, command, "--help"], capture_output=True,
                                            text=True).stdout.split())
        for code, meaning in codes_of(command):
            assert "%d %s" % (code, " ".join(meaning.split())) in help_text, (command, code, help_text)
    codes = {code for _, code, _ in exits.BISECT_CODES}
    assert codes <= {0, 1, exits.EXIT_CANNOT_TEST, exits.EXIT_ABORT, exits.EXIT_NO_CHANGE}
    assert exits.EXIT_NO_CHANGE not in (0, 1, 125) and exits.EXIT_NO_CHANGE < 128


@pytest.mark.parametrize("verdicts, rc", [(["reproduced", "not_reproduced"], 0),
                                          (["reproduced", "cannot_test"], 125),
                                          (["cannot_test"], 125)])
def test_matrix_exits_125_when_a_build_could_not_be_judged(monkeypatch, verdicts, rc):
    monkeypatch.setattr(bisect_torch, "test_build", lambda v, *a: dict(zip(["2.9.1", "2.12.0"], verdicts))[v])
    assert main("matrix", *["2.9.1", "2.12.0"][:len(verdicts)], "--index", "/x")[0] == rc


# ----------------------------------------------------------------------------- the repro's answer
CHILD = {verdict_: json.load(open(data("cpu-torch2.13", name))) for verdict_, name in
         (("not_reproduced", "child_fixed.json"), ("reproduced", "child_fix_reverted.json"))}
CHILD["cannot_test"] = {"status": "cannot_test", "reason": "the torch under test crashed: killed by SIGSEGV",
                        "env": CHILD["not_reproduced"]["env"]}


@pytest.mark.parametrize("answer, repro_rc, rc", [
    ("reproduced", 1, 1), ("not_reproduced", 0, 0), ("cannot_test", 125, 125),
    (None, 128, 128),  # the repro aborted (a bug in it, a usage error): so does the bisect
    (None, 0, 128),  # no report: nothing was judged, whatever its exit code says
    ("reproduced", -9, 128),  # killed after its report: that report was never its answer
])
def test_the_repros_answer_is_the_nightlys_exit_code(monkeypatch, folder, tmp_path, answer, repro_rc, rc):
    report = verdict.report_from_child(copy.deepcopy(CHILD[answer]), "regression", False) if answer else None
    python = repro_python(str(tmp_path / "env"), repro_rc, report)
    monkeypatch.setenv("SAC_REPRO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(envs, "ensure_venv", lambda build, *a, **k: python)
    got, out, err = main("nightly", "2025-09-07", "--index", folder)
    assert got == rc, (out, err)
    if rc == 128:
        assert "the repro script failed (exit %d)" % repro_rc in err and len(err.strip().splitlines()) == 1, err
    else:
        assert "torch 2025-09-07 %-14s" % answer in out, out


# ----------------------------------------------------------------------------- the release search
def search(monkeypatch, versions, verdicts, old, new):
    monkeypatch.setattr(indexes, "release_versions", lambda index: list(versions))
    tested = []

    def test_build(v, *a):
        tested.append(v)
        return verdicts[v]
    monkeypatch.setattr(bisect_torch, "test_build", test_build)
    rc, out, err = main("releases", old, new)
    return rc, out, err, tested


FIVE = ["2.7.0", "2.8.0", "2.9.1", "2.10.0", "2.11.0"]


def test_the_search_finds_a_change_at_the_fourth_of_five(monkeypatch):
    verdicts = dict(zip(FIVE, ["reproduced"] * 3 + ["not_reproduced"] * 2))
    rc, out, err, tested = search(monkeypatch, FIVE + ["2.12.0"], verdicts, "2.7.0", "2.11.0")
    assert rc == 0, (out, err)
    assert "first release whose verdict differs from 2.7.0 (reproduced): 2.10.0 (not_reproduced)" in out
    assert "2.9.1" in tested and len(tested) == len(set(tested)) <= 4


def test_no_change_between_the_ends_has_a_code_of_its_own(monkeypatch):
    rc, out, err, _ = search(monkeypatch, FIVE, dict.fromkeys(FIVE, "reproduced"), "2.7.0", "2.11.0")
    assert rc == exits.EXIT_NO_CHANGE, (out, err)
    assert "no release between 2.7.0 and 2.11.0 changes the verdict" in out


@pytest.mark.parametrize("old, new, says", [("2.9.1", "2.9.1", "OLD and NEW are the same release"),
                                            ("2.11.0", "2.7.0", "must be older"),
                                            ("2.6.0", "2.11.0", "2.6.0 is not among the releases"),
                                            ("2.7.0", "2.12.0", "2.12.0 is not among the releases")])
def test_bad_ends_are_usage_errors_before_any_build(monkeypatch, old, new, says):
    rc, out, err, tested = search(monkeypatch, FIVE, {}, old, new)
    one_line(rc, out, err, says)
    assert tested == []


def search_oracle(verdicts):
    """The answer docs/bisecting.md promises for releases whose verdicts are `verdicts` (OLD's
    first, NEW's last, both judged; one change at most, untestable releases anywhere between):
    the first release judged otherwise than OLD when the release judged just before it gives OLD's
    verdict (0); none (EXIT_NO_CHANGE); or the untestable span between the two (125)."""
    base = verdicts[0]
    if verdicts[-1] == base:
        return exits.EXIT_NO_CHANGE, None
    last_base = max(i for i, v in enumerate(verdicts) if v == base)
    first_other = min(i for i, v in enumerate(verdicts) if v not in (base, "cannot_test"))
    if first_other == last_base + 1:
        return 0, first_other
    return exits.EXIT_CANNOT_TEST, (last_base + 1, first_other)


@st.composite
def release_histories(draw):
    n = draw(st.integers(2, 12))
    base, other = draw(st.permutations(["reproduced", "not_reproduced"]))
    change = draw(st.integers(1, n))  # n: nothing changes
    verdicts = [base if i < change else other for i in range(n)]
    for i in range(1, n - 1):
        if draw(st.integers(0, 3)) == 0:
            verdicts[i] = "cannot_test"
    return verdicts


@settings(max_examples=500, deadline=None)
@given(release_histories())
def test_the_release_search_agrees_with_the_oracle(verdicts):
    versions = ["2.%d.0" % i for i in range(len(verdicts))]
    with pytest.MonkeyPatch.context() as mp:
        rc, out, err, tested = search(mp, versions, dict(zip(versions, verdicts)), versions[0], versions[-1])
    want, where = search_oracle(verdicts)
    assert rc == want, (verdicts, out, err)
    if want == 0:
        assert "first release whose verdict differs from %s (%s): %s (%s)" % (
            versions[0], verdicts[0], versions[where], verdicts[where]) in out
    elif want == exits.EXIT_CANNOT_TEST:
        assert "not testable in between: %s" % ", ".join(versions[where[0]:where[1]]) in out
        assert "first release whose verdict differs" not in out
    assert len(tested) == len(set(tested))  # each release built once


# ----------------------------------------------------------------------------- the bisect's terms
@pytest.mark.parametrize("old, new, hunt_fix, says", [
    ("broken", "fixed", False, "add --hunt-fix"),
    ("unfixed", "fixed", False, "add --hunt-fix"),
    ("good", "bad", True, "drop --hunt-fix or start the bisect with --term-old broken --term-new fixed"),
    ("old", "new", True, "drop --hunt-fix or start the bisect with --term-old broken --term-new fixed"),
])
def test_terms_that_contradict_the_flag_abort_before_any_work(tmp_path, old, new, hunt_fix, says):
    repo = tmp_path / "pytorch"
    commits = nightly_repo(repo, [("01", "a" * 40), ("02", "b" * 40), ("03", "c" * 40)])
    subprocess.run(["git", "-C", str(repo), "bisect", "start", "--term-old", old, "--term-new", new,
                    commits["03"], commits["01"]], check=True, capture_output=True)
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(tmp_path / "none"),
                           "--cache", str(tmp_path / "cache")] + (["--hunt-fix"] if hunt_fix else []),
                          cwd=repo, capture_output=True, text=True, timeout=60)
    one_line(proc.returncode, proc.stdout, proc.stderr, says, "%s/%s" % (old, new))
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("old, new, want", [("broken", "fixed", "fix"), ("good", "bad", "regression"),
                                            ("old", "new", "regression"), ("fixed", "broken", "regression"),
                                            ("before", "after", None), ("Broken", "Fixed", "fix")])
def test_what_the_terms_hunt(old, new, want):
    assert bisect_torch.terms_hunt(old, new) == want


@pytest.mark.parametrize("args, env", [(["--terms", "regression"], {}), (["--terms", "fix"], {}),
                                       ([], {"SAC_BISECT_TERMS": "fix"}), ([], {"SAC_BISECT_TERMS": "bogus"})])
def test_the_old_spellings_of_the_terms_are_refused(tmp_path, args, env):
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--cache", str(tmp_path / "cache")] + args,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
    one_line(proc.returncode, proc.stdout, proc.stderr, "--hunt-fix")
    assert not (tmp_path / "cache").exists()


def documented_steps():
    """Each `git bisect start` shown in the README, docs/bisecting.md and bisect_torch.py's --help,
    with the nightly-step command that follows it: (where, start's arguments, the step's)."""
    found = []
    for path in ("README.md", os.path.join("docs", "bisecting.md"), os.path.join("sac_repro", "bisecting", "bisect_torch.py")):
        start = None
        for line in open(os.path.join(ROOT, path)):
            line = line.split("#")[0]
            if "git bisect start" in line:
                start = line.split("git bisect start", 1)[1].split()
            else:  # the tool by its file, or through the bundle's one command
                step = re.search(r"(?:bisect_torch\.py|sac_repro bisect) nightly-step(.*)", line)
                if step:
                    found.append((path, start, step.group(1).split()))
    return found


def test_the_documented_bisects_run_as_documented():
    steps = documented_steps()
    assert len(steps) >= 4, steps
    for path, start, step in steps:
        args = bisect_torch.parse_args(["nightly-step"] + step)
        terms = (start[start.index("--term-old") + 1], start[start.index("--term-new") + 1]) \
            if "--term-old" in start else ("good", "bad")
        assert args.hunt_fix == (bisect_torch.terms_hunt(*terms) == "fix"), (path, start, step)
