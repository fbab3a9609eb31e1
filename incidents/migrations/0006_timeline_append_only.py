"""The audit log is append-only in the database too: on PostgreSQL a trigger refuses UPDATE and DELETE of a timeline
entry from any client, not only from the ORM (TimelineEntry.save/delete raise there). TRUNCATE, which only the test
runner's flush uses, fires no row trigger. SQLite gets no trigger: the ORM guard is what development has."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

CREATE = """
CREATE OR REPLACE FUNCTION incidents_timelineentry_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'incidents_timelineentry is the audit log: % of entry % refused', TG_OP, OLD.id
        USING ERRCODE = 'restrict_violation';
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER incidents_timelineentry_append_only
    BEFORE UPDATE OR DELETE ON incidents_timelineentry
    FOR EACH ROW EXECUTE FUNCTION incidents_timelineentry_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS incidents_timelineentry_append_only ON incidents_timelineentry;
DROP FUNCTION IF EXISTS incidents_timelineentry_append_only();
"""


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)  # None: the % in the SQL are not placeholders

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0005_notifications"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="timelineentry",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="timelineentry",
            name="incident",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="timeline",
                to="incidents.incident",
            ),
        ),
        migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP)),
    ]
