"""Failure isolation (issue 15): an event that fails to apply is quarantined with its error; every other event of its
chunk and after it is applied, the sweeper never stops on it, and it can be replayed after a fix.

The intake now refuses what the record cannot hold, so the poison here is put in the log directly, as a row stored by
an older FleetOps or a bug in an applier would be: a run.failed without its `reason`, which the lifecycle needs."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from runs.domain.cloudevents import parse_events
from runs.models import Cluster, Event, Interruption, Node, Run
from runs.services import events_apply, events_ingest, pending_events_apply, quarantined_replay
from tests.stories import assert_failure_and_restart_record, at, failure_and_restart, record_snapshot

pytestmark = pytest.mark.django_db


def poison(**data) -> Event:
    fields = {"run": "r1", **data}
    return Event.objects.create(
        source="old://fleetops",
        event_id=f"poison-{len(data)}",
        type="run.failed",
        time=at(100),
        data=fields,
        run_name="r1",
    )


def stored(events: list[dict], django_capture_on_commit_callbacks) -> list[int]:
    """Stored, not applied: the on-commit apply is captured and dropped."""
    parsed, problems = parse_events(events, max_batch=10_000)
    assert problems == []
    with django_capture_on_commit_callbacks(execute=False):
        events_ingest(events=parsed)
    return list(Event.objects.filter(applied_at=None).order_by("time", "id").values_list("pk", flat=True))


def clean_record(django_capture_on_commit_callbacks) -> dict:
    events_apply(event_ids=stored(failure_and_restart(), django_capture_on_commit_callbacks))
    snapshot = record_snapshot()
    for model in (Run, Node, Cluster, Event):
        model.objects.all().delete()
    return snapshot


@pytest.mark.reliability(
    "An event in the log that fails to apply (a run.failed without its reason), in one chunk with a whole run's story",
    how="the story and the bad row applied together in one call, as a worker's task would",
    outcome="the bad event quarantined with its error; every other event applied; the record as without it",
)
def test_one_bad_event_costs_its_chunk_mates_nothing(django_capture_on_commit_callbacks):
    expected = clean_record(django_capture_on_commit_callbacks)
    bad = poison()
    ids = stored(failure_and_restart(), django_capture_on_commit_callbacks)
    assert bad.pk in ids
    applied = events_apply(event_ids=ids)
    assert applied == len(ids) - 1
    bad.refresh_from_db()
    assert bad.quarantined_at is not None and bad.error == "KeyError: 'reason'"
    assert Event.objects.filter(applied_at=None).count() == 0
    assert record_snapshot() == expected
    assert_failure_and_restart_record()


@pytest.mark.reliability(
    "The sweeper over a log holding a bad event, with 100 valid events stored after it",
    how="apply_pending_events (the beat task's service) twice",
    outcome="the first sweep applies the 100 and quarantines the bad one; the second finds nothing to do and does "
    "not fail (before: every sweep failed on the same row, and the 100 waited until it was edited by hand)",
)
def test_the_sweeper_never_stops_on_a_bad_event(django_capture_on_commit_callbacks):
    bad = poison()
    steps = (
        failure_and_restart()[:1]
        + [
            {
                "specversion": "1.0",
                "id": f"s{i}",
                "source": "t://x",
                "type": "run.step",
                "time": f"2026-03-01T03:{i:02d}:00Z",
                "data": {"run": "r2", "step": i},
            }
            for i in range(60)
        ]
        + [
            {
                "specversion": "1.0",
                "id": f"h{i}",
                "source": "t://x",
                "type": "node.heartbeat",
                "time": f"2026-03-01T04:{i:02d}:00Z",
                "data": {"node": f"n{i}"},
            }
            for i in range(39)
        ]
    )  # r1's start (a failure before it would end nothing), 60 steps of r2, 39 heartbeats
    stored(steps, django_capture_on_commit_callbacks)
    Event.objects.update(received_at=timezone.now() - timedelta(minutes=5))
    assert pending_events_apply() == 100
    assert pending_events_apply() == 0
    assert Run.objects.get(name="r2").last_step == 59
    bad.refresh_from_db()
    assert bad.quarantined_at is not None


@pytest.mark.reliability(
    "A quarantined event replayed after the fix",
    how="the bad row's data mended, then `manage.py replay_quarantined`",
    outcome="the event applied and in the record (its interruption appears); replayed again while still bad, it is "
    "quarantined again with its error",
)
def test_a_quarantined_event_is_replayed_after_the_fix(django_capture_on_commit_callbacks):
    bad = poison()
    events_apply(event_ids=stored(failure_and_restart(), django_capture_on_commit_callbacks))
    assert quarantined_replay() == 0  # still bad: quarantined again
    bad.refresh_from_db()
    assert bad.quarantined_at is not None and "reason" in bad.error
    before = Interruption.objects.filter(run__name="r1").count()

    Event.objects.filter(pk=bad.pk).update(data={"run": "r1", "reason": "mended by hand"})
    call_command("replay_quarantined")
    bad.refresh_from_db()
    assert (bad.quarantined_at, bad.error) == (None, "") and bad.applied_at is not None
    assert Interruption.objects.filter(run__name="r1").count() == before + 1


@pytest.mark.reliability(
    "An event whose value its column cannot hold (a run of 2^40 GPUs in the log), on PostgreSQL",
    how="the row put in the log directly, then the run's story posted and applied with it",
    outcome="the bad event quarantined with the database's error; the rest applied",
)
def test_a_value_the_database_refuses_is_quarantined_not_fatal(postgres, django_capture_on_commit_callbacks):
    bad = Event.objects.create(
        source="old://fleetops",
        event_id="huge",
        type="run.started",
        time=at(200),
        data={"run": "r1", "cluster": "c1", "gpus": 2**40, "nodes": ["n9"], "job_id": "9"},
        run_name="r1",
    )
    ids = stored(failure_and_restart(), django_capture_on_commit_callbacks)
    assert events_apply(event_ids=ids) == len(ids) - 1
    bad.refresh_from_db()
    assert bad.quarantined_at is not None and "out of range" in bad.error
    assert_failure_and_restart_record()


def test_the_quarantine_page_lists_them_and_an_admin_replays(
    client, django_user_model, django_capture_on_commit_callbacks
):
    from django.contrib.auth.models import Group

    bad = poison()
    events_apply(event_ids=stored(failure_and_restart(), django_capture_on_commit_callbacks))
    viewer = django_user_model.objects.create_user("v", password="x")
    viewer.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client.force_login(viewer)
    html = client.get("/events/quarantined").content.decode()
    assert f'id="event-{bad.pk}"' in html and "KeyError: &#x27;reason&#x27;" in html
    assert 'name="event"' not in html  # a viewer reads, does not replay
    assert "1 event(s) quarantined" in client.get("/").content.decode()
    assert client.post("/events/quarantined/replay").status_code == 403

    admin = django_user_model.objects.create_user("a", password="x")
    admin.groups.add(Group.objects.get_or_create(name="admin")[0])
    client.force_login(admin)
    Event.objects.filter(pk=bad.pk).update(data={"run": "r1", "reason": "mended"})
    response = client.post("/events/quarantined/replay", {"event": [bad.pk]})
    assert response.status_code == 302
    assert not Event.objects.filter(quarantined_at__isnull=False).exists()
    page = client.get("/events/quarantined").content.decode()
    assert "No event is quarantined." in page
    assert "Replayed: 1 applied, 0 still quarantined." in page  # what the replay did, said once on the next page
