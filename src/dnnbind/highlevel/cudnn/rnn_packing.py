"""The weight space one cuDNN RNN call runs with: packed per call, or packed once by the caller.

By default :func:`weight_space` copies the PyTorch-layout weights into a new weight space on every call
(a few device copies). A training loop packs once instead: :func:`pack_rnn_weights` returns a
:class:`PackedRNNWeights`, a tuple of (w_ih, w_hh, b_ih, b_hh) entries that are *views* of one weight
space, so it goes wherever the weights list goes (``dnnbind.rnn(x, packed, ...)``), an optimizer updates
it in place, and each call finds the views at the offsets cuDNN reports and runs on their memory
without packing (no registry: the arrays themselves say where they are); a training forward saves one
copy of that space for its backward. Anything else (other arrays, a packed object of another network) is
packed per call, so the result never depends on which path ran.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.rnn_descriptors import rnn_math_type
from dnnbind.highlevel.cudnn.rnn_plan import NetworkPlan, network_plan
from dnnbind.highlevel.cudnn.rnn_weights import WeightLayout, pack, unpack
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.checks import check_same_dtype
from dnnbind.highlevel.dims.rnn import RNNDims, rnn_weight_entries
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.call import Call


def math_type(dims: RNNDims) -> int:
    """The cudnnMathType_t an RNN on ``dims.dtype`` runs with under the current settings (allow_tf32)."""
    return rnn_math_type(dims.dtype, settings.current().allow_tf32)


class PackedRNNWeights(tuple):
    """Weights packed into cuDNN's weight space once: ``packed[i] = (w_ih, w_hh, b_ih, b_hh)`` (and w_hr
    with an LSTM projection) are views of :attr:`space` (biases None without biases), usable wherever a
    weights list is.

    Rebuilt from its entries alone (``PackedRNNWeights(iterable)``, as code that maps over nested tuples
    does) it keeps working: what counts is where the arrays are, not this object's attributes.
    """

    space: Any
    layout: WeightLayout | None

    def __new__(cls, entries: Iterable[tuple[Any, ...]], space: Any = None,
                layout: WeightLayout | None = None) -> "PackedRNNWeights":
        self = super().__new__(cls, entries)
        self.space = space
        self.layout = layout
        return self

    def __repr__(self) -> str:
        where = "" if self.space is None else f" in a {self.space.dtype} weight space of {self.space.size} elements"
        return f"<PackedRNNWeights: {len(self)} entries{where}>"


def pack_rnn_weights(weights: Sequence[Sequence[Any]], *, mode: str = "lstm", hidden_size: int, num_layers: int = 1,
                     bidirectional: bool = False, proj_size: int = 0) -> PackedRNNWeights:
    """Copy PyTorch-layout weights (CuPy arrays on one GPU) into a new cuDNN weight space, once.

    The result holds views of that space in PyTorch's layout; pass it to :func:`dnnbind.rnn` in place
    of the list, and update it in place (``w -= lr * dw``) so that later calls keep running without
    packing. A training forward saves one copy of the space for its backward (the residuals are the
    forward's own), so updating the weights after the forward changes nothing there.
    """
    cp = cupy()
    entries = rnn_weight_entries(weights)
    named = {f"weights[{i}][{j}]": a for i, entry in enumerate(entries) for j, a in enumerate(entry)}
    params = {"mode": mode, "hidden_size": hidden_size, "num_layers": num_layers, "bidirectional": bidirectional,
              "proj_size": proj_size}
    with Call("pack_rnn_weights", params, **named) as call:
        arrays = [[call[f"weights[{i}][{j}]"] for j in range(len(entries[i]))] for i in range(len(entries))]
        first = arrays[0][0]
        check_same_dtype("weights[0][0]", first.dtype, **{k: call[k] for k in named})
        if first.ndim != 2:
            raise ValueError(f"weights[0][0] (w_ih) has shape {tuple(first.shape)}; it must be a matrix")
        dims = RNNDims((1, 1, first.shape[1]), [tuple(None if a is None else a.shape for a in e) for e in arrays],
                       mode=mode, hidden_size=hidden_size, num_layers=num_layers, bidirectional=bidirectional,
                       dtype=first.dtype, proj_size=proj_size)
        plan = network_plan(dims, math_type(dims), call.device)
        layout = plan.layout(handle(call.device, current_stream()), cp)
        if not layout.whole:
            raise NotImplementedError("cuDNN's weight space keeps the gates of one weight matrix apart for this "
                                      "network, so its weights cannot be views of it; pass the weights list "
                                      "instead (it is packed on every call)")
        space = new_space(cp, layout, dims.dtype)
        pack(layout, arrays, space)
        return PackedRNNWeights(unpack(layout, space, cp), space, layout)


def new_space(cp: Any, layout: WeightLayout, dtype: Any) -> Any:
    """A flat weight space for ``layout``: zeros where the regions leave gaps, so cuDNN never meets garbage."""
    return (cp.empty if layout.dense else cp.zeros)(layout.size, dtype)


@dataclass(frozen=True)
class WeightSpace:
    """The weight space of one call: its device address and size, and the flat array that holds it: a
    packed copy this call made (``owned``), or a view of the caller's packed weight space."""

    ptr: int
    nbytes: int
    array: Any
    owned: bool

    def private(self) -> Any:
        """The flat weight space as an array of the call's own (a copy of the caller's packed space)."""
        return self.array if self.owned else self.array.copy()


def weight_space(cp: Any, plan: NetworkPlan, h: Any, weights: Sequence[Sequence[Any]]) -> WeightSpace:
    """The weights' own memory when they are a packed weight space of this network, else a packed copy."""
    layout = plan.layout(h, cp)
    nbytes = plan.weight_space_bytes(h)
    base = packed_base(layout, {(r.entry, r.slot): locate(weights[r.entry][r.slot]) for r in layout.regions},
                       plan.itemsize)
    if base is not None:
        first = layout.regions[0]
        memory = weights[first.entry][first.slot].data.mem       # the allocation that holds the whole space
        view = cp.ndarray((layout.size,), plan.dims.dtype, cp.cuda.MemoryPointer(memory, base - int(memory.ptr)))
        return WeightSpace(base, nbytes, view, False)
    space = new_space(cp, layout, plan.dims.dtype)
    pack(layout, weights, space)
    return WeightSpace(int(space.data.ptr), nbytes, space, True)


@dataclass(frozen=True)
class Located:
    """Where an array's data are: address, C-contiguity and the allocation (identity, start, end)."""

    ptr: int
    contiguous: bool
    allocation: tuple[int, int, int]


def locate(a: Any) -> Located | None:
    """Where CuPy array ``a`` lives (None for anything that is not a CuPy array)."""
    data: Any = getattr(a, "data", None)
    mem: Any = getattr(data, "mem", None)
    if mem is None or not hasattr(a, "flags"):
        return None
    start = int(mem.ptr)
    return Located(int(data.ptr), bool(a.flags.c_contiguous), (id(mem), start, start + int(mem.size)))


def packed_base(layout: WeightLayout, located: dict[tuple[int, int], Located | None], itemsize: int) -> int | None:
    """The weight space's address if every region's array sits exactly where ``layout`` puts it in one
    allocation that holds the whole space; None otherwise."""
    if not layout.whole:
        return None
    base = allocation = None
    for r in layout.regions:
        where = located.get((r.entry, r.slot))
        if where is None or not where.contiguous:
            return None
        start = where.ptr - r.offset * itemsize
        if base is None:
            base, allocation = start, where.allocation
        elif start != base or where.allocation != allocation:
            return None
    if base is None or allocation is None:
        return None
    _, low, high = allocation
    return base if low <= base and base + layout.size * itemsize <= high else None
