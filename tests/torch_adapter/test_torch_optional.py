"""PyTorch stays optional: dnnbind never imports it, and dnnbind.torch says what is missing."""
from __future__ import annotations

from childproc import run_python


def test_importing_dnnbind_does_not_import_torch():
    result = run_python("""
        import sys
        import dnnbind, dnnbind.highlevel, dnnbind.gen.cudnn, dnnbind.gen.miopen
        import numpy as np
        y, pullback = dnnbind.softmax(np.ones((2, 3)))
        pullback(y)
        dnnbind.trace
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_dnnbind_torch_without_torch_explains():
    result = run_python("""
        import sys
        sys.modules["torch"] = None        # as if PyTorch were not installed
        import dnnbind
        try:
            import dnnbind.torch
        except ImportError as exc:
            print(exc)
    """)
    assert result.returncode == 0, result.stderr
    assert "dnnbind.torch needs PyTorch (pip install torch)" in result.stdout


def test_highlevel_ops_point_torch_users_to_the_adapter():
    import numpy as np
    import pytest
    import torch

    import dnnbind
    with pytest.raises(TypeError, match="dnnbind.torch"):
        dnnbind.conv(torch.zeros(1, 1, 3, 3), np.zeros((1, 1, 2, 2)))


def test_torch_functions_take_the_highlevel_ops_arguments():
    import inspect

    import dnnbind
    import dnnbind.torch as dt
    from dnnbind.highlevel.specs import OP_NAMES
    for name in OP_NAMES:
        ours = inspect.signature(getattr(dt, name)).parameters
        theirs = inspect.signature(getattr(dnnbind, name)).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == \
               [(p.name, p.kind, p.default) for p in theirs.values()], name
