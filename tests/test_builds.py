"""What bisecting costs the user: one nightly in one command, local indexes of both layouts, the
wheel checked before the work, free space checked before an install, uv's shared store or pip's
shared wheel cache, and a cache that can be listed and pruned. Stub wheels (see test_bisect.py)
stand in for torch builds; each loads this environment's real torch."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from wheels import BISECT, bisect, make_index, nightly_repo, PYTAG, serve_index


@pytest.mark.parametrize("layout, installer", [("flat", "uv"), ("pep503", "pip")])
def test_one_nightly_in_one_command_from_either_layout(tmp_path, layout, installer):
    if installer == "uv" and not shutil.which("uv") and not os.access(os.path.join(os.path.dirname(sys.executable), "uv"), os.X_OK):
        pytest.skip("uv is not installed here")
    index = make_index(tmp_path / "index", layout)
    cache = tmp_path / "cache"
    rc, out = bisect("nightly", "2025-09-06", "--index", str(index), "--installer", installer, "--markdown", cache=cache)
    assert rc == 1, out
    assert "with %s into" % installer in out
    assert "2025-09-06" in out and "reproduced" in out
    assert "| 2025-09-06 | aaaaaaaaaaaa | `reproduced` | 1 |" in out
    rc, out = bisect("nightly", "latest", "--index", str(index), "--installer", installer, cache=cache)
    assert rc == 0 and "torch 2025-09-08 " in out and "not_reproduced" in out, out  # the newest date
    if installer == "uv":
        assert os.path.isdir(cache / "uv")  # the shared store, inside the cache


def test_releases_and_nightlies_in_one_table_from_a_local_index(tmp_path):
    index = make_index(tmp_path / "index", "pep503")
    rc, out = bisect("matrix", "2.9.1", "2.12.0", "2025-09-07", "--index", str(index), "--markdown",
                     cache=tmp_path / "cache")
    assert rc == 0, out
    assert "| 2.9.1 | dddddddddddd | `reproduced` | 1 |" in out
    assert "| 2.12.0 | eeeeeeeeeeee | `not_reproduced` | 0 |" in out
    assert "| 2025-09-07 | bbbbbbbbbbbb | `not_reproduced` | 0 |" in out


def test_a_wheel_of_another_commit_is_rejected_before_it_is_installed(tmp_path):
    index = make_index(tmp_path / "index", "flat")
    repo = tmp_path / "pytorch"
    nightly_repo(repo, [("08", "f" * 40)])  # the 08 wheel says it was built from c...c
    cache = tmp_path / "cache"
    started = time.time()
    proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", str(index), "--cache", str(cache)],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "git cccccccccccc" in proc.stdout and "is not the nightly under test" in proc.stdout
    assert not (cache / "venvs").exists() or os.listdir(cache / "venvs") == []  # nothing installed
    assert time.time() - started < 60


def test_a_wheel_of_another_commit_from_a_url_is_removed_after_install(tmp_path):
    flat = make_index(tmp_path / "wheels", "flat")
    repo = tmp_path / "pytorch"
    nightly_repo(repo, [("08", "f" * 40)])
    cache = tmp_path / "cache"
    with serve_index(flat) as url:
        proc = subprocess.run([sys.executable, BISECT, "nightly-step", "--index", url, "--cache", str(cache)],
                              cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "is not the nightly under test" in proc.stdout and "installing" in proc.stdout
    assert os.listdir(cache / "venvs") == []  # the rejected environment is gone


def test_too_little_free_space_aborts_before_any_install(tmp_path, monkeypatch, capsys):
    import bisect_torch
    from sac_repro import builds
    index = make_index(tmp_path / "index", "flat")
    monkeypatch.setattr(builds, "free_bytes", lambda path: int(0.05 * builds.GB))
    rc = bisect_torch.main(["nightly", "2025-09-07", "--index", str(index), "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 128, err
    assert "needs about 0.3 GB free under" in err and "and 0.1 GB are free" in err
    assert not (tmp_path / "cache" / "venvs").exists() or os.listdir(tmp_path / "cache" / "venvs") == []
    assert builds.needed_bytes(None, "cpu") == builds.NEEDS["cpu"] and builds.needed_bytes() == builds.NEEDS["cuda"]


def test_the_cache_lists_and_prunes_only_its_own_environments(tmp_path):
    index = make_index(tmp_path / "index", "flat")
    cache = tmp_path / "cache"
    for day in ("2025-09-06", "2025-09-07"):
        assert bisect("nightly", day, "--index", str(index), cache=cache)[0] in (0, 1)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the cache's")
    os.symlink(outside, cache / "venvs" / "a-link-out")
    old = cache / "venvs" / ("torch-2.10.0.dev20250906+cpu-%s-%s-linux_x86_64" % (PYTAG, PYTAG))
    os.utime(old / ".last-used", (time.time() - 10 * 86400,) * 2)
    rc, out = bisect("cache", cache=cache)
    assert rc == 0, out
    assert "torch-2.10.0.dev20250906+cpu" in out and "aaaaaaaaaaaa" in out and "bbbbbbbbbbbb" in out
    assert "total on disk:" in out
    rc, out = bisect("cache", "--prune", "--older-than", "5", cache=cache)
    assert rc == 0 and "removed 1 environment: torch-2.10.0.dev20250906" in out, out
    assert not old.exists() and (cache / "venvs" / ("torch-2.10.0.dev20250907+cpu-%s-%s-linux_x86_64" % (PYTAG, PYTAG))).exists()
    rc, out = bisect("cache", "--prune", "--keep", "0", cache=cache)
    assert rc == 0 and "removed 1 environment" in out, out
    assert (outside / "keep.txt").read_text() == "not the cache's"  # never followed out
    # the store stays whole: a build removed can be installed again
    assert bisect("nightly", "2025-09-07", "--index", str(index), cache=cache)[0] == 0
    assert bisect("cache", "--prune", cache=cache)[0] == 128


def test_release_indexes_for_variants():
    from sac_repro import builds
    assert builds.release_index(None, None) is None
    assert builds.release_index("cpu", None) == "https://download.pytorch.org/whl/cpu"
    assert builds.release_index("cu128", "/my/index") == "/my/index"
    assert builds.nightly_index(None, None) == "https://download.pytorch.org/whl/nightly/cpu"
    assert builds.nightly_index("cu128", None) == "https://download.pytorch.org/whl/nightly/cu128"


def test_a_file_url_index_installs_as_its_folder(tmp_path):
    import urllib.parse
    index = make_index(tmp_path / "my wheels", "pep503")
    rc, out = bisect("nightly", "2025-09-07", "--index", "file://" + urllib.parse.quote(str(index)), cache=tmp_path / "cache")
    assert rc == 0 and "not_reproduced" in out, out
    assert "from %s with" % index in out
