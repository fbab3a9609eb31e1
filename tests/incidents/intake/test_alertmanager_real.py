"""A real Prometheus Alertmanager sends its webhook to FleetOps: an alert fires, joins an incident, then resolves.

The `alertmanager` fixture is tests/promstack.py's. Needs Debian's `prometheus-alertmanager` (apt-get install -y
prometheus-alertmanager): skipped on a laptop without it, a failure under CI=true. An alert with an `xid` label is an
occurrence, not a condition (its resolved notice clears nothing): tests/incidents/intake/test_dcgm_path.py.
"""

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from incidents.models import Alert
from tests.services import wait_for


def _post(url: str, body) -> None:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


@pytest.mark.django_db(transaction=True)
def test_a_real_alertmanager_fires_and_resolves_an_alert(alertmanager):
    labels = {"alertname": "GPUTemperatureHigh", "node": "gpu-003", "gpu": "1", "severity": "critical"}
    annotations = {"summary": "gpu-003 GPU 1 at 91 C"}
    _post(f"{alertmanager}/api/v2/alerts", [{"labels": labels, "annotations": annotations}])

    alert = wait_for(
        lambda: Alert.objects.filter(kind="alertmanager", status="firing").select_related("incident").first(),
        timeout=20,
        what="the firing alert in FleetOps",
    )
    assert alert.fingerprint.startswith("am:")
    assert (alert.severity, alert.summary) == ("critical", annotations["summary"])
    assert alert.evidence["labels"]["gpu"] == "1"
    assert alert.incident.is_open
    assert alert.incident.alerts.count() == 1

    ended = (datetime.now(UTC) - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    _post(f"{alertmanager}/api/v2/alerts", [{"labels": labels, "annotations": annotations, "endsAt": ended}])
    wait_for(
        lambda: Alert.objects.filter(pk=alert.pk, status="resolved").exists(),
        timeout=20,
        what="the alert resolved in FleetOps",
    )
    assert Alert.objects.filter(kind="alertmanager").count() == 1
