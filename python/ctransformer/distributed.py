"""Data-parallel training across processes and machines, over MPI (torch.distributed's names).

Start N processes with ``mpirun -np N python train.py`` (or ``mpirun -np N ctransformer-train TASK
--distributed``). Each process builds the same model, then::

    rank, world = ct.distributed.init_process_group()
    ddp = ct.distributed.DistributedDataParallel(model)    # rank 0's weights everywhere; hooks on
    shard = ct.distributed.Shard(rank, world)              # the gradients
    for step in ...:
        x, y = global_batch(step)                          # the same global batch on every rank
        with shard.split(x, y) as (x, y):                  # this rank's rows; dropout at global rows
            logits = model(x)
        loss = shard.scale_loss(local_mean_loss, local_tokens, global_tokens)
        optimizer.zero_grad()
        loss.backward()        # gradients averaged over ranks as backward goes (bucketed MPI_Iallreduce)
        optimizer.step()       # every rank applies the same update

The C++ core does the communication (ctransformer/distributed/*.hpp): no gradient goes through
Python. Without MPI in the build, ``is_available()`` is False and the rest raises RuntimeError.
"""
import contextlib
import os

import numpy as np

from ._core import distributed as _core

is_available = _core.is_available
GradientReducer = _core.GradientReducer
BatchShard = _core.BatchShard

_group = None   # (rank, world_size) once init_process_group has run


def init_process_group():
    """Join the job's processes (MPI_COMM_WORLD); returns (rank, world_size). Idempotent."""
    global _group
    if _group is None:
        _group = tuple(_core.init())
    return _group


def is_initialized():
    return _group is not None


def get_rank():
    return _group[0] if _group else 0


def get_world_size():
    return _group[1] if _group else 1


def local_world_size():
    """Processes of this job on this machine (Open MPI and MPICH tell their processes); 1 if unknown."""
    for name in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"):
        if os.environ.get(name, "").isdigit():
            return max(int(os.environ[name]), 1)
    return 1


def all_reduce(array):
    """Sum a float32/float64 NumPy array over every process, in place; returns it."""
    if get_world_size() > 1:
        _core.all_reduce(array)
    return array


def barrier():
    if get_world_size() > 1:
        _core.barrier()


def broadcast_bytes(data, root=0):
    return _core.broadcast_bytes(data, root) if get_world_size() > 1 else data


def abort(message, code=1):
    """Print `message` with this rank and stop every process of the job."""
    _core.abort(message, code)


class DistributedDataParallel:
    """Wraps a model for data-parallel training: calls go to the model; backward averages gradients.

    Construction broadcasts rank 0's parameters; from then on every ``loss.backward()`` that reaches
    the model's parameters returns with them averaged over all processes. ``bucket_cap_mb`` sizes the
    buckets (PyTorch's default is 25 MB; the models here are small, so 1 MB buckets let reduction
    start early in backward)."""

    def __init__(self, module, bucket_cap_mb=1.0):
        if not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb!r}")
        init_process_group()
        self.module = module
        self.reducer = GradientReducer(module.parameters(), bucket_bytes=max(int(bucket_cap_mb * 2**20), 4))

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.module, name)

    def communication_stats(self):
        """buckets and bytes per step, steps reduced, seconds spent waiting at backward's end."""
        return self.reducer.stats()


class Shard:
    """This process's part of every global batch: rows [begin, end), split as numpy.array_split does.

    ``Shard(0, 1)`` (one process) takes everything and changes nothing, so a task written with a
    Shard runs the same code with and without --distributed."""

    def __init__(self, rank=0, world_size=1):
        if not 0 <= rank < world_size:
            raise ValueError(f"Shard: rank must be in [0, world_size), got rank {rank} of {world_size}")
        self.rank, self.world_size = rank, world_size

    @property
    def distributed(self):
        return self.world_size > 1

    def rows(self, global_rows):
        """(begin, end) of this process's rows of a global batch of `global_rows`."""
        if global_rows < self.world_size:
            raise ValueError(f"a global batch of {global_rows} rows cannot be split over {self.world_size} "
                             f"processes: make the batch at least as large as the number of processes")
        base, extra = divmod(global_rows, self.world_size)
        begin = self.rank * base + min(self.rank, extra)
        return begin, begin + base + (self.rank < extra)

    @contextlib.contextmanager
    def split(self, *arrays):
        """This process's rows of each array (all with the same leading batch size), with dropout drawn
        at the rows' global positions for the duration of the block."""
        n = len(arrays[0])
        if any(len(a) != n for a in arrays):
            raise ValueError(f"Shard.split: the arrays have different batch sizes {[len(a) for a in arrays]}")
        if not self.distributed:
            yield arrays if len(arrays) > 1 else arrays[0]
            return
        begin, end = self.rows(n)
        local = tuple(np.ascontiguousarray(a[begin:end]) for a in arrays)
        with BatchShard(begin, end - begin, n):
            yield local if len(local) > 1 else local[0]

    def scale_loss(self, loss, local_count, global_count):
        """The loss to backward so that averaging gradients over processes gives the gradient of the
        global batch's mean: `loss` is the mean over this process's `local_count` items (tokens),
        of `global_count` in the global batch. One process: `loss` itself."""
        if not self.distributed:
            return loss
        return loss * (local_count * self.world_size / global_count)

    def global_mean(self, local_mean, local_count, global_count):
        """The global batch's mean of a value whose mean over this process's items is `local_mean`."""
        if not self.distributed:
            return float(local_mean)
        total = np.array([float(local_mean) * local_count], dtype=np.float64)
        return float(all_reduce(total)[0] / global_count)
