"""Drain-and-replace against the real Slurm controller: an Xid 79 on a node running a job, and no human."""

import json
import time

import pytest

from incidents.models import Incident, PlaybookExecution
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig
from runs.models import Cluster
from tests.slurm import put_back, start_training_job
from tests.stories import event

BATCH = "application/cloudevents-batch+json"


def ts_now(offset_s: float = 0.0):
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(seconds=offset_s)


@pytest.fixture
def slurm(slurm_cluster) -> SlurmAdapter:
    return SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))


def test_an_xid_79_drains_the_node_and_the_job_runs_again_on_a_spare(
    writer, slurm, slurm_cluster, settings, django_capture_on_commit_callbacks
):
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.5  # a six-node test cluster: one node out is a sixth of it
    Cluster.objects.create(name="loopback", scheduler="slurm", api_url=slurm_cluster.conf)
    job_id, job = start_training_job(slurm_cluster, slurm)
    bad = spare = None
    try:
        bad = job.nodes[0]
        started = event(
            "run.started", ts_now(-60), "start", run="llm", cluster="loopback", gpus=16, nodes=job.nodes, job_id=job_id
        )
        storm = [
            event(
                "gpu.xid",
                ts_now(i * 0.01),
                f"xid-{i}",
                source="dcgm://" + bad,
                node=bad,
                gpu=2,
                xid=79,
                message="GPU has fallen off the bus",
            )
            for i in range(200)
        ]
        with django_capture_on_commit_callbacks(execute=True):
            writer.post("/api/v1/events", json.dumps([started]), content_type=BATCH)
        arrived = time.monotonic()
        with django_capture_on_commit_callbacks(execute=True):  # detection and the playbook run on commit
            response = writer.post("/api/v1/events", json.dumps(storm), content_type=BATCH)
        assert response.status_code == 202

        execution = PlaybookExecution.objects.get()
        assert execution.status == "succeeded", execution.error
        running = slurm.job_status(job_id)
        recovered_s = time.monotonic() - arrived
        spare = execution.steps.get(name="pick spare").output["spare"]
        assert running.state == "running" and spare in running.nodes and bad not in running.nodes
        assert running.restart_count == 1
        reasons = slurm_cluster.run("sinfo", "-R", "-h", "-o", "%N|%E")
        assert f"{bad}|fleetops #" in reasons and "Xid 79" in reasons
        incident = Incident.objects.get()
        assert incident.status == "triggered"  # scheduled again, not yet training: not mitigated
        minutes = {s.name: s.seconds for s in execution.steps.all()}
        print(f"\nXid 79 to job running again on {spare}: {recovered_s:.1f} s; steps (s): {minutes}")
        assert all(seconds is not None for seconds in minutes.values())
        assert incident.timeline.filter(text__contains="running again on").exists()
    finally:
        put_back(slurm_cluster, slurm, job_id=job_id, bad=bad, spare=spare)


@pytest.mark.reliability(
    "A dry run asked for where the real run would be refused",
    how="the real Slurm cluster (6 nodes, none out), a job running on two of them; a dry run of drain-and-replace on "
    "one of its nodes at the default 5% share, then at 50%",
    outcome="at 5%: 'would be refused at step 1 (drain)', with the breaker's figures from sinfo (1 of 6 = 16.7%); at "
    "50%: every step would go ahead, on a spare sinfo lists; nothing drained, moved or requeued (before: the dry run "
    "read nothing and 'succeeded' either way)",
)
def test_a_dry_run_reads_slurm_as_the_real_run_would_and_changes_nothing(
    writer, slurm, slurm_cluster, settings, django_capture_on_commit_callbacks
):
    from incidents import services
    from incidents.playbooks.engine import playbook_start
    from runs.models import Node, Run

    settings.PLAYBOOK_AUTO_START = False
    Cluster.objects.create(name="loopback", scheduler="slurm", api_url=slurm_cluster.conf)
    job_id, job = start_training_job(slurm_cluster, slurm)
    try:
        started = event(
            "run.started", ts_now(-60), "start", run="llm", cluster="loopback", gpus=16, nodes=job.nodes, job_id=job_id
        )
        with django_capture_on_commit_callbacks(execute=True):
            writer.post("/api/v1/events", json.dumps([started]), content_type=BATCH)
        node, run = Node.objects.get(hostname=job.nodes[0]), Run.objects.get(name="llm")

        def dry_run() -> PlaybookExecution:
            with django_capture_on_commit_callbacks(execute=True):
                execution = playbook_start(
                    playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=run, dry_run=True
                )
            execution.refresh_from_db()
            return execution

        refused = dry_run()
        assert refused.status == "failed"
        assert refused.error.startswith(
            "would be refused at step 1 (drain): circuit breaker open: the drain would take 1 of 6 nodes out of "
            "service, 16.7%, over the 5% cap (out of service now: 0 of 6;"
        )
        settings.PLAYBOOK_MAX_OUT_SHARE = 0.5
        passed = dry_run()
        assert passed.status == "succeeded", passed.error
        output = {s.name: s.output for s in passed.steps.all()}
        assert output["pick spare"]["spare"] in ("gpu-005", "gpu-006")
        assert f"scontrol requeue {job_id}" in output["requeue job"]["plan"]
        assert output["drain"]["approval"] == "oncall"  # no incident: the SEV4 rule, as the real run would wait
        now = slurm.job_status(job_id)
        assert (now.state, now.nodes, now.restart_count) == ("running", job.nodes, 0)
        assert slurm.out_of_service() == set()
    finally:
        put_back(slurm_cluster, slurm, job_id=job_id, bad=None, spare=None)
