"""Detection claims each applied event once, and passes none over.

An applier's scan (`SELECT ... FOR UPDATE SKIP LOCKED` of a turn's unapplied events) can lock rows that another
worker applied a moment before, and hold them until its own chunk commits: PostgreSQL locks the row's newest version
before it finds the row no longer unapplied. Detection used to skip locked rows too, and an event it skipped waited
for the sweeper (a minute in a deployment; for ever in a benchmark without beat, where it was seen: 80 agents'
events of 42,600, and earlier the replica benchmark's 703). Detection now waits for such a row.
"""

import threading

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from incidents.detection import services as detection
from incidents.models import Alert
from runs.models import Event, Node
from tests.services import postgres  # noqa: F401 -- the fixture
from tests.stories import at

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_event_another_transaction_holds_is_detected_when_it_lets_go(postgres):  # noqa: F811
    Node.objects.create(hostname="n2")
    xid = Event.objects.create(
        source="test/agent",
        event_id="xid-1",
        type="gpu.xid",
        time=at(1),
        received_at=timezone.now(),
        data={"node": "n2", "gpu": 3, "xid": 79, "message": "GPU has fallen off the bus"},
        node_name="n2",
        applied_at=timezone.now(),
    )
    held, go = threading.Event(), threading.Event()

    def applier_scan():  # what an applier's chunk transaction leaves: the row locked until it commits
        with psycopg.connect(**connection.get_connection_params()) as other:
            other.execute("SELECT id FROM runs_event WHERE id = %s FOR UPDATE", [xid.pk])
            held.set()
            go.wait(10)
            other.commit()

    scan = threading.Thread(target=applier_scan)
    scan.start()
    try:
        assert held.wait(10)
        threading.Timer(0.5, go.set).start()  # the chunk commits half a second later
        found = detection.events_detect(event_ids=[xid.pk])
    finally:
        go.set()
        scan.join()
    xid.refresh_from_db()
    assert found == 1 and xid.detected_at is not None
    assert Alert.objects.get(kind="xid").fingerprint == "xid:n2:3:79"
    assert detection.events_detect(event_ids=[xid.pk]) == 0  # claimed: a second run finds nothing
