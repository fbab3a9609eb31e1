"""Absurd values are not swallowed (issue 15): what the intake admits but cannot all be true of a run is a data-quality
finding beside the figures it touches (the run page, the goodput APIs, the fleet page), with its events and how it
was counted; and a GPU count beyond what the run's nodes hold cannot inflate the fleet's GPU-hours."""

from datetime import UTC, datetime, timedelta

import pytest

from runs.domain import quality
from runs.models import Run
from tests.stories import at, event, failure_and_restart

INT_MAX = 2**31 - 1


def absurd_run() -> list[dict]:
    """Two nodes said to hold 2^31 - 1 GPUs; trained to step 40; fails; restored from step 10^12; a checkpoint
    durable in 2099."""
    return [
        event("run.started", at(0), "a-1", run="ab", cluster="c1", gpus=INT_MAX, nodes=["n1", "n2"], job_id="1"),
        event("run.step", at(30), "a-2", run="ab", step=40),
        event(
            "checkpoint.completed", at(20), "a-3", run="ab", step=30, blocking_s=10, bytes=1, tier="durable",
            durable_at="2099-12-31T00:00:00Z",
        ),
        event("run.failed", at(40), "a-4", run="ab", reason="Xid 79", node="n2", detected_at=at(41).isoformat()),
        event("run.started", at(50), "a-5", run="ab", cluster="c1", gpus=INT_MAX, nodes=["n1", "n3"], job_id="2"),
        event("run.restored", at(55), "a-6", run="ab", from_step=10**12),
    ]  # fmt: skip


@pytest.mark.reliability(
    "Absurd values the intake admits: 2^31 - 1 GPUs on two nodes, a restore from step 10^12 on a run at step 40, a "
    "checkpoint durable in 2099",
    how="one run's events through POST /api/v1/events; the run page, its goodput API, the fleet page and API",
    outcome="each a data-quality finding with its event, time and how it was counted, on the run page and in the "
    "API; the run counted at 32 GPUs (16 a node) everywhere, the fleet page says so (before: accepted without a "
    "word, and the fleet's GPU-hours inflated by 2^31)",
)
def test_absurd_values_are_findings_beside_the_figures(post, admin_client, reader):
    post(absurd_run())
    run = Run.objects.get(name="ab")
    assert (run.gpus_claimed, run.gpu_count) == (INT_MAX, 32)
    body = reader.get("/api/v1/runs/ab/goodput").json()
    assert (body["gpus"], body["gpus_claimed"]) == (32, INT_MAX)
    found = {f["code"]: f for f in body["data_quality"]}
    assert set(found) == {"gpus_beyond_nodes", "restore_beyond_steps", "durable_time_implausible"}
    assert found["gpus_beyond_nodes"]["events"] == ["slurm://test-cluster#a-5"]  # the latest start sets the count
    assert "counted as 32 GPUs" in found["gpus_beyond_nodes"]["resolution"]
    assert found["restore_beyond_steps"]["events"] == ["slurm://test-cluster#a-6"]
    assert "from step 1,000,000,000,000, but the run reached step 40" in found["restore_beyond_steps"]["what"]
    assert "74 years after its write" in found["durable_time_implausible"]["what"]
    page = admin_client.get("/runs/ab").content.decode()
    assert 'id="data-quality"' in page and "Data quality: 3 findings" in page and "claimed 2,147,483,647" in page
    fleet = reader.get("/api/v1/fleet/goodput").json()
    assert [(r["gpus"], r["gpus_claimed"]) for r in fleet["runs"]] == [(32, INT_MAX)]
    assert fleet["gpu_hours"]["wall_clock"] == pytest.approx(30 * 24 * 32)  # still going: 30 days on 32 GPUs, not 2^31
    week = reader.get("/api/v1/runs/ab/goodput", {"since": "2026-03-01T00:45:00Z"}).json()["data_quality"]
    assert {f["code"] for f in week} == {"gpus_beyond_nodes", "restore_beyond_steps"}  # the durable one is earlier
    fleet_page = admin_client.get("/fleet").content.decode()
    assert "1 run claims more GPUs than its nodes hold, counted at 16 a node" in fleet_page


def test_a_clean_run_has_no_findings(post, admin_client, reader):
    post(failure_and_restart())
    assert reader.get("/api/v1/runs/r1/goodput").json()["data_quality"] == []
    assert 'id="data-quality"' not in admin_client.get("/runs/r1").content.decode()


T = datetime(2026, 3, 1, tzinfo=UTC)


def test_the_rules_in_the_domain():
    assert quality.gpus_counted(64, 8) == 64 and quality.gpus_counted(200, 8) == 128 and quality.gpus_counted(5, 0) == 5
    write = quality.CheckpointWrite(7, T, T + timedelta(seconds=30), T - timedelta(seconds=1), "s#c")
    (early,) = quality.run_findings(
        claimed_gpus=16, nodes=2, started=None, reached_step=7, restores=[], checkpoints=[write]
    )
    assert early.code == "durable_time_implausible" and "before its write" in early.what
    fine = quality.CheckpointWrite(7, T, T + timedelta(seconds=30), T + timedelta(hours=2), "s#c")
    restore = quality.Restore(7, T + timedelta(hours=1), "s#r")
    assert not quality.run_findings(
        claimed_gpus=16, nodes=2, started=None, reached_step=None, restores=[restore], checkpoints=[fine]
    )


def test_what_the_engine_resolved_in_the_interruptions_is_said_with_its_events(post, reader):
    """Issue 16: two reporters of one fault, a failure during the reload, a restore from a step whose
    checkpoint.completed never arrived — each listed with the run.failed events it rests on."""
    events = [event("run.started", at(0), "s1", run="m", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="1")]
    events += [event("run.step", at(m), f"st-{m}", run="m", step=m) for m in range(1, 81)]
    events += [
        event("checkpoint.completed", at(30), "c30", run="m", step=30, blocking_s=30, bytes=1, tier="durable"),
        event("checkpoint.completed", at(60), "c60", run="m", step=60, blocking_s=30, bytes=1, tier="durable"),
        event("run.failed", at(80), "agent", source="agent://n2", run="m", reason="X", detected_at=at(82).isoformat()),
        event("run.failed", at(80, 30), "sched", run="m", reason="node down", detected_at=at(80, 40).isoformat()),
        event("run.started", at(85), "s2", run="m", cluster="c1", gpus=16, nodes=["n1", "n3"], job_id="2"),
        event("run.failed", at(88), "again", run="m", reason="NCCL timeout"),
        event("run.started", at(92), "s3", run="m", cluster="c1", gpus=16, nodes=["n1", "n4"], job_id="3"),
        event("run.restored", at(95), "r", run="m", from_step=70),
    ]  # fmt: skip
    post(events)
    found = {f["code"]: f for f in reader.get("/api/v1/runs/m/goodput").json()["data_quality"]}
    assert set(found) == {"several_reports", "failed_before_training_again", "restore_checkpoint_unknown"}
    assert found["several_reports"]["events"] == ["agent://n2#agent", "slurm://test-cluster#sched"]
    assert found["failed_before_training_again"]["events"][-1] == "slurm://test-cluster#again"
    assert "resumed from step 70" in found["restore_checkpoint_unknown"]["what"]


def test_the_run_page_says_a_new_finding_at_once_though_the_record_rows_stay_the_same(post, admin_client):
    # On PostgreSQL the findings are cached under the run's record version; a second report of a fault changes no
    # row of the record (its detection is later than the first's), and must still show on the next load.
    post(
        [
            event("run.started", at(0), "s1", run="q", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="1"),
            event("run.failed", at(10), "f1", run="q", reason="Xid 79", detected_at=at(11).isoformat()),
        ]
    )
    assert "reported 2 times" not in admin_client.get("/runs/q").content.decode()
    post(
        [
            event(
                "run.failed", at(10, 30), "f2", source="agent://n2", run="q", reason="x", detected_at=at(12).isoformat()
            )
        ]
    )
    assert "interruption #1 reported 2 times" in admin_client.get("/runs/q").content.decode()


@pytest.mark.reliability(
    "Lifecycle events no attempt fits: a run.failed before the run's first start, a start while an attempt still "
    "ran, a restore in an attempt that restarted nothing, a second restore of one restart",
    how="one run's events through POST /api/v1/events, shuffled; its goodput API",
    outcome="each a data-quality finding with its event and how it was counted (nothing); the goodput as without "
    "them (before: the early failure made the run's first start a restart, its startup counted as reload)",
)
def test_events_no_attempt_fits_are_findings_and_count_nothing(post, reader):
    story = [
        event("run.failed", at(-5), "o-1", run="od", reason="early"),
        event("run.started", at(0), "o-2", run="od", cluster="c1", gpus=8, nodes=["n1"], job_id="1"),
        event("run.started", at(10), "o-3", run="od", cluster="c1", gpus=8, nodes=["n1"], job_id="2"),
        event("run.restored", at(11), "o-4", run="od", from_step=0),
        event("run.failed", at(20), "o-5", run="od", reason="Xid 79", detected_at=at(21).isoformat()),
        event("run.started", at(25), "o-6", run="od", cluster="c1", gpus=8, nodes=["n1"], job_id="3"),
        event("run.restored", at(27), "o-7", run="od", from_step=0),
        event("run.restored", at(28), "o-8", run="od", from_step=0),
        event("run.completed", at(60), "o-9", run="od"),
    ]
    post(story[::-1])
    body = reader.get("/api/v1/runs/od/goodput").json()
    found = [(f["code"], f["events"]) for f in body["data_quality"]]
    assert found == [
        ("failure_before_start", ["slurm://test-cluster#o-1"]),
        ("attempt_superseded", ["slurm://test-cluster#o-3"]),
        ("restore_unmatched", ["slurm://test-cluster#o-4"]),
        ("restore_repeated", ["slurm://test-cluster#o-8"]),
    ]
    # 60 min: detection 1, rescheduling 4, reload 2, and the 20 min since the start rewound (step 0 has no write).
    lost = body["badput"]
    assert (lost["detection_s"], lost["rescheduling_s"], lost["reload_s"], lost["rewound_s"]) == (60, 240, 120, 1200)
    assert (body["productive_s"], body["wall_clock_s"], body["interruptions"]) == (1980, 3600, 1)


def test_a_run_that_never_started_has_no_time_and_says_why(post, reader, admin_client):
    post(
        [
            event("checkpoint.completed", at(5), "n-1", run="ns", step=3, blocking_s=10, bytes=1, tier="durable"),
            event("run.failed", at(9), "n-2", run="ns", reason="Xid 79", node="n1"),
            event("run.restored", at(12), "n-3", run="ns", from_step=3),
        ]
    )
    body = reader.get("/api/v1/runs/ns/goodput").json()
    assert (body["wall_clock_s"], body["productive_s"], body["interruptions"]) == (0, 0, 0)
    assert [f["code"] for f in body["data_quality"]] == ["failure_before_start", "restore_unmatched"]
    assert admin_client.get("/runs/ns").status_code == 200
