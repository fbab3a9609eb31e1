"""Fill Attempt.start_event_id for attempts derived before 0007, so that the first rebuild of a long run after the
upgrade does not rewrite every attempt's node membership (a million rows on a 54-day, 2,048-node run).

An attempt is the number-th run.started event of its run in the order the lifecycle sorts them (time, source, id:
runs.domain.lifecycle.LifecycleEvent.sort_key; starts share one rank). An attempt whose start does not line up (the
record was not derived from the events it has now) is left empty: its next rebuild re-reads its nodes.
"""

from django.db import migrations


def backfill(apps, schema_editor):
    Attempt = apps.get_model("runs", "Attempt")
    Event = apps.get_model("runs", "Event")
    Run = apps.get_model("runs", "Run")
    for run_id, name in Run.objects.filter(attempts__start_event_id__isnull=True).distinct().values_list("pk", "name"):
        starts = sorted(
            Event.objects.filter(run_name=name, type="run.started").values_list("time", "source", "event_id", "pk")
        )
        attempts = list(Attempt.objects.filter(run_id=run_id, start_event_id__isnull=True))
        for attempt in attempts:
            if attempt.number <= len(starts) and starts[attempt.number - 1][0] == attempt.started_at:
                attempt.start_event_id = starts[attempt.number - 1][3]
        Attempt.objects.bulk_update([a for a in attempts if a.start_event_id], ["start_event_id"], batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("runs", "0007_attempt_start_event")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
