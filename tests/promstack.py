"""A real Prometheus and a real Alertmanager for tests, each a process of its own on a free loopback port.

Registered for every test by tests/conftest.py (pytest_plugins): the `prometheus_start` and `alertmanager_start`
fixtures start servers from a configuration and stop them when the test ends; `alertmanager` is an Alertmanager that
sends every alert to FleetOps' intake on the live server. `query()` asks Prometheus' HTTP API.

Needs Debian's `prometheus` and `prometheus-alertmanager` (apt-get install -y prometheus prometheus-alertmanager): a
test that asks for one is skipped on a laptop without it and fails under CI=true (tests.conftest.require). A server's
output goes to a file beside its data; `Server.log()` reads its end for an assertion's message. Configurations are
written as JSON, which YAML reads as it is.
"""

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from tests.conftest import make_token, require
from tests.services import free_ports, wait_for

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
INTAKE = "/api/v1/intake/alertmanager"


@dataclass
class Server:
    """A server process we started: its base URL and the file its output goes to."""

    name: str
    url: str
    process: subprocess.Popen
    log_path: Path

    def log(self, lines: int = 80) -> str:
        """The end of its output, for an assertion's message."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"--- the last {lines} lines of {self.log_path} ---\n" + "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def _start(name: str, workdir: Path, port: int, command: list[str]) -> Server:
    """Start `command`, its output to workdir/<name>.log, and wait for its /-/ready; stopped again if it never is."""
    log_path = workdir / f"{name}.log"
    with open(log_path, "w") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    server = Server(name, f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_for(
            lambda: process.poll() is not None or _ready(server.url), timeout=30, what=f"{name} ready ({log_path})"
        )
        assert process.poll() is None, f"{name} exited with status {process.returncode}\n{server.log()}"
    except BaseException:
        server.stop()
        raise
    return server


def scrape_config(job: str, url: str, **extra) -> dict:
    """A scrape job for one target given as a URL ("http://127.0.0.1:8000/metrics"); `extra` adds settings such as
    `authorization={"credentials": token}`."""
    parsed = urlparse(url)
    return {
        "job_name": job,
        "scheme": parsed.scheme or "http",
        "metrics_path": parsed.path or "/metrics",
        "static_configs": [{"targets": [parsed.netloc]}],
        **extra,
    }


def start_prometheus(
    workdir: Path,
    *,
    scrape_configs: list[dict],
    rule_files: tuple[Path, ...] = (),
    alertmanagers: tuple[str, ...] = (),
    interval: str = "1s",
) -> Server:
    """A Prometheus that scrapes and evaluates its rules every `interval`, and sends alerts to the Alertmanagers at
    these URLs again every `interval` while they fire (--rules.alert.resend-delay; 1 minute by default)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": scrape_configs,
    }
    if alertmanagers:
        targets = [urlparse(url).netloc for url in alertmanagers]
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": targets}]}]}
    (workdir / "prometheus.yml").write_text(json.dumps(config, indent=1))
    command = [
        PROMETHEUS,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--rules.alert.resend-delay={interval}",
    ]
    return _start("prometheus", workdir, port, command)


def start_alertmanager(workdir: Path, *, config: dict) -> Server:
    """An Alertmanager of this configuration, alone (no cluster peers)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)
    (workdir / "alertmanager.yml").write_text(json.dumps(config, indent=1))
    command = [
        ALERTMANAGER,
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    return _start("alertmanager", workdir, port, command)


def fleetops_receiver(url: str, token: str) -> dict:
    """A webhook receiver named fleetops that posts to FleetOps' intake at `url` (the server's base URL)."""
    return {
        "name": "fleetops",
        "webhook_configs": [
            {
                "url": f"{url}{INTAKE}",
                "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
            }
        ],
    }


def query(url: str, promql: str) -> list[dict]:
    """The result of an instant query at Prometheus' `url` ([{"metric": {...}, "value": [time, "text"]}, ...]);
    Prometheus' own error when it refuses the query."""
    response = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    body = response.json()
    assert body.get("status") == "success", f"{promql}: {body.get('errorType')}: {body.get('error')}"
    return body["data"]["result"]


@pytest.fixture
def prometheus_start(tmp_path):
    """start(**start_prometheus's keywords) -> Server; each stopped when the test ends."""
    require(shutil.which(PROMETHEUS) is not None, "Prometheus (apt-get install -y prometheus)")
    started: list[Server] = []

    def start(**kwargs) -> Server:
        started.append(start_prometheus(tmp_path / f"prometheus-{len(started)}", **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def alertmanager_start(tmp_path):
    """start(config) -> Server; each stopped when the test ends."""
    what = "Prometheus Alertmanager (apt-get install -y prometheus-alertmanager)"
    require(shutil.which(ALERTMANAGER) is not None, what)
    started: list[Server] = []

    def start(config: dict) -> Server:
        started.append(start_alertmanager(tmp_path / f"alertmanager-{len(started)}", config=config))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def alertmanager(live_server, alertmanager_start) -> str:
    """The URL of an Alertmanager that sends every alert, grouped by alertname and node, to FleetOps' intake on the
    live server within a second, with an events:write token."""
    token = make_token("alertmanager", ["events:write"])
    route = {
        "receiver": "fleetops",
        "group_by": ["alertname", "node"],
        "group_wait": "1s",
        "group_interval": "1s",
        "repeat_interval": "1h",
    }
    return alertmanager_start({"route": route, "receivers": [fleetops_receiver(live_server.url, token)]}).url
