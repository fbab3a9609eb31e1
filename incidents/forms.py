from django import forms

from incidents.domain.playbooks import PLAYBOOKS, needs_run
from incidents.models import Incident
from runs.models import Node

OPEN = ""  # the board's default: every open incident, whatever its status
ALL = "all"


class BoardFilterForm(forms.Form):
    status = forms.ChoiceField(
        choices=[(OPEN, "open"), *Incident.Status.choices, (ALL, "all")], required=False, label="Status"
    )
    severity = forms.ChoiceField(choices=[("", "any"), *Incident.Severity.choices], required=False)
    run = forms.CharField(required=False, max_length=200, widget=forms.TextInput(attrs={"placeholder": "run name"}))
    node = forms.CharField(required=False, max_length=200, widget=forms.TextInput(attrs={"placeholder": "hostname"}))

    def selector_kwargs(self) -> dict:
        """incidents_list() arguments; a filter that does not parse is ignored rather than shown as an error."""
        data = self.cleaned_data if self.is_valid() else {}
        status = data.get("status", OPEN)
        return {
            "open_only": status == OPEN,
            "status": "" if status in (OPEN, ALL) else status,
            "severity": data.get("severity", ""),
            "run": data.get("run", "").strip(),
            "node": data.get("node", "").strip(),
        }


class PlaybookStartForm(forms.Form):
    """Which playbook to start on which of the incident's nodes; the run is the incident's, where it needs one."""

    playbook = forms.ChoiceField(choices=[(name, name) for name in PLAYBOOKS])
    node = forms.ModelChoiceField(queryset=Node.objects.none(), to_field_name="hostname")
    dry_run = forms.BooleanField(required=False)

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
        return data

    def error_text(self) -> str:
        return " ".join(
            message if field == "__all__" else f"{field}: {message}"
            for field, messages in self.errors.items()
            for message in messages
        )
