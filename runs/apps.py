from datetime import timedelta

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs and fleet record"

    def ready(self):
        # Every process that loads the app (web, workers, commands) refuses a rank-sample retention shorter than what
        # the detectors read back; settings cannot ask the domain itself (they import no app).
        from runs.domain.retention import rank_age_check

        try:
            rank_age_check(
                timedelta(hours=settings.EVENTS_RANK_RETENTION_HOURS),
                straggler_window_s=settings.STRAGGLER_WINDOW_S,
                straggler_consecutive=settings.STRAGGLER_CONSECUTIVE,
            )
        except ValueError as exc:
            raise ImproperlyConfigured(f"EVENTS_RANK_RETENTION_HOURS is too small: {exc}") from exc


@checks.register()
def event_routes_check(app_configs, **kwargs) -> list[checks.Error]:
    """Every event type with a schema has exactly one route, and every route a schema (runs/domain/routes.py): a type
    with none would be stored and then quarantined when applied, in production."""
    from runs.domain.cloudevents import SCHEMAS
    from runs.domain.routes import problems

    return [checks.Error(problem, id="runs.E001") for problem in problems(SCHEMAS)]
