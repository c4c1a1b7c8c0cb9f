"""The MIOpen backend's RNN weight mapping, in this process: PyTorch's gate order onto MIOpen's as miopen.h
documents it, and the packing of PyTorch-layout weights into a weight space and back."""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel.miopen import rnn_layout

from .rnn_helpers import labelled_weights, packed_layout, rnn_dims

# --------------------------------------------------------------------------------------- gate order

#: the gate each MIOpen paramID / biasID holds, as miopen.h documents it (IDs 0..G-1, input GEMM)
HEADER_GATES = {"lstm": ("input", "forget", "output", "new memory"), "gru": ("update", "reset", "new memory")}
#: PyTorch's gate names in its order (torch.nn.LSTM / GRU documentation)
TORCH_GATE_NAMES = {"lstm": ("input", "forget", "new memory", "output"), "gru": ("reset", "update", "new memory")}


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_gate_mapping_follows_the_header(mode):
    for miopen_id, name in enumerate(HEADER_GATES[mode]):
        assert TORCH_GATE_NAMES[mode][rnn_layout.torch_gate(mode, miopen_id)] == name


def test_gate_permutations():
    assert [rnn_layout.torch_gate("lstm", k) for k in range(4)] == [0, 1, 3, 2]
    assert [rnn_layout.torch_gate("gru", k) for k in range(3)] == [1, 0, 2]
    assert rnn_layout.torch_gate("rnn_tanh", 0) == 0


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_packing_puts_each_torch_gate_where_miopen_reads_it(rng, mode, bias):
    dims = rnn_dims(mode, bias=bias)
    ids = rnn_layout.slot_ids(dims)
    order = [ids[i] for i in rng.permutation(len(ids))]
    slots = packed_layout(dims, order)
    gather = rnn_layout.gather_index(dims, slots)
    weights = labelled_weights(dims)
    space = rnn_layout.concat(np, weights)[gather]
    h = dims.hidden_size
    for slot in slots:
        block = space[slot.offset:slot.offset + slot.size].reshape(slot.shape)
        j = (0 if slot.param < dims.gates else 1) + (2 if slot.bias else 0)
        gate = rnn_layout.torch_gate(mode, slot.param % dims.gates)
        np.testing.assert_array_equal(block, weights[slot.layer][j][gate * h:(gate + 1) * h])
    # and back: the weight gradient in MIOpen's layout becomes PyTorch's
    back = rnn_layout.split(space[rnn_layout.scatter_index(gather)], dims)
    for ours, theirs in zip(back, weights):
        for a, b in zip(ours, theirs):
            assert (a is None and b is None) or np.array_equal(a, b)


def test_slot_ids_cover_every_matrix_and_bias():
    dims = rnn_dims("gru", layers=3, bidirectional=True)
    ids = rnn_layout.slot_ids(dims)
    assert len(ids) == 3 * 2 * 2 * 3 * 2 and len(set(ids)) == len(ids)
    assert len(rnn_layout.slot_ids(rnn_dims("gru", bias=False))) == 2 * 2 * 2 * 3


def test_gather_index_refuses_layouts_it_does_not_know():
    dims = rnn_dims("lstm", layers=1, bidirectional=False)
    slots = packed_layout(dims, rnn_layout.slot_ids(dims))
    with pytest.raises(ValueError, match="do not tile"):
        rnn_layout.gather_index(dims, slots[:-1])                          # a gap
    overlapping = slots[:-1] + [rnn_layout.Slot(slots[-1].layer, slots[-1].param, True, 0, slots[-1].shape)]
    with pytest.raises(ValueError, match="do not tile"):
        rnn_layout.gather_index(dims, overlapping)
    wrong = [rnn_layout.Slot(0, 0, False, 0, (3, 2))] + slots[1:]
    with pytest.raises(ValueError, match=r"matrix 0 of layer 0 has shape \(3, 2\), expected \(2, 3\)"):
        rnn_layout.gather_index(dims, wrong)
