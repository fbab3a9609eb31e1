"""WeeklyReport moves from runs into incidents: state only, the table keeps its name (runs_weeklyreport) and rows."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0006_timeline_append_only"),
        ("runs", "0008_attempt_start_event_backfill"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="WeeklyReport",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("since", models.DateTimeField()),
                        ("until", models.DateTimeField()),
                        ("generated_at", models.DateTimeField()),
                        ("data", models.JSONField()),
                    ],
                    options={
                        "db_table": "runs_weeklyreport",
                        "ordering": ["-since", "-until"],
                        "constraints": [
                            models.UniqueConstraint(fields=("since", "until"), name="weekly_report_unique_window")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
