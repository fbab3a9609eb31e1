import json

from django import template

from incidents import selectors
from incidents.domain import playbooks

register = template.Library()


@register.simple_tag(takes_context=True)
def open_incidents(context) -> selectors.OpenSummary:
    """The nav badge's figures: the page's own where it shows them too (the overview), else read here."""
    return context.get("open_summary") or selectors.open_incidents_summary()


@register.filter
def evidence_value(value, limit=300):
    """A detector's evidence value for reading: numbers and words as they are, lists and objects as short JSON."""
    if isinstance(value, str | int | float | bool) or value is None:
        return "—" if value is None else value
    text = json.dumps(value, separators=(", ", ": "), default=str)
    return text if len(text) <= int(limit) else text[: int(limit)] + " …"


@register.filter
def status_words(status: str, dry_run=False) -> str:
    """A playbook's status for reading, a dry run's in its own words: `{{ ex.status|status_words:ex.dry_run }}`."""
    return playbooks.status_words(status, dry_run=bool(dry_run))


@register.filter
def step_words(status: str, dry_run=False) -> str:
    """A step's status for reading, a dry run's in its own words: `{{ s.status|step_words:ex.dry_run }}`."""
    return playbooks.status_words(status, dry_run=bool(dry_run), step=True)
