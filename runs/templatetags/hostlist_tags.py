"""Host lists on pages: folded in Slurm's notation, expandable to each host (runs.domain.hostlist)."""

from django import template

from runs.domain import hostlist

register = template.Library()

EXPANDED = 256  # hosts an expanded list links one by one; a longer one shows its ranges, one a line


@register.inclusion_tag("_hostlist.html")
def hosts(folded: str, count: int):
    """`folded`: hostlist.fold's text; `count`: how many hosts it names (known to the caller, not re-counted)."""
    return {
        "hosts": folded,
        "count": count,
        "each": hostlist.expand(folded) if 1 < count <= EXPANDED and "[" in folded else None,
        "ranges": hostlist.split(folded) if count > EXPANDED else None,
    }
