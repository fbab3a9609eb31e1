"""`fleetops`: the on-call engineer's command line over the REST API (README.md, "Command line").

It reads FLEETOPS_URL and FLEETOPS_TOKEN (--url and --token override them), asks the API and prints its answer: with
--json the API's own JSON, otherwise a short text that fits an 80-column terminal. The exit status says what happened
(EXIT_STATUS), so a script can tell a missing incident from a refusal or an outage. Standard library only and Python
3.9 on, like the rest of fleetops_client: it is installed where the training jobs run, not beside Django.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from urllib.parse import quote, urlencode

from fleetops_client.delivery import api_url, request_json

OK, USAGE, NOT_FOUND, NOT_ALLOWED, REFUSED, UNAVAILABLE = 0, 2, 3, 4, 5, 6

EXIT_STATUS = """exit status:
  0  done
  2  usage: a command or option it cannot read, or no URL or token
  3  not found (HTTP 404): no such incident or run
  4  not allowed (HTTP 401, 403): no valid token, or one without the scope
  5  refused (HTTP 400, 409, other 4xx): the incident's state does not allow
     it, or the input is invalid; the API's reason and field are printed
  6  FleetOps unreachable or failing (HTTP 5xx, 429)"""

WIDTH = 80
DASH = "—"
UTC = timezone.utc  # noqa: UP017 (datetime.UTC is Python 3.11's)


class Failure(Exception):
    """What went wrong, for stderr, and the exit status that says it to a script."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# --- The API ---------------------------------------------------------------------------------------------------


class Api:
    """The REST API at `url` with `token`: a 2xx answer's JSON, or a Failure that says what the answer means."""

    def __init__(self, url: str, token: str, timeout: float = 15.0):
        self.url, self.token, self.timeout = url, token, timeout

    def get(self, path: str, query: dict | None = None, *, what: str):
        pairs = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        return self._call("GET", path + ("?" + urlencode(pairs) if pairs else ""), None, what)

    def post(self, path: str, body: dict, *, what: str):
        return self._call("POST", path, body, what)

    def _call(self, method: str, path: str, body, what: str):
        url = api_url(self.url, path)
        try:
            answer = request_json(method, url, token=self.token, body=body, timeout=self.timeout)
        except (OSError, http.client.HTTPException) as exc:  # refused, timed out, or not speaking HTTP
            raise Failure(UNAVAILABLE, f"cannot reach FleetOps at {self.url}: {getattr(exc, 'reason', exc)}") from None
        if 200 <= answer.status < 300:
            return answer.body
        reason = _reason(answer.body)
        if answer.status == 404:
            raise Failure(NOT_FOUND, f"{what} not found (HTTP 404 from {url})")
        if answer.status in (401, 403):
            raise Failure(NOT_ALLOWED, f"not allowed (HTTP {answer.status}): {reason}")
        if answer.status >= 500 or answer.status == 429:
            raise Failure(UNAVAILABLE, f"FleetOps failed (HTTP {answer.status}): {reason}")
        raise Failure(REFUSED, f"refused (HTTP {answer.status}): {reason}")


def _reason(body) -> str:
    """The API's error body, {detail, errors: [{field, reason}]}, as lines; a body that is not JSON, its first line."""
    if not isinstance(body, dict):
        text = str(body or "").strip()
        return shown(text.splitlines()[0][:200]) if text else "no reason given"
    lines = [str(body["detail"])] if body.get("detail") else []
    for error in body.get("errors") or []:
        if isinstance(error, dict):
            field = error.get("field")
            lines.append(f"{field}: {error.get('reason', '')}" if field else str(error.get("reason", "")))
    return "\n  ".join(shown(line) for line in lines) or json.dumps(body)[:200]


# --- Commands: each asks the API and returns its answer; a renderer writes it for people ------------------------


def incidents_list(api: Api, args):
    query = {"page_size": args.limit, "severity": args.severity, "run": args.run, "node": args.node}
    if args.status == "open":
        query["open"] = "true"
    elif args.status != "all":
        query["status"] = args.status
    return api.get("incidents", query, what="the incident list")


def incidents_show(api: Api, args):
    return api.get(f"incidents/{args.id}", what=f"incident {args.id}")


def _acted(api: Api, args, action: str, body: dict):
    """The action, then the note when one is given: two requests, two timeline entries. A refused action adds no
    note; a note refused after the action leaves the action done, and the exit status says the note failed."""
    answer = api.post(f"incidents/{args.id}/{action}", body, what=f"incident {args.id}")
    if getattr(args, "note", None):
        answer = api.post(f"incidents/{args.id}/notes", {"text": args.note}, what=f"incident {args.id}")
    return answer


def incidents_acknowledge(api: Api, args):
    return _acted(api, args, "acknowledge", {})


def incidents_note(api: Api, args):
    return api.post(f"incidents/{args.id}/notes", {"text": args.text}, what=f"incident {args.id}")


def incidents_resolve(api: Api, args):
    return _acted(api, args, "resolve", {"override_reason": args.override_reason or ""})


def incidents_reopen(api: Api, args):
    return _acted(api, args, "reopen", {"reason": args.reason or ""})


def runs_goodput(api: Api, args):
    query = {"since": args.since, "until": args.until}
    if args.last:
        if args.since or args.until:
            raise Failure(USAGE, "--last is a window up to now: give it without --since and --until")
        now = datetime.now(UTC)
        query = {"since": _rfc3339(now - args.last), "until": _rfc3339(now)}
    return api.get(f"runs/{_segment(args.run)}/goodput", query, what=f"run {args.run}")


def runs_advice(api: Api, args):
    query = {"delta_s": args.delta_s, "mtbf_s": args.mtbf_s, "restart_s": args.restart_s}
    return api.get(f"runs/{_segment(args.run)}/advice", query, what=f"run {args.run}")


def _segment(name: str) -> str:
    return quote(name, safe="")


# --- Text for people: the console's formats (runs/templatetags/fleet_tags.py), for a terminal ------------------


def number(value, decimals: int = 0) -> str:
    """As the console writes a figure (runs/domain/numbers.py; this package installs without it): thousands
    separators, decimals only where they say something, none from 1,000 up."""
    if value is None:
        return DASH
    places = 0 if abs(value) >= 999.5 else decimals
    text = f"{value:,.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def duration(seconds) -> str:
    """Seconds as '1 h 05 min', '4 min 10 s' or '12 s', as the console writes them."""
    if seconds is None:
        return DASH
    hours, rest = divmod(int(round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def percent(fraction) -> str:
    return DASH if fraction is None else f"{fraction * 100:.1f}%"


def when(text) -> str:
    """An API time (RFC 3339, UTC) as 'YYYY-MM-DD HH:MM'; the API and this tool speak UTC."""
    if not text:
        return DASH
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))  # Python before 3.11 does not read 'Z'
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cut(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _wrap(text: str, indent: str, hang: str = "") -> list[str]:
    """`text` on lines of at most WIDTH - 1; the lines after the first indented by `hang` more."""
    lines = textwrap.wrap(
        " ".join(str(text).split()), WIDTH - 1, initial_indent=indent, subsequent_indent=indent + hang
    )
    return lines or [indent]


def _some(names: list, most: int = 8) -> str:
    shown = ", ".join(str(n) for n in names[:most])
    return f"{shown} and {len(names) - most:,} more" if len(names) > most else shown or DASH


def incident_table(page) -> str:
    rows = page["results"] if isinstance(page, dict) else page  # a list when the API does not page
    if not rows:
        return "No incidents."
    head = f"{'ID':>6} {'SEV':<4} {'STATUS':<12} {'STARTED UTC':<16} {'GPUS':>4}  "
    lines = [head + "TITLE"]
    for incident in rows:
        started = when(incident["started_at"])
        title = _cut(incident["title"], WIDTH - 1 - len(head))
        lines.append(
            f"{incident['id']:>6} {incident['severity']:<4} {incident['status']:<12} {started:<16} "
            f"{incident['impact']['gpus_idle']:>4}  {title}"
        )
    total = page.get("count", len(rows)) if isinstance(page, dict) else len(rows)
    more = f" (--limit to see more of the {total:,})" if total > len(rows) else ""
    return "\n".join(lines + [f"{len(rows):,} of {total:,} incident(s){more}"])


def incident_text(incident) -> str:
    impact, alerts = incident["impact"], incident["alerts"]
    lines = _wrap(f"#{incident['id']} {incident['severity']} {incident['status']}: {incident['title']}", "")
    pairs = [
        ("run", incident["run"] or DASH),
        ("nodes", _some(incident["nodes"])),
        ("started", when(incident["started_at"])),
        ("detected", when(incident["detected_at"])),
        ("acknowledged", when(incident["acknowledged_at"])),
        ("mitigated", when(incident["mitigated_at"])),
        ("resolved", when(incident["resolved_at"])),
        ("commander", incident["commander"] or DASH),
        ("assignees", _some(incident["assignees"])),
        (
            "impact",
            f"{impact['gpus_idle']:,} GPUs idle, {number(impact['gpu_hours_lost'], 1)} GPU-h lost, "
            f"${number(impact['cost_per_minute_usd'], 2)}/min",
        ),
        ("alerts", f"{alerts['count']:,} ({alerts['firing']:,} firing)"),
    ]
    lines += [f"{name:<13}{value}" for name, value in pairs]
    for alert in incident.get("alert_list", [])[:20]:
        where = alert["node"] or ""
        if alert["gpu"] is not None:
            where += f" gpu {alert['gpu']}"
        lines.append(f"  {alert['status']:<8} {alert['kind']:<10} {_cut(where, 14):<14} {_cut(alert['summary'], 42)}")
    if len(incident.get("alert_list", [])) > 20:
        lines.append(f"  and {len(incident['alert_list']) - 20:,} more (--json for all)")
    if incident["recommended_action"]:
        lines += ["recommended", *_wrap(incident["recommended_action"], "  ")]
    if incident.get("timeline"):
        lines.append("timeline")
        for entry in incident["timeline"]:
            lines += _wrap(f"{when(entry['at'])} {entry['actor']}: {entry['text']}", "  ", " " * 17)
    return "\n".join(lines)


def incident_acted(incident) -> str:
    return _cut(f"#{incident['id']} {incident['severity']} {incident['status']}: {incident['title']}", WIDTH - 1)


def goodput_text(report) -> str:
    lines = [
        f"{report['run']}, {report['gpus']:,} GPUs, {when(report['since'])} to {when(report['until'])} UTC",
        f"{'goodput':<16}{percent(report['goodput'])}",
        f"{'wall clock':<16}{duration(report['wall_clock_s'])}",
        f"{'productive':<16}{duration(report['productive_s'])}",
        f"{'interruptions':<16}{report['interruptions']:,}",
        "badput",
    ]
    lines += [f"  {stage[:-2]:<14}{duration(seconds)}" for stage, seconds in report["badput"].items()]
    if len(report["daily"]) > 1:
        lines.append(f"{'day':<12}{'goodput':>8}{'productive':>16}{'wall clock':>16}")
        for day in report["daily"]:
            lines.append(
                f"{day['date']:<12}{percent(day['goodput']):>8}"
                f"{duration(day['productive_s']):>16}{duration(day['wall_clock_s']):>16}"
            )
    for finding in report.get("data_quality", []):
        lines += _wrap(f"data quality: {finding['what']}", "")
    return "\n".join(lines)


def advice_text(body) -> str:
    sources, advice = body["sources"], body["advice"]
    lines = [f"{body['run']}, {body['gpus']:,} GPUs: checkpoint advice from its record"]
    if advice is None:
        overrides = ", ".join("--" + name.replace("_", "-") for name in body["missing"])
        return "\n".join(lines + _wrap(f"Not enough record to advise: give {overrides}.", ""))
    spread = body.get("mtbf_range_s")
    rows = [
        ("checkpoint cost", duration(advice["delta_s"]), sources["delta_s"]),
        ("MTBF", duration(advice["mtbf_s"]), sources["mtbf_s"]),
        ("restart cost", duration(advice["restart_s"]), sources["restart_s"]),
    ]
    lines += [f"{name:<18}{value:<16}{source}" for name, value, source in rows]
    if spread:
        lines.append(f"{'MTBF range':<18}{duration(spread[0])} to {duration(spread[1])}")
    intervals = [("Young interval", advice["young_s"], advice["waste_at_young"])]
    intervals.append(("Daly interval", advice["daly_s"], advice["waste_at_daly"]))
    if advice["current_s"]:
        intervals.append(("current interval", advice["current_s"], advice["waste_at_current"]))
    lines += [f"{name:<18}{duration(seconds):<16}waste {percent(waste)}" for name, seconds, waste in intervals]
    lines.append(f"{'floor':<18}{'':<16}waste {percent(advice['floor'])}")
    lines.append(f"{'goodput at Daly':<18}{percent(advice['goodput_at_daly'])}")
    return "\n".join(lines)


# --- The command line ------------------------------------------------------------------------------------------


def _last(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([mhd])", text.strip())
    if not match:
        raise argparse.ArgumentTypeError("a length like 90m, 24h or 7d")
    unit = {"m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
    return timedelta(**{unit: float(match.group(1))})


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 500:
        raise argparse.ArgumentTypeError("a number from 1 to 500 (the API's largest page)")
    return int(text)


def _incident_id(text: str) -> int:
    if not text.lstrip("#").isdigit():
        raise argparse.ArgumentTypeError(f"an incident number, like 42 or #42, not {text!r}")
    return int(text.lstrip("#"))


def parser() -> argparse.ArgumentParser:
    # SUPPRESS: given before or after the command, a flag is kept (a subcommand's default would overwrite it).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help="FleetOps' base URL (default: $FLEETOPS_URL)")
    common.add_argument("--token", default=argparse.SUPPRESS, help="an API token (default: $FLEETOPS_TOKEN)")
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON answer as it is"
    )
    top = argparse.ArgumentParser(
        prog="fleetops",
        description="FleetOps from a terminal: incidents, runs' goodput and advice. Times are UTC.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    kinds = top.add_subparsers(dest="kind", metavar="{incidents,runs}", required=True)

    def command(group, name, handler, render, help):
        sub = group.add_parser(name, help=help, description=help, parents=[common], epilog=EXIT_STATUS)
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        sub.set_defaults(handler=handler, render=render)
        return sub

    incidents = kinds.add_parser("incidents", help="list, show and act on incidents").add_subparsers(
        dest="command", required=True
    )
    listing = command(incidents, "list", incidents_list, incident_table, "incidents, most severe and newest first")
    statuses = ["open", "triggered", "acknowledged", "mitigated", "resolved", "closed", "all"]
    listing.add_argument(
        "--status", choices=statuses, default="open", metavar="STATUS", help=f"{', '.join(statuses)} (default: open)"
    )
    listing.add_argument("--severity", choices=["SEV1", "SEV2", "SEV3", "SEV4"])
    listing.add_argument("--run", help="only this run's")
    listing.add_argument("--node", help="only those on this host")
    listing.add_argument("--limit", type=_limit, default=50, metavar="N", help="at most N, 1-500 (default 50)")
    show = command(incidents, "show", incidents_show, incident_text, "an incident: impact, alerts and timeline")
    show.add_argument("id", type=_incident_id)
    ack = command(incidents, "acknowledge", incidents_acknowledge, incident_acted, "take an incident on")
    ack.add_argument("id", type=_incident_id)
    ack.add_argument("--note", help="a note for the timeline, added after")
    note = command(incidents, "note", incidents_note, incident_acted, "add a note to an incident's timeline")
    note.add_argument("id", type=_incident_id)
    note.add_argument("text")
    resolve = command(incidents, "resolve", incidents_resolve, incident_acted, "resolve an incident")
    resolve.add_argument("id", type=_incident_id)
    resolve.add_argument("--note", help="a note for the timeline, added after")
    resolve.add_argument("--override-reason", metavar="REASON", help="resolve although alerts still fire, saying why")
    reopen = command(incidents, "reopen", incidents_reopen, incident_acted, "reopen a resolved incident")
    reopen.add_argument("id", type=_incident_id)
    reopen.add_argument("--reason", help="why: it goes on the timeline with the reopening")
    reopen.add_argument("--note", help="a note for the timeline, added after")

    runs = kinds.add_parser("runs", help="a run's goodput and checkpoint advice").add_subparsers(
        dest="command", required=True
    )
    goodput = command(runs, "goodput", runs_goodput, goodput_text, "a run's goodput and badput by stage")
    goodput.add_argument("run")
    goodput.add_argument("--since", help="RFC 3339, e.g. 2026-03-01T00:00:00Z (default: the run's start)")
    goodput.add_argument("--until", help="RFC 3339 (default: the run's end, or now)")
    goodput.add_argument("--last", type=_last, metavar="LENGTH", help="instead: the last 90m, 24h, 7d ... up to now")
    advice = command(runs, "advice", runs_advice, advice_text, "the checkpoint interval the run's record advises")
    advice.add_argument("run")
    advice.add_argument("--delta-s", type=float, metavar="S", help="override the checkpoint cost, seconds")
    advice.add_argument("--mtbf-s", type=float, metavar="S", help="override the run's MTBF, seconds")
    advice.add_argument("--restart-s", type=float, metavar="S", help="override the restart cost, seconds")
    return top


# Control characters (C0, DEL, C1: escape sequences, carriage returns, OSC 52's clipboard writes) and the marks that
# reverse or isolate text direction: what a server's text must never do to the on-call's terminal.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(value):
    """A value from the server as a terminal shows it: each hidden character written as its escape (\\x1b, \\n,
    \\u202e), never interpreted, in every string of a JSON answer. A reason cannot move the cursor, repaint lines, write
    the clipboard or reverse what follows it."""
    if isinstance(value, str):
        return _HIDDEN.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", value)
    if isinstance(value, dict):
        return {shown(key): shown(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shown(item) for item in value]
    return value


def main(argv: list[str] | None = None) -> int:
    line = parser()
    args = line.parse_args(argv)
    url = getattr(args, "url", None) or os.environ.get("FLEETOPS_URL")
    token = getattr(args, "token", None) or os.environ.get("FLEETOPS_TOKEN")
    if not url or not url.startswith(("http://", "https://")):
        line.error("say where FleetOps is: --url or FLEETOPS_URL, starting http:// or https://")
    if not token:
        line.error("give an API token: --token or FLEETOPS_TOKEN (manage.py create_api_token)")
    sys.stdout.reconfigure(errors="replace")  # a title's '→' on a terminal that cannot show it
    try:
        answer = args.handler(Api(url, token), args)
    except Failure as failure:
        # The lines are the command line's own (a refusal's errors one a line); what is on them, shown.
        print("fleetops: " + "\n".join(shown(line) for line in str(failure).split("\n")), file=sys.stderr)
        return failure.status
    # JSON escapes control characters itself (and, ASCII only, every direction mark).
    print(json.dumps(answer, indent=2) if getattr(args, "json", False) else args.render(shown(answer)))
    return OK


if __name__ == "__main__":
    sys.exit(main())
