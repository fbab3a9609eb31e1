"""A real Prometheus Alertmanager sends its webhook to FleetOps: an alert fires, joins an incident, then resolves.

Needs Debian's `prometheus-alertmanager` (apt-get install -y prometheus-alertmanager): skipped on a laptop without
it, a failure under CI=true.
"""

import json
import shutil
import subprocess
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from incidents.models import Alert
from tests.conftest import make_token, require
from tests.services import free_ports, wait_for

BINARY = "prometheus-alertmanager"


def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _post(url: str, body) -> None:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


@pytest.fixture
def alertmanager(live_server, tmp_path):
    require(shutil.which(BINARY) is not None, "Prometheus Alertmanager (apt-get install -y prometheus-alertmanager)")
    token = make_token("alertmanager", ["events:write"])
    port = free_ports(1)
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "route": {
                    "receiver": "fleetops",
                    "group_by": ["alertname", "node"],
                    "group_wait": "1s",
                    "group_interval": "1s",
                    "repeat_interval": "1h",
                },
                "receivers": [
                    {
                        "name": "fleetops",
                        "webhook_configs": [
                            {
                                "url": f"{live_server.url}/api/v1/intake/alertmanager",
                                "send_resolved": True,
                                "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
                            }
                        ],
                    }
                ],
            }
        )
    )
    log = open(tmp_path / "alertmanager.log", "w")  # noqa: SIM115 - closed in the finalizer
    process = subprocess.Popen(
        [
            BINARY,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: process.poll() is not None or _get(f"{url}/-/ready"), timeout=15, what="Alertmanager ready")
        assert process.poll() is None, (tmp_path / "alertmanager.log").read_text()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


@pytest.mark.django_db(transaction=True)
def test_a_real_alertmanager_fires_and_resolves_an_alert(alertmanager):
    labels = {"alertname": "GPUXidError", "node": "gpu-003", "xid": "79", "severity": "critical"}
    annotations = {"summary": "Xid 79 on gpu-003: GPU fell off the bus"}
    _post(f"{alertmanager}/api/v2/alerts", [{"labels": labels, "annotations": annotations}])

    alert = wait_for(
        lambda: Alert.objects.filter(kind="alertmanager", status="firing").select_related("incident").first(),
        timeout=20,
        what="the firing alert in FleetOps",
    )
    assert alert.fingerprint.startswith("am:")
    assert (alert.severity, alert.summary) == ("critical", annotations["summary"])
    assert alert.evidence["labels"]["xid"] == "79"
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
