"""Discarding a test run (incidents.services.run_discard): by command and in the admin, on the audit log."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from incidents.models import Incident, RunDiscard, TimelineEntry
from runs.models import Event, Node, Run
from tests.stories import failure_and_restart, story_until_failure


@pytest.mark.reliability(
    "The README's example run, or any test, left in the record for good: its restart claimed GPU-hours, its incident "
    "stayed on the board and in the metrics, and nothing said how to remove it",
    how="failure_and_restart and a second run through the API; manage.py discard_run r1 without and with a reason",
    outcome="refused without a reason; then r1's events and record deleted, its incident closed and out of every "
    "list and figure (kept, with a timeline entry saying who and why), a RunDiscard row counting what went; the "
    "other run, the nodes and their events untouched",
)
def test_discard_run_removes_a_test_run_and_records_it(post, reader):
    post(failure_and_restart())
    other = [dict(e, id=f"o-{e['id']}") for e in story_until_failure() if e["type"] in ("run.started", "run.step")]
    for e in other:
        e["data"] = {**e["data"], "run": "keep"} if "run" in e["data"] else e["data"]
    post(other)
    incident = Incident.objects.get(run__name="r1")
    run_events = Event.objects.filter(run_name="r1").count()
    node_events = Event.objects.filter(run_name="", node_name="n2").count()

    with pytest.raises(CommandError, match="--reason"):
        call_command("discard_run", "r1")
    with pytest.raises(CommandError, match="run: no run named 'nope'"):
        call_command("discard_run", "nope", "--reason", "x")
    out = StringIO()
    call_command("discard_run", "r1", "--reason", "the README example", stdout=out)

    assert not Run.objects.filter(name="r1").exists() and Run.objects.filter(name="keep").exists()
    assert not Event.objects.filter(run_name="r1").exists()
    assert Event.objects.filter(run_name="", node_name="n2").count() == node_events  # the node's own, kept
    assert Node.objects.filter(hostname="n2").exists()
    assert not Incident.objects.filter(pk=incident.pk).exists()  # out of every page and figure
    kept = Incident.every.get(pk=incident.pk)
    assert kept.status == "closed" and kept.discarded_at is not None
    assert not kept.alerts.filter(status="firing").exists()  # n2's cordon alert no longer absorbs new findings
    entry = kept.timeline.get(kind=TimelineEntry.Kind.DISCARDED)
    assert entry.text.startswith("Discarded with its run r1 by command:") and entry.text.endswith("the README example")
    (discard,) = RunDiscard.objects.all()
    assert discard.run_name == "r1" and discard.reason == "the README example"
    assert discard.removed == {
        "events": run_events,
        "attempts": 2,
        "interruptions": 1,
        "checkpoints": 2,
        "incidents": 1,
    }
    assert f"Discarded run r1: {run_events:,} events" in out.getvalue()
    assert reader.get("/api/v1/incidents").json()["count"] == 0
    assert [r["name"] for r in reader.get("/api/v1/runs").json()["results"]] == ["keep"]


def test_the_admin_discards_a_run_and_the_audit_cannot_be_edited(post, admin_client):
    post(failure_and_restart())
    run = Run.objects.get(name="r1")
    response = admin_client.post("/admin/runs/run/", {"action": "discard", "_selected_action": [run.pk]}, follow=True)
    assert response.status_code == 200 and "Discarded r1:" in response.content.decode()
    assert not Run.objects.exists() and not Incident.objects.exists() and Incident.every.count() == 1
    discard = RunDiscard.objects.get()
    assert discard.actor_name == "admin" and discard.reason == "discarded in the admin by admin"
    assert admin_client.get(f"/admin/incidents/rundiscard/{discard.pk}/delete/").status_code == 403
