"""README.md and docs/ cannot rot: their Python examples run and print what they show; their reference
parts match the code.

Every ```python block of README.md and of every Markdown page under docs/ runs as a user runs it: saved
as a script and run by a fresh interpreter with Python's default warning filters, outside the
repository. What it prints on stdout and stderr together is exactly the ```text block that follows it
(nothing at all when none follows). The README stays a short front page whose commands are real
Makefile targets; the op signatures (docs/ops.md) and the `python -m dnnbind info` sample
(docs/getting-started.md) are checked against the code.
"""
from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dnnbind
import dnnbind.highlevel

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOC_PAGES = sorted(DOCS.rglob("*.md"))
# README, every page of the docs site, and the files its pages include (```{include} ../generator/README.md)
PAGES = [README, *DOC_PAGES, *sorted({(page.parent / included).resolve() for page in DOC_PAGES for included in
                                      re.findall(r"^```\{include\} (\S+)$", page.read_text(), re.MULTILINE)})]
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def _blocks(page: Path = README) -> list[tuple[str, str, int]]:
    """(language, code, line number) of every fenced block of a page, in order."""
    text = page.read_text()
    return [(m[1].strip(), m[2], text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def _examples(page: Path) -> list[tuple[str, str | None, int]]:
    """(python code, the text block right after it or None, line number)."""
    blocks = _blocks(page)
    out = []
    for i, (lang, code, line) in enumerate(blocks):
        if lang == "python":
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            expected = following[1] if following and following[0] == "text" and \
                _only_blank_between(page, line, following[2]) else None
            out.append((code, expected, line))
    return out


def _only_blank_between(page: Path, python_line: int, text_line: int) -> bool:
    lines = page.read_text().splitlines()
    closing = next(i for i in range(python_line, len(lines)) if lines[i] == "```")
    return all(not lines[i].strip() for i in range(closing + 1, text_line - 1))


EXAMPLES = [(page, code, expected, line) for page in PAGES for code, expected, line in _examples(page)]
README_EXAMPLES = [(code, expected) for page, code, expected, _ in EXAMPLES if page == README]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_readme_and_docs_have_examples_with_outputs():
    assert len(EXAMPLES) >= 5
    assert sum(expected is not None for _, _, expected, _ in EXAMPLES) >= 5
    assert {_name(page) for page, *_ in EXAMPLES} >= {"README.md", "docs/raw-api.md", "docs/ops.md",
                                                       "docs/pytorch.md", "docs/backends.md"}


def test_readme_is_a_short_front_page():
    """At most 10 KB, like the READMEs of the projects our users know; the rest lives in docs/."""
    assert len(README.read_bytes()) <= 10_240


def test_readme_shows_the_three_examples_with_their_output():
    """A raw cuDNN call, a high-level op with its pullback, a PyTorch model on dnnbind.torch.nn."""
    assert len(README_EXAMPLES) == 3 and all(expected for _, expected in README_EXAMPLES)
    raw, op, model = (code for code, _ in README_EXAMPLES)
    assert "from dnnbind.gen import cudnn" in raw
    assert re.search(r"_back\(", op) and "dnnbind.conv(" in op
    assert "from dnnbind.torch import nn" in model and ".backward()" in model


def run_as_a_script(code: str, directory: Path) -> subprocess.CompletedProcess:
    """``python example.py`` in ``directory``: default warning filters, stderr interleaved with stdout
    as a terminal shows them."""
    script = directory / "example.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE")}
    env.update(PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(script)], cwd=directory, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, env=env)


@pytest.mark.parametrize("page, code, expected, line", EXAMPLES,
                         ids=[f"{_name(page)}:{line}" for page, _, _, line in EXAMPLES])
def test_python_example_run_as_a_script_prints_what_the_page_shows(page, code, expected, line, tmp_path):
    result = run_as_a_script(code, tmp_path)
    assert result.returncode == 0, result.stdout
    assert result.stdout.rstrip() == (expected or "").rstrip(), f"{_name(page)} line {line}"


def test_a_warning_would_show_in_the_output(tmp_path):
    """The comparison above sees warnings: the raw example without its filter prints cuDNN's deprecations."""
    raw = next(code for _, code, _, _ in EXAMPLES if "cudnnSetConvolutionNdDescriptor" in code)
    unfiltered = "\n".join(line for line in raw.splitlines() if "filterwarnings" not in line)
    assert unfiltered != raw
    out = run_as_a_script(unfiltered, tmp_path).stdout
    assert "DeprecationWarning: cudnnCreateFilterDescriptor is deprecated in cuDNN: since cuDNN 9.0.0" in out


def test_readme_keeps_the_two_commands():
    shell = "".join(code for lang, code, _ in _blocks() if lang == "sh")
    assert "make setup && make generate" in shell
    assert re.search(r"^make test\b", shell, re.MULTILINE)


@pytest.mark.parametrize("page", [README, DOCS / "getting-started.md", DOCS / "maintainers.md"], ids=_name)
def test_every_make_command_a_page_names_is_a_makefile_target(page):
    phony = re.search(r"^\.PHONY: (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    targets = set(phony[1].split())
    named = set(re.findall(r"(?<![\w/-])make ((?:[a-z][\w-]*)(?: [a-z][\w-]*)*)", page.read_text()))
    words = {w for group in named for w in group.split() if w not in ("alone", "to", "and", "or")}
    assert {"setup", "generate", "test"} <= words if page == README else words
    assert words <= targets, words - targets


OPS_PAGE = DOCS / "ops.md"


def _documented_signatures() -> dict[str, inspect.Signature]:
    """The op signatures in docs/ops.md's ```text list, parsed as Python."""
    names = list(dnnbind.highlevel.OP_NAMES)
    text = "".join(code for lang, code, _ in _blocks(OPS_PAGE) if lang == "text")
    found = dict(re.findall(rf"(?<![\w.])({'|'.join(names)})\(([^()]*)\)", text))
    sigs = {}
    for name, params in found.items():
        fn = ast.parse(f"def {name}({params}): pass").body[0]
        sigs[name] = fn.args
    return sigs


def test_ops_page_has_a_section_documenting_each_op_from_its_docstring():
    text = OPS_PAGE.read_text()
    for name in dnnbind.highlevel.OP_NAMES:
        assert re.search(rf"^## {name}\n\n```{{eval-rst}}\n\.\. autofunction:: dnnbind\.{name}\n", text, re.MULTILINE), name


def test_ops_page_op_signatures_match_the_code():
    documented = _documented_signatures()
    assert set(documented) == set(dnnbind.highlevel.OP_NAMES)
    for name, args in documented.items():
        actual = inspect.signature(getattr(dnnbind, name)).parameters.values()
        positional = [p for p in actual if p.kind is p.POSITIONAL_OR_KEYWORD]
        keyword = [p for p in actual if p.kind is p.KEYWORD_ONLY]
        assert [a.arg for a in args.args] == [p.name for p in positional], name
        assert [a.arg for a in args.kwonlyargs] == [p.name for p in keyword], name
        defaults = [ast.literal_eval(d) for d in args.defaults]
        assert defaults == [p.default for p in positional[len(positional) - len(defaults):]], name
        for a, d, p in zip(args.kwonlyargs, args.kw_defaults, keyword):
            assert (d is None and p.default is p.empty) or ast.literal_eval(d) == p.default, (name, a.arg)


def test_getting_started_info_sample_has_the_sections_info_prints():
    from dnnbind.info import report
    sample = next(code for lang, code, _ in _blocks(DOCS / "getting-started.md")
                  if lang == "console" and "python -m dnnbind info" in code)

    def labels(text: str) -> list[str]:
        return [line.split()[0] for line in text.splitlines() if line and not line[0].isspace() and line[0] != "$"]
    assert labels(sample) == labels(report())


def test_ops_page_support_matrix_is_what_python_m_dnnbind_ops_prints():
    """The sample in docs/ops.md is the command's real output (lines compared without trailing blanks)."""
    sample = next(code for lang, code, _ in _blocks(OPS_PAGE) if lang == "console" and "python -m dnnbind ops" in code)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-m", "dnnbind", "ops"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.rstrip().splitlines()]
    assert lines(sample)[0] == "$ python -m dnnbind ops"
    assert lines(sample)[1:] == lines(result.stdout)


def test_readme_links_stay_inside_the_repository_and_exist():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert "docs/ARCHITECTURE.md" in local and "LICENSE" in local
    for link in local:
        target = (ROOT / link).resolve()
        assert target.is_relative_to(ROOT) and target.exists(), link
