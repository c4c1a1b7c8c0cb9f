"""bench/reference_classes.py compares like with like: every case's dnnbind op and torch op compute the
same result from the same arrays, forward and backward, so a ratio in its table is a speed ratio."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from bench import reference_classes  # noqa: E402

CASES = reference_classes.cases(F)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_case_computes_what_torch_computes(case):
    _, ours_op, theirs_op, shapes = case
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    y, pullback = ours_op(*arrays)
    tensors = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    yt = theirs_op(*tensors)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    dy = rng.standard_normal(np.shape(y), dtype=np.float32)
    ours = pullback(dy)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = torch.autograd.grad(yt, tensors, torch.from_numpy(dy))
    assert len([g for g in ours if g is not None]) == len(theirs)
    for mine, reference in zip(ours, theirs):
        scale = float(np.abs(reference.numpy()).max()) or 1.0
        np.testing.assert_allclose(mine, reference.numpy(), rtol=1e-3, atol=1e-4 * scale)

