"""Checks the drop-in layer tests share: a dnnbind layer against torch.nn's layer built with the same
arguments (state_dict both ways, outputs, input and parameter gradients)."""
from __future__ import annotations

import torch
from torch import nn


def assert_same_grads(ours: nn.Module, theirs: nn.Module, tol: float) -> None:
    ours_params, theirs_params = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert list(ours_params) == list(theirs_params)
    for name, p in ours_params.items():
        torch.testing.assert_close(p.grad, theirs_params[name].grad, rtol=tol, atol=tol, msg=name)


def assert_layer_matches(ours: nn.Module, theirs: nn.Module, x: torch.Tensor, tol: float = 1e-9) -> None:
    """ours, loaded with theirs' state_dict, gives theirs' output and gradients on x (and the state_dict
    loads back into theirs)."""
    assert repr(ours) == repr(theirs)
    ours.load_state_dict(theirs.state_dict())
    x_ours = x.detach().clone().requires_grad_()
    x_theirs = x.detach().clone().requires_grad_()
    y, y_ref = ours(x_ours), theirs(x_theirs)
    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * weights).sum().backward()
    (y_ref * weights).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=tol, atol=tol)
    assert_same_grads(ours, theirs, tol)
    theirs.load_state_dict(ours.state_dict())
