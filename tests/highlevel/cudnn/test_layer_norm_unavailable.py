"""cuDNN's layer norm with the graph path off (the default): not available (its legacy API has none), every
entry point saying why, and the support matrix showing it missing with the reason. With the graph path on,
see graph/test_wired_ops.py."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from dnnbind.highlevel import support

cudnn_layer_norm = importlib.import_module("dnnbind.highlevel.cudnn.layer_norm")

CUDNN_MESSAGE = ("layer_norm is not available on the cuDNN backend: the graph API path is off "
                 "($DNNBIND_CUDNN_GRAPH is not 1) and cuDNN's legacy API has no layer normalization")
X = np.ones((2, 3))
CALLS = {"layer_norm_forward": (X, None, None, 1, 1e-5), "layer_norm_backward": ((X,), (X,), 1, 1e-5),
         "layer_norm_residuals": (X, None, None, 1, 1e-5), "layer_norm": (X, None, None, 1, 1e-5)}


@pytest.mark.parametrize("name", list(CALLS))
def test_cudnn_has_no_layer_norm_without_the_graph_path(name, monkeypatch):
    monkeypatch.delenv("DNNBIND_CUDNN_GRAPH", raising=False)
    with pytest.raises(NotImplementedError) as info:
        getattr(cudnn_layer_norm, name, None) and getattr(cudnn_layer_norm, name)(*CALLS[name])
        getattr(importlib.import_module("dnnbind.highlevel.cudnn"), name)(*CALLS[name])
    assert str(info.value) == CUDNN_MESSAGE
    assert cudnn_layer_norm.supports(np.dtype("float32"), (2, 3), 1) == CUDNN_MESSAGE


def test_the_matrix_shows_it_missing_with_the_reason():
    assert support.matrix()["layer_norm"]["cudnn"].unavailable == cudnn_layer_norm.WHY
    text = support.render()
    row = next(line for line in text.splitlines() if line.startswith("layer_norm "))
    assert row.split()[1:] == ["all", "dtypes", "all", "dtypes", "-", "all", "dtypes"]
    assert "layer_norm on cudnn: not available: cuDNN's legacy API has no layer normalization; its graph API" \
           " runs it when DNNBIND_CUDNN_GRAPH=1" in " ".join(text.split())
