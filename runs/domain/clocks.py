"""A sender's clock as one batch shows it: how far ahead of ours it runs, and its events read on our clock.

Pure: no Django import. Times are timezone-aware datetimes (UTC); a lead is a timedelta, a tolerance seconds.

A batch's events of one source were stamped by one clock, so its skew is measured once for them: an event cannot have
happened after it arrived, so the source's newest stamp past our receipt says its clock runs at least that far ahead.
Every event of that source in the batch is then moved back by that one amount, the ones stamped inside the tolerance
too. Moving each event back on its own (to the receipt, as the intake did) inverted the sender's order wherever a
batch straddled the tolerance (an earlier event kept at +30 s, a later one moved to +0 s) and put a spool's events on
one instant; one shift a source keeps the order and the spacing its clock gave them. The lead measured is a lower
bound: the newest event is taken to have happened at the receipt.
"""

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from runs.domain.cloudevents import TIME_FIELDS, CloudEvent, parse_time


def leads(events: Iterable[CloudEvent], received_at: datetime, tolerance_s: float) -> dict[str, timedelta]:
    """source -> how far ahead of `received_at` its clock runs, for each source of the batch whose newest event is
    stamped more than `tolerance_s` seconds after the batch arrived; a source within the tolerance is not named."""
    newest: dict[str, datetime] = {}
    for event in events:
        if event.source not in newest or event.time > newest[event.source]:
            newest[event.source] = event.time
    ahead = {source: time - received_at for source, time in newest.items()}
    return {source: lead for source, lead in ahead.items() if lead.total_seconds() > tolerance_s}


def shifted(event: CloudEvent, delta: timedelta) -> CloudEvent:
    """The event with its time and the timestamps in its data moved by `delta`: what a sender with a clock off by
    -delta meant."""
    data = dict(event.data)
    for name in TIME_FIELDS[event.type]:
        if name in data:
            data[name] = (parse_time(data[name]) + delta).isoformat().replace("+00:00", "Z")
    return replace(event, time=event.time + delta, data=data)
