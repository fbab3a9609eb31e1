"""A Hugging Face Transformers callback: ``Trainer(..., callbacks=[FleetOpsCallback()])``, training code unchanged.

It reports each optimizer step (``state.global_step``), each checkpoint the Trainer saves (the Trainer calls no hook
before a save: training is blocked from the last callback before it, the end of the step or epoch or the evaluation
that asked for it, to ``on_save``; an evaluation in between is left out), the restore when ``train`` resumes from a
checkpoint (its global step at the start of training), and the run completed when ``train`` ends. Transformers gives
a callback no hook before its all-reduce, so no gradient norms are sent from here.
"""

from __future__ import annotations

import os
import time

from transformers import TrainerCallback

import fleetops_client
from fleetops_client.client import Client


def _size(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


class FleetOpsCallback(TrainerCallback):
    def __init__(self, client: Client | None = None):
        self.client = client
        self._save_from: tuple[float, float] | None = None  # (wall, monotonic) of the last callback before a save

    def on_train_begin(self, args, state, control, **kwargs):
        if self.client is None:
            self.client = fleetops_client.init(rank=args.process_index, world_size=args.world_size)
        if state.global_step > 0:  # resumed from a checkpoint
            self.client.restored(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self.client.step(state.global_step)
        self._mark()

    def on_epoch_end(self, args, state, control, **kwargs):
        self._mark()  # an "epoch" save strategy saves after this

    def on_evaluate(self, args, state, control, **kwargs):
        self._mark()  # an evaluation ran first ("best" saves after it): the save blocks from here

    def _mark(self) -> None:
        self._save_from = (time.time(), time.monotonic())

    def on_save(self, args, state, control, **kwargs):
        if self._save_from is None:
            return
        (started, started_m), self._save_from = self._save_from, None
        step = state.global_step
        folder = os.path.join(args.output_dir, f"checkpoint-{step}")
        self.client.checkpoint_started(step, at=started)
        self.client.checkpoint_completed(step, blocking_s=time.monotonic() - started_m, bytes=_size(folder))

    def on_train_end(self, args, state, control, **kwargs):
        self.client.completed()
        self.client.flush(timeout=10)
