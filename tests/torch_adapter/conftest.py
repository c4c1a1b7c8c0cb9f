"""Fixtures for the PyTorch adapter tests (CPU tensors; the cpu backend)."""
from __future__ import annotations

from typing import Callable, Iterator

import pytest
import torch


@pytest.fixture
def randn() -> Callable[..., torch.Tensor]:
    """randn(*shape, dtype=torch.float64, grad=True): seeded standard-normal tensors."""
    generator = torch.Generator().manual_seed(1234)

    def make(*shape: int, dtype: torch.dtype = torch.float64, grad: bool = True) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_(grad)
    return make


@pytest.fixture(autouse=True, scope="module")
def fresh_compiler_caches() -> Iterator[None]:
    """Each test module starts with Dynamo's caches empty: its limit of 8 recompiles per code object (a
    Sequential's forward compiled for many models) counts across the whole process otherwise, so one module's
    compilations could make a later module's fullgraph compile fail."""
    torch._dynamo.reset()
    yield
