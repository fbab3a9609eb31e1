"""Work is split into queues so a report cannot delay a playbook (issue 8, scaling out)."""

import time

import pytest
from django.conf import settings

from fleetops.celery import app as celery_app

Q = settings.CELERY_TASK_DEFAULT_QUEUE


@pytest.mark.parametrize(
    ("task", "queue"),
    [
        ("runs.tasks.apply_turn", f"{Q}-ingest"),
        ("runs.tasks.apply_events", f"{Q}-ingest"),
        ("runs.tasks.apply_pending_events", f"{Q}-ingest"),
        ("incidents.tasks.detect_events", f"{Q}-detection"),
        ("incidents.tasks.watch_hangs", f"{Q}-detection"),
        ("incidents.tasks.advance_playbook", f"{Q}-playbooks"),
        ("incidents.tasks.resume_playbooks", f"{Q}-playbooks"),
        ("incidents.tasks.reconcile_schedulers", f"{Q}-playbooks"),
        ("incidents.tasks.deliver_notification", f"{Q}-notifications"),
        ("incidents.report_tasks.generate_weekly_report", f"{Q}-reports"),
    ],
)
def test_each_kind_of_work_has_its_own_queue(task, queue):
    assert celery_app.amqp.router.route({}, task)["queue"].name == queue


def test_every_task_is_routed_to_a_queue_a_worker_consumes():
    celery_app.loader.import_default_modules()
    ours = [name for name in celery_app.tasks if name.startswith(("runs.", "incidents."))]
    assert ours
    for name in ours:
        assert celery_app.amqp.router.route({}, name)["queue"].name in settings.FLEETOPS_QUEUES, name


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_waiting_report_does_not_hold_up_a_playbook(broker, post_applied):
    """A worker on the playbooks queue finishes a playbook while a report waits, unconsumed, in its own queue."""
    from incidents import services
    from incidents.models import PlaybookExecution, WeeklyReport
    from incidents.playbooks.engine import playbook_start
    from incidents.reports.tasks import generate_weekly_report
    from runs.models import Node, Run
    from tests.services import Worker

    run, node = post_applied()
    generate_weekly_report.delay()  # queued first: with one shared queue it would be served first
    worker = Worker(queues=f"{Q}-playbooks", PLAYBOOK_MAX_OUT_SHARE="0.9")
    try:
        execution = playbook_start(
            playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=run, incident=None
        )
        from incidents.models import StepExecution

        StepExecution.objects.filter(execution=execution).update(approver_role="")  # no person in this test
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            execution.refresh_from_db()
            if execution.status not in PlaybookExecution.ACTIVE:
                break
            time.sleep(0.2)
        assert execution.status == "succeeded", execution.error + "".join(worker.lines[-30:])
        assert not WeeklyReport.objects.exists()  # still waiting in the reports queue
        assert Node.objects.get(hostname="n2").state == "in_repair" and Run.objects.get(name="r1")
    finally:
        worker.stop()
    reporter = Worker(queues=f"{Q}-reports")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not WeeklyReport.objects.exists():
            time.sleep(0.2)
        assert WeeklyReport.objects.count() == 1, "".join(reporter.lines[-40:])
    finally:
        reporter.stop()


@pytest.fixture
def post_applied(writer):
    """The failure story with a hot spare, applied in this process (no ingest worker runs in this test)."""

    def load():
        import json

        from runs.models import Event, Node, Run
        from runs.services import events_apply
        from tests.stories import at, event, story_until_failure

        spare = event("node.state", at(1), "spare", node="s1", state="hot_spare", reason="ok", cluster="c1")
        response = writer.post(
            "/api/v1/events",
            json.dumps([spare, *story_until_failure()]),
            content_type="application/cloudevents-batch+json",
        )
        assert response.status_code == 202
        events_apply(event_ids=list(Event.objects.values_list("pk", flat=True)))
        return Run.objects.get(name="r1"), Node.objects.get(hostname="n2")

    return load


# Every task's name as queued messages, routes and the beat schedule know it. Pinned with name=, so moving a
# task's module changes none of these; a task renamed or lost shows here.
TASK_NAMES = {
    "runs.tasks.apply_turn",
    "runs.tasks.apply_events",
    "runs.tasks.apply_pending_events",
    "runs.tasks.prune_events",
    "incidents.tasks.detect_events",
    "incidents.tasks.detect_pending",
    "incidents.tasks.watch_hangs",
    "incidents.tasks.watch_heartbeats",
    "incidents.tasks.reconcile_schedulers",
    "incidents.tasks.auto_resolve",
    "incidents.tasks.detect_stragglers",
    "incidents.tasks.detect_sdc",
    "incidents.tasks.detect_lemons",
    "incidents.tasks.advance_playbook",
    "incidents.tasks.resume_playbooks",
    "incidents.tasks.deliver_notification",
    "incidents.tasks.resume_deliveries",
    "incidents.report_tasks.generate_weekly_report",
    "incidents.tasks.demo_feed",  # on the beat schedule only with DEMO_FEED (make run)
}


def test_task_names_are_pinned():
    celery_app.loader.import_default_modules()
    assert {name for name in celery_app.tasks if name.startswith(("runs.", "incidents."))} == TASK_NAMES


def test_the_beat_schedule_names_only_registered_tasks():
    celery_app.loader.import_default_modules()
    for entry, schedule in settings.CELERY_BEAT_SCHEDULE.items():
        assert schedule["task"] in celery_app.tasks, entry


def test_a_fresh_process_registers_every_task_from_settings_alone():
    """What a worker has at start: CELERY_IMPORTS and autodiscovery, nothing a test module imported first."""
    import subprocess
    import sys

    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'fleetops.settings'); django.setup(); "
        "from fleetops.celery import app; app.loader.import_default_modules(); "
        "print('\\n'.join(sorted(n for n in app.tasks if n.startswith(('runs.', 'incidents.')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert set(out.split()) == TASK_NAMES


def test_task_named_finds_a_task_in_a_fresh_process_without_django_checks():
    """A service's first queue by name imports the task modules, and does not rerun django.setup()'s checks."""
    import subprocess
    import sys

    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'fleetops.settings'); django.setup(); "
        "import django.core.checks as checks; calls = []; run = checks.run_checks; "
        "checks.run_checks = lambda *a, **k: calls.append(1) or run(*a, **k); "
        "from fleetops.celery import task_named; "
        "print(task_named('incidents.tasks.advance_playbook').name, task_named('runs.tasks.apply_events').name, "
        "len(calls))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split()[-3:] == ["incidents.tasks.advance_playbook", "runs.tasks.apply_events", "0"]
