"""From events to incidents, in-process: an Xid storm and a failure make one incident; people act on it."""

import json
import tracemalloc
from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group

from incidents.detection import services as detection
from incidents.models import Alert, Incident, TimelineEntry
from runs.models import Event, Run
from tests.stories import at, event, failure_and_restart, story_until_failure, xid_storm

BATCH = "application/cloudevents-batch+json"


@pytest.fixture(autouse=True)
def _story_time():
    """The clock just after the stories' end (+120 min), as if live (a test that replays later travels on): months
    later a run still restarting would have fallen silent (RUN_SILENT_S), its impact another story."""
    with time_machine.travel(at(125), tick=True):
        yield


def test_an_xid_storm_and_a_failure_open_exactly_one_incident(post):
    post(story_until_failure() + xid_storm(2000))
    (incident,) = Incident.objects.all()
    assert incident.run.name == "r1" and incident.status == "triggered"
    assert incident.recommended_action == "reboot node, drain"
    assert incident.severity == "SEV3"  # 16 GPUs idle: any idle GPU is SEV3
    alerts = {a.kind: a for a in incident.alerts.all()}
    assert set(alerts) == {"xid", "run_failed", "node_state"}  # the scheduler also cordoned n2
    assert alerts["xid"].count == 2001 and alerts["xid"].fingerprint == "xid:n2:3:79"  # the scenario's own Xid too
    assert incident.started_at == at(44)
    assert [n.hostname for n in incident.nodes.all()] == ["n2"]


def test_posting_the_storm_again_counts_nothing_twice(post):
    events = story_until_failure() + xid_storm(300)
    post(events)
    post(events)
    assert Alert.objects.get(kind="xid").count == 301
    assert Incident.objects.count() == 1


def test_the_restart_mitigates_the_incident(post):
    post(failure_and_restart() + xid_storm(10))
    incident = Incident.objects.get()
    assert incident.status == "mitigated" and incident.mitigated_at == at(58)
    assert incident.alerts.get(kind="run_failed").status == "resolved"
    assert incident.alerts.get(kind="xid").status == "firing"  # the GPU is still suspect until it is back
    assert "trains again from step 3" in incident.timeline.get(kind="mitigated").text


@pytest.mark.reliability(
    "A run that failed and was then cancelled instead of restarted",
    how="the failure, then run.cancelled, through POST /api/v1/events",
    outcome="its incident mitigated at the cancellation (nothing more is lost) and the failure's alert resolved; "
    "before: triggered for ever, its GPUs counted idle",
)
def test_a_run_that_ends_after_a_failure_mitigates_its_incident(post):
    post(story_until_failure() + [event("run.cancelled", at(50), "c-1", run="r1", reason="given up")])
    incident = Incident.objects.get()
    assert (incident.status, incident.mitigated_at) == ("mitigated", at(50))
    assert incident.alerts.get(kind="run_failed").status == "resolved"
    assert "r1 was cancelled: nothing more is lost" in incident.timeline.get(kind="mitigated").text


def test_the_watchdog_finds_a_hang_without_any_failure_event(post, django_capture_on_commit_callbacks):
    nodes = [f"h-{i}" for i in range(1, 65)]  # 8 GPUs a node
    steps = [event("run.started", at(0), "s", run="h1", cluster="c1", gpus=512, nodes=nodes, job_id="9")]
    steps += [event("run.step", at(minute), f"h-{minute}", run="h1", step=minute) for minute in range(1, 31)]
    post(steps)
    assert detection.hangs_detect(now=at(35)) == 0  # 5 minutes of silence is under the 10-minute floor
    with time_machine.travel(at(45)), django_capture_on_commit_callbacks(execute=True):
        assert detection.hangs_detect(now=at(45)) == 1
    run = Run.objects.get(name="h1")
    assert run.state == "restarting"
    interruption = run.interruptions.get()
    after_last_step = at(30) + timedelta(microseconds=1)  # the hang began after the last sign of progress
    assert (interruption.kind, interruption.fault_at, interruption.detected_at) == ("hang", after_last_step, at(45))
    incident = Incident.objects.get(run=run)
    # Found live: 512 GPUs idle at $21/min, 15 min lost since the last step (and 30 min rewound to the run's start).
    assert incident.alerts.get().kind == "hang" and incident.severity == "SEV2"
    assert detection.hangs_detect(now=at(50)) == 0  # the run is restarting now, not hung again


def test_the_trainers_heartbeat_between_steps_holds_the_watchdog_off_and_the_hang_starts_after_the_last_one(
    post, django_capture_on_commit_callbacks
):
    """A long evaluation between steps: the training loop says it is alive (fleetops_client's heartbeat, run.heartbeat)
    and is not hung; once those stop too, the hang began after the last of them."""
    steps = [event("run.started", at(0), "s", run="h2", cluster="c1", gpus=8, nodes=["e-1"], job_id="9")]
    steps += [event("run.step", at(minute), f"h-{minute}", run="h2", step=minute) for minute in range(1, 31)]
    steps += [event("run.heartbeat", at(m), f"b-{m}", run="h2", phase="evaluation") for m in range(32, 60, 2)]
    post(steps)
    assert detection.hangs_detect(now=at(65)) == 0  # 35 min after the last step, 7 min after the last heartbeat
    with time_machine.travel(at(70)), django_capture_on_commit_callbacks(execute=True):
        assert detection.hangs_detect(now=at(70)) == 1
    hang = Run.objects.get(name="h2").interruptions.get()
    assert (hang.kind, hang.fault_at) == ("hang", at(58) + timedelta(microseconds=1))


@pytest.mark.reliability(
    "A run restored from its checkpoint that then never steps: the watchdog's hang, whose last sign of progress is "
    "the restore itself",
    how="failure_and_restart up to its restore through the API, no step after; the hang watchdog two hours later",
    outcome="the restore resumes the first interruption and the hang is a second one just after it (before: the hang, "
    "stamped at the restore's instant, ended the attempt first; the restore then resumed nothing and the run page "
    "showed goodput 0)",
)
def test_a_hang_at_the_instant_of_a_restore_comes_after_it(post, django_capture_on_commit_callbacks):
    post([e for e in failure_and_restart() if e["time"] <= "2026-03-01T00:58:00Z" and e["type"] != "run.step"])
    with django_capture_on_commit_callbacks(execute=True):
        assert detection.hangs_detect(now=at(180)) == 1
    run = Run.objects.get(name="r1")
    first, hang = run.interruptions.order_by("fault_at")
    assert (first.resumed_at, first.resumed_from_step) == (at(58), 3)
    assert (hang.kind, hang.fault_at) == ("hang", at(58) + timedelta(microseconds=1))


def test_a_run_put_back_on_its_nodes_is_silent_from_its_restart_not_from_its_last_step(
    post, django_capture_on_commit_callbacks
):
    """The demo's run, requeued on a spare, was found hung 3 min into its reload: the watchdog measured silence
    from the last step before the fault. A new attempt is silent since it started (the floor covers the reload)."""
    post([e for e in failure_and_restart() if e["time"] <= "2026-03-01T00:55:00Z"])  # restarted at +55, no restore
    assert Run.objects.get(name="r1").state == "running"
    # Steps 10 min apart: hung after 10 x 10 min of silence.
    assert detection.hangs_detect(now=at(150)) == 0  # 110 min after the last step, 95 min after the restart
    with django_capture_on_commit_callbacks(execute=True):
        assert detection.hangs_detect(now=at(160)) == 1  # the reload itself never finished: 105 min silent
    hang = Run.objects.get(name="r1").interruptions.get(kind="hang")
    assert hang.fault_at == at(55) + timedelta(microseconds=1)


def test_heartbeat_loss_and_return(post):
    post([event("node.heartbeat", at(0), "hb1", node="lonely")])
    assert detection.heartbeats_detect(now=at(10)) == 1
    alert = Alert.objects.get(kind="heartbeat")
    assert alert.status == "firing" and alert.incident.group_key == "node:lonely"
    post([event("node.heartbeat", at(12), "hb3", node="lonely"), event("node.heartbeat", at(11), "hb2", node="lonely")])
    alert.refresh_from_db()
    assert (alert.status, alert.resolved_at) == ("resolved", at(11))  # cleared by the first heartbeat back


def test_a_heartbeat_before_the_node_is_back_clears_its_alert_first(post):
    post([event("node.heartbeat", at(0), "hb1", node="lonely")])
    assert detection.heartbeats_detect(now=at(10)) == 1
    post(
        [
            event("node.heartbeat", at(11), "hb2", node="lonely"),
            event("node.state", at(12), "back", node="lonely", state="in_service", reason="rebooted"),
        ]
    )
    alert = Alert.objects.get(kind="heartbeat")
    assert (alert.status, alert.resolved_at) == ("resolved", at(11))
    assert "heartbeat back" in alert.incident.timeline.get(data__cleared=True).text


def test_an_incident_cannot_be_resolved_while_an_alert_fires_unless_overridden(post, django_user_model):
    from incidents import services

    post(story_until_failure())
    incident = Incident.objects.get()
    actor = services.Actor.of_user(django_user_model.objects.create_user("oncall"))
    with pytest.raises(services.IncidentError, match="still firing"):
        services.incident_resolve(incident=incident, actor=actor)
    services.incident_resolve(incident=incident, actor=actor, override_reason="node replaced by hand")
    incident.refresh_from_db()
    assert incident.status == "resolved"
    assert "node replaced by hand" in incident.timeline.get(kind="resolved").text


def test_the_api_lists_reads_and_acts(post, client, django_user_model):
    post(story_until_failure() + xid_storm(50))
    engineer = django_user_model.objects.create_user("ana")
    engineer.groups.add(Group.objects.get(name="oncall"))
    client.force_login(engineer)
    (listed,) = client.get("/api/v1/incidents?status=triggered").json()["results"]
    assert listed["alerts"]["count"] == 53  # 50 + the scenario's own Xid, the failure, the cordon
    assert listed["alerts"]["fingerprints"][1].startswith("run_failed:r1:")
    assert listed["impact"]["gpus_idle"] == 16
    incident_id = listed["id"]
    assert client.post(f"/api/v1/incidents/{incident_id}/acknowledge").json()["status"] == "acknowledged"
    body = client.post(
        f"/api/v1/incidents/{incident_id}/notes", {"text": "draining n2"}, content_type="application/json"
    ).json()
    assert [e["kind"] for e in body["timeline"]][-2:] == ["acknowledged", "note"]
    assert body["timeline"][-1]["actor"] == "ana" and body["commander"] == "ana"
    refused = client.post(f"/api/v1/incidents/{incident_id}/resolve", {}, content_type="application/json")
    assert refused.status_code == 409 and "still firing" in refused.json()["detail"]
    assert client.get("/api/v1/incidents?severity=SEV1").json()["count"] == 0
    assert client.get("/api/v1/incidents?node=n2").json()["count"] == 1


def test_a_viewer_cannot_acknowledge_and_leaves_only_an_audit_entry(post, client, django_user_model):
    post(story_until_failure())
    incident = Incident.objects.get()
    viewer = django_user_model.objects.create_user("vic")
    viewer.groups.add(Group.objects.get(name="viewer"))
    client.force_login(viewer)
    before = list(incident.timeline.values_list("kind", flat=True))
    response = client.post(f"/api/v1/incidents/{incident.pk}/acknowledge")
    assert response.status_code == 403
    incident.refresh_from_db()
    assert incident.status == "triggered" and incident.acknowledged_at is None
    after = list(incident.timeline.values_list("kind", flat=True))
    assert after == [*before, "refused"]
    refusal = TimelineEntry.objects.get(kind="refused")
    assert (refusal.actor, refusal.data) == (viewer, {"action": "acknowledge"})
    assert "refused" not in [e["kind"] for e in client.get(f"/api/v1/incidents/{incident.pk}").json()["timeline"]]


def test_a_token_needs_the_incidents_write_scope(post, reader, client):
    from tests.conftest import make_token

    post(story_until_failure())
    incident = Incident.objects.get()
    assert reader.post(f"/api/v1/incidents/{incident.pk}/acknowledge").status_code == 403
    bot = make_token("chatops", ["incidents:write"])
    response = client.post(f"/api/v1/incidents/{incident.pk}/acknowledge", HTTP_AUTHORIZATION=f"Bearer {bot}")
    assert response.status_code == 200
    assert incident.timeline.get(kind="acknowledged").actor_name == "token:chatops"


def test_response_metrics(post, client, django_user_model):
    from incidents import services

    post(failure_and_restart())
    incident = Incident.objects.get()
    services.incident_acknowledge(
        incident=incident, actor=services.Actor.of_user(django_user_model.objects.create_user("x"))
    )
    client.force_login(django_user_model.objects.create_user("viewer2"))
    body = client.get("/api/v1/metrics/response?since=2026-02-01T00:00:00Z&until=2026-04-01T00:00:00Z").json()
    assert body["mttm"]["count"] == 1 and body["mttm"]["mean_s"] == (at(58) - at(45)).total_seconds()
    assert body["mttd"]["count"] == 1


def test_a_fault_after_the_run_was_mitigated_is_a_new_incident(post):
    story = [e for e in failure_and_restart() if e["type"] != "run.completed"]
    post(story + [event("run.failed", at(100), "again", run="r1", reason="NCCL watchdog timeout", node="n3")])
    first, second = Incident.objects.order_by("started_at")
    assert first.status == "mitigated" and second.status == "triggered"
    assert second.started_at == at(100) and second.alerts.get().kind == "run_failed"
    assert first.group_key != second.group_key and second.group_key.startswith("run:r1@")


@pytest.mark.reliability(
    "A second fault ten minutes after the run trained again (54 simulated days: its Xid joined the outage before, "
    "the scheduler's cordon 30 s later, past the window, opened an incident that then took the next fault)",
    how="failure_and_restart, then n2's dead GPU's last Xid, n3's Xid 79, the run's failure and n3's cordon, posted "
    "in one batch, one event at a time, and one at a time newest first",
    outcome="two incidents: the first keeps its node's straggler, the second starts at the new fault and holds "
    "its Xid, failure and cordon, whichever way the events came",
)
@pytest.mark.parametrize("order", ["batch", "one_by_one", "newest_first"])
def test_a_fault_soon_after_the_run_trained_again_is_a_new_incident_with_all_its_alerts(post, order):
    story = [e for e in failure_and_restart() if e["type"] != "run.completed"]  # mitigated at +58
    again = [
        event("gpu.xid", at(62), "late-n2", node="n2", gpu=3, xid=79, message="GPU has fallen off the bus"),
        event("gpu.xid", at(68), "xid-n3", node="n3", gpu=1, xid=79, message="GPU has fallen off the bus"),
        event("run.failed", at(68), "again", run="r1", reason="GPU fell off the bus", node="n3", gpu=1, xid=79),
        event("node.state", at(74), "cordon-n3", node="n3", state="cordoned", reason="Xid 79"),  # window: to +73
    ]
    post(story)
    batches = {"batch": [again], "one_by_one": [[e] for e in again], "newest_first": [[e] for e in again[::-1]]}
    for batch in batches[order]:
        post(batch)
    first, second = Incident.objects.order_by("started_at")
    assert first.started_at == at(45) and second.started_at == at(68)
    assert sorted(first.alerts.values_list("kind", "node__hostname")) == [
        ("node_state", "n2"),
        ("run_failed", "n2"),
        ("xid", "n2"),
    ]
    assert first.alerts.get(kind="xid").count == 2  # the straggler, 4 min after the run trained again
    assert sorted(second.alerts.values_list("kind", "node__hostname")) == [
        ("node_state", "n3"),
        ("run_failed", "n3"),
        ("xid", "n3"),
    ]


def test_the_run_failing_again_on_the_same_node_soon_after_it_trained_again_is_a_new_incident(post):
    """The run's second failure 5 min after it trained again, naming the first fault's node (n2, one of the first
    incident's nodes, in its straggler window): a new outage to answer, not a straggler of the mitigated one."""
    story = [e for e in failure_and_restart() if e["type"] != "run.completed"]  # trains again at +58
    post(story + [event("run.failed", at(63), "again", run="r1", reason="Xid 13", node="n2", gpu=0, xid=13)])
    first, second = Incident.objects.order_by("started_at")
    assert (first.status, second.status, second.started_at) == ("mitigated", "triggered", at(63))
    assert second.alerts.get().kind == "run_failed" and first.alerts.filter(kind="run_failed").count() == 1


def test_a_drain_that_names_a_fleetops_playbook_but_none_ran_is_still_an_alert(post):
    """FleetOps' own drain, reported back, raises no alert (the playbook's timeline says it); a reason alone that
    claims to be one, with no playbook at work on the node, does not silence the scheduler's report."""
    post(story_until_failure()[:-1])  # up to the failure, without the scheduler's cordon
    post([event("node.state", at(47), "forged", node="n2", state="cordoned", reason="fleetops #1: trust me")])
    assert Alert.objects.filter(kind="node_state", node__hostname="n2").count() == 1


def test_an_xid_detected_before_its_run_is_known_joins_the_run_incident(post):
    """Workers apply batches in parallel: n2's Xids may be detected before the run.started that put n2 in r1."""
    story = story_until_failure()
    post(xid_storm(50))  # n2 is in no run yet: an incident on the node alone
    early = Incident.objects.get()
    assert early.run is None
    post(story)
    incident = Incident.objects.get()
    assert incident.pk == early.pk and incident.run.name == "r1"
    assert set(incident.alerts.values_list("kind", flat=True)) == {"xid", "run_failed", "node_state"}
    assert not incident.alerts.filter(run__isnull=True).exists()
    assert incident.timeline.filter(kind="note", text__startswith="Attributed to run r1").count() == 1


@pytest.mark.reliability(
    "One failure's history posted live, and the same history replayed three days later",
    how="failure_and_restart through POST /api/v1/events, with the clock just after its end and three days on",
    outcome="the incident's started, detected and mitigated times identical, from the record (the fault, the "
    "earliest detection, the run training again); before: detected was when FleetOps processed the event, so a "
    "replay's MTTD came out in days",
)
@pytest.mark.parametrize("late", [timedelta(minutes=2), timedelta(days=3)])
def test_an_incident_is_timed_from_the_record_not_from_when_it_was_processed(post, late):
    events = [e for e in failure_and_restart() if e["type"] != "gpu.xid"]  # the scheduler's report alone
    with time_machine.travel(at(120) + late):  # the story ends at +120 min: just after it, or days later
        post(events)
    incident = Incident.objects.get()
    assert (incident.started_at, incident.detected_at, incident.mitigated_at) == (at(45), at(46), at(58))


@pytest.mark.reliability(
    "Incidents left mitigated with no alert firing (34 of the demo's 36 sat there for weeks)",
    how="a failure and its restart through the API, then the auto-resolve sweep at the quiet period and after it",
    outcome="resolved by FleetOps once every alert cleared and an hour passed quiet, saying why; not while an "
    "alert still fires, not once a person reopened it, never with INCIDENT_AUTO_RESOLVE_S=0",
)
def test_a_mitigated_incident_whose_alerts_cleared_is_resolved_after_the_quiet_period(post, settings):
    from incidents import services
    from incidents.detection.tasks import auto_resolve

    post([e for e in failure_and_restart() if e["type"] != "gpu.xid"])
    incident = Incident.objects.get()
    assert incident.status == "mitigated" and incident.mitigated_at == at(58)
    # The scheduler cordoned n2 (Xid 79): that alert still fires, so the incident waits however long.
    assert [a.kind for a in incident.alerts.filter(status="firing")] == ["node_state"]
    assert services.incidents_auto_resolve(now=at(600), quiet_s=3600) == 0
    post([event("node.state", at(70), "back-1", node="n2", state="in_service", reason="repaired")])
    assert not incident.alerts.filter(status="firing").exists()
    assert services.incidents_auto_resolve(now=at(70 + 59), quiet_s=3600) == 0  # not an hour quiet yet
    settings.INCIDENT_AUTO_RESOLVE_S = 0
    with time_machine.travel(at(600)):
        assert auto_resolve() == 0  # off
    settings.INCIDENT_AUTO_RESOLVE_S = 3600
    with time_machine.travel(at(70 + 61)):
        assert auto_resolve() == 1
    incident.refresh_from_db()
    # As of when it fell due (an hour after n2 came back), not when the sweep came round a minute later.
    assert incident.status == "resolved" and incident.resolved_at == at(70 + 60)
    assert incident.timeline.get(kind="resolved").text.startswith("Resolved by FleetOps: the harm stopped at")

    # A person reopened it: FleetOps leaves it to people, however quiet.
    services.incident_reopen(incident=incident, actor=services.FLEETOPS, reason="the GPU is still suspect")
    Incident.objects.filter(pk=incident.pk).update(status="mitigated", mitigated_at=at(58))
    assert services.incidents_auto_resolve(now=at(6000), quiet_s=3600) == 0


@pytest.mark.reliability(
    "Two outages of one run, the first mitigated, the second still down; then the run cancelled",
    how="failure_and_restart's first hour and a second fault at +100 min through the API; the board's impacts",
    outcome="each incident owns its own interruption: the first shows nothing idle, the second the run's 16 GPUs; "
    "together they claim exactly the run's failure badput; none idle once the run ended (before: every incident of "
    "the run showed its current outage, and each claimed every later interruption as well)",
)
def test_each_incident_owns_its_own_interruptions_and_burns_only_while_they_last(post):
    from incidents.selectors import incident_impacts_get
    from runs.domain.goodput import interruption_costs
    from runs.selectors import run_timeline_get

    story = [e for e in failure_and_restart() if e["time"] < "2026-03-01T01:30:00Z"]
    second = event("run.failed", at(100), "f-2", run="r1", reason="NCCL timeout", detected_at=at(101).isoformat())
    post(story + [second])
    first, later = Incident.objects.order_by("started_at")
    now = at(110)
    impacts = incident_impacts_get(incidents=[first, later], now=now)
    assert (impacts[first.pk].gpus_idle, impacts[later.pk].gpus_idle) == (0, 16)
    assert impacts[first.pk].cost_per_minute_usd == 0 and impacts[later.pk].cost_per_minute_usd > 0
    run = Run.objects.get(name="r1")
    lost = [c.gpu_hours for c in interruption_costs(run_timeline_get(run=run), now=now)]
    assert impacts[first.pk].gpu_hours_lost == pytest.approx(lost[0])
    assert impacts[later.pk].gpu_hours_lost == pytest.approx(lost[1])
    assert sum(i.gpu_hours_lost for i in impacts.values()) == pytest.approx(sum(lost))

    post([event("run.cancelled", at(112), "c-9", run="r1")])
    later.refresh_from_db()
    run.refresh_from_db()
    after = incident_impacts_get(incidents=[Incident.objects.get(pk=later.pk)], now=at(130))[later.pk]
    assert after.gpus_idle == 0 and after.cost_per_minute_usd == 0


def test_an_outage_with_a_fault_during_reload_stops_burning_when_the_run_trains_again(post):
    # Fault 00:45, restart 00:55, a second fault during the reload at 00:56, restart 00:57, training again 01:00: the
    # first interruption never resumes (the second cut its reload), yet the outage is over at 01:00.
    story = [e for e in failure_and_restart() if e["time"] < "2026-03-01T00:55:00Z" and e["type"] != "gpu.xid"]
    story += [
        event("run.started", at(55), "c-1", run="r1", cluster="test-cluster", gpus=16, nodes=["n1", "n3"], job_id="2"),
        event("run.failed", at(56), "c-2", run="r1", reason="NCCL init failed"),
        event("run.started", at(57), "c-3", run="r1", cluster="test-cluster", gpus=16, nodes=["n1", "n4"], job_id="3"),
    ]
    post(story)
    from incidents.selectors import incident_impacts_get

    (incident,) = Incident.objects.all()
    assert incident_impacts_get(incidents=[incident], now=at(58))[incident.pk].gpus_idle == 16  # still reloading
    post([event("run.restored", at(60), "c-4", run="r1", from_step=3)])
    incident.refresh_from_db()
    assert incident.status == "mitigated"
    assert incident_impacts_get(incidents=[incident], now=at(70))[incident.pk].gpus_idle == 0


@pytest.mark.reliability(
    "A run whose last event says restarting, then nothing (the README's example run claimed 105,729 GPU-h months on)",
    how="story_until_failure through the API (run.failed at +45 min, nothing after from the run), RUN_SILENT_S one "
    "hour; the sweep, impacts and run goodput before and after the hour, then a run.started at +5 h",
    outcome="after the hour a run_silent alert on the run's incident, nothing burning, the loss frozen at the hour's "
    "end and the run page saying so; the next event clears the alert and the whole gap counts again",
)
def test_a_run_silent_while_restarting_raises_its_alert_and_stops_accruing(post, settings, client, django_user_model):
    from incidents.selectors import incident_impact
    from runs.selectors import run_goodput_get, runs_heard_until_get

    settings.RUN_SILENT_S = 3600
    oncall_client = _signed_in(client, django_user_model)
    post(story_until_failure())
    run, incident = Run.objects.get(name="r1"), Incident.objects.get()
    assert run.state == "restarting" and runs_heard_until_get(runs=[run]) == {run.pk: at(45 + 60)}

    early = incident_impact(incident=incident, now=at(100))
    assert early.gpus_idle == 16 and early.silent_since is None
    assert detection.silent_runs_detect(now=at(100)) == 0

    frozen = incident_impact(incident=incident, now=at(200))
    assert frozen.gpus_idle == 0 and frozen.cost_per_minute_usd == 0 and frozen.silent_since == at(45)
    assert incident_impact(incident=incident, now=at(2000)).gpu_hours_lost == frozen.gpu_hours_lost
    assert frozen.gpu_hours_lost == pytest.approx(incident_impact(incident=incident, now=at(105)).gpu_hours_lost)
    assert run_goodput_get(run=run, since=None, until=None, now=at(2000)).total.wall_clock_s == 105 * 60

    assert detection.silent_runs_detect(now=at(200)) == 1
    alert = incident.alerts.get(kind="run_silent")
    assert alert.status == "firing" and alert.first_seen_at == at(105)  # when the hour ran out, not the sweep
    assert "no event has come from it since 2026-03-01 00:45" in alert.explanation
    assert detection.silent_runs_detect(now=at(201)) == 0  # said once, not once a minute
    assert incident.alerts.get(kind="run_silent").count == 1
    with time_machine.travel(at(200)):
        html = oncall_client.get("/runs/r1").content.decode()
        assert 'id="run-silent"' in html and "counted up to 2026-03-01 01:45 UTC" in html
        board = oncall_client.get("/incidents/").content.decode()
        assert ">silent</span>" in board

    with time_machine.travel(at(301)):
        post([event("run.started", at(300), "back", run="r1", cluster="c1", gpus=16, nodes=["n1", "n3"], job_id="102")])
    alert.refresh_from_db()
    assert alert.status == "resolved" and alert.resolved_at == at(300)
    revived = incident_impact(incident=incident, now=at(310))
    assert revived.gpus_idle == 16 and revived.silent_since is None  # reloading: down again, and counted
    assert revived.gpu_hours_lost > frozen.gpu_hours_lost + 16 * 3  # the silent gap, 01:45 to 05:10, counts again

    # Silent again; then an event from inside the allowance arrives late: it moves the record's end, and clears the
    # alert no earlier than the alert was raised.
    with time_machine.travel(at(301)):
        post([event("run.failed", at(302), "again", run="r1", reason="NCCL timeout")])
    assert detection.silent_runs_detect(now=at(302 + 61)) == 1
    late = incident.alerts.filter(kind="run_silent", status="firing").get()
    with time_machine.travel(at(400)):
        post([event("checkpoint.failed", at(330), "late-1", run="r1", step=9, reason="the job stopped")])
    late.refresh_from_db()
    assert late.status == "resolved" and late.resolved_at == late.first_seen_at == at(302 + 60)


@pytest.mark.reliability(
    "Severity from idle GPUs alone: a long outage of a small run stayed SEV3, a mitigated SEV1 dropped",
    how="a 64-GPU run's failure through the API; the minute sweep (incidents_reassess) at +2 h 10 min, after its "
    "restore, and after a person lowered it",
    outcome="SEV3 at first (64 GPUs idle), SEV2 once it had lost over 100 GPU-hours, still SEV2 once mitigated (never "
    "lowered automatically), and the person's SEV3 kept while the impact grades no worse than when they set it",
)
def test_severity_is_graded_from_impact_and_never_lowered_automatically(post, django_user_model, settings):
    from incidents import services

    settings.RUN_SILENT_S = 86400  # the outage runs on for a day here, with nothing said: still counted
    person = services.Actor.of_user(django_user_model.objects.create_user("ana"))
    nodes = [f"s-{i}" for i in range(8)]
    story = [event("run.started", at(0), "s0", run="s1", cluster="c1", gpus=64, nodes=nodes, job_id="1")]
    story += [event("run.step", at(m), f"s-{m}", run="s1", step=m) for m in range(1, 45)]
    story += [event("run.failed", at(45), "s-f", run="s1", reason="NCCL timeout")]
    with time_machine.travel(at(46)):
        post(story)
    incident = Incident.objects.get()
    assert incident.severity == "SEV3"  # 64 GPUs idle, $2.67/min
    assert services.incidents_reassess(now=at(45 + 130)) == 1
    incident.refresh_from_db()
    assert incident.severity == "SEV2"  # 64 GPUs x (2 h 10 min down + 45 min rewound) = 187 GPU-h
    entry = incident.timeline.filter(kind="severity").latest("at")
    assert entry.actor_name == "FleetOps"
    assert entry.text.startswith("Severity SEV3 → SEV2 from impact: 64 GPUs idled, 18")

    # A person lowers it: graded SEV2 then, still SEV2 an hour on, theirs holds.
    with time_machine.travel(at(45 + 130)):
        services.incident_severity_set(incident=incident, actor=person, severity="SEV3", reason="a small run")
    assert services.incidents_reassess(now=at(45 + 190)) == 0
    incident.refresh_from_db()
    assert incident.severity == "SEV3" and incident.severity_overridden
    # Still down 16 hours on: 64 GPUs x 16 h = 1,024 GPU-h lost grades SEV1, worse than when they set it: it moves.
    assert services.incidents_reassess(now=at(45 + 16 * 60)) == 1
    incident.refresh_from_db()
    assert incident.severity == "SEV1"
    assert incident.timeline.filter(kind="severity").latest("at").actor_name == "FleetOps"

    with time_machine.travel(at(51 + 16 * 60)):
        post([event("run.started", at(45 + 16 * 60), "s-r", run="s1", cluster="c1", gpus=64, nodes=nodes, job_id="2")])
        post([event("run.restored", at(50 + 16 * 60), "s-rr", run="s1", from_step=0)])
    incident.refresh_from_db()
    assert incident.status == "mitigated"
    assert services.incidents_reassess(now=at(60 + 16 * 60)) == 0
    incident.refresh_from_db()
    assert incident.severity == "SEV1"  # nothing idle now, yet the outage it was keeps its grade


def _signed_in(client, django_user_model):
    user = django_user_model.objects.create_user("oncall-1", password="s3cret-pass")
    user.groups.add(Group.objects.get(name="oncall"))
    client.force_login(user)
    return client


def _renamed(events: list[dict]) -> list[dict]:
    """The same history for run r2 on nodes m1, m2, m3, under other ids."""
    text = json.dumps(events).replace('"r1"', '"r2"').replace('"ev-', '"rp-')
    for n in (1, 2, 3):
        text = text.replace(f'"n{n}"', f'"m{n}"')
    return json.loads(text)


@pytest.mark.reliability(
    "One failure's history posted live, event by event at its own time, and the same history replayed three days "
    "later, shuffled and every event sent twice",
    how="failure_and_restart through POST /api/v1/events: run r1 live (the clock at each event), run r2 all at once "
    "three days on; the two incidents compared",
    outcome="identical incident times (started, detected, mitigated), alerts (first seen, cleared) and impacts "
    "(GPU-hours, rewound minutes, goodput lost, interruptions owned); the same severity from impact (live, the one "
    "automatic drain refused paged a person once: before, the Xid and the scheduler's report each started one)",
)
def test_a_history_posted_live_and_replayed_days_later_gives_the_same_incident(post):
    import random

    from incidents.selectors import incident_impacts_get

    story = failure_and_restart()
    for e in story:
        with time_machine.travel(datetime.fromisoformat(e["time"]) + timedelta(seconds=1)):
            post([e])
    replay = _renamed(story)
    random.Random(7).shuffle(replay)
    with time_machine.travel(at(120) + timedelta(days=3)):
        post(replay)
        post(replay[::-1])  # every event again: repeats, counted once
    live, replayed = Incident.objects.get(run__name="r1"), Incident.objects.get(run__name="r2")

    def seen(incident):
        alerts = sorted((a.kind, a.first_seen_at, a.status, a.resolved_at, a.count) for a in incident.alerts.all())
        return (incident.started_at, incident.detected_at, incident.mitigated_at, incident.status), alerts

    assert seen(live) == seen(replayed)
    assert live.mitigated_at == at(58)
    # Graded alike from impact; live, FleetOps also tried to drain n2, was refused and paged a person, one level up.
    assert replayed.severity == "SEV3" and live.severity == "SEV2" and live.timeline.filter(kind="paged").count() == 1
    assert not replayed.playbooks.exists()  # a fault three days old is not drained now
    impacts = incident_impacts_get(incidents=[live, replayed], now=at(200) + timedelta(days=5))
    assert impacts[live.pk] == impacts[replayed.pk]
    assert impacts[live.pk].interruptions == 1 and impacts[live.pk].gpu_hours_lost > 0


@pytest.mark.reliability(
    "Node-only incidents left triggered for ever (a 7-day simulated fleet kept two: the scheduler drained a node "
    "after its run had moved on), and a planned stop opening an incident nobody need answer",
    how="through the API: an Xid storm on an idle node, then the node sent to repair; the scheduler draining another "
    "idle node; a run's planned stop and restart",
    outcome="the Xid's incident triggered until the node is out of service, then mitigated at that moment; the "
    "drained node's incident mitigated at once (out of the way); the planned stop opens no incident",
)
def test_a_node_incident_is_mitigated_once_its_node_is_out_of_the_way_and_a_planned_stop_opens_none(post):
    post(xid_storm(5, node="idle-1", start=10.0))
    incident = Incident.objects.get(nodes__hostname="idle-1")
    assert incident.run is None and incident.status == "triggered"
    post([event("node.state", at(20), "rep-1", node="idle-1", state="in_repair", reason="RMA")])
    incident.refresh_from_db()
    assert (incident.status, incident.mitigated_at) == ("mitigated", at(20))
    assert incident.timeline.get(kind="mitigated").text == "idle-1 out of service (in repair): it can hurt no job"

    post([event("node.state", at(30), "drain-2", node="idle-2", state="draining", reason="NIC flaps")])
    drained = Incident.objects.get(nodes__hostname="idle-2")
    assert (drained.status, drained.mitigated_at) == ("mitigated", at(30))

    nodes = ["p1", "p2"]
    post(
        [
            event("run.started", at(0), "p-0", run="p", cluster="c1", gpus=16, nodes=nodes, job_id="1"),
            event("run.failed", at(40), "p-1", run="p", reason="Planned maintenance: firmware", planned=True),
            event("run.started", at(70), "p-2", run="p", cluster="c1", gpus=16, nodes=nodes, job_id="2"),
        ]
    )
    assert Run.objects.get(name="p").interruptions.get().planned
    assert not Incident.objects.filter(run__name="p").exists()

    # A replay's batch holds the storm, the repair and the return at once: mitigated at the repair, as live.
    post(xid_storm(5, node="idle-3", start=10.0) + [
        event("node.state", at(20), "rep-3", node="idle-3", state="in_repair", reason="RMA"),
        event("node.state", at(90), "back-3", node="idle-3", state="in_service", reason="repaired"),
    ])  # fmt: skip
    replayed = Incident.objects.get(nodes__hostname="idle-3")
    assert (replayed.status, replayed.mitigated_at) == ("mitigated", at(20))
    # Marked suspect is not healthy again, nor out of the way.
    post(xid_storm(5, node="idle-4", start=10.0) + [
        event("node.state", at(20), "sus-4", node="idle-4", state="suspect", reason="a detector's hint"),
    ])  # fmt: skip
    assert Incident.objects.get(nodes__hostname="idle-4").status == "triggered"

    # A planned stop long silent (a maintenance window) is expected quiet: no silence alert, no frozen count.
    post([
        event("run.started", at(0), "q-0", run="q", cluster="c1", gpus=16, nodes=["q1"], job_id="1"),
        event("run.failed", at(40), "q-1", run="q", reason="Planned maintenance: PDU swap", planned=True),
    ])  # fmt: skip
    from runs.selectors import runs_heard_until_get

    assert runs_heard_until_get(runs=[Run.objects.get(name="q")]) == {}
    assert detection.silent_runs_detect(now=at(40 + 7 * 60)) == 0


@pytest.mark.reliability(
    "An agent's token posts gpu.xid events each folding a million occurrences",
    how="20 gpu.xid events with count 1,000,000 on one GPU, applied and detected in-process, detection's memory traced",
    outcome="one alert counting 20,000,000 occurrences; detection's peak memory under 5 MB (before: each count "
    "expanded into that many samples, 100 such events took the detection worker 17 s and 1.76 GB)",
)
def test_a_folded_xid_count_is_honoured_as_a_weight(post, settings):
    storm = [
        event("gpu.xid", at(1) + timedelta(seconds=i), f"fold-{i}", source="agent://gpu-007", node="gpu-007", gpu=2,
              xid=79, message="GPU has fallen off the bus", count=1_000_000)
        for i in range(20)
    ]  # fmt: skip
    settings.EVENTS_APPLIED_HOOKS = []  # applied here, detected below with its memory traced
    post(storm)
    ids = list(Event.objects.filter(type="gpu.xid").values_list("id", flat=True))
    tracemalloc.start()
    try:
        detection.events_detect(event_ids=ids)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (alert,) = Alert.objects.filter(kind="xid")
    assert alert.count == 20_000_000
    assert peak < 5 * 2**20, f"detection peaked at {peak / 2**20:.1f} MiB"
