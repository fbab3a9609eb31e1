"""The reconciliation with the schedulers: the runs the record calls running or restarting, checked against their
cluster's own view of their jobs on the beat schedule (SCHEDULER_RECONCILE_S).

An end event can be lost (an epilog that could not post, a controller failing over as the job ended), and then the
record keeps a run going that nothing runs. For each cluster whose scheduler FleetOps can ask (Slurm, Kubernetes; the
simulated cluster is the record itself) one read gives the latest attempt's job of each of its runs
(ClusterAdapter.jobs_status: one `squeue`, then `sacct` for those it no longer shows), and:

- a job the scheduler says ended, more than SCHEDULER_RECONCILE_GRACE_S ago (time for its own end event to come):
  FleetOps' own run.completed, run.failed or run.cancelled at the scheduler's end time, its reason saying so
  ("Slurm reports job 4711 FAILED (NonZeroExitCode, exit code 1); its end event never reached FleetOps"), from
  RECONCILE_SOURCE/<cluster> with an id per job, restart and attempt: a second sweep's is a duplicate. A late end
  event of the job's own is a second report of the same end (runs.domain.lifecycle): one failure, never two. A
  restarting run's failure is in the record already; only a completion or a cancellation ends it.
- a job still pending, running or completing: nothing.
- a job the scheduler no longer knows (ended longer ago than it keeps ended jobs, no accounting to ask): nothing is
  ended or billed on a guess; a job_unknown alert on the run's incident says so, once, and clears when the record
  and the scheduler agree again.
A run with lifecycle events not yet applied is left to the next sweep: the record is catching up.
"""

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import OuterRef, Subquery

from incidents import services
from incidents.detection.services.events import _record
from incidents.domain import detectors
from incidents.domain.alert_kinds import AlertKind
from incidents.models import Alert
from incidents.playbooks.clusters import ClusterError, JobStatus, adapter_for
from runs.domain.cloudevents import SPECVERSION, format_time
from runs.domain.lifecycle import LIFECYCLE_TYPES
from runs.domain.quality import RECONCILE_SOURCE
from runs.models import Attempt, Cluster, Event, Run
from runs.services import own_events_ingest

log = logging.getLogger(__name__)

ASKED = (Cluster.Scheduler.SLURM, Cluster.Scheduler.KUBERNETES)
_END_TYPES = {"completed": "run.completed", "failed": "run.failed", "cancelled": "run.cancelled"}


def schedulers_reconcile(*, now: datetime) -> int:
    """One sweep as of `now`; returns how many end events it wrote (a repeat of an earlier sweep's writes none)."""
    runs = _runs_on_schedulers()
    catching_up = set(
        Event.objects.filter(
            run_name__in=[run.name for run in runs], type__in=LIFECYCLE_TYPES, applied_at=None, quarantined_at=None
        ).values_list("run_name", flat=True)
    )
    by_cluster: dict[Cluster, list[Run]] = defaultdict(list)
    for run in runs:
        if run.latest_job and run.name not in catching_up:
            by_cluster[run.cluster].append(run)
    ends, unknown, undecided = [], {}, {run.pk for run in runs if run.name in catching_up}
    for cluster, its_runs in by_cluster.items():
        try:
            jobs = adapter_for(cluster).jobs_status(run.latest_job for run in its_runs)
        except ClusterError as exc:
            log.warning("reconciling cluster %s: its scheduler did not answer: %s", cluster.name, exc)
            undecided.update(run.pk for run in its_runs)
            continue
        grace = timedelta(seconds=settings.SCHEDULER_RECONCILE_GRACE_S)
        for run in its_runs:
            job = jobs.get(run.latest_job)
            if job is None:
                finding = detectors.job_unknown(
                    run=run.name, run_state=run.state, job_id=run.latest_job, scheduler=cluster.get_scheduler_display()
                )
                unknown[finding.fingerprint] = finding
            elif (event := _end_event(run, job, cluster=cluster, now=now, grace=grace)) is not None:
                ends.append(event)
    written = len(own_events_ingest(events=ends).accepted) if ends else 0
    _alerts_update(unknown, undecided, now)
    return written


def _end_event(run: Run, job: JobStatus, *, cluster: Cluster, now: datetime, grace: timedelta) -> dict | None:
    """FleetOps' own end event for the run's latest attempt from what the scheduler says of its job; None while
    there is nothing to end (the job goes on, or ended within `grace`, or the record already says it failed)."""
    type_ = _END_TYPES.get(job.state)
    if type_ is None or (run.state == Run.State.RESTARTING and type_ == "run.failed"):
        return None
    ended = min(job.ended_at or now, now)
    if job.ended_at is not None and now - ended < grace:
        return None  # its own end event may still be on its way
    said = f"{job.raw_state} ({job.reason})" if job.reason else job.raw_state
    data = {
        "run": run.name,
        "reason": f"{cluster.get_scheduler_display()} reports job {job.job_id} {said}; its end event never reached "
        "FleetOps",
    }
    if type_ == "run.failed":
        data["detected_at"] = format_time(now, "microseconds")
    return {
        "specversion": SPECVERSION,
        "source": f"{RECONCILE_SOURCE}/{cluster.name}",
        "id": f"{job.job_id}:{job.restart_count}:attempt-{run.latest_number}:end",
        "type": type_,
        # Never before the attempt it ends began: at that instant the end would sort before the start.
        "time": format_time(max(ended, run.latest_started + timedelta(microseconds=1)), "microseconds"),
        "data": data,
    }


def _runs_on_schedulers() -> list[Run]:
    """The runs the record calls running or restarting on a cluster FleetOps can ask, each with its latest attempt's
    job, number and start (latest_job, latest_number, latest_started): one query."""
    latest = Attempt.objects.filter(run=OuterRef("pk")).order_by("-number")
    return list(
        Run.objects.filter(
            state__in=(Run.State.RUNNING, Run.State.RESTARTING), ended_at=None, cluster__scheduler__in=ASKED
        )
        .select_related("cluster")
        .annotate(
            latest_job=Subquery(latest.values("job_id")[:1]),
            latest_number=Subquery(latest.values("number")[:1]),
            latest_started=Subquery(latest.values("started_at")[:1]),
        )
        .order_by("pk")
    )


def _alerts_update(unknown: dict, undecided: set[int], now: datetime) -> None:
    """Raise a job_unknown alert once for each run on a job its scheduler no longer knows; clear those whose run and
    scheduler agree again (not those this sweep could not decide)."""
    firing = {alert.fingerprint: alert for alert in Alert.objects.filter(kind=AlertKind.JOB_UNKNOWN, status="firing")}
    for fingerprint, finding in unknown.items():
        if fingerprint not in firing:  # said once, not once a sweep
            _record(finding, now)
    for fingerprint, alert in firing.items():
        if fingerprint in unknown or alert.run_id in undecided:
            continue
        services.alerts_resolve(
            at=now, reason="the run's record and its scheduler agree again", fingerprint=fingerprint
        )
