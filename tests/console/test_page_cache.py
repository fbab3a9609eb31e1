"""The run page and the incident board keep what they compute from a run's record in the cache, keyed by a version of
that record: a late event that changes the record changes the page at once; an unchanged record costs no recompute.

The version comes from PostgreSQL's row versions; on SQLite nothing is cached, and the first test checks the same
pages computed each time.
"""

import json
import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from incidents.models import Incident
from runs import selectors
from runs.models import Checkpoint, Interruption, Run
from tests.stories import at, event, failure_and_restart

BATCH = "application/cloudevents-batch+json"


@pytest.fixture
def oncall(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("oncall"))
    return client


@pytest.fixture
def record(post):
    """Run r1: fails at +45 min, back from step 3 (blocked 00:30:00-00:30:20) by +58, completed at +120."""
    post(failure_and_restart())
    return Run.objects.get(name="r1")


def _late_checkpoint_report(step: int, blocking_s: float, when) -> dict:
    """The step's write re-reported with another blocking time: an UPDATE of the checkpoint row, no new row."""
    data = {"run": "r1", "step": step, "blocking_s": blocking_s, "bytes": 10**12, "tier": "durable"}
    return event("checkpoint.completed", when, f"late-{step}-{blocking_s}", **data)


def _goodput(html: str) -> str:
    return re.search(r'id="goodput-value">([^<]+)<', html).group(1)


def _what_if_delta(html: str) -> str:
    return re.search(r'name="delta_s" value="([^"]+)"', html).group(1)


def _timeline(html: str) -> dict:
    return json.loads(re.search(r'<script id="timeline-figure" type="application/json">(.*?)</script>', html).group(1))


def _record_reads(queries) -> list[str]:
    return [q["sql"] for q in queries if '"blocking_s" IS NOT NULL' in q["sql"]]


def test_a_late_event_changes_the_run_page_at_once(oncall, record, post):
    before = oncall.get("/runs/r1").content.decode()
    assert oncall.get("/runs/r1").content.decode().count("76.5%") == before.count("76.5%")  # the second, cached
    assert _goodput(before) == "76.5%" and _what_if_delta(before) == "17.5"  # median of 20 s and 15 s
    assert "14.7 min" in before  # rewound: 00:30:20 to 00:45:00

    # Step 3's write blocked 80 s, not 20: the fault rewound a minute less (from 00:31:20), lost to the write instead.
    # Step 6's blocked 75 s, not 15: 60 s more lost.
    post([_late_checkpoint_report(3, 80.0, at(30, 20)), _late_checkpoint_report(6, 75.0, at(88, 15))])
    assert Checkpoint.objects.filter(run=record).count() == 2 and Interruption.objects.filter(run=record).count() == 1
    after = oncall.get("/runs/r1").content.decode()
    assert _goodput(after) == "75.6%"  # (5505 - 60) s of 7200 s
    assert _what_if_delta(after) == "77.5"  # median of 80 s and 75 s
    assert "13.7 min" in after and "14.7 min" not in after
    assert _timeline(after) != _timeline(before)

    # Computed afresh, with nothing in the cache, the page says the same.
    cache.clear()
    fresh = oncall.get("/runs/r1").content.decode()
    assert (_goodput(fresh), _what_if_delta(fresh), _timeline(fresh)) == (
        _goodput(after),
        _what_if_delta(after),
        _timeline(after),
    )


def test_a_late_event_changes_the_board_impact_at_once(oncall, record, post):
    incident = Incident.objects.get(run=record)
    incident.status = "triggered"  # open, on the board; the run has ended: its costs come from the cache
    incident.save()

    def lost() -> str:
        html = oncall.get("/incidents/").content.decode()
        row = html[html.index(f'id="incident-{incident.pk}"') :]
        return re.findall(r'<td data-label="GPU-h lost" class="num">([\d.,]+)</td>', row[: row.index("</tr>")])[0]

    assert lost() == lost()
    before = lost()
    post([_late_checkpoint_report(3, 80.0, at(30, 20))])
    assert lost() != before  # a minute less rewound on 16 GPUs


def test_an_unchanged_record_is_served_from_the_cache(oncall, record, post, postgres):
    with CaptureQueriesContext(connection) as first:
        oncall.get("/runs/r1")
    with CaptureQueriesContext(connection) as second:
        oncall.get("/runs/r1")
    assert len(_record_reads(first)) == 2  # the checkpoints read for the timeline and for the median write
    assert _record_reads(second) == [] and len(second) < len(first)
    version = selectors.run_record_version(run=Run.objects.get(name="r1"))
    assert cache.get(f"fleetops:run:goodput:{version}") is not None

    # A row updated (not added) moves the version: the next request computes again.
    post([_late_checkpoint_report(6, 30.0, at(88, 15))])
    assert selectors.run_record_version(run=Run.objects.get(name="r1")) != version
    with CaptureQueriesContext(connection) as third:
        oncall.get("/runs/r1")
    assert len(_record_reads(third)) == 2


def test_a_running_run_is_computed_for_now_each_time(oncall, post, postgres):
    events = [e for e in failure_and_restart() if e["type"] != "run.completed"]
    post(events)
    pages = [oncall.get("/runs/r1").content.decode() for _ in range(2)]
    # Still going: its productive time grows with the clock, so the second page is not the first one's copy.
    assert _timeline(pages[0]) != _timeline(pages[1])
