"""The chunk plan both GPU backends run activation and dropout over (arrays of 2**31 elements or more),
checked on the host, with the real cuDNN library describing each chunk."""
from __future__ import annotations

import importlib

import pytest

from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor
from dnnbind.highlevel.gpu.chunks import CHUNK_ELEMENTS, Chunk, chunk_plan


@pytest.mark.parametrize("size, limit", [(0, 256), (1, 256), (256, 256), (257, 256), (1000, 256),
                                          (2**31 + 5, CHUNK_ELEMENTS), (3 * 2**31, CHUNK_ELEMENTS),
                                          (2**30, CHUNK_ELEMENTS)])
def test_chunks_cover_every_element_once_within_the_limit(size, limit):
    chunks = chunk_plan(size, limit)
    assert chunks[0].start == 0 and chunks[-1].stop == size
    assert all(a.stop == b.start for a, b in zip(chunks, chunks[1:]))
    assert all(0 < c.size <= limit for c in chunks) or size == 0
    assert all(c.start % 256 == 0 for c in chunks)                 # aligned for every dtype
    assert len(chunks) == max(1, -(-size // limit))


def test_an_array_over_2_31_elements_is_cut_where_a_flat_descriptor_would_wrap():
    size = 2**31 + 7
    chunks = chunk_plan(size)
    assert [c.size for c in chunks] == [2**30, 2**30, 7]
    assert chunks[1].offset(2) == 2**31 and chunks[2].offset(4) == 2**33
    for chunk in chunks:          # cuDNN accepts the flat descriptor of every chunk, and sees its full size
        _, dims, _ = TensorDescriptor((1, 1, 1, chunk.size), "float16").read()
        assert dims == (1, 1, 1, chunk.size)
    with pytest.raises(Exception):      # the whole array cannot be one descriptor: n is a C int
        TensorDescriptor((1, 1, 1, size), "float16")


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match="size=-1"):
        chunk_plan(-1)
    with pytest.raises(ValueError, match="limit=100"):
        chunk_plan(10, 100)
    assert chunk_plan(5) == [Chunk(0, 5)]


def test_miopen_chunks_draw_distinct_seeds():
    """MIOpen's states never advance, so each chunk of a dropout call gets its own seed (chunk 0: the seed)."""
    dropout = importlib.import_module("dnnbind.highlevel.miopen.dropout")
    seeds = [dropout.chunk_seed(12345, i) for i in range(4)]
    assert seeds[0] == 12345 and len(set(seeds)) == 4 and all(0 <= s < 2**64 for s in seeds)
    assert dropout.chunk_seed(2**64 - 1, 1) == (2**64 - 1 + dropout.CHUNK_SEED_STEP) % 2**64
