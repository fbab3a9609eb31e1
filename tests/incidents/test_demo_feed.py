"""The demo fleet kept alive while `make run` serves it (incidents/demo/feed.py): the watchdogs of the embedded
worker find nothing wrong with a healthy demo, and its open fault heals as a fleet's would."""

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from incidents.demo.feed import demo_feed
from incidents.detection import services as detection
from incidents.models import Alert, Incident
from runs.models import Checkpoint, Event, Run


@pytest.mark.reliability(
    "make run's demo fell apart minutes after it loaded: its history stopped, so the embedded worker found every "
    "node silent (35 heartbeat alerts on the live incident) and would have found the run hung",
    how="manage.py load_demo --days 2, then the feed and the hang and heartbeat watchdogs each minute for 40 min of "
    "travelled time",
    outcome="no heartbeat alert and no hang; the run put back on a spare by FleetOps restores from its last durable "
    "checkpoint, which mitigates the live incident, then steps and writes a checkpoint every interval",
)
@pytest.mark.django_db(transaction=True)
def test_the_demo_fleet_stays_alive_and_its_fault_heals_while_served():
    call_command("load_demo", "--days", "2", stdout=StringIO())
    (live,) = Incident.objects.filter(status="triggered")
    run = Run.objects.get(name="llama3-70b-pretrain")
    durable = Checkpoint.objects.filter(run=run, durable_at__lte=live.started_at).order_by("-step").first()
    start = timezone.now()
    assert not detection.heartbeats_detect(now=start + timedelta(seconds=10))  # load_demo sent a round itself
    for minute in range(1, 41):
        with time_machine.travel(start + timedelta(minutes=minute, seconds=5), tick=False):
            now = timezone.now()
            demo_feed(now=now)
            assert demo_feed(now=now) == 0  # a second run in the same minute stores nothing
            detection.heartbeats_detect(now=now)
            detection.hangs_detect(now=now)

    assert not Alert.objects.filter(kind__in=("heartbeat", "hang")).exists()
    live.refresh_from_db()
    assert live.status == "mitigated"
    restored = Event.objects.get(source="fleetops/demo-feed", type="run.restored")
    assert restored.data["from_step"] == durable.step
    interruption = run.interruptions.get(fault_at=live.started_at)
    assert interruption.resumed_at == restored.time and interruption.resumed_from_step == durable.step
    run.refresh_from_db()
    assert run.state == "running" and run.last_step > durable.step
    written = list(
        Checkpoint.objects.filter(run=run, completed_at__lte=timezone.now() + timedelta(hours=1))
        .order_by("completed_at")
        .values_list("completed_at", flat=True)
    )
    fed = [at for at in written if at > restored.time]
    assert fed, "no checkpoint after the restore"
    interval = timedelta(seconds=run.checkpoint_interval_s)
    tail = written[-len(fed) - 1 :]  # the last one before the restore, then the feed's
    assert all(b - a >= interval for a, b in zip(tail, tail[1:], strict=False))  # one an interval
