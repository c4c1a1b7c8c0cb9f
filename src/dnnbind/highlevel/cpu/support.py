"""What the cpu backend supports (read by the support matrix, :mod:`dnnbind.highlevel.support`)."""
from __future__ import annotations

from dnnbind.highlevel.conv_composed import COMPOSED
from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.highlevel.support import Support

#: every op, every dtype (float16 and bfloat16 computed in float32) and every feature; the convolutions
#: and RNNs call numpy's BLAS
SUPPORTS = {op: Support(blas=op in COMPOSED or op == "rnn") for op in OP_NAMES}
