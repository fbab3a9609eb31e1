"""What the token-bound tests share: a client speaking with a token of given bounds, and `send`."""

import json

import pytest
from rest_framework.test import APIClient

from runs.models import ApiToken
from tests.conftest import make_token

BATCH = "application/cloudevents-batch+json"


def client_for(**bounds) -> APIClient:
    """An API client whose token (events:write) has these bounds: role, clusters, node, sources."""
    client = APIClient()
    token = make_token(f"token-{ApiToken.objects.count()}", ["events:write"], **bounds)
    client.credentials(HTTP_AUTHORIZATION="Bearer " + token)
    return client


@pytest.fixture
def send(django_capture_on_commit_callbacks):
    """send(client, events): POST them as that client's token, applied on commit in-process."""

    def post(client: APIClient, events: list[dict]):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/api/v1/events", json.dumps(events), content_type=BATCH)

    return post
