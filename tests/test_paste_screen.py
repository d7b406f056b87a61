"""The paste as a maintainer meets it on GitHub: rendered by GitHub's own Markdown (cmark-gfm), with
every <details> block collapsed to its summary. That first screen is short (250 words, 30 lines at
GitHub's issue width of about 100 characters), names an in-process change once and the second
finding once, and its script, saved from the paste into an empty folder and run as the paste says,
gives the run's verdict. Fixed and reverted, on this environment's torch (2.13, CPU)."""
import html.parser
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, SCRIPT
from sac_repro.judge import render

cmarkgfm = pytest.importorskip("cmarkgfm", reason="tests/requirements.txt pins cmarkgfm, GitHub's own Markdown")

WIDTH = 100  # characters of a line in a GitHub issue, about
BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "summary", "pre", "div", "blockquote", "table", "hr",
          "ul", "ol", "thead", "tbody", "details"}


def rendered(markdown):
    """The paste's HTML as GitHub makes it (raw HTML kept, as GitHub keeps <details>)."""
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=cmarkgfm.Options.CMARK_OPT_UNSAFE)


def collapsed(page):
    """What GitHub shows of each <details> block until it is opened: its summary."""
    return re.sub(r"<details>\s*(<summary>.*?</summary>).*?</details>", r"\1", page, flags=re.S)


class Lines(html.parser.HTMLParser):
    """The page's text as a reader sees it, one entry per line: a block starts a line, a table
    row is one line, a preformatted block keeps its own lines; comments are not shown."""

    def __init__(self):
        super().__init__()
        self.lines, self.current, self.pre = [], "", 0

    def flush(self):
        if self.current.strip():
            self.lines.append(" ".join(self.current.split()))
        self.current = ""

    def handle_starttag(self, tag, attrs):
        if tag in BLOCKS or tag == "br":
            self.flush()
        self.pre += tag == "pre"
        if tag in ("td", "th") and self.current.strip():
            self.current += " | "

    def handle_endtag(self, tag):
        self.pre -= tag == "pre"
        if tag in BLOCKS:
            self.flush()

    def handle_data(self, data):
        if not self.pre:
            self.current += data
            return
        for i, piece in enumerate(data.split("\n")):
            if i:
                self.flush()
            self.current += piece


def first_screen(markdown):
    parser = Lines()
    parser.feed(collapsed(rendered(markdown)))
    parser.close()
    parser.flush()
    return parser.lines


def screen_lines(lines):
    """Lines as the page wraps them at WIDTH characters."""
    return sum(-(-len(l) // WIDTH) for l in lines)


@pytest.mark.unit
def test_the_screen_is_read_as_github_shows_it():
    """The reader of the screen: collapsed blocks show their summary, tables a line a row, code its
    own lines, comments nothing; 101 characters take two lines."""
    page = ("# T\n\n<!-- hidden -->\n\nsome *text*\n\n<details><summary>Sum</summary>\n\nsecret words\n\n"
            "</details>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\nx\ny\n```\n\n" + "w" * 101 + "\n")
    lines = first_screen(page)
    assert lines == ["T", "some text", "Sum", "a | b", "1 | 2", "x", "y", "w" * 101]
    assert screen_lines(lines) == 9


@pytest.fixture(params=["fixed", "reverted"])
def paste(request, fixed_run, reverted_run):
    run = {"fixed": fixed_run, "reverted": reverted_run}[request.param]
    return request.param, run[0], run[1], run[4]


def test_the_first_screen_is_short_and_says_each_finding_once(paste):
    kind, rc, report, markdown = paste
    lines = first_screen(markdown)
    text = " ".join(lines)
    assert len(text.split()) <= 250, (len(text.split()), "\n".join(lines))
    assert screen_lines(lines) <= 30, (screen_lines(lines), "\n".join(lines))
    assert text.count("in-process") == (1 if kind == "reverted" else 0), text
    # the second finding: one sentence on a fixed torch, none where the bug reproduces
    assert text.count("never aten.mm.default") == text.count("A second finding") == (kind == "fixed"), text
    assert text.count("pytorch/pytorch#175229") == (kind == "fixed")
    # the answer, the torch, the one command a reader runs, Expected, Actual, the next step, the ablation
    assert lines[2].startswith("This run does not reproduce" if rc == 0 else "This run reproduces"), lines[:3]
    for words in ("torch %s" % report["torch_version"], "python3 repro.py", "Expected:", "Actual:", "Next step:",
                  "Ablation (what the template asks): " + render.ablation_said(report).replace("`", "")):
        assert words in text, words
    # each fact once: the answer in the headline (Actual gives the evidence), the finding in its sentence (the
    # ablation reads which backend shows it), 'gives 0 without the revert' where the reader is told to run it
    assert text.count("does not reproduce") == (kind == "fixed"), text
    if kind == "fixed":
        assert text.count("aten.mm.out") == 1 and "Actual: as expected" in text, text
    assert text.count("gives 0") == (kind == "reverted"), text
    # the next step is what a maintainer does, not 'none ... needs its own issue'
    assert "none for #161889" not in text and "needs its own issue" not in text
    # the script's summary in the order of its file: the code that answers, then the report's
    assert "repro.py: the answering code, then the report's code, edits marked [changed]/[added]" in lines, lines
    # a maintainer has no bundle: no path into it on the first screen, and no link unless it has an address
    assert "sac_repro/" not in text and "docs/" not in text and "](" not in markdown


def test_what_the_screen_collapses_is_each_in_one_block(fixed_run):
    markdown = fixed_run[4]
    summaries = re.findall(r"<details><summary>(.*?)</summary>", markdown)
    assert len(summaries) == len(set(summaries)) == 7, summaries
    for table_head in ("| scenario |", "| backend |", "| arrangement |"):
        assert markdown.count(table_head) == 1, table_head
    assert markdown.count("PyTorch version:") == 1  # collect_env, as the template asks


def test_a_reader_without_the_bundle_meets_no_path_into_it(paste):
    """Issue 46: the pasted revert's docstring named `PYTHONPATH=sac_repro/revert_fix ...
    torch_compile_selective_activation_checkpoint.py` and `./run_nsys.sh`, Versions named
    `sac_repro/revert_fix/sitecustomize.py`, and 'generated ... by sac_repro' linked nothing. Outside
    the bundle's own command (and the script's usage line, the script's own), no path into it."""
    kind, _, _, markdown = paste
    rest = re.sub(r"<details><summary>(repro\.py|The bundle's command).*?</details>", "", markdown, flags=re.S)
    assert rest.count("<details>") == markdown.count("<details>") - 2
    for name in ("sac_repro", "run_nsys", "torch_compile_selective_activation_checkpoint", "revert_fix"):
        assert name not in rest, (name, [l for l in rest.splitlines() if name in l])


def instructions(markdown):
    """What the paste tells a reader to do: {file name: the block to save as it} and the command."""
    line = next(l for l in markdown.splitlines() if "**To run it:**" in l)
    saves = re.findall(r"save the (script|revert) below as `([^`]+)`", line)
    command = re.findall(r"run `([^`]+)`", line)[0]
    blocks = {"script": code_after(markdown, "<details><summary>%s" % saves[0][1])}
    if len(saves) > 1:
        blocks["revert"] = code_after(markdown, "<details><summary>%s" % saves[1][1])
    return {name: blocks[what] for what, name in saves}, command


def code_after(markdown, summary):
    return re.search(re.escape(summary) + r".*?```python\n(.*?)```", markdown, re.S).group(1)


def test_the_script_saved_from_the_paste_gives_the_runs_verdict(paste, tmp_path):
    """In an empty folder, with nothing of the bundle: the files the paste shows, saved under the
    names it gives, and the command it gives, run by bash (the reverted paste: the revert loaded as
    it says)."""
    kind, rc, _, markdown = paste
    files, command = instructions(markdown)
    assert files[render.SCRIPT_NAME] == open(SCRIPT).read()
    assert (command.startswith("PYTHONPATH=") and "%s/sitecustomize.py" % render.REVERT_FOLDER in files) == (
        kind == "reverted"), (command, list(files))
    for name, code in files.items():
        os.makedirs(os.path.dirname(tmp_path / name), exist_ok=True)
        (tmp_path / name).write_text(code)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "PYTHON"))}
    clean["PATH"] = os.path.dirname(sys.executable) + os.pathsep + clean["PATH"]
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=600)
    assert proc.returncode == rc, (command, proc.stdout, proc.stderr[-2000:])
    # the script's whole answer, as the release tier's test_standalone checks it run alone from the bundle
    line = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch({0: r"f_compiled under SAC: ran compiled code \(pytorch/pytorch#161889 does not reproduce; "
                            r"torch [^;]*, git [0-9a-f]{8}\)",
                         1: r"f_compiled under SAC: ran eagerly: aten::mul, aten::add, then raised \(pytorch/pytorch"
                            r"#161889 reproduces; torch [^;]*, git [0-9a-f]{8}; the 2\.10 fix reverted in-process\); "
                            r"Dynamo skipped f: non-infra torch dispatch mode present, this is not supported today in "
                            r"torch\.compile"}[rc], line), line


@pytest.mark.unit
def test_with_the_bundles_address_the_paste_links_its_files(monkeypatch):
    """SAC_REPRO_URL: the paste links what it cites of the bundle there; without it, it names none."""
    import copy
    from conftest import data, recorded
    from sac_repro.judge import verdict
    report = verdict.report_from_child(copy.deepcopy(recorded(data("cpu-torch2.13", "child_fixed.json"))),
                                       "regression", False)
    monkeypatch.delenv(render.URL_VARIABLE, raising=False)
    bare = render.render_markdown(report, "python3 x", SCRIPT, None)
    assert "](" not in bare and "docs/policy.md" not in bare
    monkeypatch.setenv(render.URL_VARIABLE, "https://example.org/sac-repro/")
    linked = render.render_markdown(report, "python3 x", SCRIPT, None)
    for path in ("README.md", "docs/policy.md#named-regions-upstreams-mechanism", "docs/output.md",
                 "sac_repro/upstream/test_sac_compile_upstream.py"):
        assert "](https://example.org/sac-repro/%s)" % path in linked, path
    assert not re.search(r"\]\((?!https://example\.org/sac-repro/)", linked)
    text = " ".join(first_screen(linked))
    assert len(text.split()) <= 250
