"""Layers made of dnnbind's high-level ops, and a tiny tape that chains their pullbacks backwards.

Every layer maps ``(x, train)`` to ``(y, pullback)`` like the ops themselves; a layer's pullback returns
the gradient of its input and leaves its parameters' gradients in ``layer.grads``. Works on numpy
arrays (cpu backend) and CuPy arrays (GPU backends) alike: ``xp`` is numpy or cupy.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import dnnbind

Array = Any
Pullback = Callable[[Array], Array]


class Layer:
    """Parameters (name -> array) and, after a backward pass, their gradients."""

    def __init__(self) -> None:
        self.params: dict[str, Array] = {}
        self.grads: dict[str, Array] = {}

    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        raise NotImplementedError


class Conv(Layer):
    """N-d convolution with bias; He-initialised."""

    def __init__(self, xp: Any, rng: np.random.Generator, c_in: int, c_out: int, kernel: tuple[int, ...],
                 padding: int = 0) -> None:
        super().__init__()
        fan_in = c_in * int(np.prod(kernel))
        self.params = {"w": xp.asarray(rng.standard_normal((c_out, c_in, *kernel)) * np.sqrt(2 / fan_in), np.float32),
                       "b": xp.zeros(c_out, np.float32)}
        self.padding = padding

    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        y, pullback = dnnbind.conv(x, self.params["w"], self.params["b"], padding=self.padding)

        def back(dy: Array) -> Array:
            dx, self.grads["w"], self.grads["b"] = pullback(dy)
            return dx
        return y, back


class Dense(Layer):
    """A fully connected layer (N, F) -> (N, out), run as a 1-d convolution with a 1-wide kernel."""

    def __init__(self, xp: Any, rng: np.random.Generator, features: int, out: int) -> None:
        super().__init__()
        self.conv = Conv(xp, rng, features, out, (1,))
        self.params, self.grads = self.conv.params, self.conv.grads

    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        y, pullback = self.conv(x.reshape(*x.shape, 1), train)
        return y.reshape(y.shape[:2]), lambda dy: pullback(dy.reshape(*dy.shape, 1)).reshape(x.shape)


class BatchNorm(Layer):
    """Batch statistics (and running-statistics updates) in training, running statistics otherwise."""

    def __init__(self, xp: Any, channels: int) -> None:
        super().__init__()
        self.params = {"gamma": xp.ones(channels, np.float32), "beta": xp.zeros(channels, np.float32)}
        self.running_mean, self.running_var = xp.zeros(channels, np.float32), xp.ones(channels, np.float32)

    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        y, pullback = dnnbind.batchnorm(x, self.params["gamma"], self.params["beta"], running_mean=self.running_mean,
                                        running_var=self.running_var, training=train)

        def back(dy: Array) -> Array:
            dx, self.grads["gamma"], self.grads["beta"] = pullback(dy)
            return dx
        return y, back


class Stateless(Layer):
    """A parameter-free op: ``op(x) -> (y, pullback)``."""

    def __init__(self, op: Callable[[Array], tuple[Array, Pullback]], train_only: bool = False) -> None:
        super().__init__()
        self.op, self.train_only = op, train_only

    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        if self.train_only and not train:
            return x, lambda dy: dy
        return self.op(x)


class Flatten(Layer):
    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        return x.reshape(x.shape[0], -1), lambda dy: dy.reshape(x.shape)


class LSTMLast(Layer):
    """An LSTM over (batch, seq, features) whose output is the last step's hidden state (batch, hidden)."""

    def __init__(self, xp: Any, rng: np.random.Generator, features: int, hidden: int) -> None:
        super().__init__()
        bound = 1 / np.sqrt(hidden)
        shapes = {"w_ih": (4 * hidden, features), "w_hh": (4 * hidden, hidden), "b_ih": (4 * hidden,),
                  "b_hh": (4 * hidden,)}
        self.params = {k: xp.asarray(rng.uniform(-bound, bound, s), np.float32) for k, s in shapes.items()}
        self.xp, self.hidden = xp, hidden

    def __call__(self, x: Array, train: bool) -> tuple[Array, Pullback]:
        xs = x.transpose(1, 0, 2).copy()                          # the op takes (seq, batch, features)
        weights = [tuple(self.params[k] for k in ("w_ih", "w_hh", "b_ih", "b_hh"))]
        (y, hy, _), pullback = dnnbind.rnn(xs, weights, hidden_size=self.hidden)

        def back(dh: Array) -> Array:
            # y itself is not used downstream: its cotangent is zero; hy[0] gets dh
            dxs, _, _, dweights = pullback(self.xp.zeros_like(y), dh[None])
            self.grads.update(zip(("w_ih", "w_hh", "b_ih", "b_hh"), dweights[0]))
            return dxs.transpose(1, 0, 2)
        return hy[0], back


class Tape:
    """The pullbacks of one forward pass, in order; :meth:`backward` replays them in reverse."""

    def __init__(self) -> None:
        self.pullbacks: list[Pullback] = []

    def record(self, result: tuple[Array, Pullback]) -> Array:
        y, pullback = result
        self.pullbacks.append(pullback)
        return y

    def backward(self, dy: Array) -> Array:
        for pullback in reversed(self.pullbacks):
            dy = pullback(dy)
        return dy


class Sequential:
    """Layers applied in order; ``forward`` returns the output and the tape to run backwards."""

    def __init__(self, *layers: Layer) -> None:
        self.layers = layers

    def forward(self, x: Array, train: bool) -> tuple[Array, Tape]:
        tape = Tape()
        for layer in self.layers:
            x = tape.record(layer(x, train))
        return x, tape

    def parameters(self) -> list[tuple[Layer, str]]:
        return [(layer, name) for layer in self.layers for name in layer.params]


def cross_entropy(xp: Any, logits: Array, labels: Array) -> tuple[float, Array]:
    """Mean softmax cross-entropy (log-softmax op) and its gradient with respect to the logits."""
    logp, pullback = dnnbind.logsoftmax(logits)
    rows = xp.arange(len(labels))
    loss = -float(logp[rows, labels].mean())
    dlogp = xp.zeros_like(logp)
    dlogp[rows, labels] = -1.0 / len(labels)
    return loss, pullback(dlogp)


class Adam:
    """Adam over a model's parameters, updated in place."""

    def __init__(self, xp: Any, model: Sequential, lr: float = 0.01, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.model, self.lr, self.betas, self.eps, self.t = model, lr, betas, eps, 0
        self.moments = {(id(layer), name): (xp.zeros_like(layer.params[name]), xp.zeros_like(layer.params[name]))
                        for layer, name in model.parameters()}

    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        scale = self.lr * np.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
        for layer, name in self.model.parameters():
            m, v = self.moments[id(layer), name]
            g = layer.grads[name]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            layer.params[name] -= scale * m / (v ** 0.5 + self.eps)
