"""WeeklyReport moved from runs into incidents by state-only migrations: a report stored before the move is read after
it, from the same table."""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("runs", "0008_attempt_start_event_backfill"), ("incidents", "0006_timeline_append_only")]
AFTER = [("runs", "0009_weekly_report_moved"), ("incidents", "0007_weekly_report_moved")]


@pytest.mark.django_db(transaction=True)
def test_a_report_stored_before_the_move_is_read_after_it():
    try:
        _stored_before_read_after()
    finally:  # the rest of the session runs on the latest schema
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def _stored_before_read_after():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("runs", "WeeklyReport")
    since, until = datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC)
    old.objects.create(since=since, until=until, generated_at=until, data={"goodput": {"fleet": 0.9}})

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("incidents", "WeeklyReport")
    assert new._meta.db_table == "runs_weeklyreport"
    report = new.objects.get()
    assert (report.since, report.until, report.data) == (since, until, {"goodput": {"fleet": 0.9}})
    with pytest.raises(LookupError):
        executor.loader.project_state(AFTER).apps.get_model("runs", "WeeklyReport")
