"""An op is declared once, in its spec: outside the specs and the backends, no source file branches on
an op's name (``op == "conv"``, ``op in ("conv", ...)``) or keeps a registry keyed or listed by op names
(``{"conv": ...}``, ``frozenset({"conv", "rnn"})``). Such facts belong in the op's spec. The functions and
layers on torch tensors, made from the specs or calling those functions, write no op name at all."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dnnbind.highlevel.specs import OP_NAMES

SRC = Path(__file__).resolve().parents[2] / "src" / "dnnbind"
#: where op names may be written: the specs, the backends' primitives, and the generated bindings
ALLOWED = ("gen", "highlevel/specs", "highlevel/reference", "highlevel/cpu", "highlevel/cudnn",
           "highlevel/miopen", "highlevel/gpu")
#: where no op name is written, not even as the op a call runs: dnnbind.torch's functions (made from the
#: specs) and its layers (which call those functions)
NO_OP_NAMES = ("torch/functional.py", "torch/spec_functions.py", "torch/convolution.py", "torch/pooling.py",
               "torch/normalization.py", "torch/pointwise.py", "torch/recurrent.py", "torch/layer_inputs.py")


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py")
                  if not any(p.relative_to(SRC).as_posix().startswith(a + "/") for a in ALLOWED))


def _names(node: ast.AST) -> list[str]:
    """The op names a node writes as string constants (itself, or the items of a tuple, list or set)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in OP_NAMES]


def op_name_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every comparison with an op name, and every dict, set, tuple or list that keys or
    lists op names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [(node.lineno, f"compares with {n!r}") for n in _names(side)]
        elif isinstance(node, ast.Dict):
            found += [(node.lineno, f"keys a dict by {n!r}") for k in node.keys if k is not None for n in _names(k)]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            found += [(node.lineno, f"lists {n!r}") for n in _names(node)]
    return sorted(set(found))


def test_the_scan_finds_what_it_is_for():
    assert op_name_uses('if op == "conv": pass') == [(1, "compares with 'conv'")]
    assert {w for _, w in op_name_uses('x = op in ("rnn", "dropout")')} == {
        "compares with 'rnn'", "compares with 'dropout'", "lists 'rnn'", "lists 'dropout'"}
    assert {w for _, w in op_name_uses('R = {"maxpool": 1}; S = frozenset({"rnn"})')} == {
        "keys a dict by 'maxpool'", "lists 'rnn'"}
    assert op_name_uses('call("conv", x)') == []                 # naming the op one calls is no branch


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_no_source_outside_the_specs_and_backends_branches_on_an_op_name(path):
    uses = op_name_uses(path.read_text())
    assert not uses, f"{path.relative_to(SRC)}: " + "; ".join(f"line {line} {what}" for line, what in uses) + \
        " (put the fact in the op's spec, dnnbind/highlevel/specs)"


def op_name_strings(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant that is an op's name (prose, such as a docstring, never is)."""
    return sorted({(node.lineno, node.value) for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Constant) and node.value in OP_NAMES})


def test_the_string_scan_finds_what_it_is_for():
    assert op_name_strings('call("conv", x)\nF = {1: "rnn"}') == [(1, "conv"), (2, "rnn")]
    assert op_name_strings('"""Runs conv, then rnn."""\nmode = "relu"\nf(conv, "lstm")') == []


@pytest.mark.parametrize("name", NO_OP_NAMES)
def test_the_torch_functions_and_layers_write_no_op_name(name):
    path = SRC / name
    found = op_name_strings(path.read_text())
    assert not found, f"{name}: " + "; ".join(f"line {line} writes {op!r}" for line, op in found) + \
        " (read it from the op's spec, or from the dnnbind.torch.functional function the code calls)"
