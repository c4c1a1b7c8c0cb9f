"""dnnbind.jax: a jitted training step of a small CNN through dnnbind's ops (XLA FFI calls running dnnbind's
CPU backend) against the same model on JAX's own primitives (jax.lax / jax.nn), both on the CPU."""
from __future__ import annotations

import importlib.util
import sys

from common import Row, median_seconds, print_table

#: dnnbind.jax's step may take this many times XLA's own (each op is a Python handler on numpy arrays)
GOAL = 2.0


def _models():
    import jax
    import jax.numpy as jnp
    from jax import lax

    import dnnbind.jax as dj

    def ours(p, x):
        h = dj.maxpool(dj.activation(dj.conv(x, p["w1"], p["b1"], padding=1), "relu"), 2)
        h = dj.activation(dj.conv(h, p["w2"], p["b2"], padding=1), "relu")
        return dj.logsoftmax(h.mean(axis=(2, 3)) @ p["w3"], axis=1)

    def conv(x, w, b):
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW")) + b[None, :, None, None]

    def theirs(p, x):
        h = lax.reduce_window(jax.nn.relu(conv(x, p["w1"], p["b1"])), -jnp.inf, lax.max, (1, 1, 2, 2),
                              (1, 1, 2, 2), "VALID")
        h = jax.nn.relu(conv(h, p["w2"], p["b2"]))
        return jax.nn.log_softmax(h.mean(axis=(2, 3)) @ p["w3"], axis=1)

    return ours, theirs


def training_step() -> Row:
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    normal = lambda *s: jnp.asarray(rng.standard_normal(s) * 0.2, jnp.float32)     # noqa: E731
    params = {"w1": normal(16, 3, 3, 3), "b1": normal(16), "w2": normal(32, 16, 3, 3), "b2": normal(32),
              "w3": normal(32, 10)}
    x, labels = normal(32, 3, 32, 32), jnp.asarray(rng.integers(0, 10, 32))

    def step_of(model):
        def loss(p):
            return -jnp.mean(jnp.take_along_axis(model(p, x), labels[:, None], axis=1))

        @jax.jit
        def step(p):
            grads = jax.grad(loss)(p)
            return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads)
        return lambda: jax.block_until_ready(step(params))

    ours, theirs = (step_of(m) for m in _models())
    return Row("jax.jit training step, small CNN (batch 32, 32x32)", median_seconds(ours, repeats=7, warmup=2),
               median_seconds(theirs, repeats=7, warmup=2), "jax.lax / jax.nn, CPU", GOAL)


def main() -> list[Row]:
    if importlib.util.find_spec("jax") is None:
        print("\ndnnbind.jax: jax is not installed (pip install \"dnnbind[jax]\"); skipped")
        return []
    rows = [training_step()]
    print_table("dnnbind.jax (XLA FFI)", rows)
    return rows


if __name__ == "__main__":
    rows = main()
    sys.exit(0 if all(r.met for r in rows) else 1)
