import json
import os
import socket
from urllib.parse import urlparse

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from fleetops.celery import app as celery_app
from runs.models import ApiToken

# The postgres, broker and worker fixtures; the real Slurm cluster; the access tests' world; a real Prometheus and
# Alertmanager.
pytest_plugins = ["tests.services", "tests.slurm", "tests.access_policy", "tests.promstack"]

# Tests apply events in-process; the service tests start a real worker and turn this off themselves.
celery_app.conf.task_always_eager = True


# `make test` runs the suite in two passes (Makefile): every other test on two workers, each with its own test
# database, then the serial ones, one at a time, as they would run alone. A test is serial when
# - it asserts how long something took: marked @pytest.mark.serial where it does; or
# - it asks for what there is one of on the machine (ONE_A_MACHINE; `worker` comes with `broker`): the broker's Redis
#   queues, which a worker of one test would take another's tasks from, and the loopback Slurm cluster.
# Browsers, Prometheus, private PostgreSQL and Redis servers and `manage.py serve` run on free ports, in folders of
# their own, so those tests share the first pass. (pytest-xdist's --dist loadgroup would keep the one-a-machine tests
# on one worker beside the rest, but on pytest 9.2 it no longer groups: pytest-dev/pytest-xdist#1386.)
ONE_A_MACHINE = {"broker", "slurm_cluster"}


def pytest_itemcollected(item):
    """Marked as each test is collected, before `-m` selects."""
    if ONE_A_MACHINE & set(item.fixturenames):
        item.add_marker(pytest.mark.serial)


def require(available: bool, what: str) -> None:
    """Skip a test whose service is missing on a laptop; under CI a missing service is a failure."""
    if available:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required under CI=true but is not available")
    pytest.skip(f"{what} not available")


def reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def make_token(name: str, scopes: list[str], **bounds) -> str:
    """A token: an unbound scheduler (every cluster, any source) unless `bounds` say role, clusters, node, sources."""
    row = ApiToken(name=name, scopes=scopes, **{"role": "scheduler", **bounds})
    row.full_clean(exclude=["digest", "hint"])
    token = row.set_new_token()
    row.save()
    return token


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache: a record rebuilt by the next test (pks reused, time frozen) could
    otherwise match a cached version of the last one's."""
    cache.clear()


@pytest.fixture(autouse=True)
def _pages_not_kept(settings):
    """Pages are read anew on every request, as most tests assert what a page shows right after an event;
    tests/console/test_page_cache.py turns the page cache on."""
    settings.PAGE_CACHE_S = 0


@pytest.fixture
def writer(db) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + make_token("writer", ["events:write", "read"]))
    return client


@pytest.fixture
def post(writer, django_capture_on_commit_callbacks):
    """post(events): through POST /api/v1/events as the writer, 5,000 a batch, each applied on commit in-process."""

    def send(events):
        for start in range(0, len(events), 5000):
            with django_capture_on_commit_callbacks(execute=True):
                response = writer.post(
                    "/api/v1/events",
                    json.dumps(events[start : start + 5000]),
                    content_type="application/cloudevents-batch+json",
                )
            assert response.status_code in (200, 202), response.content

    return send


@pytest.fixture
def oncall(client, django_user_model):
    """The test client signed in as ana, an on-call engineer (modules with their own `oncall` keep theirs)."""
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("ana", password="s3cret-pass")
    user.groups.add(Group.objects.get(name="oncall"))
    client.force_login(user)
    return client


@pytest.fixture
def reader(db) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + make_token("reader", ["read"]))
    return client
