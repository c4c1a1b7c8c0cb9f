"""One rank of the DistributedDataParallel test: python ddp_worker.py RANK WORLD STORE OUT (every model)."""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ddp_models


def main(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        histories = {name: ddp_models.train(name, DistributedDataParallel(ddp_models.build(name)), rank, world)
                     for name in sorted(ddp_models.MODELS)}
        if rank == 0:
            torch.save(histories, out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
