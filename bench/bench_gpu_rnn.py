"""GPU benchmark of the cuDNN backend's rnn: LSTM forward + backward against torch.nn.LSTM (cuDNN), same run.

Sequence 50, batch 64, input 512, hidden 1024, 2 layers, float16 and float32 (TF32 off on both sides:
bench_gpu.main turns it off for torch, dnnbind's default keeps float32 in full precision). dnnbind runs
with weights packed once (``pack_rnn_weights``, as torch's module keeps its flat weight buffer) and
computes every gradient its pullback returns (dx, dh0, dc0, dweights); torch's autograd computes the
gradients of x and every parameter. Goal: <= 1.05x. Part of bench/bench_gpu.py; runs alone as
``PYTHONPATH=src python bench/bench_gpu_rnn.py``.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, print_table  # noqa: E402

SEQ, BATCH, INPUT, HIDDEN, LAYERS = 50, 64, 512, 1024, 2
GOAL_RNN = 1.05

Timer = Callable[..., float]        # bench_gpu.seconds_per_iteration(run, sync, iterations=...)


def rnn_rows(cupy: Any, torch: Any, dtype: str, timer: Timer) -> list[Row]:
    """One row: LSTM forward + backward, dnnbind (packed weights) against torch.nn.LSTM on cuDNN."""
    import dnnbind
    from dnnbind.highlevel.cudnn.rnn import pack_rnn_weights

    lstm = torch.nn.LSTM(INPUT, HIDDEN, num_layers=LAYERS, device="cuda", dtype=getattr(torch, dtype))
    names = [f"{kind}_l{layer}" for layer in range(LAYERS) for kind in ("weight_ih", "weight_hh", "bias_ih",
                                                                        "bias_hh")]
    params = [getattr(lstm, n) for n in names]
    weights = [tuple(cupy.asarray(p.detach()).copy() for p in params[4 * i:4 * i + 4]) for i in range(LAYERS)]
    packed = pack_rnn_weights(weights, mode="lstm", hidden_size=HIDDEN, num_layers=LAYERS)
    x = (cupy.random.standard_normal((SEQ, BATCH, INPUT), dtype=cupy.float32) / math.sqrt(INPUT)).astype(dtype)
    dy = cupy.random.standard_normal((SEQ, BATCH, HIDDEN), dtype=cupy.float32).astype(dtype)

    def ours() -> None:
        _, pullback = dnnbind.rnn(x, packed, mode="lstm", hidden_size=HIDDEN, num_layers=LAYERS)
        pullback(dy)

    xt = torch.as_tensor(x, device="cuda").requires_grad_()
    dyt = torch.as_tensor(dy, device="cuda")

    def theirs() -> None:
        y, _ = lstm(xt)
        torch.autograd.grad(y, [xt] + params, dyt)

    sync = torch.cuda.synchronize
    t_ours = timer(ours, sync, iterations=10)
    t_theirs = timer(theirs, sync, iterations=10)
    return [Row(f"LSTM fwd+bwd {dtype} seq {SEQ} batch {BATCH} {INPUT}->{HIDDEN} x{LAYERS}", t_ours, t_theirs,
                "torch.nn.LSTM (cuDNN)", GOAL_RNN)]


def main() -> list[Row]:
    import bench_gpu
    env = bench_gpu.environment()
    if isinstance(env, str):
        print(f"GPU benchmark skipped: {env}")
        return []
    cupy, torch = env
    torch.backends.cudnn.allow_tf32 = False
    rows = [row for dtype in ("float16", "float32") for row in rnn_rows(cupy, torch, dtype,
                                                                        bench_gpu.seconds_per_iteration)]
    print_table("GPU: dnnbind's cuDNN rnn vs torch.nn.LSTM (same device, same run)", rows)
    return rows


if __name__ == "__main__":
    main()
