"""The reference backend: plain numpy, small, obviously correct; the ops' semantics and the tests' oracle.

Every op is computed in float64 from direct sums (results rounded once, to the input's dtype), with no
fast paths: the cpu backend (:mod:`dnnbind.highlevel.cpu`, the default for numpy arrays) is checked against
it, and so are the GPU backends. Run an op on it by name (``dispatch.backend_function("reference", op)``)
or call this module's functions. Each op comes in both forms (:func:`dnnbind.highlevel.residual.forms`):
``NAME_forward``, ``NAME_backward``, ``NAME_residuals`` and ``NAME`` -> (result, pullback), on arguments
the public ops have checked (the dims objects), with the cpu backend's signatures.
"""
from __future__ import annotations

from dnnbind.highlevel.conv_composed import conv_ops
from dnnbind.highlevel.reference import batchnorm as _batchnorm
from dnnbind.highlevel.reference import conv as _conv
from dnnbind.highlevel.reference import layer_norm as _layer_norm
from dnnbind.highlevel.reference import pointwise as _pointwise
from dnnbind.highlevel.reference import pool as _pool
from dnnbind.highlevel.reference import rnn as _rnn
from dnnbind.highlevel.reference._arrays import quiet
from dnnbind.highlevel.residual import install_forms

# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once, run with numpy's
# floating-point warnings off (inf and NaN give their IEEE results silently); the convolutions composed
# from the conv primitives
OPS = install_forms(globals(), (_batchnorm, conv_ops(_conv.PRIMITIVES), _layer_norm, _pointwise, _pool, _rnn),
                    around=quiet)
__all__ = list(OPS)
