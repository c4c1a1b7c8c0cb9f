"""Every op's pullback names its op and the cotangents it expects: repr, docstring and errors."""
from __future__ import annotations

import pydoc
import re

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel.pullback import Pullback, _shape

from highlevel.test_ops import _calls, _cotangents

CALLS = _calls(np.float32)
OP_NAMES = {"activation": "activation('swish')"}


def _op(name: str) -> str:
    return OP_NAMES.get(name, name)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_pullback_names_its_op_in_repr_and_docstring(name):
    result, back = CALLS[name]()
    assert isinstance(back, Pullback) and back.op == _op(name)
    y = result[0] if isinstance(result, tuple) else result
    assert repr(back).startswith(f"<{_op(name)} pullback: pullback(dy")
    assert f"dy {y.shape} float32" in repr(back)
    doc = pydoc.render_doc(back, renderer=pydoc.plaintext)
    assert f"Pullback of {_op(name)}: pullback(dy" in doc
    assert f"dy: the gradient of y, an array of shape {y.shape} and dtype float32" in doc


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_wrong_shape_names_the_op_and_the_expected_shape(name):
    result, back = CALLS[name]()
    y = result[0] if isinstance(result, tuple) else result
    wrong = np.ones(y.shape[:-1] + (y.shape[-1] + 1,), np.float32)
    with pytest.raises(ValueError) as info:
        back(wrong)
    assert str(info.value) == (f"{_op(name)} pullback: dy has shape {wrong.shape} but must have shape {y.shape} "
                               f"(the shape of y, {_op(name)}'s result)")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_wrong_dtype_or_array_kind_names_the_op(name):
    """The backend's own checks of a cotangent (its dtype, its array type) name the op as the others do."""
    result, back = CALLS[name]()
    y = result[0] if isinstance(result, tuple) else result
    with pytest.raises(TypeError, match=rf"^{re.escape(_op(name))} pullback: dy has dtype int32; dnnbind supports"):
        back(np.ones(y.shape, np.int32))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=rf"^{re.escape(_op(name))} pullback: dy must be a numpy array, not Tensor"):
        back(torch.ones(y.shape))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_scalar_gets_a_hint(name):
    _, back = CALLS[name]()
    for scalar in (1.0, 1, np.float32(1.0)):
        with pytest.raises(TypeError, match=rf"^{re.escape(_op(name))} pullback: dy must be an array shaped like y, .*"
                                            rf"for the gradient of y\.sum\(\) pass ones_like\(y\)$"):
            back(scalar)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_cotangents_by_name_equal_cotangents_by_position(name):
    """The backends take the cotangents positionally; the Pullback passes ones given by name so."""
    result, back = CALLS[name]()
    cotangents = _cotangents(result)
    by_name = back(**{c.name: value for c, value in zip(back.cotangents, cotangents)})
    by_position = back(*cotangents)
    flat = (lambda t: [a for item in t for a in flat(item)] if isinstance(t, (list, tuple)) else [t])
    assert all((a is None and b is None) or np.array_equal(a, b) for a, b in zip(flat(by_name), flat(by_position)))


@pytest.mark.parametrize("name", sorted(set(CALLS) - {"rnn"}))
def test_a_tuple_for_a_one_cotangent_pullback(name):
    result, back = CALLS[name]()
    with pytest.raises(TypeError, match=r"dy is a tuple, not an array; it takes one cotangent, dy; "
                                        r"expected pullback\(dy\) -> "):
        back(tuple(_cotangents(result)))
    with pytest.raises(TypeError, match=r"pullback takes 1 cotangent \(dy\), got 2 arguments"):
        back(*_cotangents(result), *_cotangents(result))


def test_rnn_pullback_says_to_pass_its_cotangents_separately():
    result, back = CALLS["rnn"]()
    dy, dhy, dcy = _cotangents(result)
    assert back.signature() == "pullback(dy, dhy=None, dcy=None) -> (dx, dh0, dc0, dweights)"
    with pytest.raises(TypeError, match=r"rnn pullback: dy is a tuple, not an array; pass the cotangents as "
                                        r"separate arguments, pullback\(dy, dhy=None, dcy=None\); expected"):
        back((dy, dhy, dcy))
    with pytest.raises(ValueError, match=r"rnn pullback: dcy has shape \(2, 2\) but must have shape \(1, 2, 2\) "
                                         r"\(the shape of cy, rnn's result\)"):
        back(dy, dhy, dcy[0])
    with pytest.raises(TypeError, match=r"unexpected argument 'dc'"):
        back(dy, dc=dcy)
    grads = back(dy=dy, dcy=dcy)                                   # keywords work, dhy None is zeros
    assert len(grads) == 4


def test_the_gradients_are_the_backends_and_repeatable():
    (result, back) = CALLS["conv"]()
    first, second = back(np.ones_like(result)), back(np.ones_like(result))
    assert len(first) == 3 and back.gradients == ("dx", "dw", "db")
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_backend_attributes_stay_reachable():
    y, back = CALLS["dropout"]()
    assert back.mask.shape == y.shape and back.mask.dtype == bool
    with pytest.raises(AttributeError):
        back.no_such_attribute


class _DeviceArray:
    """A stand-in device array: only __cuda_array_interface__ (the tests' one allowed double)."""

    def __init__(self, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (0, False), "version": 3}


def test_device_arrays_are_checked_by_their_interface_shape():
    assert _shape(_DeviceArray((2, 3))) == (2, 3)
    result, back = CALLS["softmax"]()
    with pytest.raises(ValueError, match=r"softmax pullback: dy has shape \(2, 3\) but must have shape"):
        back(_DeviceArray((2, 3)))


@pytest.mark.gpu
def test_gpu_pullbacks_are_named_too():
    cp = pytest.importorskip("cupy")
    x = cp.ones((2, 4, 6, 6), cp.float32)
    y, back = dnnbind.conv(x, cp.ones((3, 4, 3, 3), cp.float32))
    assert repr(back).startswith("<conv pullback: pullback(dy) -> (dx, dw); takes dy (2, 3, 4, 4) float32")
    with pytest.raises(ValueError, match=r"conv pullback: dy has shape \(2, 3, 6, 6\)"):
        back(x[:, :3])
    dx, dw = back(cp.ones_like(y))
    assert dx.shape == x.shape and dw.shape == (3, 4, 3, 3)
