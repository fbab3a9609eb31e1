from django.urls import path

from . import views, views_playbooks

urlpatterns = [
    path("", views.board, name="incident-board"),
    path("open-count", views.open_count, name="incident-open-count"),
    path("<int:pk>", views.incident_page, name="incident-page"),
    *(
        path(f"<int:pk>/{name}", views.incident_act, {"action": name}, name=f"incident-action-{name}")
        for name in views.ACTIONS
    ),
    path("<int:pk>/playbooks/start", views_playbooks.incident_playbook_start, name="incident-playbook-start"),
    path(
        "<int:pk>/playbooks/<int:execution_pk>/approve",
        views_playbooks.incident_playbook_approve,
        name="incident-playbook-approve",
    ),
    path(
        "<int:pk>/playbooks/<int:execution_pk>/abort",
        views_playbooks.incident_playbook_abort,
        name="incident-playbook-abort",
    ),
]
