"""Run as `python -m tests.faults.probe [--rebuild]` with DATABASE_URL set: prints the database's event counts
and its record snapshot as JSON; with --rebuild, also the snapshot after rebuild_record (the reference)."""

import json
import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetops.settings")
    django.setup()
    from django.db.models import Count

    from runs.models import Event
    from runs.services import record_rebuild
    from tests.stories import record_snapshot

    def snapshot():
        return json.loads(json.dumps(record_snapshot(), default=str))

    copies = Event.objects.values("source", "event_id").annotate(n=Count("id")).filter(n__gt=1).count()
    out = {
        "events": Event.objects.count(),
        "doubled": copies,
        "unapplied": Event.objects.filter(applied_at__isnull=True).count(),
        "snapshot": snapshot(),
    }
    if "--rebuild" in sys.argv:
        record_rebuild()
        out["rebuilt"] = snapshot()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
