"""Training across processes: models built from dnnbind layers under DistributedDataParallel (two
processes, gloo, CPU) match single-process training on the whole batch, step for step. Nothing in
dnnbind's handles, caches or dropout states assumes one process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ddp_models

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def distributed_histories(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both models trained by two worker processes under DDP (rank 0's parameters after every step)."""
    tmp = tmp_path_factory.mktemp("ddp")
    out = tmp / "rank0.pt"
    src = str(HERE.parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(HERE)]), "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen([sys.executable, str(HERE / "ddp_worker.py"), str(rank), "2", str(tmp / "store"),
                                 str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for rank in range(2)]
    logs = [w.communicate(timeout=240)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), "\n".join(logs)
    return torch.load(out)


@pytest.mark.parametrize("name", sorted(ddp_models.MODELS))
def test_ddp_two_processes_match_single_process_training(name: str, distributed_histories: dict) -> None:
    expected = ddp_models.train(name, ddp_models.build(name))
    distributed = distributed_histories[name]
    assert len(distributed) == len(expected) == ddp_models.STEPS
    for step, (ours, theirs) in enumerate(zip(distributed, expected)):
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"step {step}")
    assert not all(torch.equal(a, b) for a, b in zip(expected[0], ddp_models.build(name).parameters())), \
        "training changed nothing: the comparison would be vacuous"
