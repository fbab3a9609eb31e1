import logging
import secrets
from contextlib import contextmanager
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from runs.domain.simulator import LLAMA3_RATE_PER_GPU_HOUR, SimulationConfig, simulate
from runs.management.commands.simulate import ingest

DEMO_DAYS = 21
# At Llama 3's rate a 256-GPU run fails about once a week: ten times that gives the pages a few dozen stops.
DEMO_RATE_FACTOR = 10


def demo_config(*, now, seed: int, days: float = DEMO_DAYS) -> SimulationConfig:
    """A 256-GPU run over the last `days`, ending at `now` so that the pages look live; maintenance once a week.

    The start is whole minutes, so that loading again within the same minutes or days gives the same event ids
    (and stores nothing new).
    """
    start = (now - timedelta(days=days)).replace(second=0, microsecond=0)
    return SimulationConfig(
        gpus=256,
        days=days,
        seed=seed,
        start=start,
        rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * DEMO_RATE_FACTOR,
        planned_stops=max(round(days / 7), 1),
        completes=False,
        model_params=70_000_000_000,
        step_s=15.0,
        cluster="demo-slurm",
        run="llama3-70b-pretrain",
        source="fleetops/demo",
    )


@contextmanager
def _quiet(logger_name: str):
    """Without a broker every apply task runs in-process and logs a line: the demo's dozens would bury the login."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


class Command(BaseCommand):
    help = "Load a simulated run (256 GPUs, the last three weeks) through the event intake; create the demo login."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--days", type=float, default=DEMO_DAYS, help=f"Days of history (default {DEMO_DAYS}).")
        parser.add_argument("--login", action="store_true", help="Also create (or reset) a demo superuser.")
        parser.add_argument("--username", default="demo")

    def handle(self, *args, seed, days, login, username, **options):
        with _quiet("celery.app.trace"):
            delivery = ingest(simulate(demo_config(now=timezone.now(), seed=seed, days=days)))
        self.stdout.write(f"Demo fleet: {delivery.stored} events stored, {delivery.duplicates} already there.")
        if not login:
            return
        password = secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": True})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(self.style.SUCCESS(f"Demo login: {username} / {password}"))
