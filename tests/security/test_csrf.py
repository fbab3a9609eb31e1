"""CSRF on every form: every page's POST forms carry the token, htmx requests send it, and every view a form posts
to refuses a POST without it (403). Pages and actions come from the access policy table of tests/test_access.py."""

import json
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import reverse

from tests.access_policy import TABLE, Row, _body

PAGES = [row for row in TABLE if row.method == "GET" and row.expected["admin"] == 200]
# Every POST a signed-in admin may make through a session: console forms and the incident API (DRF's
# SessionAuthentication enforces CSRF too). Token-only endpoints (events, intake) take no session.
SESSION_POSTS = [row for row in TABLE if row.method == "POST" and row.expected["admin"] not in (401, 403)]


class Forms(HTMLParser):
    """The POST forms of a page, with the names and values of their inputs, and the <body>'s hx-headers."""

    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []
        self.body_headers = None
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body_headers = attrs.get("hx-headers")
        elif tag == "form" and (attrs.get("method") or "get").lower() == "post":
            self._open = {"action": attrs.get("action"), "inputs": {}}
            self.forms.append(self._open)
        elif tag == "input" and self._open is not None and attrs.get("name"):
            self._open["inputs"][attrs["name"]] = attrs.get("value")

    def handle_endtag(self, tag):
        if tag == "form":
            self._open = None


def _url(row: Row, world) -> str:
    url = reverse(row.name, kwargs={k: world[v] for k, v in row.args.items()})
    return url + ("?" + row.query if row.query else "")


def _parse(response) -> Forms:
    parser = Forms()
    parser.feed(response.content.decode())
    return parser


@pytest.mark.reliability(
    "A page with a form that posts without a CSRF token",
    how="every console page (the access table's GET rows, and the sign-in page) rendered for an admin and parsed",
    outcome="every <form method=post> holds a csrfmiddlewaretoken input; every full page's <body> sends the token "
    "as X-CSRFToken in hx-headers for htmx requests",
)
def test_every_post_form_on_every_page_carries_the_csrf_token(world, db):
    admin, anonymous = Client(), Client()
    admin.force_login(world["users"]["admin"])
    pages = [(row.name, admin.get(_url(row, world))) for row in PAGES] + [("login", anonymous.get("/login/"))]
    actions = set()
    for name, response in pages:
        assert response.status_code == 200, name
        if not response["Content-Type"].startswith("text/html") or response.has_header("Content-Disposition"):
            continue  # downloads: CSV, PDF, Markdown, the standalone report (no form, no htmx)
        page = _parse(response)
        for form in page.forms:
            token = form["inputs"].get("csrfmiddlewaretoken")
            assert token and len(token) in (32, 64), f"{name}: the form posting to {form['action']} has no CSRF token"
            actions.add(form["action"])
        if b"<body" in response.content:
            assert page.body_headers is not None, f"{name}: htmx requests send no CSRF header"
            assert len(json.loads(page.body_headers)["X-CSRFToken"]) == 64, name
    # Not a test of nothing: the incident page alone has a dozen forms.
    assert len(actions) >= 15, actions


@pytest.mark.reliability(
    "Cross-site request forgery against a signed-in admin",
    how="each form-posting view and each session-authenticated API action posted by a signed-in admin through "
    "Client(enforce_csrf_checks=True) without the token, then with it",
    outcome="403 'CSRF' without the token, nothing changed; with the token the access table's own answer",
)
@pytest.mark.parametrize("row", SESSION_POSTS, ids=str)
def test_a_post_without_the_token_is_refused(row: Row, world, db):
    from incidents.models import TimelineEntry

    client = Client(enforce_csrf_checks=True)
    client.force_login(world["users"]["admin"])
    body = _body(row, world, "admin")
    before = TimelineEntry.objects.count()

    def post(**extra):
        if row.api:
            return client.post(_url(row, world), json.dumps(body), content_type="application/json", **extra)
        return client.post(_url(row, world), body, **extra)

    refused = post()
    assert refused.status_code == 403, refused.content[:300]
    assert b"CSRF" in refused.content
    assert TimelineEntry.objects.count() == before

    client.get("/")  # sets the csrftoken cookie, as any page does
    accepted = post(HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)
    assert accepted.status_code == row.expected["admin"], accepted.content[:300]


def test_signing_out_needs_the_token_too(world, db):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["users"]["admin"])
    assert client.post("/logout/").status_code == 403
    assert client.get("/").status_code == 200  # still signed in
