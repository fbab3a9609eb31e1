"""Goodput and advice endpoints, on the failure-and-restart story (tests/stories.py)."""

import json
import math
from datetime import UTC, datetime, timedelta

import pytest

from runs import selectors
from runs.models import Checkpoint, Run
from tests.stories import at, event, failure_and_restart

# The story's stages, in seconds: fault 00:45 noticed 00:46, running 00:55, training 00:58; the resumed
# checkpoint's blocking ended 00:30:20; checkpoints block 20 s and 15 s; the run lasts 2 h.
DETECTION, RESCHEDULING, RELOAD, REWOUND, CHECKPOINT = 60.0, 540.0, 180.0, 880.0, 35.0
WALL = 7200.0
PRODUCTIVE = WALL - (DETECTION + RESCHEDULING + RELOAD + REWOUND + CHECKPOINT)


@pytest.fixture
def record(writer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        writer.post("/api/v1/events", json.dumps(failure_and_restart()), content_type="application/json")


def test_it_answers_a_runs_goodput_by_stage(reader, record):
    body = reader.get("/api/v1/runs/r1/goodput").json()
    assert (body["wall_clock_s"], body["productive_s"], body["interruptions"]) == (WALL, PRODUCTIVE, 1)
    assert body["badput"] == {
        "detection_s": DETECTION,
        "rescheduling_s": RESCHEDULING,
        "reload_s": RELOAD,
        "rewound_s": REWOUND,
        "checkpoint_s": CHECKPOINT,
        "other_s": 0.0,
        "shrunk_s": 0.0,
    }
    assert math.isclose(body["goodput"], PRODUCTIVE / WALL)
    assert [d["date"] for d in body["daily"]] == ["2026-03-01"] and body["daily"][0]["productive_s"] == PRODUCTIVE


def test_a_window_counts_a_split_stage_in_part(reader, record):
    body = reader.get("/api/v1/runs/r1/goodput?since=2026-03-01T00:50:00Z&until=2026-03-01T01:00:00Z").json()
    # 00:50-00:55 rescheduling, 00:55-00:58 reload, 00:58-01:00 productive.
    assert body["wall_clock_s"] == 600 and body["badput"]["rescheduling_s"] == 300 and body["badput"]["reload_s"] == 180
    assert body["productive_s"] == 120 and body["interruptions"] == 0


def test_it_rejects_a_bad_window_naming_the_field(reader, record):
    response = reader.get("/api/v1/runs/r1/goodput?since=yesterday")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "since"
    response = reader.get("/api/v1/runs/r1/goodput?since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z")
    assert response.status_code == 400 and response.json()["errors"] == [
        {"field": "until", "reason": "must be later than since"}
    ]
    assert reader.get("/api/v1/runs/nope/goodput").status_code == 404


def test_a_checkpoint_whose_start_never_arrived_blocks_until_its_completion(db):
    started = datetime(2026, 3, 1, tzinfo=UTC)
    run = Run.objects.create(name="r2", gpu_count=8, started_at=started, ended_at=started + timedelta(hours=1))
    Checkpoint.objects.create(run=run, step=1, started_at=started + timedelta(minutes=10), blocking_s=20.0)
    Checkpoint.objects.create(run=run, step=2, completed_at=started + timedelta(minutes=30), blocking_s=15.0)
    Checkpoint.objects.create(run=run, step=3, blocking_s=15.0)  # no time at all: nothing to place it by
    Checkpoint.objects.create(run=run, step=4, started_at=started + timedelta(minutes=40))  # cost unknown
    failed = Checkpoint.Status.FAILED
    Checkpoint.objects.create(run=run, step=5, started_at=started + timedelta(minutes=50), status=failed)  # no write

    spans = selectors.run_timeline_get(run=run).checkpoints

    assert sorted((c.step, c.started_at, c.blocking_s) for c in spans) == [
        (1, started + timedelta(minutes=10), 20.0),
        (2, started + timedelta(minutes=30, seconds=-15), 15.0),
        (4, started + timedelta(minutes=40), None),  # blocks for nothing counted; a restore of step 4 rewinds to it
    ]


def test_fleet_goodput_weighs_runs_by_gpu_hours(reader, record):
    body = reader.get("/api/v1/fleet/goodput?since=2026-03-01T00:00:00Z&until=2026-03-02T00:00:00Z").json()
    assert body["wall_clock_s"] == WALL * 16 and body["productive_s"] == PRODUCTIVE * 16
    assert math.isclose(body["gpu_hours"]["wall_clock"], 32.0)
    assert [r["run"] for r in body["runs"]] == ["r1"]
    assert body["lost_gpu_hours_by_cause"] == {
        "faulty_gpu": pytest.approx((DETECTION + RESCHEDULING + RELOAD + REWOUND) * 16 / 3600)
    }


def test_the_what_if_advisor_matches_daly(reader, db):
    body = reader.get("/api/v1/advisor?delta_s=300&mtbf_s=86400&restart_s=600").json()
    assert round(body["daly_s"] / 60, 1) == 116.7  # docs/DOMAIN.md section 3, Daly's first vector
    assert math.isclose(body["young_s"], math.sqrt(2 * 300 * 86400))
    assert body["floor"] == pytest.approx(math.sqrt(2 * 300 / 86400) + 600 / 86400)
    assert len(body["curve"]) == 41 and body["waste_at_current"] is None


def test_the_what_if_advisor_names_bad_fields(reader, db):
    response = reader.get("/api/v1/advisor?delta_s=-1&restart_s=x")
    assert response.status_code == 400
    assert {e["field"] for e in response.json()["errors"]} == {"delta_s", "mtbf_s", "restart_s"}


def test_run_advice_uses_the_record_and_overrides(reader, record):
    body = reader.get("/api/v1/runs/r1/advice").json()
    assert body["sources"] == {"delta_s": "record", "mtbf_s": "record", "restart_s": "record"}
    # One unexpected failure over 16 GPUs x 2 h = 32 GPU-hours: 1/32 per GPU-hour, M = 2 h for 16 GPUs.
    assert body["failure_rate"]["failures"] == 1 and math.isclose(body["failure_rate"]["gpu_hours"], 32.0)
    advice = body["advice"]
    assert (advice["delta_s"], advice["mtbf_s"], advice["restart_s"], advice["current_s"]) == (17.5, 7200, 780, 1800)
    assert body["mtbf_range_s"][0] < 7200 < body["mtbf_range_s"][1]
    overridden = reader.get("/api/v1/runs/r1/advice?mtbf_s=86400").json()
    assert overridden["sources"]["mtbf_s"] == "override" and overridden["advice"]["mtbf_s"] == 86400


def test_run_advice_says_what_is_missing(reader, writer, django_capture_on_commit_callbacks):
    from tests.stories import at, event

    with django_capture_on_commit_callbacks(execute=True):
        writer.post(
            "/api/v1/events",
            json.dumps(event("run.started", at(0), "s", run="new", cluster="c", gpus=8, nodes=["x"], job_id="1")),
            content_type="application/json",
        )
    body = reader.get("/api/v1/runs/new/advice").json()
    assert body["advice"] is None and body["missing"] == ["delta_s", "mtbf_s", "restart_s"]
    assert "pass delta_s, mtbf_s, restart_s" in body["detail"]


# One window parser for every windowed endpoint (runs/api/windows.py): defaults first, then until after since.
@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/runs/r1/goodput?since=2026-03-01T02:00:00Z&until=2026-03-01T01:00:00Z",
        "/api/v1/runs/r1/goodput?since=2026-03-02T00:00:00Z",  # after the run's end, the default until
        "/api/v1/fleet/goodput?since=2026-03-01T01:00:00Z&until=2026-03-01T01:00:00Z",
        "/api/v1/fleet/goodput?since=2999-01-01T00:00:00Z",  # after now, the default until: accepted before the fold
        "/api/v1/metrics/response?since=2026-03-01T02:00:00Z&until=2026-03-01T01:00:00Z",
        "/api/v1/metrics/response?since=2999-01-01T00:00:00Z",
    ],
)
def test_every_window_must_end_after_it_starts(reader, record, url):
    response = reader.get(url)
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == [{"field": "until", "reason": "must be later than since"}]


@pytest.mark.parametrize(
    "failed, rewound",
    [
        # Step 10's completion never came: the run kept the state it had when that write began (00:40), 600 s lost.
        (False, 600),
        # Step 10's write failed: no checkpoint of step 10 at all, so step 5's durable one bounds the loss, from
        # 00:05:10 to the fault at 00:50: 2,690 s.
        (True, 2690),
    ],
)
def test_a_restore_of_a_write_never_completed_or_failed_through_the_record(post, reader, failed, rewound):
    story = [
        event("run.started", at(0), "w-1", run="wf", cluster="c1", gpus=8, nodes=["n1"], job_id="1"),
        event("checkpoint.started", at(5), "w-2", run="wf", step=5),
        event("checkpoint.completed", at(5, 10), "w-3", run="wf", step=5, blocking_s=10, bytes=1, tier="durable"),
        event("checkpoint.started", at(40), "w-4", run="wf", step=10),
        event("run.failed", at(50), "w-5", run="wf", reason="hang", detected_at=at(50, 30).isoformat()),
        event("run.started", at(55), "w-6", run="wf", cluster="c1", gpus=8, nodes=["n2"], job_id="2"),
        event("run.restored", at(60), "w-7", run="wf", from_step=10),
        event("run.completed", at(90), "w-8", run="wf"),
    ]
    if failed:
        story.append(event("checkpoint.failed", at(41), "w-9", run="wf", step=10, reason="disk full"))
    post(story)
    body = reader.get("/api/v1/runs/wf/goodput").json()
    lost = body["badput"]
    # Detection 30 s, rescheduling 00:50:30-00:55, reload 00:55-01:00, step 5's 10 s of blocking; 90 min in all.
    assert (lost["detection_s"], lost["rescheduling_s"], lost["reload_s"], lost["checkpoint_s"]) == (30, 270, 300, 10)
    assert (lost["rewound_s"], body["productive_s"]) == (rewound, 5400 - 30 - 270 - 300 - 10 - rewound)
    assert [f["code"] for f in body["data_quality"]] == ["restore_checkpoint_unknown"]


def test_a_step_written_again_whose_second_completion_was_lost_never_completed(post, reader):
    # Step 10 written 00:10:00-00:10:30; a fault at 00:20 rewinds to step 5 (00:05:10); the run writes step 10 again
    # from 00:40:00, its completion lost; a fault at 00:45 and a restore of step 10. The first write's completion
    # (00:10:30, 30 s) is not the second's: the second never completed, so rule 2 rewinds to its start, 00:40:00 - 5
    # min lost to the second fault, none of it counted as that write's blocking.
    def start(t, job):
        return event("run.started", t, f"p-{job}", run="pw", cluster="c1", gpus=8, nodes=["n1"], job_id=job)

    post([
        start(at(0), "1"),
        event("checkpoint.started", at(5), "p-c5", run="pw", step=5),
        event("checkpoint.completed", at(5, 10), "p-d5", run="pw", step=5, blocking_s=10, bytes=1, tier="durable"),
        event("checkpoint.started", at(10), "p-c10", run="pw", step=10),
        event("checkpoint.completed", at(10, 30), "p-d10", run="pw", step=10, blocking_s=30, bytes=1, tier="durable"),
        event("run.failed", at(20), "p-f1", run="pw", reason="Xid 79"),
        start(at(25), "2"),
        event("run.restored", at(30), "p-r1", run="pw", from_step=5),
        event("checkpoint.started", at(40), "p-c10b", run="pw", step=10),
        event("run.failed", at(45), "p-f2", run="pw", reason="Xid 79"),
        start(at(50), "3"),
        event("run.restored", at(55), "p-r2", run="pw", from_step=10),
        event("run.completed", at(60), "p-end", run="pw"),
    ])  # fmt: skip
    body = reader.get("/api/v1/runs/pw/goodput").json()
    # Rewound: 00:05:10-00:20 (14 min 50 s) for the first fault, 00:40-00:45 (5 min) for the second.
    assert body["badput"]["rewound_s"] == 890 + 300
    assert body["badput"]["checkpoint_s"] == 10  # step 5's only: step 10's first write lies in rewound work
