"""Where each event type goes once stored: one route a type, and every list of types by route is read from here.

Pure: standard library only. The intake stores every event the same way; what happens next depends on its route:

- LOGGED: stored applied and detected at the intake (`runs.services.LOGGED_AT_INTAKE`). Nothing in the record or in
  the event-driven detectors changes with them; the periodic detectors read them from the log. A rebuild or a
  replay that applies one again has nothing to do but make its run and node.
- FOLDED: of a chunk's events of one subject only the newest can change the record, so one write stands for all
  of them (`runs.services.FOLDED` says the subject and how the chunk's newest are written).
- READING: a GPU's reading where the newer one wins, written for a chunk's GPUs in one statement a type
  (`runs.services.READINGS`).
- XID: tallied per GPU over a chunk, storms included (`runs.services.appliers._XidTally`).
- LIFECYCLE: the run's state, attempts and interruptions derived again whole from its lifecycle events
  (runs/domain/lifecycle.py).
- APPLIER: its own applier, one event at a time (`runs.services.APPLIERS`).

A type with no route would be stored and then fail to apply (quarantined); a route for a type with no schema could
never be taken. `problems` says both, and the Django system check `runs.E001` runs it at every start.
"""

from collections.abc import Iterable
from enum import StrEnum


class Route(StrEnum):
    LOGGED = "logged"
    FOLDED = "folded"
    READING = "reading"
    XID = "xid"
    LIFECYCLE = "lifecycle"
    APPLIER = "applier"


ROUTES: dict[str, Route] = {  # in runs.domain.cloudevents.SCHEMAS' order
    "run.started": Route.LIFECYCLE,
    "run.step": Route.FOLDED,
    "run.heartbeat": Route.APPLIER,  # applied, not logged: detection must see it (a silent run's alert clears)
    "checkpoint.started": Route.APPLIER,
    "checkpoint.completed": Route.APPLIER,
    "checkpoint.failed": Route.APPLIER,
    "run.failed": Route.LIFECYCLE,
    "run.restored": Route.LIFECYCLE,
    "run.completed": Route.LIFECYCLE,
    "run.cancelled": Route.LIFECYCLE,
    "node.heartbeat": Route.FOLDED,
    "node.state": Route.APPLIER,
    "gpu.xid": Route.XID,
    "gpu.ecc": Route.READING,
    "gpu.health": Route.READING,
    "rank.step_time": Route.LOGGED,
    "rank.grad_norm": Route.LOGGED,
    "healthcheck.result": Route.APPLIER,  # read from the log by the simulated cluster's health checks
}


def types_of(route: Route) -> tuple[str, ...]:
    """The event types of a route, in ROUTES' order."""
    return tuple(type_ for type_, taken in ROUTES.items() if taken is route)


def problems(schemas: Iterable[str], routes: dict[str, Route] = ROUTES) -> list[str]:
    """What is wrong with the routes for these schema types: a type without a route, a route without a type."""
    schemas = list(schemas)
    return [f"event type {t!r}: a schema and no route (runs/domain/routes.py)" for t in schemas if t not in routes] + [
        f"a route for {t!r}, which has no schema (runs/domain/cloudevents.py)" for t in routes if t not in schemas
    ]
