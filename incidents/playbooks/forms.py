from django import forms

from incidents.domain.playbooks import CHOICES, PLAYBOOKS, needs_run
from incidents.models import Incident
from runs.models import Node


class PlaybookStartForm(forms.Form):
    """Which playbook to start on which of the incident's nodes; the run is the incident's, where it needs one."""

    playbook = forms.ChoiceField(choices=[(name, name) for name in PLAYBOOKS])
    node = forms.ModelChoiceField(queryset=Node.objects.none(), to_field_name="hostname")
    dry_run = forms.BooleanField(required=False)
    # shrink-and-continue only: a person's choice over the advisor's pricing when no spare is free.
    choice = forms.ChoiceField(choices=[("", "as the advisor prices it"), *((c, c) for c in CHOICES)], required=False)

    def __init__(self, *args, incident: Incident, **kwargs):
        super().__init__(*args, **kwargs)
        self.incident = incident
        self.fields["node"].queryset = incident.nodes.all()

    def clean(self):
        data = super().clean()
        playbook, data["run"] = data.get("playbook"), None
        if playbook and needs_run(PLAYBOOKS[playbook]):
            if self.incident.run is None:
                raise forms.ValidationError(f"{playbook} puts a run back on a spare, and this incident has no run.")
            data["run"] = self.incident.run
        steps = PLAYBOOKS[playbook]["steps"] if playbook else []
        if data.get("choice") and not any(step["operation"] == "choose_shrink" for step in steps):
            self.add_error("choice", f"{playbook} makes no choice between shrinking and waiting: leave it empty.")
        return data

    def error_text(self) -> str:
        return " ".join(
            message if field == "__all__" else f"{field}: {message}"
            for field, messages in self.errors.items()
            for message in messages
        )
