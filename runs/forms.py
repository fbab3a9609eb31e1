from django import forms


class WhatIfForm(forms.Form):
    """The advisor's what-if inputs, in the units an on-call engineer thinks in."""

    delta_s = forms.FloatField(label="Blocking write δ (s)", min_value=0.01)
    mtbf_h = forms.FloatField(label="Job MTBF M (h)", min_value=0.01)
    restart_min = forms.FloatField(label="Restart R (min)", min_value=0)
    interval_min = forms.FloatField(label="Current interval (min)", min_value=0.01, required=False)

    def costs(self) -> dict:
        data = self.cleaned_data
        return {
            "delta_s": data["delta_s"],
            "mtbf_s": data["mtbf_h"] * 3600,
            "restart_s": data["restart_min"] * 60,
            "current_s": data["interval_min"] * 60 if data.get("interval_min") else None,
        }


class WindowForm(forms.Form):
    days = forms.TypedChoiceField(
        choices=[(7, "7 days"), (30, "30 days"), (90, "90 days")], coerce=int, initial=30, required=False
    )
