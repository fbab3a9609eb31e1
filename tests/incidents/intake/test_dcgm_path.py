"""The DCGM path end to end: dcgm-exporter's metrics -> a real Prometheus evaluating contrib/prometheus/dcgm-rules.yml
-> a real Alertmanager routing as contrib/alertmanager/fleetops.yml does -> FleetOps' intake on the live server.

The exporter is a small HTTP server in the test that renders dcgm-exporter's metric names and labels in the text
format (FakeExporter). For speed the rules' windows are scaled, one minute to SECONDS_PER_MINUTE seconds
(`offset 1m` -> `offset 4s`, `[5m]` -> `[20s]`, `for: 5m` -> `for: 20s`: scaled_rules), with scrapes and rule
evaluations every second; and Alertmanager's DCGM route waits 1 s instead of 30 s and re-sends a firing group every
second instead of every 4 hours, so re-sent notices of one episode reach FleetOps too. Its URL and token file are
the live server's and a token made here; the rest of both files is used as it is.

Needs Debian's prometheus and prometheus-alertmanager (promtool and amtool come with them): skipped on a laptop
without them, a failure under CI=true.
"""

import json
import re
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import yaml
from django.db import OperationalError

from incidents.models import Alert, Incident
from runs.models import GPU, Node
from tests.conftest import make_token, require
from tests.promstack import INTAKE, Server, query, scrape_config
from tests.services import free_ports, wait_for

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "contrib" / "prometheus" / "dcgm-rules.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "dcgm-rules.test.yml"
ALERTMANAGER_CONFIG = ROOT / "contrib" / "alertmanager" / "fleetops.yml"
SECONDS_PER_MINUTE = 4
WAIT_S = 30  # for anything that takes a few evaluations and a notification


def _run(*command: str) -> None:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"


def test_the_rules_pass_promtool_and_their_unit_tests():
    require(shutil.which("promtool") is not None, "promtool (apt-get install -y prometheus)")
    _run("promtool", "check", "rules", str(RULES))
    _run("promtool", "test", "rules", str(RULE_TESTS))


def test_the_alertmanager_configuration_passes_amtool():
    require(shutil.which("amtool") is not None, "amtool (apt-get install -y prometheus-alertmanager)")
    _run("amtool", "check-config", str(ALERTMANAGER_CONFIG))


# --- end to end ----------------------------------------------------------------------------------------------


class FakeExporter:
    """What dcgm-exporter serves for GPU 3 of gpu-017 (internal/pkg/rendermetrics/render_metrics.go's labels, help
    and types from etc/default-counters.csv), changed by the test as faults happen."""

    LABELS = (
        'gpu="3",UUID="GPU-8a3e9f70-1c2d-4b5e-9f60-7a8b9c0d1e2f",pci_bus_id="00000000:9A:00.0",device="nvidia3",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-017"'
    )

    def __init__(self):
        self.lock = threading.Lock()
        self.last_xid = 0
        self.xid_counts: dict[int, int] = {}  # Xid -> how many within the exporter's window
        self.double_bit_errors = 0

    def xid(self, code: int) -> None:
        with self.lock:
            self.last_xid = code
            self.xid_counts[code] = self.xid_counts.get(code, 0) + 1

    def double_bit_error(self) -> None:
        with self.lock:
            self.double_bit_errors += 1

    def text(self) -> str:
        with self.lock:
            window = f'{self.LABELS},window_size_in_ms="300000"'
            counts = [
                f'DCGM_EXP_XID_ERRORS_COUNT{{{window},xid="{x}"}} {n}' for x, n in sorted(self.xid_counts.items())
            ]
            lines = [
                "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
                "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
                f"DCGM_FI_DEV_XID_ERRORS{{{self.LABELS}}} {self.last_xid}",
                "# HELP DCGM_EXP_XID_ERRORS_COUNT reported XIDs during last window",
                "# TYPE DCGM_EXP_XID_ERRORS_COUNT counter",
                *(counts or [f"DCGM_EXP_XID_ERRORS_COUNT{{{window}}} 0"]),  # none in the window: one series at 0
                "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.",
                "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter",
                f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{self.LABELS}}} {self.double_bit_errors}",
            ]
        return "\n".join(lines) + "\n"


@contextmanager
def _served(handler: type[BaseHTTPRequestHandler]):
    """The base URL of a loopback HTTP server answering with `handler` from a thread, until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", free_ports(1)), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def exporter():
    """(the fake exporter, its /metrics URL), served from a thread until the test ends."""
    fake = FakeExporter()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):
            body = fake.text().encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass  # Prometheus scrapes every second

    with _served(Metrics) as url:
        yield fake, f"{url}/metrics"


def scaled_rules(path: Path) -> Path:
    """contrib's rules with each minute in an expression or a `for` made SECONDS_PER_MINUTE seconds, beside them."""
    minutes = re.compile(r"\b(\d+)m\b")

    def scale(text: str) -> str:
        return minutes.sub(lambda m: f"{int(m.group(1)) * SECONDS_PER_MINUTE}s", text)

    groups = yaml.safe_load(RULES.read_text())
    for group in groups["groups"]:
        for rule in group["rules"]:
            rule["expr"] = scale(rule["expr"])
            if "for" in rule:
                rule["for"] = scale(rule["for"])
    path.write_text(yaml.safe_dump(groups))
    return path


def alertmanager_config(fleetops_url: str, token_file: Path) -> dict:
    """contrib's configuration, sending to FleetOps at `fleetops_url` with the token in `token_file`, its DCGM route
    quick."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    (dcgm,) = config["route"]["routes"]
    dcgm.update(group_wait="1s", group_interval="1s", repeat_interval="1s")
    (webhook,) = next(r for r in config["receivers"] if r["name"] == "fleetops")["webhook_configs"]
    webhook["url"] = f"{fleetops_url}{INTAKE}"
    webhook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    return config


class Relay:
    """Passes Alertmanager's webhook notifications on to FleetOps as they are and keeps each one's alerts with
    FleetOps' answer: so the test can wait for a notice to have been delivered, not just sent."""

    def __init__(self, target: str):
        self.target = target
        self.lock = threading.Lock()
        self.delivered: list[tuple[int, list[dict]]] = []  # (FleetOps' status, the notification's alerts)

    def notices(self, alertname: str, status: str) -> list[dict]:
        """The alerts named so, in that status, of the notifications FleetOps took."""
        with self.lock:
            return [
                alert
                for code, alerts in self.delivered
                if code == 200
                for alert in alerts
                if alert["labels"].get("alertname") == alertname and alert["status"] == status
            ]


@pytest.fixture
def relay(live_server):
    """(the relay, its URL), passing notifications on to the live server's intake until the test ends."""
    passing = Relay(f"{live_server.url}{INTAKE}")

    class Notifications(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k: self.headers[k] for k in ("Authorization", "Content-Type") if self.headers[k]}
            answer = requests.post(passing.target, data=body, headers=headers, timeout=30)
            with passing.lock:
                passing.delivered.append((answer.status_code, json.loads(body)["alerts"]))
            self.send_response(answer.status_code)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args):
            pass

    with _served(Notifications) as url:
        yield passing, url


def _evaluations(prometheus_url: str) -> float:
    """How many times Prometheus has evaluated the Xid rules, from its own /metrics (it does not scrape itself)."""
    text = requests.get(f"{prometheus_url}/metrics", timeout=5).text
    line = next(
        x for x in text.splitlines() if x.startswith("prometheus_rule_group_iterations_total{") and ';dcgm-xid"' in x
    )
    return float(line.rsplit(" ", 1)[1])


def _db(read):
    """read(), again while SQLite says a table is locked: the test database is shared in memory with the live
    server, which writes each notification in a transaction, and a read meanwhile fails at once (PostgreSQL waits)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return read()
        except OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _until(predicate, what: str, *servers: Server):
    """wait_for, failing with the servers' logs."""
    try:
        return wait_for(lambda: _db(predicate), timeout=WAIT_S, what=what)
    except pytest.fail.Exception as failure:
        pytest.fail("\n".join([str(failure), *(server.log() for server in servers)]))


def _fleetops() -> tuple[dict, int]:
    """FleetOps' alerts by fingerprint as (kind, status, count, recommended action), and how many incidents."""
    alerts = Alert.objects.values_list("fingerprint", "kind", "status", "count", "recommended_action")
    return {a[0]: a[1:] for a in alerts}, Incident.objects.count()


@pytest.mark.django_db(transaction=True)
def test_dcgm_exporter_to_prometheus_to_alertmanager_to_fleetops(
    tmp_path, exporter, relay, prometheus_start, alertmanager_start
):
    fake, metrics_url = exporter
    notifications, relay_url = relay
    gpu = GPU.objects.create(node=Node.objects.create(hostname="gpu-017", rack="r17"), index=3)
    token_file = tmp_path / "fleetops-token"
    token_file.write_text(make_token("alertmanager", ["events:write"]))
    alertmanager = alertmanager_start(alertmanager_config(relay_url, token_file))
    prometheus = prometheus_start(
        scrape_configs=[scrape_config("dcgm", metrics_url)],
        rule_files=(scaled_rules(tmp_path / "dcgm-rules.yml"),),
        alertmanagers=(alertmanager.url,),
    )
    servers = (prometheus, alertmanager)
    _until(lambda: query(prometheus.url, 'up{job="dcgm"} == 1'), "the exporter scraped", *servers)

    # Xid 79 on GPU 3: an incident on that node and GPU, with the catalog's action.
    fake.xid(79)
    xid79 = "am-xid:gpu-017:3:79"
    alert = _until(
        lambda: Alert.objects.select_related("incident", "node", "gpu").filter(fingerprint=xid79).first(),
        "the Xid 79 alert in FleetOps",
        *servers,
    )
    assert (alert.kind, alert.node, alert.gpu, alert.severity, alert.count) == ("xid", gpu.node, gpu, "critical", 1)
    assert alert.evidence["labels"]["alertname"] == "DCGMXid"
    assert alert.recommended_action == alert.incident.recommended_action == "reboot node, drain"
    assert _db(lambda: list(alert.incident.nodes.all())) == [gpu.node]

    # Still in the exporter's count several windows later: the rule's episode ended and its resolved notice was
    # delivered, and FleetOps counted nothing more, opened nothing, cleared nothing. The last-value rule never fired.
    _until(lambda: notifications.notices("DCGMXid", "resolved"), "the resolved notice delivered", *servers)
    evaluated = _evaluations(prometheus.url)
    _until(
        lambda: _evaluations(prometheus.url) >= evaluated + 3 * SECONDS_PER_MINUTE,
        "three more rule windows evaluated",
        *servers,
    )
    assert _db(_fleetops) == ({xid79: ("xid", "firing", 1, "reboot node, drain")}, 1)
    assert not query(prometheus.url, 'count_over_time(ALERTS{alertname="DCGMXidLastValue"}[1h])')
    episodes = {notice["startsAt"] for notice in notifications.notices("DCGMXid", "firing")}
    assert len(episodes) == 1, episodes

    # Xid 79 again on the same GPU: the gauge cannot show it, the count rises; once more on the same alert.
    fake.xid(79)
    _until(lambda: Alert.objects.filter(fingerprint=xid79, count=2).exists(), "the second Xid 79 counted", *servers)
    assert _db(_fleetops) == ({xid79: ("xid", "firing", 2, "reboot node, drain")}, 1)

    # A double-bit ECC error: an alert that asks for a GPU reset.
    fake.double_bit_error()
    ecc = _until(
        lambda: Alert.objects.filter(evidence__labels__alertname="DCGMDoubleBitECC").select_related("gpu").first(),
        "the double-bit ECC alert in FleetOps",
        *servers,
    )
    assert (ecc.kind, ecc.gpu, ecc.recommended_action) == ("alertmanager", gpu, "reset GPU")
    assert _db(_fleetops)[0][xid79] == ("xid", "firing", 2, "reboot node, drain")
