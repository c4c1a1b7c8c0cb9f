"""The convolutions are composed once above the backends (dnnbind.highlevel.conv_composed): every backend
implements the convolution's primitives only, and none carries code for the transposed convolution."""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import numpy as np
import pytest

from dnnbind.highlevel.conv_composed import COMPOSED
from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.dispatch import BACKENDS

SRC = Path(__file__).resolve().parents[2] / "src" / "dnnbind" / "highlevel"
BACKEND_DIRS = ("cpu", "reference", "cudnn", "miopen")


def test_the_specs_name_both_convolutions_as_composed():
    assert COMPOSED == ("conv", "conv_transpose")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_backend_runs_the_composed_convolutions(backend):
    module = importlib.import_module(BACKENDS[backend])
    for op in COMPOSED:
        for part in ("forward", "backward", "residuals"):
            assert inspect.unwrap(getattr(module, f"{op}_{part}")).__module__ == "dnnbind.highlevel.conv_composed"


@pytest.mark.parametrize("backend", BACKEND_DIRS)
def test_no_backend_defines_a_transposed_convolution(backend):
    """Its data gradient is the transposed convolution: no backend module defines a function or class for it."""
    found = []
    for path in sorted((SRC / backend).rglob("*.py")):
        if "graph" in path.relative_to(SRC / backend).parts:     # cuDNN's graph API, owned elsewhere
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and "transpose" in node.name and "conv" in node.name:
                found.append(f"{path.name}:{node.lineno} {node.name}")
    assert not found


def test_a_composed_convolution_refuses_an_option_its_backend_lacks():
    import dnnbind.highlevel.cpu as cpu
    import dnnbind.highlevel.reference as reference
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    dims = ConvDims(x.shape, w.shape, dtype=x.dtype)
    with pytest.raises(TypeError, match="conv_forward\\(\\) got an unexpected keyword argument 'layout'"):
        cpu.conv_forward(x, w, None, dims, layout="NHWC")
    with pytest.raises(TypeError, match="unexpected keyword argument 'threaded'"):
        reference.conv_forward(x, w, None, dims, threaded=False)
    y, _ = cpu.conv_forward(x, w, None, dims, threaded=False)           # the cpu's own option
    np.testing.assert_allclose(y, reference.conv_forward(x, w, None, dims)[0], rtol=1e-6)
    assert inspect.signature(cpu.conv_transpose_forward).parameters["threaded"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("needs", [(True, True, True), (True, False, False), (False, True, False), (False, False, True)])
def test_the_transposed_backward_runs_only_what_needs_asks_for(needs):
    """The cpu's fused sweep (dx and dw of a transposed convolution in one pass over the columns) and the
    separate primitives agree with the reference, gradient by gradient."""
    import dnnbind.highlevel.cpu as cpu
    import dnnbind.highlevel.reference as reference
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 4, 5, 5)), rng.standard_normal((4, 3, 4, 4))
    dims = ConvDims.transposed(x.shape, w.shape, stride=2, padding=1, output_padding=1, dtype=x.dtype)
    dy = rng.standard_normal(dims.x_shape)
    _, saved = cpu.conv_transpose_forward(x, w, None, dims)
    _, ref_saved = reference.conv_transpose_forward(x, w, None, dims)
    got = cpu.conv_transpose_backward(saved, (dy,), dims, needs=needs)
    want = reference.conv_transpose_backward(ref_saved, (dy,), dims)
    for need, g, r in zip(needs, got, want):
        if need:
            np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
        else:
            assert g is None
