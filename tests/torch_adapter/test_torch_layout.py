"""dnnbind.torch.layout: results and gradients laid out as torch's layers lay them out. A channels-last
input or filter gives channels-last results and gradients (convolutions, pooling, batch norm, the
elementwise ops), an elementwise op keeps any strides of its input, softmax and layer norm return C
order; eagerly, compiled, in a fused Sequential run, and after model.to(memory_format=...)."""
from __future__ import annotations

import pytest
import torch

from dnnbind.torch import nn as dnn

CL, CL3 = torch.channels_last, torch.channels_last_3d

# layer -> (constructor arguments, input shape)
LAYERS = {
    "Conv2d": ((4, 3, 3), (2, 4, 6, 6)), "Conv3d": ((4, 3, 2), (2, 4, 3, 4, 3)),
    "ConvTranspose3d": ((4, 3, 2), (2, 4, 3, 3, 3)),
    "ConvTranspose2d": ((4, 3, 3), (2, 4, 5, 5)), "MaxPool2d": ((2,), (2, 4, 6, 6)),
    "MaxPool3d": ((2,), (2, 4, 4, 4, 4)), "AvgPool2d": ((3, 2, 1), (2, 4, 6, 6)),
    "AvgPool3d": ((2,), (2, 4, 4, 4, 4)), "BatchNorm2d": ((4,), (2, 4, 6, 6)), "ReLU": ((), (2, 4, 6, 6)),
    "SiLU": ((), (2, 4, 3, 3, 3)), "LeakyReLU": ((0.2,), (2, 4, 6, 6)), "Dropout": ((0.0,), (2, 4, 6, 6)),
    "Softmax": ((1,), (2, 4, 6, 6)), "LayerNorm": ((6,), (2, 4, 6, 6)),
}


def _laid_out(x, how):
    if how == "channels_last":
        return x.to(memory_format=CL if x.dim() == 4 else CL3)
    if how == "permuted":                        # strides in no named format
        return x.transpose(2, 3).contiguous().transpose(2, 3)
    if how == "expanded":                        # one value for all (a sum's cotangent): zero strides
        return x.flatten()[:1].reshape((1,) * x.dim()).expand(x.shape)
    return x


def _twins(name):
    args, shape = LAYERS[name]
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args).double()
    ours = getattr(dnn, name)(*args).double()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs, shape


def _strides_and_values(model, x):
    x = x.detach().clone().requires_grad_()   # (clone keeps the strides)
    y = model(x)
    wanted = [x, *model.parameters()]
    grads = torch.autograd.grad((y * y).sum(), wanted)
    return y.stride(), [g.stride() for g in grads], y, grads


@pytest.mark.parametrize("how", ["eager", "compiled", "sequential"])
@pytest.mark.parametrize("layout", ["channels_last", "permuted", "contiguous"])
@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_results_and_gradients_are_laid_out_as_torchs(name, layout, how, dtype):
    """(torch's 3-d convolutions give channels-last results for float32 only: both dtypes.)"""
    ours, theirs, shape = _twins(name)
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    x = _laid_out(torch.randn(shape, dtype=dtype), layout)
    if how == "compiled":
        torch._dynamo.reset()
        ours = torch.compile(ours, backend="aot_eager", fullgraph=True)
    elif how == "sequential":                     # its second call runs fused where the layers allow
        ours, theirs = dnn.Sequential(ours, dnn.Tanh()), torch.nn.Sequential(theirs, torch.nn.Tanh())
        _strides_and_values(ours, x)
    y_strides, grad_strides, y, grads = _strides_and_values(ours, x)
    y_expected, grad_expected, y_ref, grads_ref = _strides_and_values(theirs, x)
    assert y_strides == y_expected and grad_strides == grad_expected
    torch.testing.assert_close(y, y_ref)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_channels_last_filter_alone_makes_a_convolution_channels_last(transposed):
    """model.to(memory_format=torch.channels_last) on a C-ordered input: the filter decides, as in torch;
    also after a fused Sequential run was planned with the filters in C order."""
    def make(nn):
        torch.manual_seed(0)
        conv = (nn.ConvTranspose2d if transposed else nn.Conv2d)(3, 4, 3, padding=1)
        return nn.Sequential(conv, nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)).double()
    ours, theirs = make(dnn), make(torch.nn)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    for _ in range(2):
        assert ours(x).stride() == theirs(x).stride() == ours(x).contiguous().stride()
    ours.to(memory_format=CL), theirs.to(memory_format=CL)
    for _ in range(2):
        y, y_ref = ours(x), theirs(x)
        assert y.stride() == y_ref.stride() and y.is_contiguous(memory_format=CL)
        torch.testing.assert_close(y, y_ref)


def test_a_channels_last_result_views_as_torchs_does():
    """The reason it matters: NHWC code viewing the permuted result (which a C-ordered result refuses)."""
    ours, theirs, shape = _twins("Conv2d")
    x = torch.randn(shape, dtype=torch.float64).to(memory_format=CL)
    for model in (ours, theirs):
        y = model(x)
        flat = y.permute(0, 2, 3, 1).view(-1, y.shape[1])
        assert flat.shape == (y.numel() // y.shape[1], y.shape[1])


AMBIGUOUS = {    # a size-1 dimension: C order and channels last agree, the strides tell them apart
    "1x1 filter channels last": (lambda nn: nn.Conv2d(3, 4, 1).to(memory_format=CL), (2, 3, 6, 6), False),
    "1x1 filter C order": (lambda nn: nn.Conv2d(3, 4, 1), (2, 3, 6, 6), False),
    "1x1 filter, input channels last": (lambda nn: nn.Conv2d(3, 4, 1), (2, 3, 6, 6), True),
    "one input channel": (lambda nn: nn.Conv2d(1, 4, 3).to(memory_format=CL), (2, 1, 6, 6), True),
    "one output channel": (lambda nn: nn.Conv2d(4, 1, 3), (2, 4, 6, 6), True),
    "depthwise": (lambda nn: nn.Conv2d(4, 4, 3, groups=4), (2, 4, 6, 6), True),
    "1x1 images, pooled": (lambda nn: nn.MaxPool2d(1), (2, 4, 1, 1), True),
    "1x1 images, batch norm": (lambda nn: nn.BatchNorm2d(4), (2, 4, 1, 1), True),
}


def _meaningful(t):
    """t's strides but those of its size-1 dimensions, which address nothing (torch's own differ there
    between its float32 and float64 kernels)."""
    return tuple(None if size == 1 else stride for size, stride in zip(t.shape, t.stride()))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", list(AMBIGUOUS))
def test_layouts_that_a_size_one_dimension_makes_ambiguous_are_torchs(name, dtype):
    make, shape, channels_last = AMBIGUOUS[name]
    torch.manual_seed(0)
    theirs, ours = make(torch.nn).to(dtype), make(dnn).to(dtype)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(shape, dtype=dtype)
    x = x.to(memory_format=CL) if channels_last else x
    found = []
    for model in (ours, theirs):
        xx = x.detach().clone().requires_grad_()
        y = model(xx)
        grads = torch.autograd.grad((y * y).sum(), [xx, *model.parameters()])
        found.append([_meaningful(t) for t in (y, *grads)])
    assert found[0] == found[1]


ELEMENTWISE = {
    "ReLU": lambda nn: nn.ReLU(), "LeakyReLU": lambda nn: nn.LeakyReLU(0.2), "ReLU6": lambda nn: nn.ReLU6(),
    "Hardtanh": lambda nn: nn.Hardtanh(0.0, 1.0), "Sigmoid": lambda nn: nn.Sigmoid(), "Tanh": lambda nn: nn.Tanh(),
    "ELU": lambda nn: nn.ELU(0.5), "SiLU": lambda nn: nn.SiLU(), "Dropout(0)": lambda nn: nn.Dropout(0.0),
    "Dropout(1)": lambda nn: nn.Dropout(1.0), "Sigmoid, ReLU": lambda nn: nn.Sequential(nn.Sigmoid(), nn.ReLU()),
    "ReLU, Tanh": lambda nn: nn.Sequential(nn.ReLU(), nn.Tanh()),
    "ReLU(inplace)": lambda nn: nn.ReLU(inplace=True), "SiLU(inplace)": lambda nn: nn.SiLU(inplace=True),
    "LeakyReLU(inplace)": lambda nn: nn.LeakyReLU(0.2, inplace=True),
    "Hardtanh(inplace)": lambda nn: nn.Hardtanh(0.0, 1.0, inplace=True),
    "Dropout(1, inplace)": lambda nn: nn.Dropout(1.0, inplace=True),
}


# not compiled: torch's Dropout(0), which then clones x while eagerly it returns x itself, as dnnbind's
# does both ways; torch's SiLU(inplace=True), whose compiled backward fails its own version check
NOT_COMPILED = ("Dropout(0)", "SiLU(inplace)")


@pytest.mark.parametrize("name, how", [(name, how) for name in ELEMENTWISE for how in ("eager", "compiled", "create_graph")
                                       if how != "compiled" or name not in NOT_COMPILED])
@pytest.mark.parametrize("layouts", [("channels_last", "contiguous"), ("contiguous", "channels_last"),
                                     ("permuted", "channels_last"), ("channels_last", "permuted"),
                                     ("channels_last", "expanded")],
                         ids=lambda pair: "x %s, cotangent %s" % pair)
def test_an_elementwise_gradient_follows_x_and_the_cotangent_as_torchs(name, layouts, how):
    """Where x and the cotangent are laid out differently, torch's backward kernel lays the gradient out
    as the first of its two operands: x for relu and leaky relu, the cotangent for the others (their
    gradients' values are the same either way); also for layers made with inplace=True, on a tensor that
    is no leaf. Compiled, against torch's layers compiled alike (AOT autograd hands the backward the
    cotangent laid out as the forward's result was)."""
    ours, theirs = ELEMENTWISE[name](dnn).double(), ELEMENTWISE[name](torch.nn).double()
    if how == "compiled":
        torch._dynamo.reset()
        ours = torch.compile(ours, backend="aot_eager", fullgraph=True)
        theirs = torch.compile(theirs, backend="aot_eager", fullgraph=True)
    x = _laid_out(torch.randn(2, 4, 5, 6, dtype=torch.float64), layouts[0])
    dy = _laid_out(torch.randn(2, 4, 5, 6, dtype=torch.float64), layouts[1])
    found = []
    for model in (ours, ours, theirs):        # (a fused Sequential runs fused from its second call)
        leaf = x.detach().clone().requires_grad_()
        y = model(leaf * 1)
        dx, = torch.autograd.grad(y, leaf, dy, create_graph=how == "create_graph")
        found.append((y.stride(), dx.stride(), dx.detach()))
    assert found[0][:2] == found[1][:2] == found[2][:2]
    torch.testing.assert_close(found[1][2], found[2][2])


@pytest.mark.parametrize("name", ["Sigmoid", "ReLU", "Hardtanh(inplace)"])
def test_an_elementwise_gradients_layout_under_dynamic_shapes_is_torchs(name):
    """compile(dynamic=True): the fake kernels lay gradients out from symbolic strides (two batch sizes),
    as torch's layer compiled alike."""
    ours, theirs = ELEMENTWISE[name](dnn).double(), ELEMENTWISE[name](torch.nn).double()
    torch._dynamo.reset()
    compiled = [torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=True) for model in (ours, theirs)]
    for batch in (2, 3):
        x = _laid_out(torch.randn(batch, 4, 5, 6, dtype=torch.float64), "channels_last")
        found = []
        for model in compiled:
            leaf = x.detach().clone().requires_grad_()
            y = model(leaf * 1)
            dx, = torch.autograd.grad(y.sum(), leaf)
            found.append((y.stride(), dx.stride(), dx))
        assert found[0][:2] == found[1][:2]
        torch.testing.assert_close(found[0][2], found[1][2])



@pytest.mark.parametrize("layout", ["channels_last", "permuted"])
@pytest.mark.parametrize("name", ["ReLU", "Sigmoid", "ELU", "LeakyReLU", "Hardtanh"])
def test_an_elementwise_layer_under_vmap_keeps_the_strides_as_torchs(name, layout):
    """vmap of an elementwise layer: one call on x as it is (any entry shape, 0-d too), laid out as
    torch's."""
    ours, theirs = ELEMENTWISE[name](dnn).double(), ELEMENTWISE[name](torch.nn).double()
    x = _laid_out(torch.randn(2, 4, 5, 6, dtype=torch.float64), layout)
    y, y_ref = torch.func.vmap(ours)(x), torch.func.vmap(theirs)(x)
    assert y.stride() == y_ref.stride()
    torch.testing.assert_close(y, y_ref)
    flat = torch.randn(7, dtype=torch.float64)                # entries of 0 dimensions
    torch.testing.assert_close(torch.func.vmap(ours)(flat), torch.func.vmap(theirs)(flat))


def _strided(shape, order, expanded, rng):
    """A tensor of ``shape`` laid out in dimension order ``order`` (slowest first), the dimensions in
    ``expanded`` broadcast (zero strides)."""
    base = torch.randn([shape[d] for d in order], dtype=torch.float64).permute(*[order.index(d) for d in range(len(shape))])
    for d in expanded:
        base = base.narrow(d, 0, 1).expand(*[shape[k] if k == d else base.shape[k] for k in range(len(shape))])
    return base


def test_the_elementwise_stride_rule_is_torchs_tensoriterators():
    """layout.iterator_strides against torch's own add on real tensors: random orders of 2 to 5 dims of
    sizes 1 to 3 for each operand, some dims expanded."""
    import itertools
    import random
    from dnnbind.torch.layout import iterator_strides
    rng = random.Random(0)
    for _ in range(6000):
        ndim = rng.randint(2, 5)
        shape = [rng.choice((1, 2, 3)) for _ in range(ndim)]
        operands = []
        for _ in range(2):
            order = list(range(ndim))
            rng.shuffle(order)
            expanded = [d for d in range(ndim) if rng.random() < 0.2]
            operands.append(_strided(shape, order, expanded, rng))
        a, b = operands
        assert iterator_strides(shape, [a.stride(), b.stride()]) == (a + b).stride(), (shape, a.stride(), b.stride())
        assert iterator_strides(shape, [a.stride()]) == (-a).stride(), (shape, a.stride())


@pytest.mark.parametrize("make", [lambda nn: nn.Conv2d(3, 4, 3), lambda nn: nn.ConvTranspose2d(3, 2, 3),
                                  lambda nn: nn.ReLU(), lambda nn: nn.BatchNorm2d(3).eval(),
                                  lambda nn: nn.MaxPool2d(2), lambda nn: nn.Softmax(1)],
                         ids=["Conv2d", "ConvTranspose2d", "ReLU", "BatchNorm2d-eval", "MaxPool2d", "Softmax"])
def test_an_empty_batch_gives_torchs_strides(make):
    """A batch of 0: results and gradients C-ordered as torch's (numpy's empty arrays have all-zero
    strides, which the conversion to tensors does not pass on)."""
    found = []
    for nn in (torch.nn, dnn):
        x = torch.randn(0, 3, 8, 8, requires_grad=True)
        y = make(nn)(x)
        y.sum().backward()
        found.append((y.shape, y.stride(), x.grad.stride()))
    assert found[1] == found[0]
