"""The search box's reads: incidents, runs, nodes and postmortems matching a Query, grouped by kind.

PostgreSQL: the words of incidents and postmortems by full-text search (websearch_to_tsquery, English stems), ranked,
on the `search_vector` column PostgreSQL keeps for each (migration incidents/0011). Runs and nodes are names and
places (a run name, a hostname, a rack, a state reason of a few words): every word as a case-insensitive substring
of one of their fields, on any database; SQLite (development, most tests) matches incidents and postmortems the same
way. Either way an identifier typed whole (an incident's number, a run's name, a hostname, a rack) comes first, then
one it begins, then the text matches (by rank where there is one), newest first; each kind capped, with its total."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from operator import and_, or_

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
from django.db import connection
from django.db.models import Case, Expression, IntegerField, Model, Q, QuerySet, Value, When
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from fleetops.console.search.query import SNIPPET_LENGTH, Query, snippet
from incidents.models import Incident, Postmortem
from runs.models import Node, Run

LIMIT = 20  # results shown per kind on the page; the live panel under the box shows fewer
CONFIG = "english"  # the text search configuration: the one the search_vector columns are built with (incidents/0011)
EXACT, PREFIX, TEXT = 3, 2, 1  # tiers: the identifier typed whole, the identifier it begins, a text match


@dataclass(frozen=True)
class Badge:
    text: str
    css: str  # the console's own classes: badge status-<status>, sev sev-<severity>, badge run-<state>, ...


@dataclass(frozen=True)
class Hit:
    title: SafeString  # escaped, the matched words in <mark>
    url: str
    badges: tuple[Badge, ...]
    snippet: SafeString
    identifier: bool  # found by its number, name or hostname (whole or by its start), not by its text


@dataclass(frozen=True)
class Group:
    kind: str  # incidents, runs, nodes, postmortems: the section's DOM id is search-<kind>
    label: str
    hits: tuple[Hit, ...]
    total: int  # every match, of which `hits` are the first


@dataclass(frozen=True)
class SearchResults:
    query: Query
    groups: tuple[Group, ...]  # every kind, in KINDS' order, those with no match included
    full_text: bool  # PostgreSQL's full-text search, not the plain substring match

    @property
    def total(self) -> int:
        return sum(group.total for group in self.groups)


@dataclass(frozen=True)
class _Kind:
    """How one kind is searched: its rows, the fields read as text, the identifier tiers and how a row is shown."""

    name: str
    label: str
    rows: Callable[[], QuerySet]
    text: tuple[str, ...]  # the fields its words are in (on PostgreSQL, those its search_vector is built from)
    names: tuple[str, ...]  # identifiers, also matched as substrings: 'cluster-0161' is no word of 'sim-cluster-01610'
    exact: Callable[[Query], Q | None]
    prefix: Callable[[Query], Q | None]
    newest: tuple[str, ...]
    hit: Callable[[Model, Query, bool], Hit]
    full_text: bool = False  # has a search_vector column on PostgreSQL


def search_get(*, query: Query, limit: int = LIMIT, full_text: bool | None = None) -> SearchResults:
    """Every kind's first `limit` matches and its total: two queries a kind at most. `full_text`: None picks by the
    database (PostgreSQL's full-text search where it is there); False forces the plain match any database runs."""
    if full_text is None:
        full_text = connection.vendor == "postgresql"
    if not query:
        return SearchResults(query, (), full_text)
    return SearchResults(query, tuple(_group(kind, query, limit, full_text) for kind in KINDS), full_text)


def _group(kind: _Kind, query: Query, limit: int, full_text: bool) -> Group:
    tiers = [(q, tier) for q, tier in ((kind.exact(query), EXACT), (kind.prefix(query), PREFIX)) if q is not None]
    rows = kind.rows()
    rank = {}
    if full_text and kind.full_text:
        search = SearchQuery(query.text, search_type="websearch", config=CONFIG)
        rows = rows.alias(search_vector=_StoredVector())  # alias: read in WHERE and in the rank, never sent back
        text = Q(search_vector=search) | _substring(kind.names, (query.identifier,) if query.identifier else ())
        rank = {"rank": SearchRank(_StoredVector(), search)}
    else:
        text = reduce(and_, (_substring(kind.text + kind.names, (word,)) for word in query.words), Q())
        rows = rows.exclude(_substring(kind.text + kind.names, query.excluded)) if query.excluded else rows
    rows = rows.filter(reduce(or_, (q for q, _ in tiers), text))
    ranked = rows.annotate(
        tier=Case(*(When(q, then=Value(t)) for q, t in tiers), default=Value(TEXT), output_field=IntegerField()),
        **rank,
    ).order_by("-tier", *(["-rank"] if rank else []), *kind.newest)
    hits = tuple(kind.hit(row, query, row.tier > TEXT) for row in ranked[:limit])
    total = len(hits) if len(hits) < limit else rows.count()
    return Group(kind.name, kind.label, hits, total)


class _StoredVector(Expression):
    """The row's `search_vector`: a tsvector column PostgreSQL keeps (generated, stored) on incidents and postmortems
    (migration incidents/0011). No model field holds it (SQLite has no such column), so it is named here, on the
    query's own table under whatever alias the query gives it."""

    def __init__(self, alias: str | None = None):
        super().__init__(output_field=SearchVectorField())
        self.alias = alias

    def resolve_expression(self, query=None, *args, **kwargs):
        return _StoredVector(query.get_initial_alias())

    def relabeled_clone(self, change_map):
        return _StoredVector(change_map.get(self.alias, self.alias))

    def as_sql(self, compiler, connection):
        return f"{compiler.quote_name_unless_alias(self.alias)}.{connection.ops.quote_name('search_vector')}", []


def _substring(fields: tuple[str, ...], words: tuple[str, ...]) -> Q:
    """Any of the words in any of the fields, case ignored (Q() when either is empty: it matches nothing in an OR)."""
    return reduce(or_, (Q(**{f"{field}__icontains": w}) for field in dict.fromkeys(fields) for w in words), Q())


def _marked(text: str, query: Query, *, whole: bool = False, markdown: bool = False) -> SafeString:
    """The text around the first match (`whole`: all of it), escaped, the matched words in <mark>."""
    parts = snippet(text, query.words, length=len(text) if whole else SNIPPET_LENGTH, markdown=markdown)
    return format_html_join("", "{}", ((format_html("<mark>{}</mark>", p) if hit else p,) for p, hit in parts))


# --- The kinds ----------------------------------------------------------------------------------------------------


def _incident(row: Incident, query: Query, identifier: bool) -> Hit:
    return Hit(
        title=format_html("#{} {}", row.pk, _marked(row.title, query, whole=True)),
        url=row.get_absolute_url(),
        badges=(Badge(row.severity, f"sev sev-{row.severity}"), Badge(row.status, f"badge status-{row.status}")),
        snippet=_marked(" · ".join(filter(None, (row.group_key, row.recommended_action))), query),
        identifier=identifier,
    )


def _run(row: Run, query: Query, identifier: bool) -> Hit:
    started = f"started {row.started_at:%Y-%m-%d %H:%M} UTC" if row.started_at else "not started"
    cluster = f"cluster {row.cluster.name}" if row.cluster else ""
    return Hit(
        title=_marked(row.name, query, whole=True),
        url=row.get_absolute_url(),
        badges=(Badge(row.state, f"badge run-{row.state}"),),
        snippet=_marked(", ".join(filter(None, (cluster, f"{row.gpu_count:,} GPUs", started))), query),
        identifier=identifier,
    )


def _node(row: Node, query: Query, identifier: bool) -> Hit:
    place = ", ".join(f"{what} {value}" for what, value in (("rack", row.rack), ("switch", row.switch)) if value)
    return Hit(
        title=_marked(row.hostname, query, whole=True),
        url=row.get_absolute_url(),
        badges=(Badge(row.get_state_display(), f"badge node-{row.state}"),),
        snippet=_marked(" · ".join(filter(None, (place, row.gpu_model, row.state_reason))), query),
        identifier=identifier,
    )


def _postmortem(row: Postmortem, query: Query, identifier: bool) -> Hit:
    reviewed = row.reviewed_at is not None
    return Hit(
        title=format_html("Postmortem of #{} {}", row.incident_id, _marked(row.incident.title, query, whole=True)),
        url=row.get_absolute_url(),
        badges=(
            Badge(row.incident.severity, f"sev sev-{row.incident.severity}"),
            Badge("reviewed" if reviewed else "draft", "badge pm-reviewed" if reviewed else "badge pm-draft"),
        ),
        snippet=_marked(row.markdown, query, markdown=True),
        identifier=identifier,
    )


def _incident_number(field: str) -> Callable[[Query], Q | None]:
    return lambda q: Q(**{field: q.incident_id}) if q.incident_id is not None else None


def _identifier(**lookups: str) -> Callable[[Query], Q | None]:
    """Q(field=<the identifier, as the template says>) for each lookup, ORed; None when no identifier was typed."""
    return lambda q: (
        reduce(or_, (Q(**{f: template.format(q.identifier)}) for f, template in lookups.items()))
        if q.identifier
        else None
    )


KINDS = (
    _Kind(
        name="incidents",
        label="Incidents",
        rows=lambda: Incident.objects.all(),  # discarded ones are in no page, nor here
        text=("title", "group_key", "recommended_action"),
        names=("title", "group_key"),
        exact=_incident_number("pk"),
        # Its group names the node, rack, switch or run typed: run:<name>@<start>, node:<hostname>, rack:<rack>
        prefix=_identifier(group_key__icontains=":{}"),
        newest=("-started_at", "-pk"),
        hit=_incident,
        full_text=True,
    ),
    _Kind(
        name="runs",
        label="Runs",
        rows=lambda: Run.objects.select_related("cluster"),
        text=("name",),
        names=("name",),
        exact=_identifier(name__iexact="{}"),
        prefix=_identifier(name__istartswith="{}"),
        newest=("-started_at", "name"),
        hit=_run,
    ),
    _Kind(
        name="nodes",
        label="Nodes",
        rows=lambda: Node.objects.all(),
        text=("hostname", "rack", "switch", "gpu_model", "state_reason"),
        names=("hostname",),
        exact=_identifier(hostname__iexact="{}"),
        prefix=_identifier(hostname__istartswith="{}", rack__iexact="{}", switch__iexact="{}"),
        newest=("hostname",),
        hit=_node,
    ),
    _Kind(
        name="postmortems",
        label="Postmortems",
        rows=lambda: Postmortem.objects.filter(incident__discarded_at__isnull=True).select_related("incident"),
        text=("markdown",),
        names=(),
        exact=_incident_number("incident_id"),
        prefix=lambda q: None,  # its text names the incident's nodes and run: the words find them
        newest=("-updated_at", "-pk"),
        hit=_postmortem,
        full_text=True,
    ),
)
