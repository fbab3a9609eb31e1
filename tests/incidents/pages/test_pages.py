"""The on-call pages: incident board, incident page and its actions, roles; the overview's node grid; node page."""

import json
import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from incidents import services
from incidents.domain.detectors import Finding
from incidents.models import Incident, TimelineEntry
from runs.models import Node
from tests.stories import at, story_until_failure, xid_storm

BATCH = "application/cloudevents-batch+json"


@pytest.fixture(autouse=True)
def _story_time():
    """The clock a few minutes after the story's failure (+45 min), as the on-call sees it live: months later the run,
    silent since, would no longer burn (RUN_SILENT_S), and the impacts shown would be another story."""
    with time_machine.travel(at(50), tick=True):
        yield


@pytest.fixture
def incident(post) -> Incident:
    """Run r1 failed on n2 (Xid 79 storm), the scheduler cordoned n2: one SEV3 incident, three alerts firing."""
    post(story_until_failure() + xid_storm(20))
    return Incident.objects.get()


def _user(django_user_model, name, group=None):
    user = django_user_model.objects.create_user(name, password="s3cret-pass")
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def oncall(client, django_user_model):
    client.force_login(_user(django_user_model, "ana", "oncall"))
    return client


@pytest.fixture
def viewer(client, django_user_model):
    client.force_login(_user(django_user_model, "vic", "viewer"))
    return client


def _other_incident(*, severity: str, key: str, status: str = "triggered") -> Incident:
    return Incident.objects.create(
        title=f"{severity} on {key}", group_key=key, severity=severity, status=status,
        started_at=timezone.now(), detected_at=timezone.now(),
    )  # fmt: skip


# --- Login and roles ---------------------------------------------------------------------------------------


def test_it_sends_strangers_to_the_login_page(client, incident):
    for url in ("/incidents/", f"/incidents/{incident.pk}", "/incidents/open-count"):
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith("/login/?next=")
    expired = client.get("/incidents/open-count", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/fleet")
    assert expired.headers["HX-Redirect"] == "/login/?next=/fleet"  # the whole page goes to the login form
    response = client.post(f"/incidents/{incident.pk}/acknowledge")
    assert response.status_code == 302 and response.url.startswith("/login/")
    incident.refresh_from_db()
    assert incident.status == "triggered" and not incident.timeline.filter(kind="refused").exists()


def test_the_nav_links_the_board_with_the_open_count(oncall, incident):
    html = oncall.get("/").content.decode()
    assert 'href="/incidents/" id="nav-incidents"' in html
    assert re.search(r'<span id="open-incidents" class="count sev-SEV3"[^>]*>1</span>', html)


# --- Board --------------------------------------------------------------------------------------------------


def test_the_board_lists_what_needs_a_person_first_with_impact(oncall, incident):
    other = _other_incident(severity="SEV1", key="rack:r9")
    seen = _other_incident(severity="SEV1", key="rack:r8", status="acknowledged")
    _other_incident(severity="SEV4", key="node:old", status="resolved")
    html = oncall.get("/incidents/").content.decode()
    # Both unacknowledged need a person, the burning one (16 GPUs idle) before the SEV1 that idles nothing; the
    # acknowledged SEV1 that burns nothing waits below them.
    assert html.index('id="group-needs-a-person"') < html.index(f'id="incident-{incident.pk}"')
    assert html.index(f'id="incident-{incident.pk}"') < html.index(f'id="incident-{other.pk}"')
    assert html.index(f'id="incident-{other.pk}"') < html.index('id="group-open"')
    assert html.index('id="group-open"') < html.index(f'id="incident-{seen.pk}"')
    assert "SEV4 on node:old" not in html  # resolved: not on the board by default
    row = html[html.index(f'id="incident-{incident.pk}"') :]
    row = row[: row.index("</tr>")]
    assert 'href="/runs/r1"' in row and 'href="/nodes/n2"' in row
    assert '<td data-label="GPUs idle" class="num impact hot">16</td>' in row  # the run's 16 GPUs idle
    assert "3 firing" in row and "reboot node, drain" in row
    assert "<b>2</b> SEV1" in html and "<b>1</b> SEV3" in html and "<b>0</b> SEV2" in html


def test_an_incident_automation_mitigated_that_nobody_acknowledged_still_needs_a_person(oncall, db):
    """The demo's live fault, healed by FleetOps' drain-and-replace, left the board and the badge at 0 with nobody
    having looked at it (docs/DOMAIN.md section 6: unacknowledged, or idling GPUs now)."""
    from incidents.selectors import open_incidents_summary

    healed = _other_incident(severity="SEV2", key="rack:r7", status="mitigated")
    answered = _other_incident(severity="SEV2", key="rack:r6", status="mitigated")
    Incident.objects.filter(pk=answered.pk).update(acknowledged_at=timezone.now())
    html = oncall.get("/incidents/").content.decode()
    assert html.index(f'id="incident-{healed.pk}"') < html.index('id="group-open"')
    assert html.index('id="group-open"') < html.index(f'id="incident-{answered.pk}"')
    assert open_incidents_summary().needs_person == 1


def test_the_board_filters(oncall, incident):
    _other_incident(severity="SEV1", key="rack:r9")
    _other_incident(severity="SEV4", key="node:old", status="resolved")
    assert "SEV1 on rack:r9" not in oncall.get("/incidents/?severity=SEV3").content.decode()
    assert "SEV4 on node:old" in oncall.get("/incidents/?status=resolved").content.decode()
    html = oncall.get("/incidents/?node=n2").content.decode()
    assert f'id="incident-{incident.pk}"' in html and "SEV1 on rack:r9" not in html
    assert "No open incidents matching these filters" in oncall.get("/incidents/?run=nope").content.decode()
    assert oncall.get("/incidents/?severity=SEV9").status_code == 200  # a bad filter is ignored


def test_the_board_answers_htmx_with_the_list_only_polling_while_open(oncall, incident):
    response = oncall.get("/incidents/?severity=SEV3", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="incident-list"') and "<html" not in html
    assert 'hx-trigger="every 5s, incidents-changed from:body"' in html
    assert 'hx-get="/incidents/?severity=SEV3"' in html  # the poll keeps the filters
    assert response.headers["Vary"].count("HX-Request") == 1


def test_the_board_stops_polling_when_nothing_is_open(oncall, db):
    response = oncall.get("/incidents/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 286  # htmx: stop polling
    assert "No open incidents." in html and "every 5s" not in html
    assert 'hx-trigger="incidents-changed from:body"' in html  # but reloads once when the nav sees a new one
    page = oncall.get("/incidents/").content.decode()
    assert "every 5s" not in page and "No open incidents." in page


def _many_incidents(severity: str, count: int, *, status: str = "triggered") -> list[Incident]:
    """`count` incidents, the first the newest (started a minute apart)."""
    now = timezone.now()
    return Incident.objects.bulk_create(
        Incident(
            title=f"{severity} #{n}", group_key=f"{severity}:{status}:{n}", severity=severity, status=status,
            started_at=now - timedelta(minutes=n), detected_at=now,
        )
        for n in range(count)
    )  # fmt: skip


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr id="incident-(\d+)"', html)


def test_the_board_shows_50_incidents_a_page_and_links_the_others(oncall, db):
    sev1 = _many_incidents("SEV1", 3)
    sev3 = _many_incidents("SEV3", 117)
    _many_incidents("SEV2", 5, status="resolved")  # not on the default board, on no page of it
    order = [str(i.pk) for i in sev1 + sev3]  # most severe first, then newest first
    first = oncall.get("/incidents/").content.decode()
    assert _rows(first) == order[:50]
    assert "1–50 of 120" in first and "50 of 120 incidents" in first  # all unacknowledged: all need a person
    assert "<b>3</b> SEV1" in first and "<b>117</b> SEV3" in first  # counts of every page, not of this one
    assert 'href="/incidents/?page=2" hx-get="/incidents/?page=2"' in first and "previous" not in first
    second = oncall.get("/incidents/?page=2", HTTP_HX_REQUEST="true")
    html = second.content.decode()
    assert second.status_code == 200 and html.lstrip().startswith('<section id="incident-list"')
    assert _rows(html) == order[50:100] and "51–100 of 120" in html
    assert 'hx-get="/incidents/?page=2"' in html and 'hx-trigger="every 5s,' in html  # the poll keeps its page
    assert 'href="/incidents/?page=1"' in html and 'href="/incidents/?page=3"' in html
    last = oncall.get("/incidents/?page=3").content.decode()
    assert _rows(last) == order[100:] and "101–120 of 120" in last and "next" not in last
    assert _rows(oncall.get("/incidents/?page=7").content.decode()) == order[100:]  # past the end: the last page
    filtered = oncall.get("/incidents/?severity=SEV3&page=2").content.decode()
    assert _rows(filtered) == order[53:103] and 'href="/incidents/?severity=SEV3&amp;page=3"' in filtered


def test_the_board_refuses_a_page_that_is_not_a_number(oncall, db):
    for bad in ("0", "-1", "two", "1.5", "", "１"):
        response = oncall.get("/incidents/", {"page": bad})
        assert response.status_code == 400, bad
        assert response.content.decode() == "page: a whole number of 1 or more"


def test_a_board_that_fits_on_one_page_has_no_page_links(oncall, db):
    _many_incidents("SEV2", 50)
    html = oncall.get("/incidents/").content.decode()
    assert len(_rows(html)) == 50 and 'id="board-pager"' not in html and "50 incidents" in html


def test_the_open_count_tells_the_page_when_an_incident_opens(oncall, db):
    quiet = oncall.get("/incidents/open-count?seen=0.0.0.0", HTTP_HX_REQUEST="true")
    assert quiet.status_code == 200 and "HX-Trigger" not in quiet.headers
    assert quiet.content.decode().startswith('<span id="open-incidents"')
    opened = _other_incident(severity="SEV2", key="rack:r1")
    response = oncall.get("/incidents/open-count?seen=0.0.0.0", HTTP_HX_REQUEST="true")
    assert json.loads(response.headers["HX-Trigger"]) == {"incidents-changed": {}}
    seen = re.search(r"\?seen=([0-9a-f.]+)", response.content.decode()).group(1)
    assert seen.startswith(f"1.{opened.pk}.1.") and ">1</span>" in response.content.decode()
    assert "HX-Trigger" not in oncall.get(f"/incidents/open-count?seen={seen}").headers
    # Acknowledged and idling nothing: still open, no longer needing a person; the badge counts 0 and says so.
    services.incident_acknowledge(incident=opened, actor=services.FLEETOPS)
    response = oncall.get(f"/incidents/open-count?seen={seen}", HTTP_HX_REQUEST="true")
    assert "HX-Trigger" in response.headers and f"?seen=1.{opened.pk}.0.0" in response.content.decode()
    assert ">0</span>" in response.content.decode() and "0 need a person" in response.content.decode()


# --- Incident page --------------------------------------------------------------------------------------------


def test_the_incident_page_shows_impact_alerts_timeline_and_recommended_action(oncall, incident):
    html = oncall.get(f"/incidents/{incident.pk}").content.decode()
    assert '<span class="sev sev-big sev-SEV3" id="incident-severity">SEV3</span>' in html
    assert re.search(r'id="recommended-action">\s*<h3>Recommended action</h3>\s*<p>reboot node, drain</p>', html)
    assert '<p class="huge" id="impact-gpus-idle">16</p>' in html
    assert "GPU has fallen off the bus" in html and "21" in html  # the Xid alert folds the storm: 20 + 1
    for kind in ("xid", "run_failed", "node_state"):
        assert f'<td data-label="Kind" class="mono">{kind}</td>' in html
    assert "Opened by the" in html and 'class="tl-opened"' in html
    assert 'href="/runs/r1"' in html and 'href="/nodes/n2"' in html
    assert "3 alerts still firing" in html and 'name="override_reason"' in html
    assert html.count('name="csrfmiddlewaretoken"') >= 6
    for action in ("acknowledge", "assign", "command", "note", "escalate", "severity", "resolve"):
        url = f"/incidents/{incident.pk}/{action}"  # the page's own views, not the API's routes of the same name
        assert f'method="post" action="{url}" hx-post="{url}"' in html, action
    # Without htmx, static/js/confirm.js asks the hx-confirm question (no inline handler: the CSP forbids them).
    assert 'hx-confirm="Resolve #' in html and "js/confirm.js" in html and "onsubmit=" not in html
    assert oncall.get("/incidents/999999").status_code == 404


def test_the_incident_page_polls_its_parts_while_open_and_stops_after(oncall, incident, django_user_model):
    url = f"/incidents/{incident.pk}"
    response = oncall.get(url + "?part=timeline", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section class="card" id="incident-timeline"')
    assert 'hx-trigger="every 10s"' in html
    impact = oncall.get(url + "?part=impact", HTTP_HX_REQUEST="true").content.decode()
    assert impact.lstrip().startswith('<section id="incident-impact"')
    actor = services.Actor.of_user(django_user_model.objects.get(username="ana"))
    services.incident_resolve(incident=incident, actor=actor, override_reason="replaced n2")
    assert oncall.get(url + "?part=timeline", HTTP_HX_REQUEST="true").status_code == 286


# --- Actions ---------------------------------------------------------------------------------------------------


def _state(incident: Incident) -> tuple:
    incident.refresh_from_db()
    return (
        incident.status, incident.severity, incident.severity_overridden, incident.commander_id,
        incident.acknowledged_at, incident.resolved_at, list(incident.assignees.values_list("pk", flat=True)),
    )  # fmt: skip


ACTIONS = [
    # (action, form, expected timeline kind, check on the incident)
    ("acknowledge", {}, "acknowledged", lambda i, u: i.status == "acknowledged" and i.commander == u),
    ("assign", {}, "assigned", lambda i, u: list(i.assignees.all()) == [u]),
    ("command", {}, "assigned", lambda i, u: i.commander == u),
    ("escalate", {"reason": "second run hit"}, "escalated", lambda i, u: i.severity == "SEV2"),
    ("note", {"text": "draining n2 by hand"}, "note", lambda i, u: True),
    ("severity", {"severity": "SEV1", "reason": "the flagship run"}, "severity", lambda i, u: i.severity == "SEV1"),
    ("resolve", {"override_reason": "n2 replaced"}, "resolved", lambda i, u: i.status == "resolved"),
]


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
@pytest.mark.parametrize("action, form, kind, check", ACTIONS, ids=[a[0] for a in ACTIONS])
def test_each_action_works_for_an_oncall_engineer(oncall, incident, action, form, kind, check, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = oncall.post(f"/incidents/{incident.pk}/{action}", form, **headers)
    if htmx:
        html = response.content.decode()
        assert response.status_code == 200
        assert html.lstrip().startswith('<section class="card actions" id="incident-actions"')
        for part in ("incident-header", "incident-impact", "incident-timeline"):
            assert re.search(f'id="{part}"[^>]*hx-swap-oob="true"', html), part
    else:
        assert response.status_code == 302 and response.url == f"/incidents/{incident.pk}"
    incident.refresh_from_db()
    entry = incident.timeline.filter(kind=kind).last()
    assert entry.actor.username == "ana" and entry.actor_name == "ana"
    assert check(incident, entry.actor)
    if action == "note":
        assert entry.text == "draining n2 by hand"
        assert "draining n2 by hand" in oncall.get(f"/incidents/{incident.pk}").content.decode()


def test_a_resolved_incident_can_be_reopened(oncall, incident):
    oncall.post(f"/incidents/{incident.pk}/resolve", {"override_reason": "n2 replaced"})
    html = oncall.get(f"/incidents/{incident.pk}").content.decode()
    assert 'id="action-reopen"' in html and 'id="action-acknowledge"' not in html
    response = oncall.post(f"/incidents/{incident.pk}/reopen", {"reason": "n2 again"})
    assert response.status_code == 302
    incident.refresh_from_db()
    assert incident.status == "acknowledged" and incident.timeline.filter(kind="reopened").exists()


def test_resolve_is_refused_while_alerts_fire_unless_a_reason_is_given(oncall, incident):
    response = oncall.post(f"/incidents/{incident.pk}/resolve", {"override_reason": "  "})
    assert response.status_code == 409
    assert "3 alert(s) still firing" in response.content.decode()
    response = oncall.post(f"/incidents/{incident.pk}/resolve", {}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and 'id="action-error">3 alert(s) still firing' in response.content.decode()
    incident.refresh_from_db()
    assert incident.status == "triggered" and not incident.timeline.filter(kind="resolved").exists()
    oncall.post(f"/incidents/{incident.pk}/resolve", {"override_reason": "n2 replaced by hand"})
    incident.refresh_from_db()
    assert incident.status == "resolved"
    assert "with 3 alert(s) still firing: n2 replaced by hand" in incident.timeline.get(kind="resolved").text


def test_a_severity_change_needs_a_reason_and_a_known_severity(oncall, incident):
    assert oncall.post(f"/incidents/{incident.pk}/severity", {"severity": "SEV1"}).status_code == 409
    assert oncall.post(f"/incidents/{incident.pk}/severity", {"severity": "SEV9", "reason": "x"}).status_code == 409
    assert _state(incident)[1:3] == ("SEV3", False)


def test_actions_take_only_post(oncall, incident):
    assert oncall.get(f"/incidents/{incident.pk}/acknowledge").status_code == 405
    assert oncall.post("/incidents/999999/acknowledge").status_code == 404


REFUSABLE = [(action, form) for action, form, *_ in ACTIONS] + [("reopen", {})]


@pytest.mark.parametrize("group", ["viewer", None], ids=["viewer", "no-role"])
@pytest.mark.parametrize("action, form", REFUSABLE, ids=[a for a, _ in REFUSABLE])
def test_someone_without_the_oncall_role_cannot_act(client, incident, django_user_model, group, action, form):
    from incidents.pages.incident import ACTIONS as VIEW_ACTIONS

    user = _user(django_user_model, "vic", group)
    client.force_login(user)
    before_state, before_timeline = _state(incident), list(incident.timeline.values_list("pk", flat=True))
    response = client.post(f"/incidents/{incident.pk}/{action}", form)
    assert response.status_code == 403
    assert _state(incident) == before_state
    verb = VIEW_ACTIONS[action][0]
    new = list(incident.timeline.exclude(pk__in=before_timeline))
    assert [(e.kind, e.actor, e.data) for e in new] == [("refused", user, {"action": verb})]
    assert new[0].text == f"vic may not {verb}: refused"


def test_a_viewer_reads_without_action_buttons_and_refusals_stay_out_of_the_timeline(viewer, incident):
    viewer.post(f"/incidents/{incident.pk}/acknowledge")
    html = viewer.get(f"/incidents/{incident.pk}").content.decode()
    assert "acting needs the <b>oncall</b> role" in html
    assert 'id="action-acknowledge"' not in html and 'id="action-resolve"' not in html
    assert "may not acknowledge" not in html  # an audit entry, shown to admins only
    assert TimelineEntry.objects.filter(kind="refused").count() == 1


def test_an_admin_sees_the_refusals(client, incident, django_user_model):
    actor = services.Actor.of_user(_user(django_user_model, "vic", "viewer"))
    services.action_refused(incident=incident, actor=actor, action="resolve")
    client.force_login(_user(django_user_model, "boss", "admin"))
    html = client.get(f"/incidents/{incident.pk}").content.decode()
    assert "Audit: 1 refused action" in html and "vic may not resolve: refused" in html
    assert 'id="action-acknowledge"' in html  # admins act too


# --- Overview and node page ---------------------------------------------------------------------------------


def _fleet(n: int) -> None:
    states = ["in_service"] * 9 + ["suspect", "in_repair", "cordoned"]
    Node.objects.bulk_create(
        Node(hostname=f"gpu-{i:04d}", rack=f"r{i // 32:02d}", state=states[i % len(states)]) for i in range(n)
    )


def test_the_overview_shows_the_node_grid_goodput_and_incidents(oncall, incident):
    _fleet(70)
    Node.objects.create(hostname="loose-1", state="in_service")
    html = oncall.get("/").content.decode()
    assert 'id="node-grid"' in html and "73 nodes" in html  # 70 + loose-1 + the scenario's n1, n2
    assert 'title="n2 · cordoned"' in html and 'href="/nodes/n2"' in html
    assert 'class="cell s-cordoned hot"' in html  # n2 is in the open incident
    assert 'class="rack-label" title=" r00">r00</span>' in html and ">unracked</span>" in html
    assert html.index(">r00</span>") < html.index(">r01</span>") < html.index(">r02</span>")
    assert '<a href="/nodes/gpu-0009" class="cell s-suspect" title="gpu-0009 · suspect"></a>' in html
    assert '<a href="/incidents/" id="needs-person-count">1</a>' in html  # unacknowledged, and 16 GPUs idle
    assert '<span id="open-incident-count">1</span> open' in html
    assert 'id="fleet-gpus-idle">16</span>' in html and 'id="fleet-burn">$0.67' in html  # 16 GPUs x $2.50/h
    assert 'id="goodput-24h">' in html
    assert "gpu-0009" in html[html.index('id="flagged-nodes"') :]  # suspect nodes listed


def test_the_overview_grid_costs_the_same_queries_at_any_size(oncall, db):
    _fleet(40)
    oncall.get("/")  # the session's first request reads the person's time zone once
    cache.clear()
    with CaptureQueriesContext(connection) as small:
        assert oncall.get("/").status_code == 200
    Node.objects.bulk_create(Node(hostname=f"big-{i:04d}", rack=f"b{i // 32:02d}") for i in range(2048))
    cache.clear()  # both counts with a cold cache (the spare pools keep their repair times in it)
    with CaptureQueriesContext(connection) as large:
        html = oncall.get("/?part=grid").content.decode()  # past GRID_INLINE_NODES: the page with its grid drawn
    assert len(large) == len(small)
    # Every node once, plus a swatch for each state the legend offers to show ("all" has none).
    assert html.count('class="cell s-') == 2088 + html.count('class="grid-show"') - 1


def test_a_large_fleets_grid_comes_when_it_is_scrolled_to(oncall, db, monkeypatch):
    from fleetops.console import overview

    monkeypatch.setattr(overview, "GRID_INLINE_NODES", 40)
    _fleet(40)
    html = oncall.get("/").content.decode()
    assert 'class="cell s-' in html[html.index('id="grid-racks"') :]  # 40 nodes: drawn with the page
    Node.objects.create(hostname="one-more", rack="r99", state="draining")
    html = oncall.get("/").content.decode()
    grid = html[html.index('id="node-grid"') : html.index('id="clusters"')]
    racks = grid[grid.index('id="grid-racks"') :]
    assert 'class="cell s-' not in racks and 'data-grid-src="/?part=grid"' in racks  # console.js fetches it
    assert "41 nodes" in grid and 'href="/?part=grid#node-grid">Draw them now</a>' in grid  # without scripts
    assert 'data-state="draining"' in grid  # the legend's counts and filters come with the page

    part = oncall.get("/?part=grid", HTTP_HX_REQUEST="true").content.decode()
    assert part.lstrip().startswith('<div class="grid-racks" id="grid-racks"') and "<html" not in part
    assert part.count('class="cell s-') == 41 and 'title="one-more · draining"' in part
    whole = oncall.get("/?part=grid").content.decode()  # the link: the page, its grid drawn in place
    assert "<html" in whole and whole.count('class="cell s-') == 41 + whole.count('class="grid-show"') - 1


def test_the_overview_lists_lemon_nodes(oncall, db):
    Node.objects.create(hostname="sour-1", rack="r1")
    finding = Finding(
        kind="lemon",
        fingerprint="lemon:sour-1",
        severity="warning",
        summary="sour-1 is a lemon: 4 interruptions in 7 d",
        explanation="sour-1 was involved in 4 interruptions",
        node="sour-1",
        evidence={"interruptions": 4},
    )
    services.finding_record(finding=finding, at=timezone.now())
    html = oncall.get("/").content.decode()
    flagged = html[html.index('id="flagged-nodes"') :]
    assert "sour-1 is a lemon: 4 interruptions in 7 d" in flagged
    assert '<span class="badge lemon">lemon</span>' in flagged
    assert re.search(r'id="kpi-lemons"><h3>Lemon nodes</h3><p class="huge">1</p>', html)


def test_the_node_page_shows_xid_history_alerts_and_evidence(oncall, incident):
    finding = Finding(
        kind="straggler",
        fingerprint="straggler:r1:n2",
        severity="warning",
        summary="n2 slows r1: rank 5 is a straggler",
        explanation="rank 5 took 1.8 s per step vs median 1.2 s",
        node="n2",
        run="r1",
        evidence={"rank": 5, "windows": [1.8, 1.9, 1.7]},
    )
    services.finding_record(finding=finding, at=at(46))
    html = oncall.get("/nodes/n2").content.decode()
    xids = html[html.index('id="node-xids"') :]
    assert xids.count("<td>gpu3</td>") == 1 and "<b>×21</b>" in xids  # the storm and the scenario's Xid: one burst
    assert "GPU has fallen off the bus" in xids and "<b>reboot node, drain</b>" in xids
    assert "from the latest 21 Xid events" in xids
    evidence = html[html.index('id="node-evidence"') : html.index('id="node-alerts"')]
    assert "n2 slows r1: rank 5 is a straggler" in evidence and "rank 5 took 1.8 s per step" in evidence
    assert "[1.8, 1.9, 1.7]" in evidence
    alerts = html[html.index('id="node-alerts"') : html.index('id="node-xids"')]
    assert f'href="/incidents/{incident.pk}"' in alerts and '<td class="mono">xid</td>' in alerts
    assert 'id="node-interruptions"' in html and "Faulty GPU" in html


# --- Bulk acknowledge from the board (issue 20) ----------------------------------------------------------------


def test_the_board_acknowledges_the_ticked_incidents_each_on_its_own_timeline(oncall, db):
    first, second, third = _many_incidents("SEV2", 3)
    Incident.objects.filter(pk=third.pk).update(status="acknowledged", acknowledged_at=timezone.now())
    html = oncall.get("/incidents/").content.decode()
    assert f'name="ids" value="{first.pk}"' in html and f'name="one" value="{first.pk}"' in html
    assert f'name="ids" value="{third.pk}"' not in html  # acknowledged already: nothing to tick
    response = oncall.post("/incidents/acknowledge", {"ids": [first.pk, second.pk, third.pk]}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and 'id="incident-list"' in html
    assert f"Acknowledged #{first.pk}, #{second.pk}." in html
    assert f"#{third.pk} already acknowledged or closed by someone else: left as they were." in html
    for incident in (first, second):
        incident.refresh_from_db()
        assert incident.status == "acknowledged" and incident.commander.get_username() == "ana"
        assert list(incident.timeline.values_list("kind", flat=True)) == ["acknowledged"]
    assert not third.timeline.exists()  # passed over, not acknowledged twice


def test_one_rows_button_acknowledges_that_incident_only(oncall, db):
    first, second = _many_incidents("SEV3", 2)
    response = oncall.post("/incidents/acknowledge?severity=SEV3", {"one": second.pk, "ids": [first.pk]})
    assert response.status_code == 302 and response.url == "/incidents/?severity=SEV3"
    assert Incident.objects.get(pk=second.pk).status == "acknowledged"
    assert Incident.objects.get(pk=first.pk).status == "triggered"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({}, "tick at least one"),
        ({"ids": ["1", "x"]}, "whole numbers"),
        ({"ids": ["\u00b2"]}, "whole numbers"),  # a superscript two is a digit to str.isdigit, not to int()
        ({"ids": ["1"] * 201}, "up to 200"),
    ],
)
def test_a_bulk_acknowledge_without_incidents_says_why(oncall, db, data, reason):
    response = oncall.post("/incidents/acknowledge", data)
    assert response.status_code == 400 and reason in response.content.decode()


def test_a_viewer_may_not_bulk_acknowledge_and_each_refusal_is_audited(viewer, db):
    first, second = _many_incidents("SEV2", 2)
    html = viewer.get("/incidents/").content.decode()
    assert 'name="ids"' not in html and "bulk-acknowledge" not in html
    assert viewer.post("/incidents/acknowledge", {"ids": [first.pk, second.pk]}).status_code == 403
    for incident in (first, second):
        incident.refresh_from_db()
        assert incident.status == "triggered"
        assert list(incident.timeline.values_list("kind", flat=True)) == ["refused"]


@pytest.mark.reliability(
    "A viewer's script retries a refused bulk acknowledge of the board's 200 incidents",
    how="the same refused POST /incidents/acknowledge of 200 incidents sent five times, then again 10 minutes later",
    outcome="one refusal entry per incident for the five (each 403), and one more each once REFUSAL_REPEAT_S has "
    "passed (before: an entry per incident per request: 33,000 in 36 s)",
)
def test_a_repeated_refusal_is_audited_once_in_its_window(viewer, db):
    incidents = _many_incidents("SEV2", 200)
    ids = [incident.pk for incident in incidents]
    for _ in range(5):
        assert viewer.post("/incidents/acknowledge", {"ids": ids}).status_code == 403
    assert TimelineEntry.objects.filter(kind="refused").count() == 200
    later = timezone.now() + timedelta(seconds=services.REFUSAL_REPEAT_S + 1)
    with time_machine.travel(later, tick=False):
        assert viewer.post("/incidents/acknowledge", {"ids": ids}).status_code == 403
    assert TimelineEntry.objects.filter(kind="refused").count() == 400
