"""Sign-in throttling (django-axes): repeated failures lock out one username from one address for a cool-off."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.test import Client

PASSWORD = "s3cret-pass-for-tests"
NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def sign_in(username: str, password: str, ip: str = "10.0.0.1"):
    return Client(REMOTE_ADDR=ip).post("/login/", {"username": username, "password": password, "next": "/"})


@pytest.fixture
def ana(db):
    return get_user_model().objects.create_user("ana", password=PASSWORD)


def test_the_limit_and_cool_off_are_settings():
    assert settings.AXES_FAILURE_LIMIT == 5 and settings.AXES_COOLOFF_TIME == timedelta(minutes=15)
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


@pytest.mark.reliability(
    "Password guessing on the sign-in form",
    how="five wrong passwords for one username from one address, then the right one",
    outcome="the first four answer the form again (200); from the fifth a 429 lockout page, the right password "
    "included; another address or another username still signs in; after the 15-minute cool-off it works",
)
def test_it_locks_out_a_username_from_an_address_after_five_failures(ana):
    with time_machine.travel(NOW, tick=False):
        for _ in range(4):
            response = sign_in("ana", "wrong")
            assert response.status_code == 200 and b"Wrong username or password" in response.content
        locked = sign_in("ana", "wrong")
        assert locked.status_code == 429
        assert b"Too many sign-in attempts" in locked.content and b"locked for 0:15:00" in locked.content
        right = sign_in("ana", PASSWORD)
        assert right.status_code == 429 and "_auth_user_id" not in right.client.session

        assert sign_in("ana", PASSWORD, ip="10.0.0.2").status_code == 302  # another address
        get_user_model().objects.create_user("bob", password=PASSWORD)
        assert sign_in("bob", PASSWORD).status_code == 302  # another username from the same address

    # Each failure during the lockout restarted it: the last one was at NOW.
    with time_machine.travel(NOW + timedelta(minutes=14), tick=False):
        assert sign_in("ana", PASSWORD).status_code == 429
    with time_machine.travel(NOW + timedelta(minutes=14 + 16), tick=False):
        response = sign_in("ana", PASSWORD)
        assert response.status_code == 302 and response["Location"] == "/"


def test_a_success_resets_the_count(ana):
    for _ in range(4):
        assert sign_in("ana", "wrong").status_code == 200
    assert sign_in("ana", PASSWORD).status_code == 302
    for _ in range(4):
        assert sign_in("ana", "wrong").status_code == 200  # four again, not a lockout at the first
    assert sign_in("ana", PASSWORD).status_code == 302


def test_client_login_and_force_login_still_work(ana, client):
    # axes counts failures per request: the test client's login() must hand one over (no test uses it without).
    assert client.login(request=HttpRequest(), username="ana", password=PASSWORD)
    assert client.get("/").status_code == 200
    other = Client()
    other.force_login(ana)
    assert other.get("/").status_code == 200
