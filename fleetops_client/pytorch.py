"""PyTorch helpers: what a DDP job reports with its training code unchanged but for a few calls (docs/CLIENT.md).

- ``watch_ddp(client, model)``: a DDP communication hook and a forward pre-hook. Each step it times this rank's
  compute, from the forward's start to the moment backward hands DDP its last gradient bucket, before the rank waits
  on the others in the all-reduce (on a GPU with CUDA events, read a step later: see _DDPWatch). In synchronous data
  parallelism every rank's wall-clock step is the slowest rank's, so only the compute shows a straggler. On the
  sampled steps (``Client.wants_grad_norm``) it takes this rank's local gradient norm from the buckets before they
  are all-reduced, for the cross-replica silent-data-corruption check. The all-reduce itself is PyTorch's default
  hook's.
- ``save`` and ``async_save``: torch.distributed.checkpoint's, timed; for the asynchronous save the blocking is the
  copy to host memory, and the write is reported durable when its future completes.
- ``load``: torch.distributed.checkpoint's load, then ``run.restored`` from that step.
"""

from __future__ import annotations

import logging
import math
import time

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from fleetops_client.client import Client

log = logging.getLogger("fleetops_client")


class _DDPWatch:
    """On CPU the compute is timed with the wall clock. On a GPU the hooks run when the kernels are queued, not when
    they finish, so the span is two CUDA events on the current stream instead (the forward's start, the last bucket
    ready), read without a synchronisation once the later one has completed: a step late, which the step-time
    windows average over anyway."""

    def __init__(self, client: Client, process_group):
        self.client = client
        self.process_group = process_group
        self.started = None  # perf_counter, or a CUDA event, at this step's forward
        self.timed: list = []  # (start, end) CUDA event pairs not yet read
        self.squares = []

    def forward_started(self, module, args) -> None:
        self._read_gpu_times()
        if torch.cuda.is_available() and _on_cuda(module):
            self.started = torch.cuda.Event(enable_timing=True)
            self.started.record()
        else:
            self.started = time.perf_counter()
        self.squares = []

    def bucket_ready(self, state, bucket):  # unannotated: DDP checks annotations, and this module's are strings
        if self.client.wants_grad_norm(self.client.current_step):
            self.squares.append(bucket.buffer().detach().double().pow(2).sum())
        if bucket.is_last():
            if isinstance(self.started, float):
                self.client.compute_time(time.perf_counter() - self.started)
            elif self.started is not None:
                ended = torch.cuda.Event(enable_timing=True)
                ended.record()
                self.timed.append((self.started, ended))
            self.started = None
            if self.squares:  # read when the step is reported (Client.step)
                self.client.local_grad_norm(torch.stack(self.squares).sum().sqrt())
                self.squares = []
        return allreduce_hook(self.process_group, bucket)

    def _read_gpu_times(self) -> None:
        while self.timed and self.timed[0][1].query():
            start, end = self.timed.pop(0)
            self.client.compute_time(start.elapsed_time(end) / 1000)
        del self.timed[:-8]  # never more than a few steps behind


def _on_cuda(module) -> bool:
    parameter = next(module.parameters(), None)
    return parameter is not None and parameter.is_cuda


def watch_ddp(client: Client, model: torch.nn.parallel.DistributedDataParallel, *, process_group=None) -> None:
    """Time each step's compute on this rank and take its local gradient norm on the sampled steps (module doc)."""
    watch = _DDPWatch(client, process_group)
    try:
        model.register_comm_hook(None, watch.bucket_ready)
    except RuntimeError as exc:  # a hook of its own already (PowerSGD, fp16 compression): DDP allows one
        log.warning("fleetops_client: no DDP hook (%s); step times are wall-clock and no gradient norm is sent", exc)
        return
    model.register_forward_pre_hook(watch.forward_started)


def _bytes(state_dict) -> int:
    total = 0
    stack = [state_dict]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            total += item.numel() * item.element_size()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "state_dict"):
            stack.append(item.state_dict())
    return total


def save(client: Client, step: int, state_dict, *, checkpoint_id, **kwargs) -> None:
    """torch.distributed.checkpoint.save, reported: training is blocked for the whole write."""
    with client.checkpoint(step, bytes=_bytes(state_dict), tier="durable"):
        dcp.save(state_dict, checkpoint_id=checkpoint_id, **kwargs)


def async_save(client: Client, step: int, state_dict, *, checkpoint_id, **kwargs):
    """torch.distributed.checkpoint.async_save, reported: blocked while the state is copied to host memory, completed
    and durable when the background write is done. Returns the future of that write."""
    with client.checkpoint(step, bytes=_bytes(state_dict), tier="durable") as write:
        result = dcp.async_save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
        future = result
        if hasattr(result, "upload_completion"):  # an AsyncSaveResponse: staging is asynchronous too, so wait for it
            result.staging_completion.result()
            future = result.upload_completion
        write.durable_when(future)
    return future


def load(client: Client, step: int, state_dict, *, checkpoint_id, **kwargs) -> None:
    """torch.distributed.checkpoint.load into ``state_dict``, then ``run.restored`` from ``step``."""
    dcp.load(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    client.restored(step)


def grad_norm(parameters) -> float:
    """The gradient norm of ``parameters`` (for a loop without DDP: pass it to ``Client.grad_norm``)."""
    squares = [p.grad.detach().double().pow(2).sum() for p in parameters if p.grad is not None]
    return math.sqrt(float(torch.stack(squares).sum())) if squares else 0.0
