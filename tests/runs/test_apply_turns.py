"""Apply turns (runs.services.turn_of, apply_turn_take): the node agents' polls wait in one turn together, a larger
batch in its token's own; a turn is queued once, and taken over when its message was lost.

At 16,384 nodes the agents post 546 small batches a second, each under a token bound to its node: a turn each was a
Celery task each (44 POSTs a second on two cores; docs/PERFORMANCE.md, "16,384 agents posting for themselves").
"""

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from runs import services
from runs.domain.cloudevents import parse_events
from runs.models import ApiToken, ApplyTurn, Event
from runs.services import AGENT_POLL_MAX, AGENTS_TURN, apply_turn_take, events_ingest, turn_apply, turn_of
from tests.conftest import make_token
from tests.services import wait_for
from tests.stories import event


def _poll(node: str, when, readings: int = 0, prefix: str = "p") -> list[dict]:
    """A node agent's poll: its heartbeat and `readings` GPU health readings."""
    source = f"agent://{node}"
    batch = [event("node.heartbeat", when, f"{prefix}-{node}-hb", source=source, node=node, cluster="c1")]
    batch += [
        event(
            "gpu.health",
            when,
            f"{prefix}-{node}-g{i}",
            source=source,
            node=node,
            gpu=i % 8,
            temperature_c=60.0,
            throttle_reasons=[],
            nvlink_errors=0,
            recovery_action=0,
        )
        for i in range(readings)
    ]
    return batch


def _store(batch: list[dict], token: ApiToken | None) -> None:
    """Stored as the intake stores them; the turn's task is not queued (no commit in a test's transaction)."""
    parsed, problems = parse_events(batch, max_batch=len(batch))
    assert not problems
    events_ingest(events=parsed, token=token)


def _token(name: str, **bounds) -> ApiToken:
    make_token(name, ["events:write"], **bounds)
    return ApiToken.objects.get(name=name)


def test_a_node_agents_poll_waits_in_the_agents_turn_and_a_larger_batch_in_its_own(db):
    a, b = _token("agent-a", role="agent", node="a"), _token("agent-b", role="agent", node="b")
    scheduler = _token("slurm", role="scheduler")
    now = timezone.now()
    _store(_poll("a", now), a)
    _store(_poll("b", now, readings=16), b)
    _store(_poll("a", now - timedelta(minutes=5), readings=AGENT_POLL_MAX, prefix="spool"), a)  # 101 events
    _store(_poll("d", now, prefix="scheduled"), scheduler)  # a relay of many nodes: a sender like any other
    _store(_poll("e", now, prefix="own"), None)
    turns = dict(Event.objects.values_list("event_id", "turn").filter(type="node.heartbeat"))
    assert turns == {
        "p-a-hb": AGENTS_TURN,
        "p-b-hb": AGENTS_TURN,
        "spool-a-hb": a.pk,
        "scheduled-d-hb": scheduler.pk,
        "own-e-hb": 0,
    }
    assert turn_of(a, AGENT_POLL_MAX) == AGENTS_TURN and turn_of(a, AGENT_POLL_MAX + 1) == a.pk

    assert turn_apply(sender=AGENTS_TURN) == 1 + 17  # both polls, in one turn
    pending = set(
        Event.objects.filter(applied_at__isnull=True, type="node.heartbeat").values_list("event_id", flat=True)
    )
    assert pending == {"spool-a-hb", "scheduled-d-hb", "own-e-hb"}
    assert turn_apply(sender=a.pk) == AGENT_POLL_MAX + 1
    assert turn_apply(sender=0) == 1
    assert Event.objects.filter(applied_at__isnull=True).count() == 1  # the scheduler's, in its own turn


def test_a_turn_is_queued_once_and_taken_over_when_its_message_was_lost(db):
    """Tasks run in-process here: a turn that is queued runs at once, and its events are applied."""
    a = _token("agent-a", role="agent", node="a")
    _store(_poll("a", timezone.now()), a)
    queued = timezone.now() - timedelta(seconds=10)
    ApplyTurn.objects.create(sender=AGENTS_TURN, queued_at=queued)
    apply_turn_take(sender=AGENTS_TURN)  # one is queued already: no second task
    assert ApplyTurn.objects.get(sender=AGENTS_TURN).queued_at == queued
    assert Event.objects.filter(applied_at__isnull=True).count() == 1

    ApplyTurn.objects.filter(sender=AGENTS_TURN).update(queued_at=timezone.now() - services.TURN_STALE * 2)
    apply_turn_take(sender=AGENTS_TURN)  # its message was lost (a broker restart): queued again, and it ran
    assert not Event.objects.filter(applied_at__isnull=True).exists()
    assert not ApplyTurn.objects.exists()


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_forty_agents_polls_are_applied_by_a_real_worker_through_their_shared_turn(worker):
    now = timezone.now()
    for n in range(40):
        node = f"n{n:02d}"
        api = APIClient()
        api.credentials(
            HTTP_AUTHORIZATION="Bearer " + make_token(f"agent-{node}", ["events:write"], role="agent", node=node)
        )
        response = api.post(
            "/api/v1/events", json.dumps(_poll(node, now, readings=n % 3)), content_type="application/json"
        )
        assert response.status_code == 202, response.content
    expected = sum(1 + n % 3 for n in range(40))

    def applied() -> bool:
        return Event.objects.filter(applied_at__isnull=False).count() == expected

    wait_for(applied, timeout=30, what=f"{expected} events applied")
    assert set(Event.objects.values_list("turn", flat=True)) == {AGENTS_TURN}
    assert not ApplyTurn.objects.exists()
    assert any("runs.tasks.apply_turn" in line and "succeeded" in line for line in worker)
