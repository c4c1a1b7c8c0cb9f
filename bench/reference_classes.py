"""Classes of problems beyond the convolution layer set: one representative of each (dilated, grouped,
1-d, 3-d and transposed convolution, pooling, batch norm, softmax, activations), forward and forward +
backward through dnnbind's public ops against torch's functional ops on the CPU. Reported, no goal: a
class that falls far behind here is a cliff the layer set does not show."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import dnnbind

#: name, dnnbind call, torch call (on tensors, same arguments); each takes the input first
Case = tuple[str, Callable[..., Any], Callable[..., Any], list[tuple[int, ...]]]


def cases(F: Any) -> list[Case]:
    """(name, ours(*arrays), theirs(*tensors), the arrays' shapes): x first, then weights if any."""
    return [
        ("conv dilated 3x3 d=2 64 @56", lambda x, w: dnnbind.conv(x, w, padding=2, dilation=2),
         lambda x, w: F.conv2d(x, w, padding=2, dilation=2), [(8, 64, 56, 56), (64, 64, 3, 3)]),
        ("conv grouped g=32 256 @14", lambda x, w: dnnbind.conv(x, w, padding=1, groups=32),
         lambda x, w: F.conv2d(x, w, padding=1, groups=32), [(8, 256, 14, 14), (256, 8, 3, 3)]),
        ("conv grouped g=32 1024 @7", lambda x, w: dnnbind.conv(x, w, padding=1, groups=32),
         lambda x, w: F.conv2d(x, w, padding=1, groups=32), [(8, 1024, 7, 7), (1024, 32, 3, 3)]),
        ("conv grouped g=4 128 @28", lambda x, w: dnnbind.conv(x, w, padding=1, groups=4),
         lambda x, w: F.conv2d(x, w, padding=1, groups=4), [(8, 128, 28, 28), (128, 32, 3, 3)]),
        ("conv1d k=5 64 @1024", lambda x, w: dnnbind.conv(x, w, padding=2),
         lambda x, w: F.conv1d(x, w, padding=2), [(8, 64, 1024), (64, 64, 5)]),
        ("conv3d 3x3x3 32 @16x28x28", lambda x, w: dnnbind.conv(x, w, padding=1),
         lambda x, w: F.conv3d(x, w, padding=1), [(2, 32, 16, 28, 28), (32, 32, 3, 3, 3)]),
        ("conv_transpose 4x4/2 128->64 @28", lambda x, w: dnnbind.conv_transpose(x, w, stride=2, padding=1),
         lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), [(8, 128, 28, 28), (128, 64, 4, 4)]),
        ("maxpool 3x3/2 64 @112", lambda x: dnnbind.maxpool(x, 3, stride=2, padding=1),
         lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [(8, 64, 112, 112)]),
        ("conv batch 1 3x3 64 @56", lambda x, w: dnnbind.conv(x, w, padding=1),
         lambda x, w: F.conv2d(x, w, padding=1), [(1, 64, 56, 56), (64, 64, 3, 3)]),
        ("depthwise 7x7 256 @14", lambda x, w: dnnbind.conv(x, w, padding=3, groups=256),
         lambda x, w: F.conv2d(x, w, padding=3, groups=256), [(8, 256, 14, 14), (256, 1, 7, 7)]),
        ("depthwise 5x5 96 @56", lambda x, w: dnnbind.conv(x, w, padding=2, groups=96),
         lambda x, w: F.conv2d(x, w, padding=2, groups=96), [(8, 96, 56, 56), (96, 1, 5, 5)]),
        ("depthwise 1x1 64 @56", lambda x, w: dnnbind.conv(x, w, groups=64),
         lambda x, w: F.conv2d(x, w, groups=64), [(8, 64, 56, 56), (64, 1, 1, 1)]),
        ("maxpool global 512 @7", lambda x: dnnbind.maxpool(x, 7), lambda x: F.max_pool2d(x, 7), [(8, 512, 7, 7)]),
        ("meanpool global 512 @7", lambda x: dnnbind.meanpool(x, 7), lambda x: F.avg_pool2d(x, 7), [(8, 512, 7, 7)]),
        ("maxpool1d 3/2 64 @1024", lambda x: dnnbind.maxpool(x, 3, stride=2),
         lambda x: F.max_pool1d(x, 3, stride=2), [(8, 64, 1024)]),
        ("meanpool 2x2 128 @56", lambda x: dnnbind.meanpool(x, 2),
         lambda x: F.avg_pool2d(x, 2), [(8, 128, 56, 56)]),
        ("batchnorm 64 @56", lambda x, g, b: dnnbind.batchnorm(x, g, b),
         lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True), [(8, 64, 56, 56), (64,), (64,)]),
        ("batchnorm1d (256, 512)", lambda x, g, b: dnnbind.batchnorm(x, g, b),
         lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True), [(256, 512), (512,), (512,)]),
        ("softmax rows (64, 1000)", lambda x: dnnbind.softmax(x, axis=1),
         lambda x: F.softmax(x, dim=1), [(64, 1000)]),
        ("softmax channels 21 @64", lambda x: dnnbind.softmax(x, axis=1),
         lambda x: F.softmax(x, dim=1), [(8, 21, 64, 64)]),
        ("logsoftmax rows (64, 1000)", lambda x: dnnbind.logsoftmax(x, axis=1),
         lambda x: F.log_softmax(x, dim=1), [(64, 1000)]),
        ("relu 64 @56", lambda x: dnnbind.activation(x, "relu"), F.relu, [(8, 64, 56, 56)]),
        ("sigmoid 64 @56", lambda x: dnnbind.activation(x, "sigmoid"), F.sigmoid, [(8, 64, 56, 56)]),
        ("elu 64 @56", lambda x: dnnbind.activation(x, "elu"), F.elu, [(8, 64, 56, 56)]),
        ("tanh 64 @56", lambda x: dnnbind.activation(x, "tanh"), F.tanh, [(8, 64, 56, 56)]),
    ]


def runners(case: Case, torch: Any, backward: bool) -> tuple[Callable[[], None], Callable[[], None]]:
    """(ours, theirs) for one case: the forward alone (no gradient kept on either side), or forward and
    backward with a cotangent of ones' shape drawn once."""
    _, ours_op, theirs_op, shapes = case
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    with dnnbind.no_grad():
        y_shape = np.shape(ours_op(*arrays)[0])
    dy = rng.standard_normal(y_shape, dtype=np.float32)
    tensors = [torch.from_numpy(a).requires_grad_(backward) for a in arrays]
    dyt = torch.from_numpy(dy)

    def ours() -> None:
        if not backward:
            with dnnbind.no_grad():
                ours_op(*arrays)
            return
        _, pullback = ours_op(*arrays)
        pullback(dy)

    def theirs() -> None:
        with torch.set_grad_enabled(backward):
            y = theirs_op(*tensors)
            if backward:
                torch.autograd.grad(y, tensors, dyt)

    return ours, theirs
