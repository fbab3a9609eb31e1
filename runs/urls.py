from django.urls import path

from runs.pages import fleet, quarantine

urlpatterns = [
    path("fleet", fleet.fleet, name="fleet"),
    path("events/quarantined", quarantine.quarantine, name="event-quarantine"),
    path("events/quarantined/replay", quarantine.quarantine_replay, name="event-quarantine-replay"),
]
