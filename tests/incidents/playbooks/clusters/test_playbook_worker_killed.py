"""A worker killed mid-step: the playbook resumes on another worker and no side effect happens twice.

Real parts only: PostgreSQL, Redis, `celery worker` processes (one killed with SIGKILL), a real slurmctld.
"""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from incidents.models import PlaybookExecution, StepExecution
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig
from incidents.playbooks.engine import playbooks_resume_stale
from runs.models import Cluster
from tests.services import Worker, wait_for
from tests.slurm import put_back, start_training_job
from tests.stories import event

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
BATCH = "application/cloudevents-batch+json"


@pytest.mark.reliability(
    "Celery worker killed (SIGKILL) while running a playbook step",
    how="real Slurm; the worker running drain-and-replace killed in its wait-running step, after the requeue; "
    "a second worker resumes it once the step lease runs out",
    outcome="the playbook succeeds on the second worker; drain and requeue ran once each (attempts 1), the "
    "read-only step twice; Slurm restarted the job once, onto the spare",
)
def test_a_killed_worker_leaves_the_playbook_to_the_next_without_repeating_a_side_effect(writer, broker, slurm_cluster):
    slurm = SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))
    Cluster.objects.create(name="loopback", scheduler="slurm", api_url=slurm_cluster.conf)
    job_id, job = start_training_job(slurm_cluster, slurm)
    # a six-node test cluster; a 3 s step lease, so that the killed worker's step is free again soon
    first = Worker(PLAYBOOK_MAX_OUT_SHARE="0.5", PLAYBOOK_STEP_LEASE_S="3")
    second = bad = spare = None
    try:
        bad, now = job.nodes[0], datetime.now(UTC)
        events = [
            event(
                "run.started",
                now - timedelta(minutes=5),
                "start",
                run="llm",
                cluster="loopback",
                gpus=16,
                nodes=job.nodes,
                job_id=job_id,
            )
        ]
        events += [
            event(
                "gpu.xid",
                now + timedelta(milliseconds=i),
                f"xid-{i}",
                node=bad,
                gpu=1,
                xid=79,
                message="GPU has fallen off the bus",
            )
            for i in range(50)
        ]
        assert writer.post("/api/v1/events", json.dumps(events), content_type=BATCH).status_code == 202

        # Kill the worker while it waits for the requeued job to run again: the requeue is done, the step is not.
        waiting = wait_for(
            lambda: StepExecution.objects.filter(name="wait running", status="running").first(),
            timeout=60,
            what="the playbook in its wait-running step",
        )
        first.kill()
        execution = PlaybookExecution.objects.get(pk=waiting.execution_id)
        assert execution.status == "running"
        assert execution.steps.get(name="requeue job").status == "succeeded"

        second = Worker(PLAYBOOK_MAX_OUT_SHARE="0.5", PLAYBOOK_STEP_LEASE_S="3")
        time.sleep(4)  # the killed worker's lease on its step runs out
        assert playbooks_resume_stale(older_than=timedelta(0)) == 1  # what beat's sweeper does after a minute
        wait_for(
            lambda: PlaybookExecution.objects.get(pk=execution.pk).status == "succeeded",
            timeout=60,
            what="the playbook to finish on the second worker",
        )

        steps = {s.name: s for s in execution.steps.all()}
        assert steps["wait running"].attempts == 2  # run again from the top: it only reads
        assert (steps["drain"].attempts, steps["requeue job"].attempts) == (1, 1)  # side effects: once each
        running = slurm.job_status(job_id)
        spare = steps["pick spare"].output["spare"]
        assert running.restart_count == 1 and running.state == "running" and spare in running.nodes
    except BaseException:
        print("".join(first.lines[-80:]))
        print(list(PlaybookExecution.objects.values_list("status", "error")))
        raise
    finally:
        for process in (first, second):
            if process is not None and process.process.poll() is None:
                process.stop()
        put_back(slurm_cluster, slurm, job_id=job_id, bad=bad, spare=spare)
