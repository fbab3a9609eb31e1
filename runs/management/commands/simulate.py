"""`manage.py simulate`: a simulated training run's CloudEvents, to a JSONL file, an intake URL or this database.

The progress line is written here (a dozen lines) rather than taken from tqdm: the progress worth showing is in
simulated days, which the events carry, and a dependency for one stderr line is not worth its upkeep.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.domain.cloudevents import parse_time
from runs.domain.simulator import (
    LLAMA3_RATE_PER_GPU_HOUR,
    SimulationConfig,
    Summary,
    Triangular,
    simulate,
)
from runs.services import own_events_ingest

URL_BATCH = 1000  # events per POST: about 0.3 MB, well under the intake's body limit
APPLY_BATCH = 5000  # events per intake transaction when applying in-process
URL_TIMEOUT_S = 60


@dataclass
class Delivery:
    """What the receiving end said: events stored new, and events it had already."""

    stored: int = 0
    duplicates: int = 0


def batches(events: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(events)
    while batch := list(islice(iterator, size)):
        yield batch


def ingest(events: Iterable[dict], *, batch_size: int = APPLY_BATCH) -> Delivery:
    """Validate and store events in batches through the event API's own path (parse_events, events_ingest).

    Each batch is one intake transaction; its events are applied when it commits (in-process without a broker,
    by the workers with one), as they would be had they come through the API.
    """
    delivery = Delivery()
    for batch in batches(events, min(batch_size, settings.EVENTS_MAX_BATCH)):
        try:
            result = own_events_ingest(events=batch, backfill=True)  # a history, late by design: not flagged
        except ValueError as exc:
            raise CommandError(f"simulated events are invalid: {exc}") from exc
        delivery.stored += len(result.accepted)
        delivery.duplicates += len(result.duplicates)
    return delivery


def post(events: Iterable[dict], *, url: str, token: str | None) -> Delivery:
    """POST events in batches to an intake (application/cloudevents-batch+json); stop at the first refusal."""
    delivery = Delivery()
    headers = {"Content-Type": "application/cloudevents-batch+json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    sent = 0
    for batch in batches(events, URL_BATCH):
        request = urllib.request.Request(url, data=json.dumps(batch).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=URL_TIMEOUT_S) as response:
                body = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:1000]
            raise CommandError(
                f"POST {url} refused events {sent}-{sent + len(batch) - 1} with HTTP {exc.code} {exc.reason}: {detail}"
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise CommandError(f"POST {url} failed after {sent} events: {getattr(exc, 'reason', exc)}") from None
        except json.JSONDecodeError:
            raise CommandError(f"POST {url} answered with something other than JSON after {sent} events") from None
        delivery.stored += int(body.get("accepted", 0))
        delivery.duplicates += int(body.get("duplicates", 0))
        sent += len(batch)
    return delivery


def write_jsonl(events: Iterable[dict], stream) -> None:
    for event in events:
        stream.write(json.dumps(event, separators=(",", ":")) + "\n")


class Progress:
    """A one-line progress report on a terminal: simulated days done and events so far."""

    EVERY = 2000  # events between looks at the clock; parsing a time for each event would cost more than it tells

    def __init__(self, config: SimulationConfig, stream=sys.stderr):
        self.stream, self.config = stream, config
        self.shown_at = 0.0

    def track(self, events: Iterable[dict]) -> Iterator[dict]:
        for count, event in enumerate(events, start=1):
            if count % self.EVERY == 0 and time.monotonic() - self.shown_at > 0.2:
                self.shown_at = time.monotonic()
                days = (parse_time(event["time"]) - self.config.start).total_seconds() / 86400
                self.stream.write(f"\r  simulated day {days:5.1f} of {self.config.days:g}, {count:,} events ")
                self.stream.flush()
            yield event
        if self.shown_at:
            self.stream.write("\n")


def tallied(events: Iterable[dict], tally: Summary) -> Iterator[dict]:
    for event in events:
        tally.add(event)
        yield event


def _start(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {value!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError("needs a time zone, e.g. 2026-01-05T00:00:00Z")
    return moment.astimezone(UTC)


def window_start(*, now: datetime, days: float) -> datetime:
    """The start of a window of `days` that ends now: a run the record calls running (--running) steps until now, not
    until some fixed day in the past whose silence since would read as training. The end is whole minutes, so that
    the same command in the same minute gives the same event ids (and stores nothing twice)."""
    return now.replace(second=0, microsecond=0) - timedelta(days=days)


class Command(BaseCommand):
    help = (
        "Simulate a training run on a GPU cluster (Llama 3 failure rate and causes by default) and send its "
        "CloudEvents to a JSONL file, an intake URL, or this database through the intake's own code path."
    )

    def add_arguments(self, parser):
        parser.add_argument("--gpus", type=int, default=16384)
        parser.add_argument("--days", type=float, default=54, help="Wall-clock length of the run (default 54).")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--start",
            type=_start,
            help="RFC 3339 (default: --days before now, so that the run's last event is now; a fixed start gives the "
            "same stream whenever it is made).",
        )
        parser.add_argument("--interval-min", type=float, default=30, help="Checkpoint interval, minutes of training.")
        parser.add_argument(
            "--write-s", type=float, help="Seconds each checkpoint blocks training (default: 20-60, most often 30)."
        )
        parser.add_argument(
            "--rate",
            type=float,
            default=LLAMA3_RATE_PER_GPU_HOUR,
            help=f"Unexpected faults per GPU-hour of wall-clock (default Llama 3's {LLAMA3_RATE_PER_GPU_HOUR:.3e}).",
        )
        parser.add_argument("--planned", type=int, help="Planned stops (default: 47 per 54 days at 16,384 GPUs).")
        parser.add_argument("--run", default="llama3-405b-sim")
        parser.add_argument("--cluster", default="sim-cluster")
        parser.add_argument(
            "--running", action="store_true", help="Leave the run running at the end (default: it completes)."
        )
        out = parser.add_mutually_exclusive_group(required=True)
        out.add_argument("--jsonl", metavar="PATH", help="Write one event a line to PATH ('-' for stdout).")
        out.add_argument("--url", help="POST batches to an intake, e.g. http://127.0.0.1:8000/api/v1/events.")
        out.add_argument("--apply", action="store_true", help="Store and apply here, as the intake would.")
        parser.add_argument("--token", help="API token with the events:write scope, for --url.")

    def handle(self, *args, **options):
        config = self._config(options)
        tally = Summary()
        events = tallied(simulate(config), tally)
        if sys.stderr.isatty():
            events = Progress(config).track(events)
        report = self.stdout
        if options["jsonl"] == "-":
            write_jsonl(events, self.stdout)
            report = self.stderr
            delivered = "written to stdout"
        elif options["jsonl"]:
            with open(options["jsonl"], "w", encoding="utf-8") as stream:
                write_jsonl(events, stream)
            delivered = f"written to {options['jsonl']}"
        else:
            if options["url"]:
                delivery = post(events, url=options["url"], token=options["token"])
            else:
                delivery = ingest(events)
            delivered = f"{delivery.stored:,} stored, {delivery.duplicates:,} already there"
        report.write(
            f"{tally.events:,} events ({delivered}), {tally.first_time} to {tally.last_time}: "
            f"{tally.interruptions} interruptions ({tally.unexpected} unexpected, {tally.planned} planned), "
            f"{tally.checkpoints:,} checkpoints ({tally.checkpoints_lost} lost in flight), "
            f"{tally.steps:,} step events.",
            style_func=lambda text: text,  # plain even on stderr, where Django would colour it as an error
        )

    def _config(self, options) -> SimulationConfig:
        extra = {}
        if options["write_s"] is not None:
            extra["checkpoint_blocking"] = Triangular(options["write_s"], options["write_s"], options["write_s"])
        try:
            start = options["start"] or window_start(now=timezone.now(), days=options["days"])
            return SimulationConfig(
                gpus=options["gpus"],
                days=options["days"],
                seed=options["seed"],
                start=start,
                checkpoint_interval_s=options["interval_min"] * 60,
                rate_per_gpu_hour=options["rate"],
                planned_stops=options["planned"],
                run=options["run"],
                cluster=options["cluster"],
                completes=not options["running"],
                **extra,
            )
        except OverflowError:
            raise CommandError(f"--days {options['days']:g} reaches past the calendar") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
