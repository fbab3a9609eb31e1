"""findings_record (a webhook's findings at once) records what finding_record gives one finding at a time (issue 15:
the Alertmanager intake's cost grows with its alerts, a query or two each, and its grouping stays the same)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from incidents import services
from incidents.domain.detectors import Finding
from incidents.models import Alert, Incident
from runs.models import Attempt, Cluster, Node, Run

pytestmark = pytest.mark.django_db
T = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _world() -> None:
    """A run on r0-r3; nodes in rack A, in a switch, with no place; an unattributed incident on r3 to adopt; and an
    alert already firing."""
    cluster = Cluster.objects.create(name="c1")
    nodes = {
        **{f"r{i}": Node.objects.create(hostname=f"r{i}", cluster=cluster, rack="A") for i in range(4)},
        **{f"a{i}": Node.objects.create(hostname=f"a{i}", cluster=cluster, rack="A") for i in range(5)},
        **{f"s{i}": Node.objects.create(hostname=f"s{i}", cluster=cluster, switch="sw1") for i in range(3)},
        **{f"x{i}": Node.objects.create(hostname=f"x{i}", cluster=cluster) for i in range(3)},
    }
    run = Run.objects.create(name="big", cluster=cluster, state="running", started_at=T - timedelta(hours=1))
    attempt = Attempt.objects.create(run=run, number=1, job_id="1", started_at=T - timedelta(hours=1))
    attempt.nodes.set([nodes[f"r{i}"] for i in range(4)])
    services.finding_record(finding=_finding("r3", "old", run=None), at=T - timedelta(minutes=2))
    Incident.objects.filter(alerts__fingerprint="old").update(run=None)
    Alert.objects.filter(fingerprint="old").update(run=None)
    services.finding_record(finding=_finding("a0", "already"), at=T - timedelta(minutes=5))


def _finding(node: str, fingerprint: str, run: str | None = None) -> Finding:
    return Finding(
        kind="xid", fingerprint=fingerprint, severity="critical", summary=f"Xid 79 on {node}",
        explanation="fell off the bus", node=node, gpu=0, run=run,
    )  # fmt: skip


def _findings() -> list[tuple[Finding, datetime]]:
    names = ["r3", "r0", "a0", "a1", "a2", "s0", "s1", "x0", "x1", "r1", "a3", "x2", "s2", "r2", "a4"]
    batch = [(_finding(n, f"fp-{n}"), T + timedelta(seconds=i)) for i, n in enumerate(names)]
    batch.insert(5, (_finding("a0", "already"), T + timedelta(seconds=30)))  # a repeat notification
    batch.append((_finding("x0", "fp-x0"), T + timedelta(seconds=40)))  # the same alert twice in one webhook
    return batch


def _record() -> dict:
    incidents = {
        i.pk: (i.group_key, i.run.name if i.run else None, sorted(i.nodes.values_list("hostname", flat=True)))
        for i in Incident.objects.prefetch_related("nodes")
    }
    alerts = {
        a.fingerprint: (incidents[a.incident_id], a.count, a.first_seen_at, a.last_seen_at, a.run_id is not None)
        for a in Alert.objects.all()
    }
    entries = sorted((e.incident.group_key, e.kind, e.text) for i in Incident.objects.all() for e in i.timeline.all())
    return {"alerts": alerts, "incidents": sorted(incidents.values()), "entries": entries}


def test_a_batch_groups_as_one_finding_at_a_time_does():
    _world()
    with transaction.atomic():
        for finding, at in _findings():
            again = Alert.objects.filter(fingerprint=finding.fingerprint, status="firing").exists()
            services.finding_record(finding=finding, at=at, count=0 if again else 1, refresh=False)
        one_by_one = _record()
        transaction.set_rollback(True)
    with transaction.atomic():
        services.findings_record(findings=_findings())
        batched = _record()
    assert batched == one_by_one
    # The run's (r3's unattributed incident, adopted), rack A, switch sw1, and one for each node of no place.
    assert batched["incidents"] == [
        ("node:x0", None, ["x0"]),
        ("node:x1", None, ["x1"]),
        ("node:x2", None, ["x2"]),
        ("rack:A", None, ["a0", "a1", "a2", "a3", "a4"]),
        ("run:big@2026-11-29T09:58:00", "big", ["r0", "r1", "r2", "r3"]),
        ("switch:sw1", None, ["s0", "s1", "s2"]),
    ]
    assert batched["alerts"]["already"][1] == 1 and batched["alerts"]["fp-x0"][1] == 1  # repeats are not counted


def test_a_batch_costs_a_query_or_so_a_finding():
    _world()
    findings = [(_finding(f"a{i % 5}", f"many-{i}"), T + timedelta(seconds=i)) for i in range(300)]
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        services.findings_record(findings=findings)
    assert len(queries) <= 300 + 30
