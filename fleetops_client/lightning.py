"""A PyTorch Lightning callback: ``Trainer(callbacks=[FleetOpsCallback()])`` and the training code is unchanged.

It reports each optimizer step (``trainer.global_step``), each checkpoint Lightning writes (timed around the
strategy's checkpoint I/O, where the write happens, on global rank 0), the restore when ``fit`` resumes from a
checkpoint (at the start of training, when it trains again), and the run completed when ``fit`` ends normally. Under
DDP it watches the model as ``fleetops_client.pytorch.watch_ddp`` does (per-rank compute, local gradient norms).
Works with ``lightning`` and with the older ``pytorch_lightning`` package.
"""

from __future__ import annotations

import os

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

import fleetops_client
from fleetops_client.client import Client


class FleetOpsCallback(Callback):
    def __init__(self, client: Client | None = None):
        self.client = client
        self._resumed_from: int | None = None
        self._reported_step = -1

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.client is None:
            self.client = fleetops_client.init(rank=trainer.global_rank, world_size=trainer.world_size)
        io = trainer.strategy.checkpoint_io
        if getattr(io.save_checkpoint, "_fleetops", False):
            return
        write, client = io.save_checkpoint, self.client

        def timed(checkpoint, path, storage_options=None):
            with client.checkpoint(int(checkpoint.get("global_step", trainer.global_step))) as w:
                write(checkpoint, path, storage_options=storage_options)
                w.bytes = os.path.getsize(path) if os.path.isfile(path) else 0

        timed._fleetops = True
        io.save_checkpoint = timed

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self._resumed_from = int(checkpoint.get("global_step", 0))

    def on_train_start(self, trainer, pl_module) -> None:
        from torch.nn.parallel import DistributedDataParallel

        model = trainer.strategy.model
        if isinstance(model, DistributedDataParallel):
            from fleetops_client.pytorch import watch_ddp

            watch_ddp(self.client, model)
        if self._resumed_from is not None:
            self.client.restored(self._resumed_from)
            self._reported_step = self._resumed_from

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step != self._reported_step:  # with gradient accumulation, a batch is not always a step
            self._reported_step = step
            self.client.step(step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.client.completed()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.client is not None:
            self.client.flush(timeout=10)
