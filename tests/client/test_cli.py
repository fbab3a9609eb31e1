"""The `fleetops` console script against a live FleetOps, run as an on-call engineer runs it: a subprocess with
FLEETOPS_URL and FLEETOPS_TOKEN in its environment. Its actions change the incident as the API says, its figures are
the API's, and its exit status tells a script what happened (fleetops_client/cli.py, EXIT_STATUS)."""

import json
import re
import socket
import subprocess
import sys
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from fleetops_client import cli
from fleetops_client.delivery import api_url
from incidents.models import Incident, TimelineEntry
from tests.conftest import make_token
from tests.stories import failure_and_restart, post_events

FLEETOPS = Path(sys.executable).parent / "fleetops"
ROOT = Path(__file__).resolve().parents[2]


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def fleetops(url: str, token: str, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "FLEETOPS_URL": url, "FLEETOPS_TOKEN": token}
    done = subprocess.run([str(FLEETOPS), *args], env=env, capture_output=True, text=True, timeout=60)
    if "--json" not in args:
        wide = [line for line in done.stdout.splitlines() if len(line) > 80]
        assert wide == [], "wider than an 80-column terminal"
    return done


def api_get(url: str, token: str, path: str):
    request = urllib.request.Request(f"{url}/api/v1/{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@pytest.fixture
def story(live_server):
    """Run r1 failed (Xid 79 on n2) and trained again: its incident is mitigated, two of its alerts still fire."""
    post_events(live_server, make_token("slurm", ["events:write"]), failure_and_restart())
    incident = Incident.objects.get()
    assert incident.status == "mitigated" and incident.alerts.filter(status="firing").count() == 2
    return incident


@pytest.mark.django_db(transaction=True)
def test_it_lists_shows_and_acts_on_an_incident_as_the_api_records_it(live_server, story):
    url, token, pk = live_server.url, make_token("oncall", ["read", "incidents:write"]), str(story.pk)

    listed = fleetops(url, token, "incidents", "list", "--json")
    assert listed.returncode == 0 and [i["id"] for i in json.loads(listed.stdout)["results"]] == [story.pk]
    table = fleetops(url, token, "incidents", "list").stdout.splitlines()
    assert table[0].split() == ["ID", "SEV", "STATUS", "STARTED", "UTC", "GPUS", "TITLE"]
    assert table[1].split()[:5] == [pk, "SEV3", "mitigated", "2026-03-01", "00:45"]
    assert table[1].split()[6:9] == ["Run", "r1", "stopped"] and table[2] == "1 of 1 incident(s)"
    assert fleetops(url, token, "incidents", "list", "--status", "resolved").stdout == "No incidents.\n"
    shown = fleetops(url, token, "incidents", "show", f"#{pk}").stdout
    assert shown.startswith(f"#{pk} SEV3 mitigated: Run r1 stopped on n2 gpu3") and "\nrun          r1\n" in shown
    assert "alerts       3 (2 firing)" in shown and "Opened by the run_failed detector" in shown

    acked = fleetops(url, token, "incidents", "acknowledge", pk, "--note", "draining n2", "--json")
    assert acked.returncode == 0 and json.loads(acked.stdout)["acknowledged_at"] is not None
    story.refresh_from_db()
    assert story.acknowledged_at is not None and story.status == "mitigated"  # the run already trains again
    again = fleetops(url, token, "incidents", "acknowledge", pk)
    assert (again.returncode, again.stdout) == (cli.REFUSED, "")
    assert (
        again.stderr == "fleetops: refused (HTTP 409): This incident is mitigated and cannot be acknowledged again.\n"
    )
    noted = fleetops(url, token, "incidents", "note", pk, "GPU 3 swapped")
    assert noted.stdout == f"#{pk} SEV3 mitigated: Run r1 stopped on n2 gpu3: GPU fell off the bus\n"

    refused = fleetops(url, token, "incidents", "resolve", pk)
    assert refused.returncode == cli.REFUSED and "2 alert(s) still firing" in refused.stderr
    resolved = fleetops(url, token, "incidents", "resolve", pk, "--override-reason", "GPU 3 replaced", "--json")
    assert resolved.returncode == 0 and json.loads(resolved.stdout)["status"] == "resolved"
    assert json.loads(fleetops(url, token, "incidents", "list", "--json").stdout)["count"] == 0  # open ones only
    reopened = fleetops(url, token, "incidents", "reopen", pk, "--reason", "Xid 79 again", "--json")
    assert reopened.returncode == 0 and json.loads(reopened.stdout)["status"] == "acknowledged"
    not_resolved = fleetops(url, token, "incidents", "reopen", pk)
    assert not_resolved.returncode == cli.REFUSED and "Only a resolved incident can be reopened" in not_resolved.stderr

    story.refresh_from_db()
    assert (story.status, story.resolved_at) == ("acknowledged", None)
    by_cli = story.timeline.filter(actor_name="token:oncall").order_by("at", "id")
    assert [(e.kind, e.text) for e in by_cli] == [
        ("acknowledged", "Acknowledged by token:oncall"),
        ("note", "draining n2"),
        ("note", "GPU 3 swapped"),
        ("resolved", "Resolved by token:oncall with 2 alert(s) still firing: GPU 3 replaced"),
        ("reopened", "Reopened by token:oncall: Xid 79 again"),
    ]
    assert json.loads(reopened.stdout)["timeline"][-1]["text"] == "Reopened by token:oncall: Xid 79 again"


@pytest.mark.django_db(transaction=True)
def test_goodput_and_advice_print_the_apis_figures(live_server, story):
    url, token = live_server.url, make_token("reader", ["read"])

    goodput = fleetops(url, token, "runs", "goodput", "r1", "--json")
    assert json.loads(goodput.stdout) == api_get(url, token, "runs/r1/goodput")
    text = fleetops(url, token, "runs", "goodput", "r1").stdout.splitlines()
    figures = json.loads(goodput.stdout)
    assert text[0] == "r1, 16 GPUs, 2026-03-01 00:00 to 2026-03-01 02:00 UTC"
    assert f"goodput         {figures['goodput'] * 100:.1f}%" in text and "wall clock      2 h 00 min" in text
    # The story's stages (tests/runs/test_goodput_api.py): 60, 540, 180, 880 and 35 seconds.
    for line in (
        "detection     1 min 00 s",
        "rescheduling  9 min 00 s",
        "rewound       14 min 40 s",
        "checkpoint    35 s",
    ):
        assert f"  {line}" in text
    window = ["--since", "2026-03-01T00:50:00Z", "--until", "2026-03-01T01:00:00Z", "--json"]
    windowed = json.loads(fleetops(url, token, "runs", "goodput", "r1", *window).stdout)
    assert (windowed["wall_clock_s"], windowed["badput"]["rescheduling_s"], windowed["productive_s"]) == (600, 300, 120)
    last = json.loads(fleetops(url, token, "runs", "goodput", "r1", "--last", "7d", "--json").stdout)
    since, until = (datetime.fromisoformat(last[k].replace("Z", "+00:00")) for k in ("since", "until"))
    assert until - since == timedelta(days=7) and last["wall_clock_s"] == 0  # the run ended in March 2026

    advice = fleetops(url, token, "runs", "advice", "r1", "--json")
    body = json.loads(advice.stdout)
    assert body == api_get(url, token, "runs/r1/advice") and body["advice"]["current_s"] == 1800
    text = fleetops(url, token, "runs", "advice", "r1").stdout.splitlines()
    a = body["advice"]
    assert f"Daly interval     {cli.duration(a['daly_s']):<16}waste {a['waste_at_daly'] * 100:.1f}%" in text
    assert f"current interval  30 min 00 s     waste {a['waste_at_current'] * 100:.1f}%" in text
    assert "restart cost      13 min 00 s     record" in text  # fault 00:45 to training again 00:58
    overridden = json.loads(fleetops(url, token, "runs", "advice", "r1", "--mtbf-s", "86400", "--json").stdout)
    assert overridden["sources"]["mtbf_s"] == "override" and overridden["advice"]["mtbf_s"] == 86400

    bad = fleetops(url, token, "runs", "goodput", "r1", "--since", "yesterday")
    assert bad.returncode == cli.REFUSED and "\n  since: Datetime has wrong format." in bad.stderr


@pytest.mark.django_db(transaction=True)
def test_its_exit_status_says_what_went_wrong(live_server, story):
    reader = make_token("reader", ["read"])
    closed = _closed_url()

    # --url and --token win over the environment's (here a closed port and a token that does not exist).
    missing = fleetops(closed, "fo_nope", "--url", live_server.url, "--token", reader, "incidents", "show", "999999")
    assert missing.returncode == cli.NOT_FOUND and missing.stderr.startswith("fleetops: incident 999999 not found")
    assert fleetops(live_server.url, reader, "runs", "advice", "no-such-run").returncode == cli.NOT_FOUND

    forbidden = fleetops(live_server.url, reader, "incidents", "acknowledge", str(story.pk))
    assert forbidden.returncode == cli.NOT_ALLOWED
    assert forbidden.stderr == (
        "fleetops: not allowed (HTTP 403): "
        "You may not acknowledge incidents (needs incidents:write or the oncall role).\n"
    )
    story.refresh_from_db()
    assert story.acknowledged_at is None
    assert story.timeline.filter(kind=TimelineEntry.Kind.REFUSED, actor_name="token:reader").count() == 1
    unknown = fleetops(live_server.url, "fo_nope", "incidents", "list")
    assert (unknown.returncode, unknown.stderr) == (
        cli.NOT_ALLOWED,
        "fleetops: not allowed (HTTP 401): Unknown API token.\n",
    )

    down = fleetops(closed, reader, "incidents", "list")
    assert down.returncode == cli.UNAVAILABLE and down.stderr.startswith(f"fleetops: cannot reach FleetOps at {closed}")
    nowhere = fleetops("", reader, "incidents", "list")
    assert nowhere.returncode == cli.USAGE and "--url or FLEETOPS_URL" in nowhere.stderr


def test_the_readme_and_help_give_the_same_exit_status():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Command line") :]
    rows = dict(re.findall(r"^\| `(\d)` \| ([^|]+) \|", section, re.MULTILINE))
    codes = {cli.OK, cli.USAGE, cli.NOT_FOUND, cli.NOT_ALLOWED, cli.REFUSED, cli.UNAVAILABLE}
    assert {int(code) for code in rows} == codes
    assert {int(code) for code in re.findall(r"^  (\d)  ", cli.EXIT_STATUS, re.MULTILINE)} == codes


def test_it_writes_figures_as_the_console_does():
    assert [cli.duration(s) for s in (12, 250, 3900, None)] == ["12 s", "4 min 10 s", "1 h 05 min", "—"]
    assert (cli.percent(0.9791), cli.number(45696.04, 1), cli.number(2.0, 1)) == ("97.9%", "45,696", "2")
    assert cli.when("2026-03-01T00:45:00.500000Z") == "2026-03-01 00:45" and cli.when(None) == "—"


def test_it_finds_the_api_from_any_url_fleetops_url_may_name():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/api/v1", "http://h:8000/api/v1/events/"):
        assert api_url(url, "incidents/4") == "http://h:8000/api/v1/incidents/4", url


@pytest.mark.reliability(
    "A reason written for the on-call's terminal: an escape sequence that writes the clipboard (OSC 52), one that "
    "clears the screen, a carriage return and a right-to-left override",
    how="the CLI's text output of an answer carrying them (fleetops_client.cli.shown, which every text answer and "
    "error passes through)",
    outcome="each shown as its escape (\\x1b, \\x0d, \\u202e) and none written raw (before: printed raw)",
)
def test_text_from_the_server_is_shown_never_interpreted_by_the_terminal():
    reason = "fell off\x1b]52;c;cm0gLXJmIH4=\x07 the bus\x1b[2J\roverwritten \u202egnp.exe"
    shown = cli.shown({"incidents": [{"title": reason, "nodes": ["n1"], "count": 2}]})
    title = shown["incidents"][0]["title"]
    assert title == "fell off\\x1b]52;c;cm0gLXJmIH4=\\x07 the bus\\x1b[2J\\x0doverwritten \\u202egnp.exe"
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch == "\u202e" for ch in title)
    assert shown["incidents"][0]["nodes"] == ["n1"] and shown["incidents"][0]["count"] == 2


def test_the_command_line_passes_every_text_answer_and_error_through_it(monkeypatch, capsys):
    """main() renders the answer as shown, and says a failure's message as shown."""
    monkeypatch.setattr(cli, "incidents_list", lambda api, args: {"answer": "\x1b[2J"})
    monkeypatch.setattr(cli, "incident_table", lambda answer: f"title {answer['answer']}")
    assert cli.main(["--url", "http://127.0.0.1:9", "--token", "t", "incidents", "list"]) == cli.OK
    assert capsys.readouterr().out == "title \\x1b[2J\n"

    def refused(api, args):
        raise cli.Failure(4, "refused: \x1b]52;c;eA==\x07")

    monkeypatch.setattr(cli, "incidents_list", refused)
    assert cli.main(["--url", "http://127.0.0.1:9", "--token", "t", "incidents", "list"]) == 4
    assert capsys.readouterr().err == "fleetops: refused: \\x1b]52;c;eA==\\x07\n"
    # A refusal's errors from the server: one a line, as the command line lays them out; what the server wrote, shown.
    reason = cli._reason({"detail": "Invalid.", "errors": [{"field": "data.run", "reason": "r\x1b[2J\nx"}]})
    assert reason == "Invalid.\n  data.run: r\\x1b[2J\\x0ax"
