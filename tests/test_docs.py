"""The docs site's API reference: an anchor for every function of both generated modules, and a build that
fails on a name the code does not have.

`make docs` (in CI) itself fails when its HTML lacks an anchor for a function of a generated module
(docs/_ext/dnnbind_rawref.py checks the pages it wrote). The slow test here builds the two reference pages
to HTML under the real docs/conf.py (about 20 s) and checks every anchor against a count taken from the
modules themselves; the default run checks what an entry says and the nitpicky build on a small page.
"""
from __future__ import annotations

import inspect
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from sphinx.application import Sphinx
from sphinx.util.console import nocolor

import dnnbind.gen.cudnn
import dnnbind.gen.miopen

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MODULES = {"cudnn": dnnbind.gen.cudnn, "miopen": dnnbind.gen.miopen}
sys.path.insert(0, str(DOCS / "_ext"))           # the docs' Sphinx extensions, as docs/conf.py adds them


def _c_functions(module: ModuleType, prefix: str) -> list[str]:
    """The module's bound C functions, counted from the module: its own functions named like the library's."""
    return [name for name, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module.__name__ and name.startswith(prefix)]


def _build(srcdir: Path, pages: dict[str, str], tmp: Path, builder: str = "dummy") -> tuple[Sphinx, str]:
    """Build ``pages`` (name -> Markdown) with docs/conf.py; (app, its warnings)."""
    for name, text in pages.items():
        (srcdir / name).parent.mkdir(parents=True, exist_ok=True)
        (srcdir / name).write_text(text)
    nocolor()
    warnings = io.StringIO()
    app = Sphinx(str(srcdir), str(DOCS), str(tmp / "out"), str(tmp / "doctrees"), builder, status=None,
                 warning=warnings, freshenv=True, confoverrides={"nitpicky": True})
    app.build()
    # a second app in one process re-registers Sphinx's node classes and says so: not about the pages
    return app, "".join(line for line in warnings.getvalue().splitlines(keepends=True)
                        if "is already registered" not in line)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Sphinx, str]:
    """The two raw reference pages, built as `make docs` builds them."""
    tmp = tmp_path_factory.mktemp("docs")
    srcdir = tmp / "src"
    (srcdir / "reference").mkdir(parents=True)
    pages = {"index.md": "# index\n\n```{toctree}\nreference/cudnn\nreference/miopen\n```\n"}
    for lib in MODULES:
        pages[f"reference/{lib}.md"] = text = (DOCS / "reference" / f"{lib}.md").read_text()
        for linked in re.findall(r"\]\(\.\./([\w-]+)\.md\)", text):     # the guide pages it links to
            pages[f"{linked}.md"] = f"# {linked}\n"
            pages["index.md"] += f"\n```{{toctree}}\n{linked}\n```\n"
    return _build(srcdir, pages, tmp, "html")


@pytest.mark.slow
@pytest.mark.parametrize("lib", MODULES)
def test_reference_has_an_anchor_for_every_function_of_the_generated_module(lib, reference):
    app, warnings = reference
    assert warnings == ""
    module = MODULES[lib]
    functions = _c_functions(module, lib)
    assert len(functions) == len(module._lib.function_names) > 200
    objects = app.env.domains["py"].objects
    html = (Path(app.outdir) / "reference" / f"{lib}.html").read_text()
    for name in functions:
        entry = objects.get(f"{module.__name__}.{name}")
        assert entry is not None, name
        assert entry.docname == f"reference/{lib}" and entry.objtype == "function", entry
        assert f'id="{module.__name__}.{name}"' in html, name


def test_make_docs_fails_when_its_html_lacks_a_function(tmp_path):
    """The check `make docs` runs on what it wrote: a reference page without the functions is refused."""
    from dnnbind_rawref import missing_anchors
    (tmp_path / "reference").mkdir()
    cudnn = dnnbind.gen.cudnn
    kept = cudnn._lib.function_names[1:]
    (tmp_path / "reference" / "cudnn.html").write_text("".join(f'<dt id="dnnbind.gen.cudnn.{n}">' for n in kept))
    missing = missing_anchors(str(tmp_path))
    assert f"dnnbind.gen.cudnn.{cudnn._lib.function_names[0]}" in missing
    assert len(missing) == 1 + len(_c_functions(dnnbind.gen.miopen, "miopen"))     # no miopen page at all


def _fresh(code: str) -> str:
    """stdout of ``code`` run by a fresh interpreter with the docs' extensions importable, as `make docs` runs
    them: in a process where nothing has loaded or bound a vendor library yet."""
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n" + code,
                          str(DOCS / "_ext")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_reference_entry_carries_the_prototype_and_each_parameter_facts():
    """What a function's entry says comes from its docstring: prototype, kind, length, None, range, deprecation,
    the vendor's reference."""
    entries = json.loads(_fresh(
        "import json, dnnbind_rawref as r, dnnbind.gen.cudnn as c, dnnbind.gen.miopen as m\n"
        "print(json.dumps({f: '\\n'.join(r.function_rst(mod, f)) for mod, f in ((c, 'cudnnConvolutionForward'),"
        " (c, 'cudnnGetConvolutionNdForwardOutputDim'), (m, 'miopenGetVersion'))}))\n"))
    rst = entries["cudnnGetConvolutionNdForwardOutputDim"]
    assert "cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc" in rst
    assert "host output, count nbDims" in rst                                   # kind and length source
    assert "integer (int): -2147483648 to 2147483647" in rst                     # nbDims' range
    assert "**Deprecated** by the vendor. Deprecated since: cuDNN 9.0.0." in rst
    assert "`cudnnGetConvolutionNdForwardOutputDim <https://docs.nvidia.com/" in rst   # the vendor's reference
    version = entries["miopenGetVersion"]
    assert version.count("may be None") == 3 and "Deprecated" not in version
    forward = entries["cudnnConvolutionForward"]
    assert "``x``\n        - ``const void *``\n        - device memory" in forward
    assert "enum :class:`cudnnConvolutionFwdAlgo_t`: a member" in forward
    assert "handle cudnnTensorDescriptor\\_t, refused when None" in forward


def test_a_name_the_code_does_not_have_fails_the_build_one_it_has_does_not(tmp_path):
    page = ("# page\n\n{func}`dnnbind.conv` {data}`dnnbind.highlevel.ops.ACTIVATION_DEFAULTS` "
            "{func}`dnnbind.conv_3000` {class}`dnnbind.gen.cudnn.cudnnNoSuchThing_t`\n")
    _, warnings = _build(tmp_path / "src", {"index.md": page}, tmp_path)
    assert "dnnbind.conv_3000" in warnings and "cudnnNoSuchThing_t" in warnings
    assert "ACTIVATION_DEFAULTS" not in warnings and "dnnbind.conv " not in warnings
    assert warnings.count("WARNING") == 2


def test_building_the_reference_loads_no_vendor_library():
    """The reference reads the generated modules, which bind lazily: no libcudnn or libMIOpen is loaded."""
    out = _fresh("import dnnbind_rawref as r, dnnbind.gen.cudnn as c, dnnbind.gen.miopen as m\n"
                 "n = sum(len(r.function_rst(mod, f)) for mod in (c, m) for f in r.function_names(mod))\n"
                 "n += sum(len(r.enum_rst(mod, e)) for mod in (c, m) for e in r.enum_names(mod))\n"
                 "print(n > 10000, c._lib.loaded, m._lib.loaded)\n")
    assert out.split() == ["True", "False", "False"]
