"""Postmortems: drafted from the record on resolve, edited with versions, previewed safely, exported, reviewed
before closing, and their action items tracked across incidents."""

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.utils import timezone

from incidents import services
from incidents.domain import postmortem as domain
from incidents.models import ActionItem, Incident, PlaybookExecution, Postmortem
from incidents.postmortems import services as postmortems
from runs.domain.numbers import number_text
from tests.stories import at, spares, story_until_failure, xid_storm

T0 = datetime(2026, 3, 1, 0, 44, tzinfo=UTC)


def _t(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _user(django_user_model, name, group):
    user = django_user_model.objects.create_user(name, password="s3cret-pass")
    user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def ana(django_user_model):
    return _user(django_user_model, "ana", "oncall")


@pytest.fixture
def oncall(client, ana):
    client.force_login(ana)
    return client


@pytest.fixture
def viewer(client, django_user_model):
    client.force_login(_user(django_user_model, "vic", "viewer"))
    return client


def _incident(*, severity="SEV3", key="node:n9", status="resolved") -> Incident:
    now = timezone.now()
    return Incident.objects.create(
        title=f"{severity} on {key}", group_key=key, severity=severity, status=status,
        started_at=now - timedelta(minutes=30), detected_at=now - timedelta(minutes=29), resolved_at=now,
    )  # fmt: skip


# --- The pure draft ---------------------------------------------------------------------------------------


def _facts(**overrides) -> domain.PostmortemFacts:
    values = dict(
        incident_id=7,
        title="Xid 79 on n2",
        severity="SEV3",
        milestones=domain.Milestones(
            started_at=_t(0),
            detected_at=_t(6),
            acknowledged_at=_t(8),
            mitigated_at=_t(14),
            repair_at=_t(15),
            gate_at=_t(75),
            returned_at=_t(105),
            resolved_at=_t(110),
        ),  # fmt: skip
        gpu_hours_lost=4.25,
        goodput_lost=0.0123,
        rewound_min=9.5,
        runs_affected=("r1",),
        gpus_affected=16,
        severity_minutes=domain.severity_minutes(
            initial="SEV4", changes=[(_t(1), "SEV3"), (_t(20), "SEV2")], start=_t(0), end=_t(110)
        ),
        interruptions=(
            domain.InterruptionFact("faulty_gpu", "Faulty GPU", "GPU", _t(0), "n2", 3, 79, "fell off the bus"),
        ),
        playbooks=(
            domain.PlaybookFact(
                name="drain-and-replace",
                status="succeeded",
                started_by="FleetOps",
                started_at=_t(7),
                finished_at=_t(15),
                node="n2",
                steps=(
                    domain.StepFact("drain", "succeeded", 90.0),
                    domain.StepFact("requeue job", "succeeded", 330.0, approver_role="oncall", approved_by="ana"),
                ),
            ),  # fmt: skip
        ),
        culprit=domain.HardwareFact(node="n2", gpu=3, serial="S123", xid_count=51, earlier_interruptions=2),
        usual_detection_s=120.0,
        checkpoint_interval_s=3600.0,
        advised_interval_s=900.0,
        links={"run r1": "/runs/r1"},
    )
    values.update(overrides)
    return domain.PostmortemFacts(**values)


def test_it_drafts_impact_stages_cause_and_assessment_from_known_numbers():
    text = domain.draft(_facts())
    assert "- GPU-hours lost: 4.2" in text  # 4.25 rounds half to even
    assert "- Goodput lost: 1.23 %" in text and "- Work rewound: 9.5 min" in text
    assert "- Runs affected: 1 (r1)" in text and "- GPUs affected: 16" in text
    assert "- Minutes at each severity: SEV2 90 min, SEV3 19 min, SEV4 1 min" in text
    for row in ("| detect |", "| stabilize |", "| diagnose |", "| repair |", "| return through the gate |"):
        assert row in text
    assert "| detect | 2026-03-01 00:44:00 UTC | 2026-03-01 00:50:00 UTC | 6 |" in text
    assert "| 8 |" in text and "| 9 |" in text  # stabilize, diagnose
    assert "| 60 |" in text and "| 30 |" in text  # repair, gate
    assert "| 1 | drain | succeeded | 1.5 |" in text and "| 2 | requeue job | succeeded | 5.5 |" in text
    assert "Category: **Faulty GPU** (GPU; Llama 3 taxonomy: `faulty_gpu`)" in text
    assert "Culprit hardware: n2 GPU 3 (serial S123)" in text and "51 Xid errors" in text
    assert "n2 had 2 earlier interruption(s) on record." in text
    assert "Detection took 6 min, slower than the usual 2 min." in text
    assert "waited for approval by oncall at step 'requeue job' (5.5 min, approved by ana)" in text
    assert "far from the advised 15 min" in text
    assert "- [ ] Set the run's checkpoint interval near 15 min." in text
    assert "[run r1](/runs/r1)" in text


def test_it_says_what_went_well_when_the_facts_are_good():
    facts = _facts(usual_detection_s=600.0, checkpoint_interval_s=1000.0, playbooks=(), culprit=None)
    good, bad = domain.assessment(facts)
    assert bad == []
    assert "Detected in 6 min (usual: 10 min)." in good
    assert any("close to the advised" in g for g in good)


def test_its_figures_are_written_as_every_page_writes_them():
    # One number format (runs.domain.numbers): thousands separators, no decimals that say nothing (issue 20).
    text = domain.draft(_facts(gpu_hours_lost=45_696.04, gpus_affected=16_384, rewound_min=1_500.25))
    assert "- GPU-hours lost: 45,696\n" in text and "- GPUs affected: 16,384" in text
    assert "- Work rewound: 1,500 min" in text and "rewound work was 1,500 min" in text


def test_stages_not_yet_reached_have_no_minutes():
    text = domain.draft(_facts(milestones=domain.Milestones(started_at=_t(0), detected_at=_t(1))))
    assert "| stabilize | 2026-03-01 00:45:00 UTC | — | — |" in text
    assert "| return through the gate | — | — | — |" in text


def test_the_rendered_html_is_sanitized():
    html = domain.to_html("# Hi\n\n<script>alert(1)</script>\n\n[x](javascript:alert(1)) <img src=x onerror=alert(1)>")
    assert "<h1>Hi</h1>" in html
    assert "<script" not in html and 'href="javascript' not in html and "<img" not in html


# --- Drafted on resolve from the record -------------------------------------------------------------------


def test_it_drafts_a_drain_and_replace_postmortem_listing_each_step_with_its_minutes(post):
    with time_machine.travel(at(47, 30)):  # the fault is fresh: the playbook runs with no human
        post(spares("s1") + story_until_failure() + xid_storm(50))
    (execution,) = PlaybookExecution.objects.all()
    assert execution.status == "succeeded", execution.error
    incident = Incident.objects.get()
    services.incident_resolve(incident=incident, actor=services.FLEETOPS, override_reason="n2 in repair")

    postmortem = Postmortem.objects.get(incident=incident)
    text = postmortem.markdown
    assert "### Playbook drain-and-replace on n2 (succeeded)" in text
    for index, step in enumerate(execution.steps.order_by("index"), start=1):
        assert f"| {index} | {step.name} | succeeded | {number_text(step.seconds / 60, 1)} |" in text
    assert "Category: **Faulty GPU**" in text and "Culprit hardware: [n2](/nodes/n2) GPU 3" in text
    assert "- Runs affected: 1 (r1)" in text and "- GPUs affected: 16" in text
    assert "Playbook drain-and-replace ran with no human" in text
    (version,) = postmortem.versions.all()
    assert (version.number, version.author_name, version.note) == (1, "FleetOps", "drafted")
    assert incident.timeline.filter(kind="postmortem", text__startswith="Postmortem drafted").exists()


# --- Editing, preview, export -----------------------------------------------------------------------------


def test_it_saves_each_edit_as_a_version_with_its_author(oncall, ana):
    incident = _incident()
    postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    response = oncall.post(f"/incidents/{incident.pk}/postmortem/save", {"markdown": "# Better\n\nWe fixed it."})
    assert response.status_code == 302
    oncall.post(f"/incidents/{incident.pk}/postmortem/save", {"markdown": "# Better\n\nWe fixed it twice."})
    postmortem = Postmortem.objects.get(incident=incident)
    assert postmortem.markdown == "# Better\n\nWe fixed it twice."
    versions = list(postmortem.versions.values_list("number", "author_name", "note"))
    assert versions == [(3, "ana", "edited"), (2, "ana", "edited"), (1, "FleetOps", "drafted")]
    html = oncall.get(f"/incidents/{incident.pk}/postmortem").content.decode()
    assert 'id="version-3"' in html and "<h1>Better</h1>" in html and 'id="postmortem-markdown"' in html


def test_the_preview_returns_sanitized_html(oncall):
    incident = _incident()
    response = oncall.post(
        f"/incidents/{incident.pk}/postmortem/preview",
        {"markdown": "**bold** <script>alert(1)</script>"},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert response.status_code == 200 and html.strip().startswith('<article class="card postmortem-body"')
    assert "<strong>bold</strong>" in html and "<script" not in html


def test_it_exports_markdown(oncall, ana):
    incident = _incident()
    postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    postmortems.action_item_add(
        incident=incident, actor=services.Actor.of_user(ana), text="RMA the GPU", owner=ana, due_on=date(2026, 4, 1)
    )
    response = oncall.get(f"/incidents/{incident.pk}/postmortem.md")
    assert response["Content-Type"] == "text/markdown"
    assert response["Content-Disposition"] == f'attachment; filename="incident-{incident.pk}-postmortem.md"'
    text = response.content.decode()
    assert text.startswith(f"# Postmortem: #{incident.pk} ")
    assert "- [ ] RMA the GPU (ana, due 2026-04-01)" in text


def test_a_viewer_reads_but_cannot_edit(viewer):
    incident = _incident()
    postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    page = viewer.get(f"/incidents/{incident.pk}/postmortem").content.decode()
    assert "<h1>Postmortem:" in page and 'id="postmortem-markdown"' not in page
    response = viewer.post(f"/incidents/{incident.pk}/postmortem/save", {"markdown": "vandalised"})
    assert response.status_code == 403
    assert Postmortem.objects.get(incident=incident).versions.count() == 1
    refused = incident.timeline.get(kind="refused")
    assert refused.text == "vic may not edit the postmortems of: refused"


# --- Review and close -------------------------------------------------------------------------------------


def test_closing_a_sev3_needs_a_reviewed_postmortem(oncall):
    incident = _incident(severity="SEV3")
    postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    response = oncall.post(f"/incidents/{incident.pk}/postmortem/close")
    assert response.status_code == 409
    assert "closes only once its postmortem is marked reviewed" in response.content.decode()
    incident.refresh_from_db()
    assert incident.status == "resolved"

    oncall.post(f"/incidents/{incident.pk}/postmortem/review")
    assert oncall.post(f"/incidents/{incident.pk}/postmortem/close").status_code == 302
    incident.refresh_from_db()
    assert incident.status == "closed" and incident.closed_at is not None
    assert incident.timeline.filter(kind="closed", actor_name="ana").exists()


def test_an_edit_after_review_needs_another_review(ana):
    incident = _incident()
    actor = services.Actor.of_user(ana)
    postmortem = postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    postmortems.postmortem_review(postmortem=postmortem, actor=actor)
    postmortems.postmortem_save(postmortem=postmortem, actor=actor, markdown="changed")
    with pytest.raises(services.IncidentError):
        services.incident_close(incident=incident, actor=actor)


def test_a_sev4_closes_without_review(oncall):
    incident = _incident(severity="SEV4")
    response = oncall.post(f"/incidents/{incident.pk}/close")  # the incident page's own Close action
    assert response.status_code == 302
    incident.refresh_from_db()
    assert incident.status == "closed"


def test_only_a_resolved_incident_closes(ana):
    incident = _incident(severity="SEV4", status="triggered")
    with pytest.raises(services.IncidentError, match="Only a resolved incident"):
        services.incident_close(incident=incident, actor=services.Actor.of_user(ana))


# --- Action items -----------------------------------------------------------------------------------------


def test_action_items_are_listed_across_incidents(oncall, ana):
    first, second = _incident(key="node:a"), _incident(key="node:b")
    oncall.post(
        f"/incidents/{first.pk}/postmortem/item", {"text": "Replace the cable", "owner": ana.pk, "due_on": "2026-04-02"}
    )
    oncall.post(f"/incidents/{second.pk}/postmortem/item", {"text": "Tighten the hang detector"})
    done = ActionItem.objects.get(text="Tighten the hang detector")
    oncall.post(f"/incidents/{second.pk}/postmortem/done", {"item": done.pk})
    item = ActionItem.objects.get(text="Replace the cable")
    assert (item.owner, item.due_on, item.created_by_name) == (ana, date(2026, 4, 2), "ana")
    assert ActionItem.objects.get(pk=done.pk).done_by_name == "ana"

    html = oncall.get("/incidents/action-items").content.decode()
    assert "Replace the cable" in html and "2026-04-02" in html and "Tighten the hang detector" not in html
    html = oncall.get("/incidents/action-items?all=1").content.decode()
    assert "Replace the cable" in html and "Tighten the hang detector" in html
    assert f"#{first.pk}" in html and f"#{second.pk}" in html


@pytest.mark.parametrize(("action", "data"), [("done", {"item": "abc"}), ("item", {"text": "x", "owner": "1 OR 1=1"})])
def test_an_id_that_is_not_a_number_is_refused_naming_the_field(oncall, action, data):
    """Before: the database refused the value with an error, a 500."""
    incident = _incident(key="node:c")
    response = oncall.post(f"/incidents/{incident.pk}/postmortem/{action}", data)
    assert response.status_code == 400
    field = next(iter(k for k in data if k in ("item", "owner")))
    assert f"{field}: must be the number of one" in response.content.decode()
    assert not ActionItem.objects.exists()


def test_a_bad_due_date_is_refused_with_a_message(oncall):
    incident = _incident()
    response = oncall.post(f"/incidents/{incident.pk}/postmortem/item", {"text": "x", "due_on": "2026-02-31"})
    assert response.status_code == 409 and "YYYY-MM-DD" in response.content.decode()
    assert not ActionItem.objects.exists()


def test_it_drafts_on_demand_and_the_incident_page_links_the_postmortem(oncall):
    incident = _incident()
    page = oncall.get(f"/incidents/{incident.pk}/postmortem").content.decode()
    assert "No postmortem yet" in page and 'id="postmortem-draft"' in page
    assert oncall.post(f"/incidents/{incident.pk}/postmortem/draft").status_code == 302
    assert Postmortem.objects.get(incident=incident).versions.get().note == "drafted"
    oncall.post(f"/incidents/{incident.pk}/postmortem/draft")
    assert list(Postmortem.objects.get(incident=incident).versions.values_list("note", flat=True)) == [
        "redrafted",
        "drafted",
    ]
    html = oncall.get(f"/incidents/{incident.pk}").content.decode()
    assert f'href="/incidents/{incident.pk}/postmortem"' in html and 'id="action-close"' in html


def test_the_versions_are_named_once_and_the_editor_fills_its_card(oncall, settings):
    import re
    from pathlib import Path

    incident = _incident()
    postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    oncall.post(f"/incidents/{incident.pk}/postmortem/save", {"markdown": "# Better"})
    html = oncall.get(f"/incidents/{incident.pk}/postmortem").content.decode()
    versions = html[html.index('id="postmortem-versions"') :]
    versions = versions[: versions.index("</section>")]
    # Named v2, v1 and nothing else: an ordered list numbered them again ("2. v1" in a browser).
    assert "<ol" not in versions and '<ul class="versions">' in versions
    assert re.findall(r'<li id="version-(\d+)">v(\d+) <b>', versions) == [("2", "2"), ("1", "1")]
    # A bare textarea is 20 columns (~160 px) in a 1,000 px card: a stylesheet gives the editor its card's width.
    assert '<section class="card postmortem-editor">' in html and "<textarea" in html
    css = "".join(path.read_text() for path in sorted((Path(settings.BASE_DIR) / "static" / "css").glob("*.css")))
    assert re.search(r"\.postmortem-editor textarea\s*\{[^}]*\bwidth:\s*100%", css)
