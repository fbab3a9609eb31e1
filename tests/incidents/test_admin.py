"""The incidents' admin: incidents, alerts, timelines, playbook executions, postmortems, action items and deliveries
are listed and viewable there, never written (their writes go through the services that log them), and each list
costs the same queries for 2 incidents as for 12."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from incidents.models import (
    ActionItem,
    Alert,
    Delivery,
    Incident,
    PlaybookExecution,
    Postmortem,
    PostmortemVersion,
    StepExecution,
    TimelineEntry,
    WebhookEndpoint,
)
from runs.models import GPU, Node, Run

T0 = datetime(2026, 3, 1, tzinfo=UTC)
READ_ONLY = {
    "incident": Incident,
    "timelineentry": TimelineEntry,
    "alert": Alert,
    "playbookexecution": PlaybookExecution,
    "stepexecution": StepExecution,
    "postmortem": Postmortem,
    "actionitem": ActionItem,
    "delivery": Delivery,
}


@pytest.fixture
def admin(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "admin@example.com", "pw-admin-123")
    client.force_login(user)
    return client, user


def _grow(user, start: int, stop: int) -> None:
    """Incidents start..stop-1, each with its run, node, GPU, two alerts, three timeline entries, a playbook execution
    of two steps, a postmortem of two versions, an action item and a delivery."""
    endpoint, _ = WebhookEndpoint.objects.get_or_create(name="hook", defaults={"url": "http://127.0.0.1:9/hook"})
    for i in range(start, stop):
        at = T0 + timedelta(hours=i)
        run = Run.objects.create(name=f"r{i}", state="running", started_at=at)
        node = Node.objects.create(hostname=f"n{i}")
        gpu = GPU.objects.create(node=node, index=i % 8)
        incident = Incident.objects.create(
            title=f"Xid 79 on n{i}", group_key=f"run:r{i}", run=run, started_at=at, detected_at=at, commander=user
        )
        incident.nodes.add(node)
        for kind in ("xid", "ecc"):
            Alert.objects.create(
                incident=incident,
                fingerprint=f"{kind}:n{i}",
                kind=kind,
                severity="critical",
                summary=f"{kind} on n{i}",
                node=node,
                gpu=gpu,
                run=run,
                first_seen_at=at,
                last_seen_at=at,
            )
        entries = [
            TimelineEntry.objects.create(incident=incident, at=at, actor=user, actor_name="admin", kind=kind, text=kind)
            for kind in ("opened", "note", "playbook")
        ]
        execution = PlaybookExecution.objects.create(
            playbook="drain", definition={}, incident=incident, run=run, node=node, started_by="admin", started_at=at
        )
        for index, name in enumerate(("cordon", "drain")):
            StepExecution.objects.create(execution=execution, index=index, name=name, status="succeeded")
        postmortem = Postmortem.objects.create(incident=incident, markdown="# v2", drafted_at=at, updated_at=at)
        for number in (1, 2):
            PostmortemVersion.objects.create(
                postmortem=postmortem,
                number=number,
                markdown=f"# v{number}",
                author=user,
                author_name="admin",
                created_at=at,
            )
        ActionItem.objects.create(
            incident=incident, text="replace the GPU", owner=user, created_by_name="admin", created_at=at
        )
        Delivery.objects.create(
            endpoint=endpoint, incident=incident, entry=entries[0], event="triggered", payload={}, created_at=at
        )


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(queries)


def test_each_list_shows_its_rows_in_queries_that_do_not_grow_with_them(admin):
    client, user = admin
    lists = {name: f"/admin/incidents/{name}/" for name in READ_ONLY}
    _grow(user, 0, 2)
    for url in lists.values():  # once before counting: what a first request caches (content types) is not per row
        client.get(url)
    small = {name: _queries(client, url) for name, url in lists.items()}
    _grow(user, 2, 12)
    large = {name: _queries(client, url) for name, url in lists.items()}
    assert large == small, {name: (small[name], large[name]) for name in small if small[name] != large[name]}
    page = client.get("/admin/incidents/alert/").content.decode()
    assert "n11/gpu3" in page and "Xid 79 on n11" in page and "xid on n11" in page


def test_the_records_are_viewable_and_cannot_be_added_changed_or_deleted(admin):
    client, user = admin
    _grow(user, 0, 1)
    for name, model in READ_ONLY.items():
        pk = model._base_manager.order_by("pk").first().pk
        assert client.get(f"/admin/incidents/{name}/add/").status_code == 403, name
        assert client.get(f"/admin/incidents/{name}/{pk}/change/").status_code == 200, name  # view only
        assert client.post(f"/admin/incidents/{name}/{pk}/change/", {}).status_code == 403, name
        assert client.post(f"/admin/incidents/{name}/{pk}/delete/", {"post": "yes"}).status_code == 403, name
        assert 'value="delete_selected"' not in client.get(f"/admin/incidents/{name}/").content.decode(), name
    assert TimelineEntry.objects.count() == 3 and Incident.objects.get().title == "Xid 79 on n0"


def test_the_incident_links_to_its_record_and_discarded_ones_stay_listed(admin):
    client, user = admin
    _grow(user, 0, 2)
    incident = Incident.objects.get(title="Xid 79 on n1")
    Incident.objects.filter(pk=incident.pk).update(status="closed", discarded_at=T0)
    listing = client.get("/admin/incidents/incident/").content.decode()
    assert f"/admin/incidents/incident/{incident.pk}/change/" in listing  # the audit keeps discarded incidents
    page = client.get(f"/admin/incidents/incident/{incident.pk}/change/").content.decode()
    timeline = f"/admin/incidents/timelineentry/?incident__id__exact={incident.pk}"
    assert f'href="{timeline}"' in page and f'href="/incidents/{incident.pk}"' in page
    entries = client.get(timeline).content.decode()
    assert entries.count("/admin/incidents/timelineentry/") >= 3 and "3 timeline entries" in entries


def test_a_playbook_execution_shows_its_steps_and_a_postmortem_its_versions(admin):
    client, user = admin
    _grow(user, 0, 1)
    execution = client.get(f"/admin/incidents/playbookexecution/{PlaybookExecution.objects.get().pk}/change/")
    assert "cordon" in execution.content.decode() and "drain" in execution.content.decode()
    postmortem = client.get(f"/admin/incidents/postmortem/{Postmortem.objects.get().pk}/change/").content.decode()
    assert "# v1" in postmortem and "# v2" in postmortem
