"""A per-user time zone (issue 20): UTC by default, every time says its zone, the weekly report stays UTC."""

from datetime import UTC, datetime

import pytest
import time_machine

from incidents.models import Incident, Preference

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def ana(client, django_user_model):
    user = django_user_model.objects.create_user("ana")
    client.force_login(user)
    return user


@pytest.fixture
def incident(db):
    with time_machine.travel(NOW, tick=False):
        return Incident.objects.create(title="Xid 79 on gpu-0003", group_key="node:gpu-0003", started_at=NOW,
                                       detected_at=NOW)  # fmt: skip


def test_times_are_utc_until_a_person_chooses_a_zone_and_then_say_theirs(client, ana, incident):
    with time_machine.travel(NOW, tick=False):
        html = client.get("/incidents/").content.decode()
        assert "12:00:00 UTC" in html
        page = client.get("/preferences")
        assert page.status_code == 200 and '<option value="UTC" selected>' in page.content.decode()
        saved = client.post("/preferences/save", {"time_zone": "Asia/Kolkata", "back": "/incidents/"})
        assert saved.status_code == 302 and saved.url == "/incidents/"
        assert Preference.objects.get(user=ana).time_zone == "Asia/Kolkata"
        html = client.get("/incidents/").content.decode()
        assert "17:30:00 IST" in html  # UTC+5:30, said as such
        timeline = client.get(incident.get_absolute_url()).content.decode()
        assert "times in Asia/Kolkata" in timeline


def test_a_zone_saved_on_one_device_holds_on_the_others_next_page(client, ana):
    from django.test import Client

    laptop = Client()
    laptop.force_login(ana)
    with time_machine.travel(NOW, tick=False):
        assert "12:00:00 UTC" in laptop.get("/incidents/").content.decode()
        client.post("/preferences/save", {"time_zone": "America/New_York"})  # on the phone
        assert "08:00:00 EDT" in laptop.get("/incidents/").content.decode()


def test_a_stored_zone_this_machine_does_not_know_reads_as_utc(client, ana):
    Preference.objects.create(user=ana, time_zone="Mars/Olympus")
    with time_machine.travel(NOW, tick=False):
        assert "12:00:00 UTC" in client.get("/incidents/").content.decode()
    assert '<option value="UTC" selected>' in client.get("/preferences").content.decode()  # not the list's first


def test_an_unknown_zone_is_refused_with_the_field_and_nothing_saved(client, ana):
    response = client.post("/preferences/save", {"time_zone": "Mars/Olympus"})
    assert response.status_code == 400 and "time_zone" in response.content.decode()
    assert not Preference.objects.exists()


def test_an_outside_next_is_not_followed(client, ana):
    response = client.post("/preferences/save", {"time_zone": "UTC", "back": "https://evil.example/"})
    assert response.status_code == 302 and response.url == "/preferences"


def test_the_weekly_report_stays_in_utc_whatever_the_readers_zone(client, ana):
    from incidents.reports.services import report_generate

    report = report_generate(since=NOW.replace(day=22, month=6), until=NOW.replace(day=29, month=6), now=NOW)
    Preference.objects.create(user=ana, time_zone="Asia/Tokyo")
    client.force_login(ana)
    html = client.get(f"/reports/{report.pk}").content.decode()
    assert "2026-06-22 12:00 – 2026-06-29 12:00 UTC" in html  # not 21:00, Tokyo's
    listed = client.get("/reports/").content.decode()
    assert "2026-06-22 – 2026-06-29" in listed and "2026-07-01 12:00" in listed  # generated at NOW, in UTC
