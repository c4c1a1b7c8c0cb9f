"""Every op's spec, by name, in the order of :data:`dnnbind.highlevel.specs.OP_NAMES`."""
from __future__ import annotations

from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.highlevel.specs.activation import ACTIVATION
from dnnbind.highlevel.specs.base import ArrayArg, EmptyCall, OpSpec, Output, Param, Unbatching
from dnnbind.highlevel.specs.batchnorm import BATCHNORM
from dnnbind.highlevel.specs.conv import CONV, CONV_BIAS_ACTIVATION, CONV_TRANSPOSE
from dnnbind.highlevel.specs.dropout import DROPOUT
from dnnbind.highlevel.specs.layer_norm import LAYER_NORM
from dnnbind.highlevel.specs.pool import MAXPOOL, MEANPOOL
from dnnbind.highlevel.specs.rnn import RNN
from dnnbind.highlevel.specs.softmax import LOGSOFTMAX, SOFTMAX

_ALL = {spec.name: spec for spec in (
    CONV, CONV_TRANSPOSE, CONV_BIAS_ACTIVATION, MAXPOOL, MEANPOOL, SOFTMAX, LOGSOFTMAX, ACTIVATION, BATCHNORM,
    LAYER_NORM, DROPOUT, RNN)}
if set(_ALL) != set(OP_NAMES):            # pragma: no cover - a spec added without its name, or the reverse
    raise ImportError(f"the specs {sorted(_ALL)} and OP_NAMES {sorted(OP_NAMES)} disagree")

#: op name -> its spec, in the public API's order
SPECS: dict[str, OpSpec] = {name: _ALL[name] for name in OP_NAMES}

