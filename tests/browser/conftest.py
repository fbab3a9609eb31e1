"""Real headless Chromium (Debian's, never a downloaded one) driven by Playwright against pytest-django's live_server.

Playwright's sync API runs an event loop in the test thread, so Django's async-safety check must be relaxed for
the database calls the tests (and live_server's teardown) make there.
"""

import os

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from django.conf import settings  # noqa: E402

from tests.conftest import require  # noqa: E402

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # skipped on a laptop without it, a failure under CI=true
    sync_playwright = None

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
PASSWORD = "s3cret-pass-for-tests"


@pytest.fixture(scope="module")
def chromium():
    require(sync_playwright is not None, "the playwright Python package")
    require(Path(CHROMIUM).exists(), f"Chromium at {CHROMIUM}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go: $TEST_ARTIFACTS_DIR, by default var/test-artifacts/."""
    path = Path(os.environ.get("TEST_ARTIFACTS_DIR") or settings.BASE_DIR / "var" / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def oncall_user(django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("ana", password=PASSWORD)
    # A transactional test may start after another one flushed the groups the migration made.
    user.groups.add(Group.objects.get_or_create(name="oncall")[0])
    return user


def log_in(page, live_server, path: str, user) -> None:
    """Open `path`, get sent to the login form, sign in through it, and land on `path`."""
    page.goto(live_server.url + path)
    assert "/login/" in page.url
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + path)
