"""The demo's fleet kept alive while `make run` serves it: what its node agents and its trainer would send.

The simulated history stops when the demo loads; without more events the embedded worker's watchdogs find, rightly,
every node silent five minutes later and the run hung ten minutes after its restart. So each minute (settings
DEMO_FEED, beat's "demo-feed"), through the event intake like any source:
- a heartbeat from every node of the demo cluster that is not in repair or retired;
- the trainer: a run put back on its nodes (by FleetOps' drain-and-replace or by a person) restores from its last
  durable checkpoint once RELOAD has passed, then steps each minute at the run's pace and writes a durable
  checkpoint every interval.
No new faults: the demo's fault stays the one it loaded. Event ids are the minute's, so a feed run twice in a minute
stores nothing twice.
"""

from datetime import datetime, timedelta

from runs.domain.cloudevents import SPECVERSION, format_time
from runs.domain.demo import DEMO_CLUSTER, DEMO_RUN
from runs.models import Checkpoint, Event, Node, Run
from runs.services import own_events_ingest

FEED_SOURCE = "fleetops/demo-feed"
RELOAD = timedelta(minutes=3)  # from the job running again to training again
STEP_S = 15.0  # the demo run's step (runs.domain.demo.demo_config)
CHECKPOINT_BLOCKING_S = 30.0
_SILENT_NODES = ("in_repair", "retired")  # no agent answers there


def demo_feed(*, now: datetime) -> int:
    """This minute's events of the demo fleet, stored through the intake (applied on commit); returns how many were
    new. Nothing when there is no demo run, or it has ended."""
    run = Run.objects.filter(name=DEMO_RUN, ended_at__isnull=True).first()
    if run is None:
        return 0
    minute = now.replace(second=0, microsecond=0)
    events = [
        _event("node.heartbeat", now, f"hb-{host}-{minute:%Y%m%dT%H%M}", node=host, cluster=DEMO_CLUSTER)
        for host in Node.objects.filter(cluster__name=DEMO_CLUSTER)
        .exclude(state__in=_SILENT_NODES)
        .order_by("hostname")
        .values_list("hostname", flat=True)
    ]
    events += _trainer(run, now, minute)
    return len(own_events_ingest(events=events).accepted)


def _trainer(run: Run, now: datetime, minute: datetime) -> list[dict]:
    key = f"{run.name}-{minute:%Y%m%dT%H%M}"
    down = run.interruptions.filter(resumed_at__isnull=True).order_by("-fault_at").first()
    if down is not None:
        if down.running_at is None or now - down.running_at < RELOAD:
            return []  # waiting for the job to run again, or still loading
        durable = (
            Checkpoint.objects.filter(run=run, durable_at__lte=down.fault_at)
            .order_by("-step")
            .values_list("step", flat=True)
            .first()
        )
        # One restore an interruption, whenever the feed comes round: an intake slow to apply it gets it once.
        restored = f"restored-{run.name}-{down.pk}"
        return [_event("run.restored", now, restored, run=run.name, from_step=durable or 0)]
    last = Event.objects.filter(run_name=run.name, type="run.step").order_by("-time").values("time", "data").first()
    resumed = run.interruptions.order_by("-resumed_at").values_list("resumed_at", "resumed_from_step").first()
    since, step = (last["time"], last["data"]["step"]) if last else (run.started_at, 0)
    if resumed and resumed[0] and resumed[0] > since:  # trained again since its last step: from the restored step
        since, step = resumed[0], resumed[1] if resumed[1] is not None else step
    steps = int((now - since).total_seconds() // STEP_S)
    if steps < 1:
        return []
    step += steps
    events = [_event("run.step", now, f"step-{key}", run=run.name, step=step)]
    written = Checkpoint.objects.filter(run=run, completed_at__isnull=False).order_by("-completed_at").first()
    interval = timedelta(seconds=run.checkpoint_interval_s or 1800)
    if written is None or now - written.completed_at >= interval:
        after = f"{run.name}-after-{written.pk if written else 0}"  # one write an interval, however slow the apply
        started = now - timedelta(seconds=CHECKPOINT_BLOCKING_S)
        size = written.bytes if written is not None and written.bytes else None
        events += [
            _event("checkpoint.started", started, f"ckpt-start-{after}", run=run.name, step=step),
            _event(
                "checkpoint.completed",
                now,
                f"ckpt-done-{after}",
                run=run.name,
                step=step,
                blocking_s=CHECKPOINT_BLOCKING_S,
                tier="durable",
                **({"bytes": size} if size else {}),
            ),
        ]
    return events


def _event(type_: str, at: datetime, id_: str, **data) -> dict:
    return {
        "specversion": SPECVERSION,
        "id": id_,
        "source": FEED_SOURCE,
        "type": type_,
        "time": format_time(at),
        "data": data,
    }
