"""The search box's full-text search (fleetops/console/search/selectors.py), PostgreSQL only: each incident's and
each postmortem's words, kept by PostgreSQL in a stored generated tsvector column `search_vector`, with a GIN index.

Why stored and not an index on the expression: a postmortem is about 2 KB of text, and to_tsvector over the 517 of the
54-day benchmark run takes 160 ms on the 2-core machine; an expression index answers `@@` but the rank, a phrase's
recheck and any OR beside it (an incident number, an identifier's substring) compute it again for every row they read.
A stored column is read instead (docs/PERFORMANCE.md, "The search box").

No model field: the column is PostgreSQL's to write (Django never inserts into it), and SQLite, which has no
to_tsvector, has no such column (the search there is the plain substring match). A migration that changes the type of
a column the vector reads (title, group_key, recommended_action, markdown) is refused by PostgreSQL ("cannot alter type
of a column used by a generated column"): drop search_vector first in that migration and add it back with this SQL.
"""

from django.db import migrations

# Keep the config in step with fleetops/console/search/selectors.py CONFIG.
CREATE = """
ALTER TABLE incidents_incident ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    to_tsvector('english'::regconfig,
                coalesce(title, '') || ' ' || coalesce(group_key, '') || ' ' || coalesce(recommended_action, ''))
) STORED;
CREATE INDEX incidents_incident_search ON incidents_incident USING gin (search_vector);
ALTER TABLE incidents_postmortem ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    to_tsvector('english'::regconfig, coalesce(markdown, ''))
) STORED;
CREATE INDEX incidents_postmortem_search ON incidents_postmortem USING gin (search_vector);
"""
DROP = """
ALTER TABLE incidents_incident DROP COLUMN IF EXISTS search_vector;
ALTER TABLE incidents_postmortem DROP COLUMN IF EXISTS search_vector;
"""


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0010_preference"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP)),
    ]
