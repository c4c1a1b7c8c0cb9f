"""What the numpy reference backend supports (read by the support matrix, :mod:`dnnbind.highlevel.support`)."""
from __future__ import annotations

from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.highlevel.support import Support

#: every op, every dtype (computed in float64) and every feature
SUPPORTS = {op: Support() for op in OP_NAMES}
