"""The reconciliation with the scheduler against the real Slurm cluster on loopback (tests/slurm.py): a run the record
calls running whose job's end event never reached FleetOps is ended as Slurm says, within one sweep.

Each test starts a real job with sbatch and records its run.started as the prolog would (contrib/slurm/prolog.sh: its
source and id), then lets Slurm end the job and sends no epilog event: the sweep must find the end in squeue.
"""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from incidents.detection.services import schedulers_reconcile
from incidents.models import Alert, Incident
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig
from runs.domain.quality import RECONCILE_SOURCE
from runs.models import Cluster, Event, Run
from runs.selectors import run_quality_get
from runs.services import events_apply, own_events_ingest
from tests.services import wait_for
from tests.stories import event

PROLOG = "slurm/loopback"  # the hooks' source: slurm/<cluster>


@pytest.fixture
def loopback(slurm_cluster, db, settings) -> Cluster:
    settings.SCHEDULER_RECONCILE_GRACE_S = 0  # the tests send no epilog: nothing to wait for
    return Cluster.objects.create(name="loopback", scheduler="slurm", api_url=slurm_cluster.conf)


@pytest.fixture
def sweep(django_capture_on_commit_callbacks):
    """One sweep as of now, its events applied as the worker would (on commit); how many it wrote."""

    def once() -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return schedulers_reconcile(now=timezone.now())

    return once


def start(slurm_cluster, post, run: str, script: str) -> str:
    """A one-node job running `script`, and its run.started once it runs, stamped with the job's start as the prolog
    stamps it; the job id."""
    job_id = slurm_cluster.run(
        "sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", "--partition=gpu", f"--wrap={script}"
    )
    job_id = job_id.strip().split(";")[0]
    job = wait_for(
        lambda: (j := _slurm(slurm_cluster).job_status(job_id)).state == "running" and j, timeout=15, what="job running"
    )
    (began,) = [
        j["start_time"] for j in json.loads(slurm_cluster.run("squeue", "--json"))["jobs"] if str(j["job_id"]) == job_id
    ]
    data = {"run": run, "cluster": "loopback", "gpus": 8, "nodes": job.nodes, "job_id": job_id}
    at = datetime.fromtimestamp(began, UTC)
    post([event("run.started", at, f"slurm:loopback:{job_id}:0:start", source=PROLOG, **data)])
    assert Run.objects.get(name=run).state == "running"
    return job_id


def ended(slurm_cluster, job_id: str):
    """The job's JobStatus once Slurm has ended it (squeue keeps it for MinJobAge, 300 s here)."""
    return wait_for(
        lambda: (j := _slurm(slurm_cluster).job_status(job_id)).state in ("completed", "failed", "cancelled") and j,
        timeout=30,
        what=f"job {job_id} ended",
    )


def _slurm(slurm_cluster) -> SlurmAdapter:
    return SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))


def _ours(run: str) -> list[Event]:
    return list(Event.objects.filter(run_name=run, source=f"{RECONCILE_SOURCE}/loopback"))


@pytest.mark.reliability(
    "A Slurm job ends and its epilog's event never reaches FleetOps",
    how="the real Slurm cluster: a 3 s job with its run.started posted as the prolog would, no epilog event; one "
    "sweep of the reconciliation, then a second",
    outcome="the run completed at Slurm's end time, the run page saying 'Slurm reports job N COMPLETED; its end event "
    "never reached FleetOps'; the second sweep writes nothing (before: running, and counted as training, for ever)",
)
def test_a_job_whose_end_event_was_lost_is_ended_within_one_sweep(loopback, slurm_cluster, post, sweep, oncall):
    job_id = start(slurm_cluster, post, "lost-epilog", "sleep 3")
    job = ended(slurm_cluster, job_id)

    assert sweep() == 1
    run = Run.objects.get(name="lost-epilog")
    (attempt,) = run.attempts.all()
    assert (run.state, attempt.end_reason) == ("completed", "completed")
    assert run.ended_at == attempt.ended_at == job.ended_at  # when Slurm says, not when the sweep noticed
    said = f"Slurm reports job {job_id} COMPLETED; its end event never reached FleetOps"
    (finding,) = run_quality_get(run=run)
    assert (finding.code, finding.what) == ("ended_by_reconciliation", f"run.completed written by FleetOps: {said}")
    assert said in oncall.get(f"/runs/{run.name}").content.decode()

    assert sweep() == 0  # nothing left to reconcile, and nothing written twice
    assert len(_ours(run.name)) == 1


def test_a_failed_job_fails_its_attempt_with_slurms_reason_and_the_late_epilog_adds_no_failure(
    loopback, slurm_cluster, post, sweep
):
    job_id = start(slurm_cluster, post, "lost-failure", "sleep 3; exit 1")
    job = ended(slurm_cluster, job_id)

    assert sweep() == 1
    run = Run.objects.get(name="lost-failure")
    (interruption,) = run.interruptions.all()
    assert run.state == "restarting" and interruption.fault_at == job.ended_at
    said = f"Slurm reports job {job_id} FAILED (NonZeroExitCode, exit code 1); its end event never reached FleetOps"
    assert interruption.reason == said
    incident = Incident.objects.get(run=run)  # a failure like any other: its incident, its timeline
    assert incident.title == f"Run {run.name} stopped: {said}"
    assert sweep() == 0  # restarting: the record already says it failed

    # The epilog's own event comes after all (a spool emptied late): a second report of the same failure.
    epilog = {"run": run.name, "reason": f"Slurm job {job_id} ended with exit code 1", "node": job.nodes[0]}
    post(
        [
            event(
                "run.failed",
                job.ended_at + timedelta(seconds=1),
                f"slurm:loopback:{job_id}:0:end",
                source=PROLOG,
                **epilog,
            )
        ]
    )
    (interruption,) = Run.objects.get(name=run.name).interruptions.all()
    assert (interruption.fault_at, interruption.reason, interruption.node.hostname) == (
        job.ended_at,
        said,
        job.nodes[0],
    )


def test_a_failure_the_record_already_has_is_not_reported_again(loopback, slurm_cluster, post, sweep):
    """The epilog's failure came (the run is restarting) and Slurm still shows the job FAILED: nothing to add."""
    job_id = start(slurm_cluster, post, "told", "sleep 3; exit 2")
    job = ended(slurm_cluster, job_id)
    data = {"run": "told", "reason": f"Slurm job {job_id} ended with exit code 2"}
    post([event("run.failed", job.ended_at, f"slurm:loopback:{job_id}:0:end", source=PROLOG, **data)])
    assert Run.objects.get(name="told").state == "restarting"

    assert sweep() == 0 and not _ours("told")


def test_a_running_job_is_left_alone_and_a_cancelled_one_ends_its_run_cancelled(loopback, slurm_cluster, post, sweep):
    job_id = start(slurm_cluster, post, "still-going", "sleep 300")
    assert sweep() == 0
    assert Run.objects.get(name="still-going").state == "running"

    time.sleep(1)  # Slurm's times are whole seconds: cancelled within its start's second, it would end as it began
    slurm_cluster.run("scancel", job_id)
    job = ended(slurm_cluster, job_id)
    assert job.state == "cancelled"
    assert sweep() == 1
    run = Run.objects.get(name="still-going")
    assert (run.state, run.ended_at) == ("cancelled", job.ended_at)
    assert _ours(run.name)[0].data["reason"].startswith(f"Slurm reports job {job_id} CANCELLED")


def test_an_end_within_the_grace_or_already_on_its_way_is_left_to_its_own_event(
    loopback, slurm_cluster, post, sweep, settings
):
    job_id = start(slurm_cluster, post, "epilog-late", "sleep 3")
    job = ended(slurm_cluster, job_id)
    settings.SCHEDULER_RECONCILE_GRACE_S = 3600  # the epilog may still be retrying
    assert sweep() == 0

    settings.SCHEDULER_RECONCILE_GRACE_S = 0
    epilog = event("run.completed", job.ended_at, f"slurm:loopback:{job_id}:0:end", source=PROLOG, run="epilog-late")
    stored = own_events_ingest(events=[epilog])  # stored, not yet applied (no on-commit here): the record catches up
    assert sweep() == 0 and not _ours("epilog-late")
    events_apply(event_ids=stored.event_ids)
    assert Run.objects.get(name="epilog-late").state == "completed"


@pytest.mark.reliability(
    "A run on a Slurm job that Slurm no longer knows (ended past MinJobAge, no accounting to ask)",
    how="the real Slurm cluster without slurmdbd (sacct refuses); a run.started on job 999999, two sweeps, then the "
    "run's end event and a third",
    outcome="nothing ended or billed on a guess; one job_unknown alert on the run's incident (counted once over two "
    "sweeps), cleared once the run's end arrived",
)
def test_a_job_slurm_no_longer_knows_is_not_guessed_but_said(loopback, post, sweep):
    data = {"run": "forgotten", "cluster": "loopback", "gpus": 8, "nodes": ["gpu-001"], "job_id": "999999"}
    post([event("run.started", timezone.now() - timedelta(hours=2), "s-999999", source=PROLOG, **data)])

    assert sweep() == 0 and sweep() == 0
    run = Run.objects.get(name="forgotten")
    assert run.state == "running" and not run.interruptions.exists()
    alert = Alert.objects.get(kind="job_unknown", run=run)
    assert (alert.status, alert.count, alert.summary) == ("firing", 1, "Slurm no longer knows job 999999 of forgotten")

    post([event("run.completed", timezone.now(), "e-999999", source=PROLOG, run="forgotten")])
    assert sweep() == 0
    alert.refresh_from_db()
    assert alert.status == "resolved"
