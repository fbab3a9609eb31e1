"""Checkpoint I/O of a run built through the event intake: on the run page, in GET /api/v1/runs/{name}/checkpoint-io,
and in its goodput, whose rewind points are where the writes were durable (docs/DOMAIN.md sections 2 and 3)."""

from datetime import timedelta

import pytest

from runs import selectors
from runs.models import Cluster, Run
from tests.stories import at, event, ts

# Every 10 minutes (the run's policy) a 16 GB checkpoint blocks 5 s and takes 15 minutes more to be durable: each
# drain is longer than the interval. The fault at +35 min names a node.
INTERVAL_S = 600
DRAIN_S = 900


def drains_behind() -> list[dict]:
    e = [
        event(
            "run.started", at(0), "start", run="io", cluster="c-io", gpus=16, nodes=["io-n1", "io-n2"], job_id="1",
            checkpoint_interval_s=INTERVAL_S,
        )
    ]  # fmt: skip
    for step in (10, 20, 30):
        done = at(step, 5)
        e += [
            event("checkpoint.started", at(step), f"ckpt-{step}", run="io", step=step),
            event(
                "checkpoint.completed", done, f"ckpt-{step}-done", run="io", step=step, blocking_s=5.0,
                bytes=16 * 10**9, tier="durable", durable_at=ts(done + timedelta(seconds=DRAIN_S)),
            ),
        ]  # fmt: skip
    e.append(event("run.failed", at(35), "failed", run="io", reason="Xid 79", node="io-n1", gpu=0, xid=79))
    return e


@pytest.fixture
def io_run(post):
    post(drains_behind())
    return Run.objects.get(name="io")


def test_it_shows_the_drain_behind_warning_on_the_run_page(oncall, io_run):
    response = oncall.get("/runs/io")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="checkpoint-io-drain_behind"' in page
    assert "3 writes took longer to become durable than the interval (600 s, policy)" in page
    assert 'id="checkpoint-io-figure"' in page and 'id="checkpoint-front-figure"' in page
    # 16 GB over 16 GPUs: 1 GB a rank; blocked 5 s: 0.2 GB/s a rank; drained in 900 s.
    assert "1 GB" in page and "0.2 GB/s" in page and "900 s" in page


def test_it_answers_the_drain_behind_warning_and_the_record_in_the_api(reader, io_run):
    body = reader.get("/api/v1/runs/io/checkpoint-io").json()
    record = body["record"]
    assert record["bytes_per_rank"] == 1e9
    assert record["bandwidth_gb_s"] == pytest.approx(0.2)
    assert record["drain_s"] == DRAIN_S and record["interval_s"] == INTERVAL_S
    assert record["drains_over_interval"] == [10, 20, 30]
    # Its asynchronous writes block 5 s for a 1 GB shard (0.2 GB/s a rank), where the default 50 GB/s to host memory
    # would take 0.02 s: said beside the designs, which are priced on the defaults.
    assert [w["code"] for w in body["warnings"]] == ["drain_behind", "hops_disagree"]
    assert "GPU to pinned host memory" in body["warnings"][1]["text"] and "250.0x faster" in body["warnings"][1]["text"]
    assert body["data_quality"] == []
    designs = body["designs"]
    assert designs["ranks"] == 16 and designs["gpus_per_node"] == 8 and designs["state_bytes"] == 16e9
    assert [d["design"] for d in designs["designs"]] == ["sync", "async", "local", "peer"]
    # The defaults (no cluster value): 1 GB a rank at 50 GB/s to host memory blocks 0.02 s; synchronous writes share
    # 2,000 GB/s among 16 ranks (125 GB/s, above the GPU's 50), so they are limited by the GPU's link too.
    sync, async_ = designs["designs"][0], designs["designs"][1]
    assert sync["blocking_s"] == pytest.approx(0.02) and sync["limit"] == "gpu_host"
    assert async_["background_s"] == pytest.approx(16 / 2000)
    assert body["sources"]["storage"] == "setting" and body["sources"]["state_bytes"] == "record"


def test_a_clusters_own_bandwidth_and_an_override_are_used_and_said(reader, io_run):
    Cluster.objects.filter(name="c-io").update(storage_gb_s=1.6)
    body = reader.get("/api/v1/runs/io/checkpoint-io").json()
    # 1.6 GB/s over 16 ranks: 0.1 GB/s a rank; 1 GB / 0.1 GB/s = 10 s, now limited by shared storage.
    sync = body["designs"]["designs"][0]
    assert sync["blocking_s"] == pytest.approx(10.0) and sync["limit"] == "storage"
    assert body["sources"]["storage"] == "cluster"
    body = reader.get("/api/v1/runs/io/checkpoint-io?storage_gb_s=3.2&state_bytes=3.2e10").json()
    assert body["designs"]["designs"][0]["blocking_s"] == pytest.approx(10.0)  # 2 GB a rank at 0.2 GB/s
    assert body["sources"]["storage"] == "override" and body["sources"]["state_bytes"] == "override"


@pytest.mark.parametrize("query", ["storage_gb_s=0", "gpu_host_gb_s=abc", "target=2", "state_bytes=-1"])
def test_bad_input_is_a_400_naming_the_field(reader, io_run, query):
    response = reader.get(f"/api/v1/runs/io/checkpoint-io?{query}")
    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == [query.split("=")[0]]


def test_an_unknown_run_is_a_404(reader, db):
    assert reader.get("/api/v1/runs/nope/checkpoint-io").status_code == 404


def test_its_goodput_rewinds_to_the_last_write_durable_by_the_fault(io_run):
    """At the fault (+35:00) step 30 (durable +45:05) and step 20 (durable +35:05) were not durable yet: the run
    rewinds to step 10, whose blocking ended at +10:05, and loses 35:00 - 10:05 = 24 min 55 s = 1,495 s, not the
    295 s since step 30 that its completion times would say."""
    timeline = selectors.run_timeline_get(run=io_run)
    assert [c.durable_at for c in timeline.checkpoints] == [at(s, 5) + timedelta(seconds=DRAIN_S) for s in (10, 20, 30)]
    report = selectors.run_goodput_get(run=io_run, since=None, until=None, now=at(40))
    assert report.total.stages_s["rewound"] == pytest.approx(1495.0)


def test_writes_that_say_no_size_are_named_and_the_designs_not_priced(oncall, post, reader):
    e = [event("run.started", at(0), "s", run="nobytes", cluster="c-io", gpus=8, nodes=["nb-n1"], job_id="1")]
    for step in (1, 2):
        e += [
            event("checkpoint.started", at(10 * step), f"c{step}", run="nobytes", step=step),
            event(
                "checkpoint.completed", at(10 * step, 3), f"c{step}-done", run="nobytes", step=step, blocking_s=3.0,
                bytes=0, tier="durable",
            ),
        ]  # fmt: skip
    post(e)
    page = oncall.get("/runs/nobytes").content.decode()
    assert 'id="checkpoint-io-finding-bytes_missing"' in page
    assert "2 writes said no size (bytes missing or 0)" in page
    assert 'id="checkpoint-io-missing"' in page and "state_bytes" in page
    body = reader.get("/api/v1/runs/nobytes/checkpoint-io").json()
    assert body["designs"] is None and "state_bytes" in body["missing"]
    assert [note["code"] for note in body["data_quality"]] == ["bytes_missing"]
    assert body["record"]["blocking_s"] == 3.0 and body["record"]["bytes_per_rank"] is None
