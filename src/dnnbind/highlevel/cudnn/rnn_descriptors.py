"""cuDNN's RNN descriptors (the v8 API that cuDNN 9 keeps) as Python objects that own them.

:class:`RNNDescriptor` describes the network (cudnnSetRNNDescriptor_v8) and :class:`RNNDataDescriptor`
one padded batch of sequences (cudnnSetRNNDataDescriptor, layout CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED:
an array (seq, batch, vector) in C order, with one length per sequence). Both build on the host from
plain values (no handle, no GPU) and read back what cuDNN holds, so they are checked on any machine.
"""
from __future__ import annotations

from ctypes import byref, c_int, c_int32, c_uint32
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.cudnn._lib import DTYPES, lib
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.descriptors import OwnedDescriptor

#: public mode -> cudnnRNNMode_t name
CELL_MODES = {"rnn_relu": "CUDNN_RNN_RELU", "rnn_tanh": "CUDNN_RNN_TANH", "lstm": "CUDNN_LSTM", "gru": "CUDNN_GRU"}


def rnn_math_type(dtype: str, allow_tf32: bool) -> int:
    """The cudnnMathType_t an RNN on ``dtype`` data runs with: tensor cores (float32 accumulation) for
    float16 and bfloat16; float32 in full precision (CUDNN_FMA_MATH) unless TF32 is allowed, then CUDNN_DEFAULT_MATH,
    which permits TF32 (PyTorch's choices for its cuDNN RNNs); float64 has no tensor-core math."""
    c = lib()
    if dtype in ("float16", "bfloat16"):
        return int(c.CUDNN_TENSOR_OP_MATH)
    if dtype == "float32" and not allow_tf32:
        return int(c.CUDNN_FMA_MATH)
    return int(c.CUDNN_DEFAULT_MATH)


@dataclass(frozen=True)
class RNNSettings:
    """Every value cudnnSetRNNDescriptor_v8 takes, as cuDNN's enum values (see :meth:`of`)."""

    algo: int
    cell_mode: int
    bias_mode: int
    dir_mode: int
    input_mode: int
    data_type: int
    math_prec: int
    math_type: int
    input_size: int
    hidden_size: int
    proj_size: int
    num_layers: int
    aux_flags: int

    @classmethod
    def of(cls, dims: RNNDims, math_type: int) -> "RNNSettings":
        """The settings for ``dims``: standard algorithm, PyTorch's two biases (or none), linear input, the
        LSTM's recurrent projection when dims.proj_size is set (projSize; else projSize = hiddenSize, which
        cuDNN takes as no projection), padded I/O (variable lengths in the unpacked layout), data in
        dims.dtype computed in its compute type (float32 for float16), math type ``math_type``."""
        c = lib()
        dtype = DTYPES[dims.dtype]
        return cls(
            algo=int(c.CUDNN_RNN_ALGO_STANDARD),
            cell_mode=int(getattr(c, CELL_MODES[dims.mode])),
            bias_mode=int(c.CUDNN_RNN_DOUBLE_BIAS if dims.has_bias else c.CUDNN_RNN_NO_BIAS),
            dir_mode=int(c.CUDNN_BIDIRECTIONAL if dims.num_directions == 2 else c.CUDNN_UNIDIRECTIONAL),
            input_mode=int(c.CUDNN_LINEAR_INPUT),
            data_type=int(dtype.library),
            math_prec=int(dtype.compute),
            math_type=int(math_type),
            input_size=dims.input_size,
            hidden_size=dims.hidden_size,
            proj_size=dims.proj_size or dims.hidden_size,
            num_layers=dims.num_layers,
            aux_flags=int(c.CUDNN_RNN_PADDED_IO_ENABLED),
        )


class RNNDescriptor(OwnedDescriptor):
    """The network: cell, biases, directions, sizes, data and math types; no inter-layer dropout."""

    def __init__(self, settings: RNNSettings) -> None:
        c = lib()
        super().__init__(c.cudnnRNNDescriptor_t, c.cudnnCreateRNNDescriptor, c.cudnnDestroyRNNDescriptor)
        self.settings = s = settings
        c.cudnnSetRNNDescriptor_v8(self.handle, s.algo, s.cell_mode, s.bias_mode, s.dir_mode, s.input_mode,
                                   s.data_type, s.math_prec, s.math_type, s.input_size, s.hidden_size,
                                   s.proj_size, s.num_layers, None, s.aux_flags)

    def read(self) -> tuple[RNNSettings, bool]:
        """(the settings cuDNN holds, whether it holds a dropout descriptor), by cudnnGetRNNDescriptor_v8."""
        c = lib()
        ints = [c_int() for _ in range(8)]
        sizes = [c_int32() for _ in range(4)]
        dropout, aux = c.cudnnDropoutDescriptor_t(), c_uint32()
        c.cudnnGetRNNDescriptor_v8(self.handle, *(byref(v) for v in ints), *(byref(v) for v in sizes),
                                   byref(dropout), byref(aux))
        values = [v.value for v in ints] + [v.value for v in sizes] + [aux.value]
        return RNNSettings(*values), bool(dropout)


class RNNDataDescriptor(OwnedDescriptor):
    """A batch of sequences (seq, batch, vector) in C order, with ``lengths`` (one per sequence, any
    order); output positions past a sequence's end are filled with zeros by cuDNN."""

    def __init__(self, dtype: Any, seq_len: int, batch: int, vector: int,
                 lengths: Sequence[int] | np.ndarray) -> None:
        c = lib()
        super().__init__(c.cudnnRNNDataDescriptor_t, c.cudnnCreateRNNDataDescriptor,
                         c.cudnnDestroyRNNDataDescriptor)
        self.dtype = DTYPES[dtype]
        self.shape = (int(seq_len), int(batch), int(vector))
        self.lengths = np.ascontiguousarray(lengths, dtype=np.int32)      # seqLengthArray: host memory
        fill = np.zeros(1, self.dtype.name)                                # paddingFill: the data type's 0
        c.cudnnSetRNNDataDescriptor(self.handle, self.dtype.library, c.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                    self.shape[0], self.shape[1], self.shape[2], self.lengths, fill)

    def read(self) -> dict[str, Any]:
        """data type, layout, shape, lengths and padding fill as cuDNN holds them."""
        data_type, layout, seq, batch, vector = (c_int() for _ in range(5))
        lengths = np.zeros(self.shape[1], np.int32)
        fill = np.full(1, np.nan, self.dtype.name)
        lib().cudnnGetRNNDataDescriptor(self.handle, byref(data_type), byref(layout), byref(seq), byref(batch),
                                        byref(vector), len(lengths), lengths, fill)
        return {"data_type": data_type.value, "layout": layout.value,
                "shape": (seq.value, batch.value, vector.value), "lengths": tuple(lengths.tolist()),
                "fill": float(fill[0])}
