from django.urls import path

from incidents.pages import board, deliveries, incident, playbooks, postmortem

urlpatterns = [
    path("", board.board, name="incident-board"),
    path("open-count", board.open_count, name="incident-open-count"),
    path("acknowledge", board.acknowledge, name="incident-bulk-acknowledge"),
    path("<int:pk>", incident.incident_page, name="incident-page"),
    path("action-items", postmortem.action_items, name="action-items"),
    path("deliveries", deliveries.deliveries, name="incident-deliveries"),
    path("deliveries/<int:pk>/retry", deliveries.delivery_retry, name="incident-delivery-retry"),
    path("<int:pk>/postmortem", postmortem.postmortem_page, name="incident-postmortem"),
    path("<int:pk>/postmortem.md", postmortem.postmortem_markdown, name="incident-postmortem-md"),
    path("<int:pk>/postmortem/preview", postmortem.postmortem_preview, name="incident-postmortem-preview"),
    *(
        path(f"<int:pk>/postmortem/{name}", postmortem.postmortem_act, {"action": name}, name=f"postmortem-{name}")
        for name in postmortem.ACTIONS
    ),
    *(
        path(f"<int:pk>/{name}", incident.incident_act, {"action": name}, name=f"incident-action-{name}")
        for name in incident.ACTIONS
    ),
    path("<int:pk>/playbooks/start", playbooks.incident_playbook_start, name="incident-playbook-start"),
    path(
        "<int:pk>/playbooks/<int:execution_pk>/approve",
        playbooks.incident_playbook_approve,
        name="incident-playbook-approve",
    ),
    path(
        "<int:pk>/playbooks/<int:execution_pk>/abort",
        playbooks.incident_playbook_abort,
        name="incident-playbook-abort",
    ),
]
