from datetime import timedelta

from django.apps import AppConfig
from django.conf import settings
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
