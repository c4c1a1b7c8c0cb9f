"""The convolution layer set of bench_reference: ResNet-18's layers at batch 8 and depthwise 3x3 layers."""
from __future__ import annotations

import math

#: name, in channels, spatial size, out channels, kernel, stride, padding, groups (batch 8)
RESNET18 = [
    ("conv1 7x7/2 3->64 @224", 3, 224, 64, 7, 2, 3, 1),
    ("layer1 3x3 64->64 @56", 64, 56, 64, 3, 1, 1, 1),
    ("layer2 3x3/2 64->128 @56", 64, 56, 128, 3, 2, 1, 1),
    ("layer2 down 1x1/2 64->128 @56", 64, 56, 128, 1, 2, 0, 1),
    ("layer2 3x3 128->128 @28", 128, 28, 128, 3, 1, 1, 1),
    ("layer3 3x3/2 128->256 @28", 128, 28, 256, 3, 2, 1, 1),
    ("layer3 down 1x1/2 128->256 @28", 128, 28, 256, 1, 2, 0, 1),
    ("layer3 3x3 256->256 @14", 256, 14, 256, 3, 1, 1, 1),
    ("layer4 3x3/2 256->512 @14", 256, 14, 512, 3, 2, 1, 1),
    ("layer4 down 1x1/2 256->512 @14", 256, 14, 512, 1, 2, 0, 1),
    ("layer4 3x3 512->512 @7", 512, 7, 512, 3, 1, 1, 1),
]
DEPTHWISE = [
    ("depthwise 3x3 32 @112", 32, 112, 32, 3, 1, 1, 32),
    ("depthwise 3x3/2 96 @56", 96, 56, 96, 3, 2, 1, 96),
    ("depthwise 3x3 144 @28", 144, 28, 144, 3, 1, 1, 144),
]
LAYERS = RESNET18 + DEPTHWISE
BATCH = 8
GOAL_GEOMEAN = 1.25
GOAL_WORST = 2.0


def shapes(layer: tuple, batch: int = BATCH) -> tuple[tuple[int, ...], tuple[int, ...], dict]:
    """x shape, w shape and conv keyword arguments of a layer (at ``batch`` samples)."""
    _, cin, size, cout, k, stride, pad, groups = layer
    return (batch, cin, size, size), (cout, cin // groups, k, k), dict(stride=stride, padding=pad, groups=groups)


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))
