from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "incidents"
    verbose_name = "Incidents"

    def ready(self):
        from django.contrib.auth.signals import user_logged_in

        user_logged_in.connect(_remember_zone, dispatch_uid="fleetops-time-zone")


def _remember_zone(sender, request, user, **kwargs) -> None:
    """Signing in puts the person's time zone (models.Preference) into the new session: no page request reads it."""
    from incidents.selectors import TIME_ZONE_SESSION_KEY, time_zone_get

    if request is not None and hasattr(request, "session"):
        request.session[TIME_ZONE_SESSION_KEY] = time_zone_get(user=user)
