"""What the MIOpen backend supports (read by the support matrix, :mod:`dnnbind.highlevel.support`)."""
from __future__ import annotations

from dnnbind.highlevel.conv_composed import COMPOSED
from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.highlevel.support import Support

_NO_BFLOAT16 = ("float16", "float32", "float64")

#: bfloat16 only where MIOpen has kernels for it (MIOpen documents bfloat16 for its convolutions; its
#: layer-norm kernels take miopenBFloat16 too); RNNs in float16 and float32 only, without projection
SUPPORTS = {op: Support() if op in COMPOSED or op == "layer_norm" else Support(_NO_BFLOAT16) for op in OP_NAMES}
SUPPORTS["rnn"] = Support(("float16", "float32"), {"proj_size": "MIOpen's RNN descriptor has no projection size"})
