from django.urls import path

from runs import views

urlpatterns = [
    path("fleet", views.fleet, name="fleet"),
    path("events/quarantined", views.quarantine, name="event-quarantine"),
    path("events/quarantined/replay", views.quarantine_replay, name="event-quarantine-replay"),
]
