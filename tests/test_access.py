"""Who may do what: every URL and API endpoint, tried by every role and every token scope.

The access policy is data (tests/access_policy.py): one row per endpoint (method, URL name, the objects its URL needs,
the body it sends, the expected status per role). A new URL without a row fails
test_every_url_pattern_has_an_access_rule, so nobody adds a page or an endpoint without saying who may use it.
"""

import json

import pytest
from django.test import Client
from django.urls import get_resolver, reverse

from tests.access_policy import EXEMPT_NAMES, EXEMPT_NAMESPACES, ROLES, SESSIONS, TABLE, TOKENS, Row, _body, _names


def test_every_url_pattern_has_an_access_rule():
    resolver = get_resolver()
    assert all(ns in resolver.namespace_dict for ns in EXEMPT_NAMESPACES)
    urls = _names(resolver)
    covered = {row.name for row in TABLE}
    assert urls - covered - set(EXEMPT_NAMES) == set(), "URLs without a row in TABLE: say who may use them"
    assert covered - urls == set(), "rows for URLs that no longer exist"
    assert set(EXEMPT_NAMES) <= urls


CASES = [pytest.param(row, role, id=f"{row}-{role}") for row in TABLE for role in ROLES]


@pytest.mark.parametrize(("row", "role"), CASES)
def test_access(row: Row, role: str, world, db):
    client = Client()
    if role in SESSIONS:
        client.force_login(world["users"][role])
    elif role in TOKENS:
        client.defaults["HTTP_AUTHORIZATION"] = "Bearer " + world["tokens"][role]
    url = reverse(row.name, kwargs={k: world[v] for k, v in row.args.items()})
    if row.query:
        url += "?" + row.query
    if row.method == "GET":
        response = client.get(url)
    elif row.api:
        response = client.post(url, json.dumps(_body(row, world, role)), content_type="application/json")
    else:
        response = client.post(url, _body(row, world, role))
    expected = row.expected[role]
    assert response.status_code == expected, (
        f"{row} as {role}: {response.status_code}, expected {expected}: {response.content[:300]!r}"
    )
    if expected == 302 and role not in SESSIONS:
        assert response["Location"].startswith("/login/"), response["Location"]


@pytest.mark.parametrize("row", [r for r in TABLE if r.method == "POST"], ids=str)
def test_a_get_on_an_action_changes_nothing(row: Row, world, db, client):
    """Every action answers an admin's GET with 405 (an API one may refuse first, 403): a link changes nothing."""
    client.force_login(world["users"]["admin"])
    url = reverse(row.name, kwargs={k: world[v] for k, v in row.args.items()})
    assert client.get(url).status_code == (403 if row.expected["admin"] == 403 else 405)
