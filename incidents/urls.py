from django.urls import path

from incidents import views, views_notifications, views_playbooks, views_postmortems

urlpatterns = [
    path("", views.board, name="incident-board"),
    path("open-count", views.open_count, name="incident-open-count"),
    path("<int:pk>", views.incident_page, name="incident-page"),
    path("action-items", views_postmortems.action_items, name="action-items"),
    path("deliveries", views_notifications.deliveries, name="incident-deliveries"),
    path("deliveries/<int:pk>/retry", views_notifications.delivery_retry, name="incident-delivery-retry"),
    path("<int:pk>/postmortem", views_postmortems.postmortem_page, name="incident-postmortem"),
    path("<int:pk>/postmortem.md", views_postmortems.postmortem_markdown, name="incident-postmortem-md"),
    path("<int:pk>/postmortem/preview", views_postmortems.postmortem_preview, name="incident-postmortem-preview"),
    *(
        path(
            f"<int:pk>/postmortem/{name}", views_postmortems.postmortem_act, {"action": name}, name=f"postmortem-{name}"
        )
        for name in views_postmortems.ACTIONS
    ),
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
