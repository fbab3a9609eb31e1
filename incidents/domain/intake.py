"""Alerts from other monitoring systems, parsed: Prometheus Alertmanager webhooks (payload version 4) and PagerDuty
Events API v2 events, each into a plain record that knows its `Finding` (fingerprints `am:<Alertmanager fingerprint>`
and `pd:<dedup_key>`). Pure: no Django import. Lenient about optional fields and strict about the shape; problems
come back as (field, reason). incidents/intake/services.py records them.

An Alertmanager alert with a numeric `xid` label (contrib/prometheus/dcgm-rules.yml) is an Xid occurrence rather than
a condition: a finding of kind xid, graded from the Xid catalog, one fingerprint per (node, GPU, Xid)
(`am-xid:<node>:<gpu>:<xid>`), whose firing episode (startsAt) is counted once. An `action` label that names one of
FleetOps' actions is the action to recommend.
"""

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from incidents.domain.alert_kinds import AlertKind
from incidents.domain.detectors import Finding
from incidents.domain.xid import Action, classify
from runs.domain.cloudevents import INT_MAX, Problem

SEVERITIES = ("critical", "error", "warning", "info")
_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_PORT = re.compile(r"^(\[[^\]]+\]|[^:]+):\d+$")


def rfc3339_time(value: Any) -> datetime | None:
    """An RFC 3339 time (any number of fraction digits, as Go writes them) in UTC; None for Go's zero time."""
    if not isinstance(value, str) or not (match := _TIME.match(value)):
        raise ValueError("must be an RFC 3339 timestamp with a time zone, e.g. 2026-01-31T23:59:00Z")
    base, fraction, zone = match.groups()
    fraction = (fraction or "")[:7]  # Python takes at most microseconds
    try:
        parsed = datetime.fromisoformat(f"{base}{fraction}{'+00:00' if zone in 'Zz' else zone}").astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise ValueError("is outside the years 1 to 9999 in UTC") from None
    return None if parsed.year <= 1 else parsed


def _host(value: str) -> str:
    """`gpu-003:9100` -> `gpu-003`; `[::1]:9100` -> `::1`."""
    value = value.strip()
    if match := _PORT.match(value):
        value = match.group(1)
    return value.strip("[]")


def _gpu(value: Any) -> int | None:
    try:
        gpu = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return gpu if 0 <= gpu <= 255 else None


def _severity(value: Any) -> str:
    value = str(value or "").strip().lower()
    return value if value in SEVERITIES else "warning"


def _xid(value: Any) -> int | None:
    """An `xid` label's code: ASCII digits only, as a rule writes it with printf "%.0f"; 0 is no Xid (the last-Xid
    gauge reads 0 before the first)."""
    value = str(value or "").strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 10):  # 10 digits: INT_MAX's, and int() stays cheap
        return None
    code = int(value)
    return code if 0 < code <= INT_MAX else None


def _node_key(node: str | None) -> str:
    """The node as a fingerprint names it: a hostname longer than any node's (200 characters) by its digest, so the
    fingerprint fits its column."""
    if node is None:
        return "-"
    return node if len(node) <= 200 else hashlib.sha256(node.encode()).hexdigest()


def _action(value: Any) -> tuple[Action | None, str]:
    """An `action` label as an Action, or None; and what the on-call should read when the label was not one."""
    if value is None or not str(value).strip():
        return None, ""
    try:
        return Action(str(value).strip().lower()), ""
    except ValueError:
        shown = str(value)[:40]
        return None, f" Its action label {shown!r} is not one of FleetOps' actions ({', '.join(Action)}): ignored."


# --- Alertmanager (webhook payload version 4) ---------------------------------------------------------------


@dataclass(frozen=True)
class AmAlert:
    fingerprint: str
    status: str  # firing, resolved
    labels: dict
    annotations: dict
    starts_at: datetime | None
    ends_at: datetime | None
    generator_url: str = ""

    def resolved(self, now: datetime) -> bool:
        return self.status == "resolved" or (self.ends_at is not None and self.ends_at <= now)

    @property
    def xid(self) -> int | None:
        """The Xid this alert reports, if it is an Xid alert (a numeric `xid` label)."""
        return _xid(self.labels.get("xid"))

    def finding(self) -> Finding:
        labels, annotations = self.labels, self.annotations
        name = labels.get("alertname", "alert")
        node = next((labels[k] for k in ("node", "instance", "Hostname") if labels.get(k)), None)
        node = _host(node) if node else None
        gpu = _gpu(labels.get("gpu")) if labels.get("gpu") is not None else None
        action, refused = _action(labels.get("action"))
        evidence = {"source": "alertmanager", "labels": labels, "annotations": annotations}
        if self.xid is not None:
            return self._xid_finding(self.xid, node, gpu, action, refused, evidence)
        others = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
        return Finding(
            kind=AlertKind.ALERTMANAGER,
            fingerprint=self.fingerprint,
            severity=_severity(labels.get("severity")),
            summary=annotations.get("summary") or (f"{name} {others}".strip()),
            explanation=(annotations.get("description") or f"Prometheus Alertmanager: {name} is firing.") + refused,
            node=node,
            gpu=gpu,
            run=labels.get("run") or None,
            evidence={**evidence, "generator_url": self.generator_url},
            action=action or Action.NONE,
        )

    def _xid_finding(
        self, xid: int, node: str | None, gpu: int | None, action: Action | None, refused: str, evidence: dict
    ) -> Finding:
        """An Xid is an event, not a condition: graded from the catalog (the alert's severity label routes in
        Alertmanager only), and counted once per firing episode; its resolved notice means only that the rule's window
        passed, so it clears nothing (services.findings_record, incidents/intake/services.py)."""
        info = classify(xid)
        action = action or info.action
        where = f"{node or 'an unnamed node'} GPU {'?' if gpu is None else gpu}"
        note = f"; {info.note}" if info.note else ""
        name = self.labels.get("alertname", "alert")
        return Finding(
            kind=AlertKind.XID,
            fingerprint=f"am-xid:{_node_key(node)}:{'-' if gpu is None else gpu}:{xid}",
            severity=info.severity,
            summary=f"Xid {xid} on {where}: {info.meaning}",
            explanation=(
                f"Prometheus Alertmanager ({name}) reported Xid {xid} ({info.meaning}) on {where}{note}. "
                f"Recommended: {action.label}. Each new firing of the alert counts once; its "
                "resolved notice clears nothing: resolve it here once the GPU is dealt with." + refused
            ),
            node=node,
            gpu=gpu,
            run=self.labels.get("run") or None,
            evidence={**evidence, "xid": xid, "generator_url": self.generator_url},
            action=action,
            episode=self.starts_at,
        )


def _string_map(value: Any, where: str, problems: list[Problem], index: int) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        problems.append(Problem(index, where, "must be an object of string values"))
        return {}
    return value


def alertmanager_parse(body: Any, *, max_alerts: int | None = None) -> tuple[list[AmAlert], list[Problem]]:
    """The alerts of a webhook body, or every problem found (index is the alert's place in `alerts`).

    More than `max_alerts` alerts is refused whole (Alertmanager's webhook_config max_alerts truncates instead).
    """
    if not isinstance(body, dict):
        return [], [Problem(0, "", "an Alertmanager webhook body must be a JSON object")]
    problems: list[Problem] = []
    version = body.get("version")
    if version is not None and str(version) != "4":
        problems.append(Problem(0, "version", f"payload version {version!r} is not supported; expected '4'"))
    raws = body.get("alerts")
    if raws is None:
        return [], [*problems, Problem(0, "alerts", "is required")]
    if not isinstance(raws, list):
        return [], [*problems, Problem(0, "alerts", "must be a list")]
    if max_alerts is not None and len(raws) > max_alerts:
        reason = f"holds {len(raws)} alerts, over the limit of {max_alerts} (set max_alerts in the webhook_config)"
        return [], [*problems, Problem(0, "alerts", reason)]
    common = body.get("commonLabels") if isinstance(body.get("commonLabels"), dict) else {}
    alerts: list[AmAlert] = []
    for index, raw in enumerate(raws):
        if not isinstance(raw, dict):
            problems.append(Problem(index, f"alerts[{index}]", "must be a JSON object"))
            continue
        before = len(problems)
        labels = _string_map(raw.get("labels"), f"alerts[{index}].labels", problems, index)
        labels = {**{k: v for k, v in common.items() if isinstance(v, str)}, **labels}
        annotations = _string_map(raw.get("annotations"), f"alerts[{index}].annotations", problems, index)
        if not labels and len(problems) == before:
            problems.append(Problem(index, f"alerts[{index}].labels", "is required (an alert is its labels)"))
        status = raw.get("status", "firing")
        if status not in ("firing", "resolved"):
            problems.append(Problem(index, f"alerts[{index}].status", "must be 'firing' or 'resolved'"))
        times = {}
        for name in ("startsAt", "endsAt"):
            try:
                times[name] = rfc3339_time(raw[name]) if raw.get(name) not in (None, "") else None
            except ValueError as error:
                problems.append(Problem(index, f"alerts[{index}].{name}", str(error)))
        fingerprint = raw.get("fingerprint")
        if fingerprint is not None and (not isinstance(fingerprint, str) or len(fingerprint) > 200):
            problems.append(Problem(index, f"alerts[{index}].fingerprint", "must be a string of at most 200 chars"))
        if len(problems) > before:
            continue
        if not fingerprint:
            fingerprint = hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]
        alerts.append(
            AmAlert(
                fingerprint=f"am:{fingerprint}",
                status=status,
                labels=labels,
                annotations=annotations,
                starts_at=times.get("startsAt"),
                ends_at=times.get("endsAt"),
                generator_url=str(raw.get("generatorURL") or ""),
            )
        )
    return (alerts, []) if not problems else ([], problems)


# --- PagerDuty Events API v2 --------------------------------------------------------------------------------

PD_ACTIONS = ("trigger", "acknowledge", "resolve")


@dataclass(frozen=True)
class PdEvent:
    routing_key: str
    action: str
    dedup_key: str
    payload: dict

    @property
    def fingerprint(self) -> str:
        return f"pd:{self.dedup_key}"

    def finding(self) -> Finding:
        payload = self.payload
        details = payload.get("custom_details")
        details = details if isinstance(details, dict) else ({"details": details} if details is not None else {})
        source = payload.get("source", "")
        context = ", ".join(f"{k} {payload[k]}" for k in ("component", "group", "class") if payload.get(k))
        return Finding(
            kind=AlertKind.PAGERDUTY,
            fingerprint=self.fingerprint,
            severity=payload["severity"],
            summary=payload["summary"],
            explanation=f"Sent as a PagerDuty event from {source}" + (f" ({context})." if context else "."),
            node=_host(details.get("node") or source) or None,
            gpu=_gpu(details.get("gpu")) if details.get("gpu") is not None else None,
            run=str(details["run"]) if details.get("run") else None,
            evidence={"source": "pagerduty", "dedup_key": self.dedup_key, "payload": payload},
        )


def pagerduty_parse(body: Any) -> tuple[PdEvent | None, list[str]]:
    """One event, or PagerDuty-style error strings."""
    if not isinstance(body, dict):
        return None, ["Event object is invalid: the body must be a JSON object"]
    errors = []
    routing_key = body.get("routing_key")
    if not isinstance(routing_key, str) or not routing_key.strip():
        errors.append("'routing_key' is missing or blank")
    action = body.get("event_action")
    if action not in PD_ACTIONS:
        errors.append(f"'event_action' must be one of: {', '.join(PD_ACTIONS)}")
    dedup_key = body.get("dedup_key")
    if dedup_key is not None and (not isinstance(dedup_key, str) or len(dedup_key) > 255):
        errors.append("'dedup_key' must be a string of at most 255 characters")
    elif not dedup_key and action in ("acknowledge", "resolve"):
        errors.append(f"'dedup_key' is required to {action}")
    payload = body.get("payload")
    if action == "trigger":
        if not isinstance(payload, dict):
            errors.append("'payload' is missing or not an object")
        else:
            for name in ("summary", "source"):
                if not isinstance(payload.get(name), str) or not payload[name].strip():
                    errors.append(f"'payload.{name}' is missing or blank")
            if payload.get("severity") not in SEVERITIES:
                errors.append(f"'payload.severity' must be one of: {', '.join(SEVERITIES)}")
            if payload.get("timestamp") is not None:
                try:
                    rfc3339_time(payload["timestamp"])
                except ValueError as error:
                    errors.append(f"'payload.timestamp' {error}")
    if errors:
        return None, errors
    return PdEvent(
        routing_key=routing_key.strip(),
        action=action,
        dedup_key=dedup_key or uuid.uuid4().hex,
        payload=payload if isinstance(payload, dict) else {},
    ), []
