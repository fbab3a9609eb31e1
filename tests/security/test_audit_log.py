"""The audit log (TimelineEntry) is append-only: the ORM refuses every change, and PostgreSQL refuses raw SQL too."""

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError

from incidents import services
from incidents.models import AppendOnlyError, Incident, TimelineEntry

T = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def entry(db):
    ana = get_user_model().objects.create_user("ana")
    incident = Incident.objects.create(title="n2 down", group_key="node:n2", started_at=T, detected_at=T)
    return services.timeline_add(
        incident=incident, kind=TimelineEntry.Kind.NOTE, text="draining n2", actor=services.Actor.of_user(ana)
    )


def snapshot():
    return list(TimelineEntry.objects.order_by("id").values_list("id", "incident_id", "actor_id", "kind", "text"))


@pytest.mark.reliability(
    "The app changes or removes an audit record",
    how="save() of a stored TimelineEntry, delete(), QuerySet update() and delete() through the manager and the "
    "incident's related manager; deleting the incident or the person who acted",
    outcome="AppendOnlyError (ProtectedError for the incident and the person); the log unchanged",
)
def test_the_orm_never_updates_or_deletes_an_entry(entry):
    before = snapshot()
    entry.text = "nothing happened"
    with pytest.raises(AppendOnlyError, match="never updated"):
        entry.save()
    with pytest.raises(AppendOnlyError, match="never deleted"):
        entry.delete()
    with pytest.raises(AppendOnlyError, match="never updated"):
        TimelineEntry.objects.filter(pk=entry.pk).update(text="x")
    with pytest.raises(AppendOnlyError, match="never updated"):
        entry.incident.timeline.update(text="x")
    with pytest.raises(AppendOnlyError, match="never deleted"):
        TimelineEntry.objects.all().delete()
    with pytest.raises(AppendOnlyError, match="never deleted"):
        entry.incident.timeline.all().delete()
    with pytest.raises(ProtectedError):
        Incident.objects.get(pk=entry.incident_id).delete()
    with pytest.raises(ProtectedError):
        get_user_model().objects.get(username="ana").delete()
    assert snapshot() == before
    # Appending stays possible.
    services.timeline_add(incident=entry.incident, kind=TimelineEntry.Kind.NOTE, text="n2 back")
    assert len(snapshot()) == len(before) + 1


@pytest.mark.reliability(
    "Another client rewrites the audit log in the database",
    how="raw SQL UPDATE and DELETE of incidents_timelineentry on PostgreSQL, and a DELETE of the incident",
    outcome="the trigger (migration incidents 0006) refuses each with an error; the rows are unchanged; an INSERT "
    "still works",
)
def test_postgresql_refuses_raw_update_and_delete(entry, postgres):
    before = snapshot()
    statements = [
        ("UPDATE incidents_timelineentry SET text = 'nothing happened' WHERE id = %s", [entry.pk], "is the audit log"),
        ("DELETE FROM incidents_timelineentry WHERE id = %s", [entry.pk], "is the audit log"),
        ("UPDATE incidents_timelineentry SET actor_id = NULL", [], "is the audit log"),
        ("DELETE FROM incidents_incident WHERE id = %s", [entry.incident_id], "foreign key"),
    ]
    for sql, params, reason in statements:
        with pytest.raises(IntegrityError, match=reason), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # Django's foreign keys are checked at commit otherwise
            cursor.execute(sql, params)
    assert snapshot() == before
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO incidents_timelineentry (incident_id, at, actor_name, kind, text, data) "
            "VALUES (%s, now(), 'psql', 'note', 'appended', '{}')",
            [entry.incident_id],
        )
    assert len(snapshot()) == len(before) + 1
