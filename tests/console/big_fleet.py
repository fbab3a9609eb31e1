"""A fleet at the scale Meta's research-cluster study projects: 16,384 nodes, 131,072 GPUs, in racks of 32, and one
run on every node whose collective hang opened an alert on each node (issue 20: at 2,048 nodes the incident page was
18,518 px tall). Written with bulk inserts: what is measured is reading and rendering it, not writing it."""

from datetime import timedelta

from django.utils import timezone

from incidents.models import Alert, Incident, PlaybookExecution, StepExecution, TimelineEntry
from runs.domain import hostlist
from runs.models import Cluster, Node, Run

NODES = 16_384
RACK = 32


def hostname(number: int) -> str:
    return f"gpu-{number:05d}"


def build_big_fleet(nodes: int = NODES) -> Incident:
    now = timezone.now()
    cluster = Cluster.objects.create(name="rsc-big", scheduler=Cluster.Scheduler.SLURM)
    Node.objects.bulk_create(
        Node(hostname=hostname(n), cluster=cluster, rack=f"r{(n - 1) // RACK + 1:03d}", gpu_count=8)
        for n in range(1, nodes + 1)
    )
    Node.objects.filter(hostname__in=[hostname(7), hostname(4099)]).update(state="draining")
    run = Run.objects.create(name="llama-405b", cluster=cluster, gpu_count=nodes * 8, state="restarting")
    started = now - timedelta(minutes=12)
    incident = Incident.objects.create(
        title=f"Collective hang on all {nodes:,} nodes of llama-405b",
        severity=Incident.Severity.SEV1,
        group_key=f"run:{run.name}",
        run=run,
        started_at=started,
        detected_at=started + timedelta(minutes=5),
        recommended_action="drain-and-replace the node that hung first",
    )
    ids = dict(Node.objects.values_list("hostname", "pk"))
    incident.nodes.through.objects.bulk_create(
        incident.nodes.through(incident_id=incident.pk, node_id=pk) for pk in ids.values()
    )
    Alert.objects.bulk_create(
        Alert(
            incident=incident,
            fingerprint=f"hang:{run.name}:{name}",
            kind="hang",
            severity="critical",
            summary=f"NCCL watchdog: {name} waited 600 s in an all-reduce",
            explanation="No step for 600 s, more than 5 times the median step time",
            node_id=pk,
            run=run,
            evidence={"silent_s": 600, "median_step_s": 4.1, "collective": "all_reduce"},
            first_seen_at=started + timedelta(minutes=5, milliseconds=n),
            last_seen_at=started + timedelta(minutes=5, milliseconds=n),
        )
        for n, (name, pk) in enumerate(sorted(ids.items()))
    )
    TimelineEntry.objects.bulk_create(
        [
            TimelineEntry(
                incident=incident,
                at=started + timedelta(minutes=5),
                actor_name="FleetOps",
                kind="opened",
                text=incident.title,
            )
        ]
        + [
            TimelineEntry(
                incident=incident,
                at=started + timedelta(minutes=5, milliseconds=n),
                actor_name="FleetOps",
                kind="alert",
                text=f"NCCL watchdog: {name} waited 600 s in an all-reduce — no step for 600 s",
            )
            for n, name in enumerate(sorted(ids))
        ]
        + [
            TimelineEntry(
                incident=incident,
                at=started + timedelta(minutes=9),
                actor_name="ana",
                kind="note",
                text="gpu-00007 hung first (its last step is 40 s older): draining it",
            )
        ]
    )
    execution = PlaybookExecution.objects.create(
        playbook="drain-and-replace",
        definition={"title": "Drain the node, requeue the job onto a spare", "steps": []},
        incident=incident,
        run=run,
        node=Node.objects.get(hostname=hostname(7)),
        status=PlaybookExecution.Status.SUCCEEDED,
        started_by="ana",
        started_at=started + timedelta(minutes=9),
        finished_at=started + timedelta(minutes=11),
    )
    running_on = [hostname(n) for n in range(1, nodes + 1) if n != 7] + [hostname(nodes + 1)]
    StepExecution.objects.create(
        execution=execution,
        index=0,
        name="wait_job_running",
        status="succeeded",
        attempts=1,
        output={"summary": f"job 4242 running on {hostlist.fold(running_on)}", "nodes": running_on},
        started_at=started + timedelta(minutes=10),
        finished_at=started + timedelta(minutes=11),
    )
    return incident
