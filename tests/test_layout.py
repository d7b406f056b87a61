"""The bundle's layout: the report's five files at the top, everything built on them in one package
(subfolders by concern), and every entry point working from any folder, through a relative path or
a symlink."""
import ast
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import data, ROOT

# The report's five files, the one package built on them, the docs and the tests: nothing else.
TOP_LEVEL = {"torch_compile_selective_activation_checkpoint.py", "run_nsys.sh", "requirements.txt",
             "README.md", "expected_output.md", "sac_repro", "docs", "tests", ".ci"}
# The package's folders, one per concern
CONCERNS = {"judge", "bisecting", "bench", "policy", "revert_fix", "upstream"}


def test_the_top_level_holds_the_report_files_and_one_package():
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    top = {p.split("/")[0] for p in tracked.stdout.splitlines()} - {".gitignore"}
    assert top == TOP_LEVEL
    folders = {p.split("/")[1] for p in tracked.stdout.splitlines() if p.startswith("sac_repro/") and p.count("/") > 1}
    assert folders == CONCERNS


def callers(tmp_path, name):
    """The same entry point three ways: in place, by a relative path from another folder, and
    through a symlink in another folder. Returns (argv prefix, cwd) pairs."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    link = elsewhere / ("link-" + os.path.basename(name))
    if not link.exists():
        os.symlink(os.path.join(ROOT, name), link)
    return [([os.path.join(ROOT, name)], ROOT),
            ([os.path.relpath(os.path.join(ROOT, name), elsewhere)], str(elsewhere)),
            ([str(link)], str(elsewhere))]


@pytest.mark.parametrize("capture, rc", [
    (("h200-torch2.11", "full_nvtx_kern_sum.csv"), 0),
    (("h200-torch2.11-fix-reverted", "nvtx_kern_sum.csv"), 1),
])
def test_the_judged_run_gives_the_same_verdict_from_anywhere(tmp_path, capture, rc):
    for argv, cwd in callers(tmp_path, "sac_repro"):
        proc = subprocess.run([sys.executable] + argv + ["--from-nsys", data(*capture)], cwd=cwd,
                              capture_output=True, text=True)
        assert proc.returncode == rc, (argv, proc.stdout, proc.stderr)


def test_bisect_torch_runs_from_anywhere(tmp_path):
    for argv, cwd in callers(tmp_path, "sac_repro/bisecting/bisect_torch.py"):
        proc = subprocess.run([sys.executable] + argv + ["releases", "2.12.0", "2.8.0"], cwd=cwd,
                              capture_output=True, text=True)
        assert proc.returncode == 128 and "must be older" in proc.stderr, (argv, proc.stderr)


@pytest.mark.parametrize("argv, rc, said", [(["bisect", "releases", "2.12.0", "2.8.0"], 128, "must be older"),
                                             (["bench", "--help"], 0, "--fsdp"),
                                             (["--help"], 0, "python3 -m sac_repro bisect")])
def test_the_one_command_runs_the_tools_from_anywhere(tmp_path, argv, rc, said):
    for prefix, cwd in callers(tmp_path, "sac_repro"):
        proc = subprocess.run([sys.executable] + prefix + argv, cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == rc and said in proc.stdout + proc.stderr, (prefix, proc.stdout, proc.stderr)


def test_the_bench_finds_its_package_from_anywhere(tmp_path):
    for argv, cwd in callers(tmp_path, "sac_repro/bench/bench_sac_compile.py"):
        proc = subprocess.run([sys.executable] + argv + ["--help"], cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == 0 and "--fsdp" in proc.stdout, (argv, proc.stderr)


# --------------------------------------------------------------------- docs that cannot rot
def markdown_files():
    docs = [os.path.join(dirpath, f) for dirpath, _, files in os.walk(os.path.join(ROOT, "docs"))
            for f in files if f.endswith(".md")]
    return [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "expected_output.md")] + sorted(docs)


@pytest.mark.unit
def test_every_relative_link_in_the_docs_resolves():
    checked = 0
    for path in markdown_files():
        text = open(path).read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://|#|mailto:", target):
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
            assert os.path.exists(resolved), "%s links to %s, which is not there" % (os.path.relpath(path, ROOT), target)
            checked += 1
    assert checked >= 10


@pytest.mark.unit
def test_the_readme_is_short_and_in_its_users_order():
    """Its first 40 lines say where the bug stands and give the one command. Read from the top at
    200 words a minute, a maintainer has the command within 1 minute, the exit codes within 1.5,
    the kernel names within 3, how to paste within 4, and the whole within 5."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    lines = readme.splitlines()
    assert len(lines) <= 160
    first = "\n".join(lines[:40])
    assert "**fixed in 2.10.0**" in first and "affected 2.5.1 to 2.9.1" in first
    assert "\npython3 torch_compile_selective_activation_checkpoint.py\n" in first
    headings = [l for l in lines if l.startswith("## ")]
    assert headings[:5] == ["## Run it", "## Reading the kernel names", "## The judged run", "## Pasting into an issue",
                            "## A second finding: the policy never sees the compiled matmul"]

    def minutes_to(text):
        return len(readme[:readme.index(text) + len(text)].split()) / 200

    assert minutes_to("python3 torch_compile_selective_activation_checkpoint.py\n") <= 1
    # the exit codes: to the end of their table's last row, which comes before any sample output
    table_end = re.search(r"^\| 128 \|.*\|$", readme, re.M).group(0)
    assert minutes_to(table_end) <= 1.5
    assert readme.index(table_end) < readme.index("\nf_compiled under SAC: ")
    assert minutes_to("kernel names, which tables leave out.") <= 3  # the end of the kernel names' list
    assert minutes_to("--markdown --plot evidence.png") <= 4
    assert len(readme.split()) / 200 <= 5  # the whole
    assert len(open(os.path.join(ROOT, "expected_output.md")).read().splitlines()) <= 300


@pytest.mark.unit
def test_the_readme_says_each_thing_before_it_uses_it():
    """Issue 46, a newcomer's reading: the user's pattern by upstream's name, sac(compile(f)), early;
    f's body where f comes in, before 'the matmul'; Dynamo's refusal in plain words, not 'non-infra
    dispatch mode' and 'frames'; what upgrading leaves, and the arrangement for every version spelled
    out; what the script prints besides its line; the 2.9.1 sample's torch said to be a CUDA build
    run on the CPU; the exit codes' names said to be the judged run's; SAC_REPRO_URL an environment
    variable; CI as it is."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    prose = re.sub(r"```.*?```", "", readme, flags=re.S)  # the outputs shown are the runs' own words
    words = prose.split()
    assert "sac(compile(f))" in " ".join(words[:40])
    f_body = "`f(x, y) = (3 * x + 1) @ (2 * y + 1)`"
    assert prose.index(f_body) < prose.index("matmul")
    # Dynamo's refusal in plain words; each term where it is first used, defined there
    assert "non-infra" not in prose and "frames" not in prose and "has not opted in" in prose.split("## Run it")[0]
    for term, defined in (("judged run", "judged run (below)"), ("NVTX range", "NVTX range (a named span"),
                          ("named region", "named regions (`torch.compile(f, name=")):
        assert prose.index(term) == prose.index(defined), term
    advice = " ".join(prose.split("## Run it")[0].split())
    assert "upgrading" in advice.lower() and "second finding" in advice and "every version" in advice
    assert "`torch.compile(lambda x, y: checkpoint(f, x, y, use_reentrant=False, context_fn=context_fn))`" in advice
    run_it = " ".join(prose.split("## Run it")[1].split("## ")[0].split())
    assert "traceback" in run_it and "stderr" in run_it
    assert "PyPI's CUDA build, run on the CPU" in run_it
    assert "Its exit codes, named as the judged run (below) names them:" in run_it  # the script prints no name
    assert "environment variable `SAC_REPRO_URL`" in " ".join(prose.split())
    assert "`.ci/run` runs both" in " ".join(prose.split())


@pytest.mark.unit
def test_the_readme_states_the_exit_codes_of_exits_py():
    from sac_repro import exits
    readme = open(os.path.join(ROOT, "README.md")).read()
    rows = re.findall(r"^\| (\d+) \| `?([a-z_-]+)`? \|", readme, re.M)
    assert [(int(code), verdict) for code, verdict in rows] == [(code, verdict) for code, verdict, _ in exits.CODES]


# ------------------------------------------------------- the script and the engine
def script_names():
    """Every name the script binds at module level (assignments, defs, imports)."""
    tree = ast.parse(open(os.path.join(ROOT, "torch_compile_selective_activation_checkpoint.py")).read())
    names = set()
    for node in tree.body:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.ClassDef)) and sub in tree.body:
                names.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and not isinstance(node, ast.FunctionDef):
                names.add(sub.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return names


@pytest.mark.unit
def test_the_script_defines_every_name_the_engine_reads():
    """measure.py's REPORT_NAMES is the interface between the script, run as written, and the
    scenarios: each name is bound by the script, and measure.py reads no other name of it."""
    measure = open(os.path.join(ROOT, "sac_repro", "judge", "measure.py")).read()  # imports torch: read, not imported
    interface = set(next(ast.literal_eval(n.value) for n in ast.parse(measure).body if isinstance(n, ast.Assign)
                         and getattr(n.targets[0], "id", None) == "REPORT_NAMES"))
    assert interface - script_names() == set()
    read = set(re.findall(r'(?:namespace|ns)\["(\w+)"\]', measure)) | set(re.findall(r'"(\w+)" (?:not )?in namespace', measure))
    assert read and read <= interface, read - interface


@pytest.mark.unit
def test_the_bench_section_states_the_benchs_exit_codes():
    from sac_repro import exits
    policy = open(os.path.join(ROOT, "docs", "policy.md")).read()
    section = policy[policy.index("## What it costs"):policy.index("## A regression test")]
    rows = re.findall(r"^\| (\d+) \| `?([a-z_-]+)`? \|", section, re.M)
    assert [(int(code), name) for code, name in rows] == [(code, name) for code, name, _ in exits.BENCH_CODES]


# ------------------------------------------------------------------ the house: sizes and imports
def our_python_files():
    """The bundle's Python files outside tests/, as git sees them, tracked or not yet (or as they
    lie, in a copy that git does not track)."""
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                             capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout.strip():
        paths = tracked.stdout.split()
    else:
        paths = [os.path.relpath(os.path.join(d, f), ROOT) for d, subs, files in os.walk(ROOT)
                 for f in files if f.endswith(".py")
                 if not os.path.relpath(d, ROOT).split(os.sep)[0].startswith((".", "__"))]
    return sorted(p for p in paths if p.split("/")[0] != "tests" and os.path.exists(os.path.join(ROOT, p)))


@pytest.mark.unit
def test_no_python_file_outside_the_tests_passes_500_lines():
    sizes = {p: len(open(os.path.join(ROOT, p)).read().splitlines()) for p in our_python_files()}
    assert "sac_repro/exits.py" in sizes and "sac_repro/bisecting/bisect_torch.py" in sizes, sizes
    assert {p: n for p, n in sizes.items() if n > 500} == {}


def module_name(path):
    """sac_repro/bisecting/builds.py -> sac_repro.bisecting.builds."""
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path, ours):
    """The modules of ours that a file imports, at its top or inside a function: a lazy import
    closes a circle as well as any."""
    name = module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(open(os.path.join(ROOT, path)).read())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found.add(base)
            found.update("%s.%s" % (base, a.name) for a in node.names)  # `from . import outputs`
    return {m for m in found if m in ours and m != name}


def import_circles(graph):
    """Each circle of the graph {module: modules it imports}, as a list of modules."""
    circles, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                circles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return circles


@pytest.mark.unit
def test_the_house_has_no_import_circles():
    files = {module_name(p): p for p in our_python_files()}
    graph = {m: imports_of(p, set(files)) for m, p in files.items()}
    bisect = graph["sac_repro.bisecting.bisect_torch"]
    assert bisect >= {"sac_repro.bisecting.builds", "sac_repro.bisecting.envs"}, bisect  # it reads them
    assert import_circles(graph) == []


@pytest.mark.unit
def test_a_circle_is_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.unit
def test_every_mutant_names_text_its_file_holds_once():
    """A mutant whose text the code no longer holds mutates nothing and is scored as an error, not
    a kill: a table that drifted from its file is seen here, not at the next run by hand."""
    import mutate
    drifted = []
    for path, table in mutate.TABLES.items():
        text = open(os.path.join(ROOT, path)).read()
        drifted += ["%s: %s (%d times)" % (path, m.what, text.count(m.old)) for m in table if text.count(m.old) != 1]
    assert drifted == []


@pytest.mark.unit
def test_the_mutants_baseline_runs_what_the_mutants_run(monkeypatch, tmp_path):
    """mutate.py: --baseline checked the tables' selections while --only and --against chose
    others, and a pytest option's own value (-m release) was made a path into the copy."""
    import mutate
    ran = []
    monkeypatch.setattr(mutate, "copy_bundle", lambda copy: shutil.copytree(os.path.join(ROOT, "tests"),
                                                                          os.path.join(copy, "tests")))
    monkeypatch.setattr(mutate.subprocess, "Popen", lambda cmd, **kw: ran.append(cmd) or FakePytest())
    monkeypatch.setattr(mutate, "run_table", lambda path, mutants: (len(mutants), 0, 0))
    assert mutate.main(["--baseline", "--only", "capture run's torch", "--against",
                        "-m release tests/test_nsys.py::test_x", "run_nsys.sh"]) == 0
    [cmd] = ran
    tail = cmd[cmd.index("-n") + 2:]
    assert tail[:2] == ["-m", "release"] and tail[2].endswith(os.sep + "tests" + os.sep + "test_nsys.py::test_x"), tail


class FakePytest:
    pid, returncode = 0, 0

    def communicate(self, timeout=None):
        return "", None
