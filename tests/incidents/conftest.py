import json

import pytest

BATCH = "application/cloudevents-batch+json"


@pytest.fixture
def post(writer, django_capture_on_commit_callbacks):
    def send(events):
        for start in range(0, len(events), 5000):
            with django_capture_on_commit_callbacks(execute=True):
                response = writer.post("/api/v1/events", json.dumps(events[start : start + 5000]), content_type=BATCH)
            assert response.status_code in (200, 202), response.content

    return send
