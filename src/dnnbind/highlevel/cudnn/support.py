"""What the cuDNN backend supports (read by the support matrix, :mod:`dnnbind.highlevel.support`)."""
from __future__ import annotations

from dnnbind.highlevel.cudnn.layer_norm import WHY
from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.highlevel.support import Support

#: every op, every dtype and feature (dilated and index-returning max pools and the other modes cuDNN
#: lacks run as CuPy kernels within the backend)
SUPPORTS = {op: Support() for op in OP_NAMES}
SUPPORTS["layer_norm"] = Support((), unavailable=WHY)
