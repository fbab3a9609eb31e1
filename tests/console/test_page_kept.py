"""Pages kept PAGE_CACHE_S seconds (fleetops/pagecache.py): a page asked again within that time is the same
page, stamped with when it was read, shared by the people who would see the same page, each with their own name and
CSRF token in it; what someone writes through the console shows to them at once; once the time is up the page is
read anew."""

import re
import time

import pytest
from django.contrib.auth.models import Group
from django.core.cache import caches
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleetops.pagecache import CACHE
from incidents.models import Incident

KEPT_S = 5


@pytest.fixture(autouse=True)
def _pages_kept(settings):
    settings.PAGE_CACHE_S = KEPT_S
    caches[CACHE].clear()
    yield
    caches[CACHE].clear()


def _browser(django_user_model, name: str, group: str) -> Client:
    user = django_user_model.objects.create_user(name)
    user.groups.add(Group.objects.get(name=group))
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    browser.get("/incidents/")  # the first page sets the CSRF cookie: a page that sets a cookie is never kept
    return browser


def _person(name: str, group: str):
    @pytest.fixture(name=name)
    def person(db, django_user_model) -> Client:
        return _browser(django_user_model, name, group)

    return person


# On call (they can act): ana, bob, cid; viewers: vic, val. Each signed in in a browser of their own.
ana, bob, cid = (_person(name, "oncall") for name in ("ana", "bob", "cid"))
vic, val = (_person(name, "viewer") for name in ("vic", "val"))


def _incident(n: int) -> Incident:
    now = timezone.now()
    return Incident.objects.create(
        title=f"kept page #{n}", group_key=f"kept:{n}", severity="SEV2", status="triggered", started_at=now,
        detected_at=now,
    )  # fmt: skip


def _stamp(html: str) -> str:
    return re.search(r'id="page-stamp">Read <time datetime="([^"]+)"', html).group(1)


CSRF = re.compile(r'"X-CSRFToken": "([^"]+)"|name="csrfmiddlewaretoken" value="([^"]+)"')


def _tokens(html: str) -> set[str]:
    return {a or b for a, b in CSRF.findall(html)}


def _impersonal(html: str) -> str:
    """The page without its CSRF tokens, which are masked anew for every answer."""
    return CSRF.sub("", html)


def test_a_page_asked_again_within_the_time_is_the_same_page_and_says_when_it_was_read(ana):
    first = _incident(1)
    page = ana.get("/incidents/").content.decode()
    assert first.title in page
    assert f"kept up to {KEPT_S} s" in page
    _incident(2)  # an incident opened by detection meanwhile (no write through this browser)
    with CaptureQueriesContext(connection) as queries:
        again = ana.get("/incidents/").content.decode()
    assert _impersonal(again) == _impersonal(page) and "kept page #2" not in again
    assert _stamp(again) == _stamp(page)  # the page says when its figures were read, not when it was served
    # The session and the user, and nothing of the board: the kept page is not recomputed.
    assert not [q for q in queries if "incidents_incident" in q["sql"]]


def test_this_browsers_own_write_shows_at_once(ana):
    first = _incident(1)
    page = ana.get("/incidents/").content.decode()
    assert f'name="one" value="{first.pk}"' in page  # kept from here on
    response = ana.post("/incidents/acknowledge", {"one": first.pk}, HTTP_X_CSRFTOKEN=_tokens(page).pop())
    assert response.status_code == 302
    page = ana.get(response.url).content.decode()
    assert f'name="one" value="{first.pk}"' not in page  # no button left: acknowledged, read anew
    assert '<span class="badge status-acknowledged">acknowledged</span>' in page


def test_readers_share_a_kept_page_each_with_their_own_name_and_a_token_that_works(vic, val):
    _incident(1)
    vic_page = vic.get("/incidents/").content.decode()
    _incident(2)
    val_page = val.get("/incidents/").content.decode()
    assert "kept page #2" not in val_page  # vic's reading, 0-5 s old, as its stamp says
    assert "<span>vic</span>" in vic_page and "<span>val</span>" in val_page and "<span>vic</span>" not in val_page
    assert _impersonal(val_page).replace("<span>val</span>", "<span>vic</span>") == _impersonal(vic_page)
    # The token in val's page is val's: the console takes it (a write of val's), where it refuses vic's.
    (token,) = _tokens(val_page)
    (vic_token,) = _tokens(vic_page)
    refused = val.post("/preferences/save", {"time_zone": "Europe/Paris"}, HTTP_X_CSRFTOKEN=vic_token)
    assert refused.status_code == 403
    taken = val.post("/preferences/save", {"time_zone": "Europe/Paris"}, HTTP_X_CSRFTOKEN=token)
    assert taken.status_code in (200, 302)


def test_people_of_other_roles_get_other_pages(ana, vic):
    _incident(1)
    ana_page = ana.get("/incidents/").content.decode()
    vic_page = vic.get("/incidents/").content.decode()
    assert 'name="ids"' in ana_page and 'name="ids"' not in vic_page  # the on-call ticks, the viewer reads
    assert "<span>ana</span>" in ana_page and "<span>vic</span>" in vic_page


def test_the_incident_page_follows_who_commands_it_and_who_is_assigned(ana, bob, cid, django_user_model):
    incident = _incident(1)
    incident.commander = django_user_model.objects.get(username="ana")
    incident.save()
    url = incident.get_absolute_url()
    ana_page, bob_page = ana.get(url).content.decode(), bob.get(url).content.decode()
    assert 'id="action-command"' not in ana_page and 'id="action-assign"' in ana_page  # she commands it already
    assert 'id="action-command"' in bob_page and 'id="action-assign"' in bob_page
    incident.assignees.add(django_user_model.objects.get(username="bob"))  # by someone else: no write of bob's
    bob_page = bob.get(url).content.decode()
    assert 'id="action-command"' in bob_page and 'id="action-assign"' not in bob_page
    # Cid, on call too, neither commands nor is assigned: he shares what bob was shown before.
    cid_page = cid.get(url).content.decode()
    assert 'id="action-assign"' in cid_page and "<span>cid</span>" in cid_page
    incident.title = "renamed"
    incident.save()
    assert "renamed" not in cid.get(url).content.decode()  # kept: the place he shares was read a moment ago


def test_the_htmx_poll_and_the_whole_page_are_kept_apart(ana):
    _incident(1)
    whole = ana.get("/incidents/").content.decode()
    poll = ana.get("/incidents/", HTTP_HX_REQUEST="true").content.decode()
    assert whole.startswith("<!doctype html>") and not poll.startswith("<!doctype html>")
    assert _impersonal(ana.get("/incidents/").content.decode()) == _impersonal(whole)


def test_once_the_time_is_up_the_page_is_read_anew(ana, settings):
    settings.PAGE_CACHE_S = 1
    _incident(1)
    ana.get("/incidents/")
    _incident(2)
    assert "kept page #2" not in ana.get("/incidents/").content.decode()
    time.sleep(1.1)
    assert "kept page #2" in ana.get("/incidents/").content.decode()


def test_a_page_that_failed_is_not_kept(ana):
    assert ana.get("/runs/not-yet").status_code == 404
    assert not caches[CACHE]._cache  # noqa: SLF001 -- the locmem store itself: nothing was put in it


def test_a_message_for_one_person_is_never_kept_for_others(django_user_model):
    """The message a write leaves (the quarantine replay's count) shows on that person's next page, which is then
    neither read from nor kept in the cache: another person with the same roles never sees it."""
    first, second = (_browser(django_user_model, name, "admin") for name in ("adm1", "adm2"))
    token = _tokens(first.get("/incidents/").content.decode()).pop()
    assert second.get("/incidents/").status_code == 200  # the board kept for both
    assert first.post("/events/quarantined/replay", HTTP_X_CSRFTOKEN=token).status_code == 302
    assert "Replayed: 0 applied" in first.get("/incidents/").content.decode()
    assert "Replayed:" not in second.get("/incidents/").content.decode()
    assert "Replayed:" not in first.get("/incidents/").content.decode()  # said once
