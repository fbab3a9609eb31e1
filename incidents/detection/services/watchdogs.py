"""Watchdogs on the beat schedule: hangs, silent runs, lost heartbeats, stragglers, silent data corruption
and lemon nodes, found from the record and the event log as of `now`."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings

from incidents.detection.services.events import DETECTOR, WATCHDOG, _record
from incidents.domain import detectors
from incidents.domain.alert_kinds import AlertKind
from incidents.domain.detectors import Finding
from incidents.models import Alert
from runs.domain.cloudevents import format_time
from runs.models import Event, Interruption, Node, Run
from runs.selectors import runs_heard_until_get
from runs.services import own_events_ingest


def hangs_detect(*, now: datetime) -> int:
    """Running runs silent for too long: written back as run.failed (kind hang), which opens the incident."""
    found = []
    for run in Run.objects.filter(state=Run.State.RUNNING):
        times = list(
            Event.objects.filter(run_name=run.name, type="run.step")
            .order_by("-time")
            .values_list("time", flat=True)[:21]
        )
        intervals = [(a - b).total_seconds() for a, b in zip(times, times[1:], strict=False)]
        resumed = (
            run.interruptions.filter(resumed_at__isnull=False)
            .order_by("-resumed_at")
            .values_list("resumed_at", flat=True)
            .first()
        )
        # The trainer's heartbeat (fleetops_client, between steps: an evaluation, a long load) is a sign of life too.
        beat = (
            Event.objects.filter(run_name=run.name, type="run.heartbeat")
            .order_by("-time")
            .values_list("time", flat=True)
            .first()
        )
        last = max([t for t in (run.last_step_at, resumed, beat) if t is not None], default=None)
        started = run.attempts.order_by("-number").values_list("started_at", flat=True).first() or run.started_at
        if last is not None and started is not None and last < started:
            # A new attempt (requeued after a fault) is silent since it started, loading its checkpoint, not since
            # the last step before the fault: the demo's run put back on a spare was "hung" 3 min into its reload.
            last = None
        finding = detectors.hang(
            run=run.name,
            last_step_at=last,
            started_at=started,
            step_intervals_s=intervals,
            now=now,
            k=settings.HANG_K,
            floor_s=settings.HANG_FLOOR_S,
        )
        if finding is not None:
            silent_since = last or started
            found.append(
                {
                    "specversion": "1.0",
                    "source": WATCHDOG,
                    "id": f"hang:{run.name}:{silent_since.isoformat()}",
                    "type": "run.failed",
                    # The hang began after the last sign of progress, not at it: stamped at that instant it would
                    # end the attempt before a restore of the same instant resumed it (docs/DOMAIN.md section 2).
                    "time": _ts(silent_since + timedelta(microseconds=1)),
                    "data": {
                        "run": run.name,
                        "reason": finding.explanation,
                        "kind": "hang",
                        "category": "nccl_watchdog",
                        "detected_at": _ts(now),
                    },
                }
            )
    return _emit(found)


def silent_runs_detect(*, now: datetime) -> int:
    """Runs restarting with no event for longer than RUN_SILENT_S: an alert on the run's incident (their downtime stops
    growing at the same moment, runs.selectors.runs_heard_until_get). The run's next event clears it (_detect)."""
    restarting = list(Run.objects.filter(state=Run.State.RESTARTING, ended_at=None))
    silence = timedelta(seconds=settings.RUN_SILENT_S)
    heard = runs_heard_until_get(runs=restarting)
    firing = set(Alert.objects.filter(kind=AlertKind.RUN_SILENT, status="firing").values_list("run_id", flat=True))
    recorded = 0
    for run in restarting:
        heard_until = heard.get(run.pk)
        if heard_until is None or heard_until >= now or run.pk in firing:  # said once, not once a minute
            continue
        last = heard_until - silence
        finding = detectors.run_silent(run=run.name, last_event_at=last, now=now, silent_s=settings.RUN_SILENT_S)
        # Timed at the moment the allowance ran out, not at the sweep: a replay or a late sweep tells the same story.
        recorded += _record(finding, heard_until)
    return recorded


def heartbeats_detect(*, now: datetime) -> int:
    cutoff = now - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_S)
    recorded = 0
    for hostname, last in Node.objects.filter(state="in_service", last_heartbeat_at__lt=cutoff).values_list(
        "hostname", "last_heartbeat_at"
    ):
        finding = detectors.heartbeat_lost(
            node=hostname, last_heartbeat_at=last, now=now, timeout_s=settings.HEARTBEAT_TIMEOUT_S
        )
        recorded += _record(finding, now)
    return recorded


def stragglers_detect(*, now: datetime) -> int:
    """Per running run, rank step times in the last few windows; slow ranks flag their node suspect."""
    window = timedelta(seconds=settings.STRAGGLER_WINDOW_S)
    windows_n = settings.STRAGGLER_CONSECUTIVE
    findings = []
    for run in Run.objects.filter(state=Run.State.RUNNING).values_list("name", flat=True):
        since = now - window * windows_n
        samples = defaultdict(lambda: defaultdict(list))
        for time, data in Event.objects.filter(run_name=run, type="rank.step_time", time__gte=since).values_list(
            "time", "data"
        ):
            index = min(int((time - since) / window), windows_n - 1)
            samples[index][(data["rank"], data["node"])].append(data["seconds"])
        windows = [{key: sum(v) / len(v) for key, v in samples[i].items()} for i in range(windows_n)]
        findings += detectors.stragglers(
            run=run, windows=windows, threshold_mads=settings.STRAGGLER_THRESHOLD_MADS, consecutive=windows_n
        )
    return _flag_suspects(findings, now)


def sdc_detect(*, now: datetime, steps: int = 20) -> int:
    """Cross-replica gradient norms over the last steps; a host that keeps disagreeing is flagged."""
    findings = []
    for run in Run.objects.filter(state=Run.State.RUNNING).values_list("name", flat=True):
        by_step = defaultdict(dict)
        rows = (
            Event.objects.filter(run_name=run, type="rank.grad_norm").order_by("-time").values_list("data", flat=True)
        )
        for data in rows[: steps * 1024]:
            by_step[data["step"]][(data["rank"], data["node"])] = data["value"]
        recent = [by_step[s] for s in sorted(by_step)[-steps:]]
        findings += detectors.silent_data_corruption(
            steps=recent, rel_tolerance=settings.SDC_REL_TOLERANCE, repeats=settings.SDC_REPEATS
        )
    return _flag_suspects(findings, now)


def lemons_detect(*, now: datetime) -> int:
    since = now - timedelta(seconds=settings.LEMON_WINDOW_S)
    pairs = list(
        Interruption.objects.filter(fault_at__gte=since, node__isnull=False, planned=False).values_list(
            "node__hostname", "fault_at"
        )
    )
    findings = detectors.lemons(
        interruptions=pairs, now=now, window_s=settings.LEMON_WINDOW_S, threshold=settings.LEMON_THRESHOLD
    )
    return _flag_suspects(findings, now)


def _flag_suspects(findings: list[Finding], now: datetime) -> int:
    """Record each finding and mark its node suspect through a node.state event, with the evidence as reason."""
    events = []
    for finding in findings:
        _record(finding, now)
        node = Node.objects.filter(hostname=finding.node, state="in_service").first() if finding.node else None
        if node is not None:
            events.append(
                {
                    "specversion": "1.0",
                    "source": DETECTOR,
                    "id": f"{finding.fingerprint}:{now.isoformat()}",
                    "type": "node.state",
                    "time": _ts(now),
                    "data": {"node": node.hostname, "state": "suspect", "reason": finding.explanation[:1000]},
                }
            )
    _emit(events)
    return len(findings)


def _emit(raws: list[dict]) -> int:
    return len(own_events_ingest(events=raws).accepted) if raws else 0


def _ts(moment: datetime) -> str:
    return format_time(moment, "microseconds")
