"""The Lightning and Transformers callbacks with the real frameworks (on CPU) against a live FleetOps: training code
unchanged but for the callback, each step, checkpoint (timed) and the run's end arrive, and a resumed fit reports
the restore from the checkpoint's step."""

import importlib.util

import pytest

from fleetops_client import Client, Config
from runs.models import Checkpoint, Event, Run
from tests.conftest import make_token, require

pytestmark = pytest.mark.django_db(transaction=True)


def _client(live_server, tmp_path, run: str) -> Client:
    """A client of the run; each call is the job's next process (a new attempt's incarnation)."""
    token = make_token(f"{run}-trainer-{len(list(tmp_path.iterdir()))}", ["events:write"], role="trainer")
    config = Config(url=live_server.url, token=token, run=run, incarnation=f"{run}-{len(list(tmp_path.iterdir()))}")
    config.spool_dir, config.flush_s, config.step_every_s = str(tmp_path / "spool"), 0.05, 0.0
    return Client(config)


def _steps(run: str) -> list[int]:
    return sorted(Event.objects.filter(run_name=run, type="run.step").values_list("data__step", flat=True))


def _assert_trained_twenty_steps(run: str) -> None:
    """Every step of a 20-step fit, and its two checkpoints (every 10 steps) completed, timed and sized."""
    assert _steps(run) == list(range(1, 21))
    written = Checkpoint.objects.filter(run__name=run, status="completed").order_by("step")
    assert [(c.step, c.tier) for c in written] == [(10, "durable"), (20, "durable")]
    assert all(c.blocking_s > 0 and c.bytes > 0 for c in written)


def test_lightning_reports_steps_checkpoints_the_restore_and_the_end(live_server, tmp_path):
    require(importlib.util.find_spec("lightning") is not None, "PyTorch Lightning (make test installs it)")
    import lightning
    import torch

    from fleetops_client.lightning import FleetOpsCallback

    class Regression(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(512, 8), torch.randn(512, 1))

    def fit(max_steps: int, resume: str | None) -> None:
        client = _client(live_server, tmp_path, "lightning-run")
        saving = lightning.pytorch.callbacks.ModelCheckpoint(
            dirpath=tmp_path / "ckpt", every_n_train_steps=10, save_top_k=-1, filename="{step}"
        )
        trainer = lightning.Trainer(
            max_steps=max_steps,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[FleetOpsCallback(client), saving],
        )
        trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=16), ckpt_path=resume)
        assert client.close(timeout=30)

    fit(20, None)
    _assert_trained_twenty_steps("lightning-run")
    assert Event.objects.filter(run_name="lightning-run", type="run.completed").count() == 1

    fit(30, str(tmp_path / "ckpt" / "step=20.ckpt"))
    restored = Event.objects.get(run_name="lightning-run", type="run.restored")
    assert restored.data["from_step"] == 20
    assert _steps("lightning-run") == list(range(1, 31))


def test_transformers_reports_steps_checkpoints_the_restore_and_the_end(live_server, tmp_path):
    require(importlib.util.find_spec("transformers") is not None, "Transformers (make test installs it)")
    import torch
    import transformers

    from fleetops_client.transformers import FleetOpsCallback

    class Regression(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}

    rows = [{"x": torch.randn(8), "labels": torch.randn(1)} for _ in range(512)]

    def train(max_steps: int, resume: bool) -> None:
        client = _client(live_server, tmp_path, "hf-run")
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "out"),
            max_steps=max_steps,
            save_steps=10,
            per_device_train_batch_size=16,
            report_to=[],
            use_cpu=True,
            logging_steps=1000,
            save_strategy="steps",
            remove_unused_columns=False,
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=Regression(), args=args, train_dataset=rows, callbacks=[FleetOpsCallback(client)]
        )
        trainer.train(resume_from_checkpoint=resume or None)
        assert client.close(timeout=30)

    train(20, False)
    _assert_trained_twenty_steps("hf-run")

    train(30, True)
    assert Event.objects.get(run_name="hf-run", type="run.restored").data["from_step"] == 20
    assert _steps("hf-run") == list(range(1, 31))
    assert Run.objects.get(name="hf-run").state == Run.State.COMPLETED
