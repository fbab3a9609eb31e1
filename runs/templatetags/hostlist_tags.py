"""Host lists on pages: folded in Slurm's notation, expandable to each host (runs.domain.hostlist)."""

from django import template
from django.urls import reverse

from runs.domain import hostlist

register = template.Library()

EXPANDED = 256  # hosts an expanded list links one by one; a longer one shows its parts, one a line


@register.inclusion_tag("runs/_hostlist.html")
def hosts(hostnames):
    """`hostnames`: the names as read (repeats allowed: several alerts on one node). The names themselves are listed
    when expanded, never the folded text read back: a hostname with a bracket or a comma stays one host."""
    names = set(hostnames)
    parts = hostlist.fold_parts(names)
    return {
        "hosts": ",".join(parts),
        "count": len(names),
        "each": sorted(names, key=hostlist.natural) if 1 < len(names) <= EXPANDED else None,
        "parts": parts if len(names) > EXPANDED else None,
        "node_url": reverse("node-page", args=["-"])[:-1],  # + the quoted name: any name, a slash in it too
    }
