"""GET /metrics: Prometheus' text format, its own token scope, and figures that agree with the API and the pages."""

import uuid
from datetime import timedelta

import kombu
import pytest
import time_machine
from django.core.cache import cache
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from fleetops.celery import app as celery_app
from fleetops.celery import queue_depths
from fleetops.console import metrics
from incidents import selectors as incident_selectors
from incidents.models import Incident, PlaybookExecution
from runs.models import Event, EventRollup
from tests.conftest import make_token
from tests.stories import at, event, failure_and_restart, story_until_failure, ts


def scrape(token: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def fresh_scrape(token: str) -> dict:
    cache.delete_many([metrics.TEXT_KEY, metrics.GOODPUT_KEY])
    return scrape(token)


@pytest.fixture
def token(db) -> str:
    return make_token("prometheus", ["metrics:read"])


@pytest.fixture
def live_run(post, settings):
    """The failure-and-restart story up to +100 min: r1 running on its second attempt, an Xid 79 incident open."""
    settings.METRICS_EVENTS_SETTLE_S = 0.0
    with time_machine.travel(at(100), tick=False):
        post(failure_and_restart()[:-1])  # not the run.completed at +120


@pytest.mark.parametrize(
    ("authorization", "status"),
    [(None, 401), ("Bearer fo_not-a-token", 401), ("Basic dXNlcjpwYXNz", 401), ("read", 403), ("events", 403)],
)
def test_only_a_token_with_the_metrics_scope_reads_it(db, authorization, status):
    tokens = {"read": make_token("reader", ["read"]), "events": make_token("writer", ["events:write", "read"])}
    header = f"Bearer {tokens[authorization]}" if authorization in tokens else authorization
    response = Client().get("/metrics", headers={"Authorization": header} if header else {})
    assert response.status_code == status
    assert "detail" in response.json()
    if status == 401:
        assert response["WWW-Authenticate"] == "Bearer"


def test_the_figures_are_the_apis_and_the_pages(live_run, token, reader):
    with time_machine.travel(at(100), tick=False):
        samples = scrape(token)
        run = reader.get("/api/v1/runs/r1/goodput", {"since": "2026-02-28T01:40:00Z", "until": "2026-03-01T01:40:00Z"})
        advice = reader.get("/api/v1/runs/r1/advice").json()
        fleet = reader.get("/api/v1/fleet/goodput", {"since": "2026-02-28T01:40:00Z", "until": "2026-03-01T01:40:00Z"})
        opened = incident_selectors.open_incidents_get()
        board = incident_selectors.incident_board_get(first=0, size=50, now=at(100), open_only=True)
    labels = (("cluster", "c1"), ("run", "r1"), ("window", "24h"))
    run = run.json()
    assert samples[("fleetops_run_goodput_ratio", labels)] == pytest.approx(run["goodput"])
    assert 0 < run["goodput"] < 1
    for stage, seconds in run["badput"].items():
        key = ("fleetops_run_badput_seconds", tuple(sorted((*labels, ("stage", stage.removesuffix("_s"))))))
        assert samples[key] == pytest.approx(seconds), stage
    assert samples[("fleetops_fleet_goodput_ratio", (("window", "24h"),))] == pytest.approx(fleet.json()["goodput"])
    assert samples[("fleetops_job_mtbf_seconds", (("cluster", "c1"), ("run", "r1")))] == pytest.approx(
        advice["advice"]["mtbf_s"]
    )
    assert samples[("fleetops_gpus_idle", ())] == board.gpus_idle
    assert samples[("fleetops_idle_cost_usd_per_minute", ())] == pytest.approx(board.cost_per_minute_usd)
    assert opened, "the Xid 79 failure opened an incident"
    for incident in opened:
        key = ("fleetops_incidents_open", (("severity", incident.severity), ("state", incident.status)))
        assert samples[key] == sum(1 for i in opened if (i.severity, i.status) == (incident.severity, incident.status))
    assert sum(v for (name, _), v in samples.items() if name == "fleetops_incidents_open") == len(opened)
    assert samples[("fleetops_incidents_needing_a_person", ())] == board.summary.needs_person


def test_gpus_idle_and_the_incidents_needing_a_person_are_the_boards_while_a_run_is_down(post, token, settings):
    settings.METRICS_EVENTS_SETTLE_S = 0.0
    with time_machine.travel(at(50), tick=False):
        post(story_until_failure())
        samples = fresh_scrape(token)
        board = incident_selectors.incident_board_get(first=0, size=50, now=at(50), open_only=True)
        summary = incident_selectors.open_incidents_summary(now=at(50))
    assert board.gpus_idle == 16, "the run's 16 GPUs idle since its failure"
    assert samples[("fleetops_gpus_idle", ())] == board.gpus_idle
    assert samples[("fleetops_idle_cost_usd_per_minute", ())] == pytest.approx(board.cost_per_minute_usd)
    assert samples[("fleetops_incidents_needing_a_person", ())] == summary.needs_person == 1
    incident = Incident.objects.get()
    incident.status, incident.acknowledged_at = Incident.Status.ACKNOWLEDGED, at(50)
    incident.save()
    with time_machine.travel(at(50), tick=False):
        samples = fresh_scrape(token)
    assert samples[("fleetops_incidents_needing_a_person", ())] == 1, "acknowledged, but its GPUs still idle"
    key = ("fleetops_incidents_open", (("severity", incident.severity), ("state", "acknowledged")))
    assert samples[key] == 1


def test_events_are_counted_by_type_accepted_applied_waiting_and_quarantined(live_run, token, post):
    story = failure_and_restart()[:-1]
    with time_machine.travel(at(100), tick=False):
        samples = fresh_scrape(token)
        for type_ in {e["type"] for e in story}:
            n = sum(1 for e in story if e["type"] == type_)
            assert samples[("fleetops_events_accepted_total", (("type", type_),))] == n, type_
            assert samples[("fleetops_events_applied_total", (("type", type_),))] == n, type_
        assert samples[("fleetops_apply_lag_seconds", ())] == 0
        # One more step, stored but not applied (its on-commit apply never runs here), one quarantined.
        Event.objects.create(
            source="s", event_id="late", type="run.step", time=at(99), data={"run": "r1", "step": 7}, run_name="r1"
        )
        Event.objects.filter(type="node.heartbeat").update(quarantined_at=at(100), error="test")
    with time_machine.travel(at(101), tick=False):
        samples = fresh_scrape(token)
    steps = sum(1 for e in story if e["type"] == "run.step")
    assert samples[("fleetops_events_accepted_total", (("type", "run.step"),))] == steps + 1
    assert samples[("fleetops_events_applied_total", (("type", "run.step"),))] == steps
    assert samples[("fleetops_events_waiting", (("type", "run.step"),))] == 1
    assert samples[("fleetops_apply_lag_seconds", ())] == 60
    assert samples[("fleetops_events_quarantined", (("type", "node.heartbeat"),))] == 1
    assert samples[("fleetops_events_applied_total", (("type", "node.heartbeat"),))] == 0
    assert samples[("fleetops_events_accepted_total", (("type", "node.heartbeat"),))] == 1


def test_the_event_counters_count_on_never_back_and_keep_what_retention_pruned(live_run, token, settings):
    settings.METRICS_EVENTS_SETTLE_S = 30.0
    with time_machine.travel(at(100, 31), tick=False):
        first = fresh_scrape(token)
        key = ("fleetops_events_accepted_total", (("type", "node.heartbeat"),))
        assert first[key] == 1
        Event.objects.filter(type="node.heartbeat").delete()  # pruned, as retention does, into a rollup
        EventRollup.objects.create(
            type="node.heartbeat", day=at(100).date(), node_name="n3", count=1, first_at=at(100), last_at=at(100)
        )
        Event.objects.create(source="s", event_id="hb", type="node.heartbeat", time=at(100), data={"node": "n3"})
        assert fresh_scrape(token)[key] == 1, "received now: counted once it is 30 s old"
    with time_machine.travel(at(101, 2), tick=False):
        assert fresh_scrape(token)[key] == 2, "counted on from the last count, the pruned one still in"
        cache.delete(metrics.EVENTS_KEY)
        assert fresh_scrape(token)[key] == 2, "from scratch: the log plus the rollups"


def test_playbook_outcomes_and_the_broker(live_run, token, settings):
    incident = Incident.objects.first()
    for status, dry_run in (("succeeded", False), ("succeeded", False), ("failed", False), ("waiting_approval", True)):
        PlaybookExecution.objects.create(
            playbook="drain-and-replace",
            definition=[],
            incident=incident,
            status=status,
            dry_run=dry_run,
            started_by="test",
            started_at=at(99),
        )
    with time_machine.travel(at(100), tick=False):
        samples = fresh_scrape(token)
    outcome = "fleetops_playbook_outcomes_total"
    assert samples[(outcome, (("dry_run", "false"), ("outcome", "succeeded"), ("playbook", "drain-and-replace")))] == 2
    assert samples[(outcome, (("dry_run", "false"), ("outcome", "failed"), ("playbook", "drain-and-replace")))] == 1
    active = ("fleetops_playbooks_active", (("playbook", "drain-and-replace"), ("state", "waiting_approval")))
    assert samples[active] == 1
    assert samples[("fleetops_broker_up", ())] == 1
    depths = {dict(labels)["queue"]: v for (name, labels), v in samples.items() if name == "fleetops_queue_depth"}
    assert set(depths) == set(settings.FLEETOPS_QUEUES)  # what waits there is the broker's (a shared one under CI)
    assert all(depth >= 0 for depth in depths.values())


def test_a_queue_depth_is_what_waits_in_the_broker():
    """Three messages published to a queue of this test's own, on whichever broker the settings name."""
    name = f"fleetops-test-depth-{uuid.uuid4().hex[:8]}"
    queue = kombu.Queue(name)
    with celery_app.connection_for_write() as connection:
        with connection.Producer() as producer:
            for n in range(3):
                producer.publish({"n": n}, routing_key=name, declare=[queue], retry=False)
        try:
            assert queue_depths([name]) == {name: 3}
        finally:
            queue.bind(connection.default_channel).delete()


def test_a_scrape_inside_the_cache_time_costs_no_query(live_run, token, django_assert_max_num_queries, settings):
    with time_machine.travel(at(100), tick=False):
        first = fresh_scrape(token)
        Event.objects.create(source="s", event_id="x", type="run.step", time=at(99), data={"run": "r1", "step": 7})
        with django_assert_max_num_queries(2):  # the token's row, and its last_used_at at most
            assert scrape(token) == first
    with time_machine.travel(at(100) + timedelta(seconds=settings.METRICS_CACHE_S + 1), tick=False):
        waiting = scrape(token)[("fleetops_events_waiting", (("type", "run.step"),))]
    assert waiting == 1


def test_the_window_and_the_age_of_each_part_are_in_the_answer(live_run, token, settings):
    with time_machine.travel(at(100), tick=False):
        fresh_scrape(token)
    later = at(100) + timedelta(seconds=settings.METRICS_CACHE_S + 1)
    with time_machine.travel(later, tick=False):
        samples = scrape(token)
    computed = "fleetops_metrics_computed_timestamp_seconds"
    assert samples[(computed, (("part", "all"),))] == later.timestamp()
    assert samples[(computed, (("part", "goodput"),))] == at(100).timestamp(), "goodput is kept longer"
    assert all(
        dict(labels).get("window") == "24h" for (name, labels) in samples if "goodput" in name or "badput" in name
    )


def runs_of_two_kinds(*, live: bool, ended: range) -> list[dict]:
    """Four live runs of 8 to 32 GPUs (if `live`), one of them failed and restarted, and the `ended` runs of 128 GPUs,
    each failed once and completed by +60 min: more GPU-seconds than any live one, but over."""
    events = []

    def add(type_, when, run, **data):
        events.append(event(type_, when, f"{run}-{len(events)}", run=run, **data))

    def start(when, run, gpus, cluster):
        nodes = [f"{run}-n{k}" for k in range(gpus // 8)]
        add("run.started", when, run, cluster=cluster, gpus=gpus, nodes=nodes, job_id=f"{run}-{len(events)}")

    for n in range(1, 5) if live else ():
        start(at(0), f"live-{n}", 8 * n, "c1")
    if live:
        add("run.failed", at(20), "live-3", reason="NCCL timeout", detected_at=ts(at(22)))
        start(at(30), "live-3", 24, "c1")
    for n in ended:
        start(at(0), f"done-{n}", 128, f"c{2 + n % 2}")
        add("run.failed", at(10 + n % 7), f"done-{n}", reason="NCCL timeout", detected_at=ts(at(14 + n % 7)))
        start(at(25), f"done-{n}", 128, f"c{2 + n % 2}")
        add("run.completed", at(60), f"done-{n}")
    return events


OTHER = "(other)"  # the runs beyond METRICS_MAX_RUNS: no run's name (dashboards filter on it)


def per_run(samples: dict, name: str) -> dict[tuple, float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


@pytest.mark.reliability(
    "A trainer's token starts runs by the thousand, and each would be a series per stage on /metrics",
    how="METRICS_MAX_RUNS=3; 12 runs through POST /api/v1/events (4 live, 8 ended and larger), scraped, then 24 more "
    "ended runs and a scrape again",
    outcome='the 3 live runs with the most GPU-seconds shown by name, the others one run="(other)" series (the sum of '
    "theirs, goodput a ratio of sums) and fleetops_runs_folded 9 then 33; the answer the same number of lines both "
    "times; the runs' GPU-seconds add up to the fleet's (before: a series per run and stage, 90,593 lines at 10,000 "
    "runs)",
)
def test_per_run_series_are_bounded_and_the_folded_runs_add_up_to_the_fleet(post, token, reader, settings):
    settings.METRICS_EVENTS_SETTLE_S, settings.METRICS_MAX_RUNS = 0.0, 3
    window = {"since": ts(at(120) - metrics.WINDOW), "until": ts(at(120))}
    with time_machine.travel(at(120), tick=False):
        post(runs_of_two_kinds(live=True, ended=range(1, 9)))
        samples = fresh_scrape(token)
        lines = Client().get("/metrics", headers={"Authorization": f"Bearer {token}"}).content.count(b"\n")
        fleet = reader.get("/api/v1/fleet/goodput", window).json()
    shown = {dict(labels)["run"] for labels in per_run(samples, "fleetops_run_goodput_ratio")}
    assert shown == {"live-4", "live-3", "live-2", OTHER}, "live first, then by GPU-seconds"
    assert {dict(labels)["run"] for labels in per_run(samples, "fleetops_run_gpu_seconds")} == shown
    assert samples[("fleetops_runs_folded", (("window", "24h"),))] == 9
    folded = [run for run in fleet["runs"] if run["run"] not in shown]
    assert len(folded) == 9
    other = (("cluster", ""), ("run", OTHER), ("window", "24h"))
    gpu_s = sum(run["wall_clock_s"] * run["gpus"] for run in folded)
    assert samples[("fleetops_run_gpu_seconds", other)] == pytest.approx(gpu_s, rel=1e-9)
    productive = sum(run["productive_s"] * run["gpus"] for run in folded)
    assert samples[("fleetops_run_goodput_ratio", other)] == pytest.approx(productive / gpu_s, rel=1e-9)
    assert 0 < productive / gpu_s < 1
    runs_gpu_s = per_run(samples, "fleetops_run_gpu_seconds").values()
    assert sum(runs_gpu_s) == pytest.approx(samples[("fleetops_fleet_gpu_seconds", (("window", "24h"),))], rel=1e-9)
    assert sum(runs_gpu_s) == pytest.approx(fleet["wall_clock_s"], rel=1e-9)
    for stage, fleet_s in fleet["badput"].items():
        stage = stage.removesuffix("_s")
        key = tuple(sorted((*other, ("stage", stage))))
        assert samples[("fleetops_run_badput_gpu_seconds", key)] == pytest.approx(
            sum(run["badput"][f"{stage}_s"] * run["gpus"] for run in folded), rel=1e-9, abs=1e-6
        ), stage
        by_run = [
            v for labels, v in per_run(samples, "fleetops_run_badput_gpu_seconds").items() if ("stage", stage) in labels
        ]
        assert sum(by_run) == pytest.approx(fleet_s, rel=1e-9, abs=1e-6), stage
        assert fleet_s == pytest.approx(
            samples[("fleetops_fleet_badput_gpu_seconds", (("stage", stage), ("window", "24h")))]
        )
    assert sum(run["badput"]["detection_s"] for run in folded) > 0, "the folded runs lost time"
    mtbf = {dict(labels)["run"] for labels in per_run(samples, "fleetops_job_mtbf_seconds")}
    assert mtbf == {"live-4", "live-3", "live-2"}, "a job MTBF is one job's: none for the folded"

    with time_machine.travel(at(120), tick=False):
        post(runs_of_two_kinds(live=False, ended=range(9, 33)))
        samples = fresh_scrape(token)
        again = Client().get("/metrics", headers={"Authorization": f"Bearer {token}"}).content.count(b"\n")
    assert samples[("fleetops_runs_folded", (("window", "24h"),))] == 33
    assert {dict(labels)["run"] for labels in per_run(samples, "fleetops_run_badput_gpu_seconds")} == shown
    assert again == lines, "36 runs, the same answer's length as 12"
