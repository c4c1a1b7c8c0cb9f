"""What MIOpen 3.4 cannot do as the reference does, for the MIOpen backend's case runs (GPU and emulated)."""
from __future__ import annotations

from .gpu_cases import CASES, TOLERANCE

#: (op, dtype) pairs the backend does not run: MIOpen's pooling solvers take float16/float32 only, and its
#: RNN descriptor rejects double (the backend raises TypeError, tested apart)
UNSUPPORTED = {("maxpool", "float64"), ("meanpool", "float64"), ("rnn", "float64")}

#: MIOpen keeps batch-norm parameters and statistics in float32 whatever the data type (its derived
#: descriptor is always float), so float64 batch norm has float32 precision
TOLERANCES = {("batchnorm", "float64"): TOLERANCE["float32"]}

#: cases also run in float16 (float32 accumulation on both sides)
HALF = ["conv2d", "conv_transpose2d", "maxpool2d", "meanpool3d_exclude_pad", "softmax_axis1", "activation_tanh",
        "activation_swish", "batchnorm_training", "lstm_2layer_bidirectional", "layer_norm_affine"]

#: every (case, dtype) run on MIOpen: the shared cases in the dtypes MIOpen supports, plus HALF in float16
RUNS = [(c, d) for c in CASES for d in c.dtypes if (c.op, d) not in UNSUPPORTED] + \
    [(c, "float16") for c in CASES if c.name in HALF]


def tolerance(op: str, dtype: str) -> tuple[float, float]:
    return TOLERANCES.get((op, dtype), TOLERANCE[dtype])
