"""The demo's people and its live fault: the simulated history answered as an on-call rotation would have answered it.

After the simulated run is loaded (runs.domain.demo), two on-call engineers acknowledge each incident a few minutes
after FleetOps detected it, FleetOps resolves the quiet ones as it would have live, the engineers resolve those whose
node is still in repair, one postmortem is reviewed and its incident closed, last week's report is made, and a fault
a few minutes ago leaves one incident triggered and burning: what the on-call opens the console to.

Every draw comes from one random.Random(seed) in a fixed order, so the same seed gives the same demo.
"""

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from incidents import services
from incidents.models import Incident, Postmortem, WebhookEndpoint
from incidents.postmortems.services import postmortem_review
from incidents.reports.services import report_generate
from runs.domain.cloudevents import format_time
from runs.domain.demo import DEMO_SOURCE
from runs.domain.utcdays import week_start
from runs.models import Event

ONCALL = ("ana", "ben")  # the rotation: unusable passwords, they act only through this module
ACK_MIN = (1.0, 4.0, 15.0)  # minutes from detection to a person's acknowledgement: low, mode, high (triangular)
RESOLVE_MIN = (20.0, 45.0, 180.0)  # minutes from mitigation to a person resolving one whose node is in repair
REVIEW_H = 20.0  # hours from resolution to the postmortem's review
LIVE_FAULT_AGO = timedelta(minutes=4)  # the fault the demo leaves triggered
LIVE_ID = "live-"  # how the ids of a live fault's events begin


@dataclass(frozen=True)
class DemoPeople:
    acknowledged: int
    resolved_by_fleetops: int
    resolved_by_people: int
    closed: int
    report_id: int | None


def demo_people_act(*, now: datetime, until: datetime, seed: int) -> DemoPeople:
    """The rotation's answers, as of `now`, to the incidents that began before `until` (the history's end, before the
    live fault): see the module. Run again, it acts only on what it has not answered yet."""
    rng = random.Random(seed)
    people = [_person(name) for name in ONCALL]
    past = list(Incident.objects.filter(started_at__lt=until).order_by("started_at", "pk"))
    acknowledged = 0
    for incident in past:
        actor = people[rng.randrange(len(people))]
        if incident.is_open and incident.acknowledged_at is None:
            at = incident.detected_at + timedelta(minutes=rng.triangular(ACK_MIN[0], ACK_MIN[2], ACK_MIN[1]))
            if at < now:
                services.incident_acknowledge(incident=incident, actor=actor, at=at)
                acknowledged += 1
    # Whoever comes first resolves: a person some minutes after the run trains again, or FleetOps an hour after the
    # last alert cleared (INCIDENT_AUTO_RESOLVE_S), which it does for those a person left.
    by_people = 0
    quiet = timedelta(seconds=settings.INCIDENT_AUTO_RESOLVE_S)
    for incident in Incident.objects.filter(pk__in=[i.pk for i in past], status=Incident.Status.MITIGATED):
        at = incident.mitigated_at + timedelta(minutes=rng.triangular(RESOLVE_MIN[0], RESOLVE_MIN[2], RESOLVE_MIN[1]))
        actor = people[rng.randrange(len(people))]
        due = _quiet_since(incident)
        if at >= now or (due is not None and settings.INCIDENT_AUTO_RESOLVE_S > 0 and due + quiet <= at):
            continue
        firing = incident.alerts.filter(status="firing").exists()
        reason = "the node is in repair, tracked in its RMA ticket; the run trains on a spare" if firing else ""
        services.incident_resolve(incident=incident, actor=actor, override_reason=reason, at=at)
        by_people += 1
    by_fleetops = 0
    if settings.INCIDENT_AUTO_RESOLVE_S > 0:
        by_fleetops = services.incidents_auto_resolve(now=now, quiet_s=settings.INCIDENT_AUTO_RESOLVE_S)
    closed = _review_latest(people[0], now)
    return DemoPeople(acknowledged, by_fleetops, by_people, closed, _last_weeks_report(now))


def _quiet_since(incident: Incident) -> datetime | None:
    """When the last thing moved on it, once every alert has cleared (what auto-resolve waits from); else None."""
    alerts = list(incident.alerts.values_list("status", "resolved_at", "last_seen_at"))
    if any(status == "firing" for status, _, _ in alerts):
        return None
    return max([incident.mitigated_at, *(t for _, cleared, seen in alerts for t in (cleared, seen) if t)])


def _person(name: str) -> services.Actor:
    user, created = get_user_model().objects.get_or_create(username=name)
    if created:
        user.set_unusable_password()
        user.save()
    user.groups.add(Group.objects.get_or_create(name="oncall")[0])  # the migration's, unless a flush took it
    return services.Actor.of_user(user)


def _review_latest(actor: services.Actor, now: datetime) -> int:
    """The latest resolved incident whose postmortem a day's wait has let someone review: reviewed, then closed."""
    postmortem = (
        Postmortem.objects.filter(
            incident__status=Incident.Status.RESOLVED,
            incident__resolved_at__lt=now - timedelta(hours=REVIEW_H),
            reviewed_at__isnull=True,
        )
        .select_related("incident")
        .order_by("-incident__resolved_at")
        .first()
    )
    if postmortem is None or Postmortem.objects.filter(reviewed_at__isnull=False).exists():
        return 0  # one reviewed postmortem shows the page; the demo leaves the others to people
    at = postmortem.incident.resolved_at + timedelta(hours=REVIEW_H)
    postmortem_review(postmortem=postmortem, actor=actor, at=at)
    services.incident_close(incident=postmortem.incident, actor=actor, at=at + timedelta(minutes=5))
    return 1


def _last_weeks_report(now: datetime) -> int | None:
    """Last ISO week's reliability report, as the Monday beat task would have made it."""
    until = week_start(now)
    report = report_generate(since=until - timedelta(days=7), until=until, now=now)
    return report.pk


DEMO_MAIL = "oncall@demo.invalid"


def demo_mail_endpoint() -> WebhookEndpoint:
    """The rotation's e-mail endpoint: every event of an incident from now on is a delivery (the deliveries page),
    sent through the mail backend, in the embedded default a file under var/mail/ (settings.EMAIL_FILE_PATH)."""
    endpoint, _ = WebhookEndpoint.objects.get_or_create(
        name="demo on-call e-mail", defaults={"url": DEMO_MAIL, "format": WebhookEndpoint.Format.EMAIL}
    )
    return endpoint


def mail_sink() -> str:
    """Where the mail backend puts what it sends, in words."""
    if settings.EMAIL_BACKEND.endswith("filebased.EmailBackend"):
        return f"written as files under {settings.EMAIL_FILE_PATH}"
    if settings.EMAIL_BACKEND.endswith("smtp.EmailBackend"):
        return f"sent through {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    return f"handed to {settings.EMAIL_BACKEND}"


def demo_live_faults() -> list[datetime]:
    """When each fault the demo left open happened (its run.failed), oldest first."""
    return list(
        Event.objects.filter(source=DEMO_SOURCE, type="run.failed", event_id__startswith=LIVE_ID)
        .order_by("time")
        .values_list("time", flat=True)
    )


def demo_live_fault(*, now: datetime, nodes: list[str], run: str, seed: int) -> list[dict]:
    """The fault the demo leaves open: a GPU on one of the run's nodes falls off the bus a few minutes ago (an Xid 79
    storm from its agent), and the scheduler reports the run failed a few seconds later. CloudEvents to post."""
    rng = random.Random(seed)
    node, gpu = nodes[rng.randrange(len(nodes))], rng.randrange(8)
    at = (now - LIVE_FAULT_AGO).replace(microsecond=0)
    key = f"{at:%Y%m%dT%H%M}"

    storm = [
        {
            "specversion": "1.0",
            "id": f"{LIVE_ID}{key}-xid-{i}",
            "source": f"nvml://{node}",
            "type": "gpu.xid",
            "time": format_time(at + timedelta(milliseconds=20 * i)),
            "data": {"node": node, "gpu": gpu, "xid": 79, "message": "GPU has fallen off the bus"},
        }
        for i in range(12)
    ]
    failed = {
        "specversion": "1.0",
        "id": f"{LIVE_ID}{key}-failed",
        "source": DEMO_SOURCE,
        "type": "run.failed",
        "time": format_time(at),
        "data": {
            "run": run,
            "reason": "Xid 79: GPU has fallen off the bus",
            "node": node,
            "gpu": gpu,
            "xid": 79,
            "category": "faulty_gpu",
            "detected_at": format_time(at + timedelta(seconds=25)),
        },
    }
    return [*storm, failed]
