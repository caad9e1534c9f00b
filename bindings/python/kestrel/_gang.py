"""A gang's rank in Python: who this process is (KESTREL_RANK / KESTREL_WORLD_SIZE, which kestreld sets
for every rank of a `--replicas N` job), the rows of each global batch it trains on, and a vote every
rank takes part in (so that all stop at the same step). Used by kestrel.keras."""
import os
from typing import Any, Tuple

import numpy as np


def world() -> Tuple[int, int]:
    """(rank, world size) of this process: (0, 1) outside a gang."""
    size = int(os.environ.get("KESTREL_WORLD_SIZE") or 1)
    rank = int(os.environ.get("KESTREL_RANK") or 0)
    return (rank, size) if size > 1 else (0, 1)


def is_leader() -> bool:
    """Rank 0 (or no gang): the one that reports metrics and writes checkpoints."""
    return world()[0] == 0


def shard(n: int, batch_size: int) -> Tuple[Any, int]:
    """The rows of n this rank trains on, every global batch of batch_size cut into equal parts a
    rank (rank r takes the r-th part), and the per-rank batch size. A last global batch too small
    to give every rank a row is left out; one that does not split evenly loses its remainder."""
    rank, size = world()
    if size == 1:
        return np.arange(n), batch_size
    if batch_size % size:
        raise ValueError(f"batch_size={batch_size} is the global batch: it must be a multiple of the {size} ranks")
    local = batch_size // size
    parts = []
    for start in range(0, n, batch_size):
        rows = min(batch_size, n - start) // size   # the last batch: as many rows a rank as all can have
        if rows == 0:
            break
        parts.append(np.arange(start + rank * rows, start + (rank + 1) * rows))
    return (np.concatenate(parts) if parts else np.arange(0)), local


def agree(flag: bool, backend: str) -> bool:
    """True on every rank when flag is true on any (a collective: every rank must call it)."""
    if world()[1] == 1:
        return flag
    if backend == "jax":
        from jax.experimental import multihost_utils
        return bool(np.max(multihost_utils.process_allgather(np.array([int(flag)], dtype=np.int32))))
    if backend == "torch":
        import torch
        import torch.distributed as dist
        t = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())
    return flag
