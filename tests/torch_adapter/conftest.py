"""Fixtures for the PyTorch adapter tests (CPU tensors; the reference backend)."""
from __future__ import annotations

from typing import Callable

import pytest
import torch


@pytest.fixture
def randn() -> Callable[..., torch.Tensor]:
    """randn(*shape, dtype=torch.float64, grad=True): seeded standard-normal tensors."""
    generator = torch.Generator().manual_seed(1234)

    def make(*shape: int, dtype: torch.dtype = torch.float64, grad: bool = True) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_(grad)
    return make
