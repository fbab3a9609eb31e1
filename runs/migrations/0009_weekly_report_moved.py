"""WeeklyReport now lives in incidents (incidents/0007): runs forgets it, state only; the table stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0008_attempt_start_event_backfill"),
        ("incidents", "0007_weekly_report_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="WeeklyReport")],
            database_operations=[],
        ),
    ]
