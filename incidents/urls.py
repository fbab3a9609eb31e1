from django.urls import path

from . import views

urlpatterns = [
    path("", views.board, name="incident-board"),
    path("open-count", views.open_count, name="incident-open-count"),
    path("<int:pk>", views.incident_page, name="incident-page"),
    *(
        path(f"<int:pk>/{name}", views.incident_act, {"action": name}, name=f"incident-action-{name}")
        for name in views.ACTIONS
    ),
]
