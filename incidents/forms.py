from django import forms

from .models import Incident

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
