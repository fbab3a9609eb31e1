"""The console's pages read the record from a PostgreSQL read replica, when one is configured, and only while the
replica has everything the reader must see.

Why: at a big fleet's scale the primary's CPU goes to the event stream (docs/DEPLOY.md, "Past one machine"); the
people keeping the console open read the same record a second later just as well, from a streaming replica.

What is read there (DATABASE_REPLICA_URL set; otherwise nothing here runs):
- Only a signed-in person's GET or HEAD of a console page or one of its htmx parts: never the API (its callers are
  programs that read what they just wrote), never the admin, never a write.
- Only the record (the `runs` and `incidents` apps' tables): sign-in, sessions, permissions and the sign-in guard
  stay on the primary, so a person who just signed in is known at once.
- Never inside a transaction on the primary, so a page that locks or writes reads what it locks.

How fresh it must be: every REPLICA_CHECK_S each process notes the primary's WAL position and the time, and asks the
replica how far it has replayed. The replica then holds everything the primary held at the latest noted time whose
position it has replayed (`as_of`). A page is read there only if
- that time is within REPLICA_MAX_LAG_S of now, and
- it is after this person's last write through the console (the session's stamp, fleetops/pagecache.py): what
  they just did shows at once, read from the primary until the replica has it.
Otherwise, and whenever the replica cannot be asked, the page reads the primary. A page read from the replica says
so beside its time stamp (base.html), and the page cache keeps it as of `as_of`, not as of now.
"""

import contextvars
import logging
import threading
import time
from collections import deque

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from fleetops.pagecache import READ_AS_OF, WRITES

log = logging.getLogger(__name__)

REPLICA = "replica"  # the alias in settings.DATABASES
RECORD_APPS = frozenset({"runs", "incidents"})
_SAFE = ("GET", "HEAD")
_NOT_PAGES = ("/api/", "/admin/", "/static/", "/metrics", "/healthz", "/login/", "/logout/")

# The request being served reads the record from the replica as of this time (time.time_ns()); None: the primary.
_as_of: contextvars.ContextVar[int | None] = contextvars.ContextVar("replica_as_of", default=None)


class ReplicaRouter:
    """settings.DATABASE_ROUTERS when a replica is configured. Always names the alias: left to Django, a row read
    from the replica would be saved back (or its relations read) through the replica's connection."""

    def db_for_read(self, model, **hints):
        if (
            _as_of.get() is not None
            and model._meta.app_label in RECORD_APPS
            and not connections[DEFAULT_DB_ALIAS].in_atomic_block
        ):
            return REPLICA
        return DEFAULT_DB_ALIAS

    def db_for_write(self, model, **hints):
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        return True  # one database: the replica is the primary's copy

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return db == DEFAULT_DB_ALIAS


class _Freshness:
    """Per process: how far the replica has caught up with the primary, asked at most every REPLICA_CHECK_S."""

    def __init__(self):
        self._lock = threading.Lock()
        self._marks: deque[tuple[int, int]] = deque()  # (time.time_ns(), the primary's WAL position then), oldest first
        self._checked_ns = 0
        self._as_of: int | None = None

    def as_of(self) -> int | None:
        """The latest time (time.time_ns()) as of which the replica holds the primary's record; None if unknown."""
        now = time.time_ns()
        with self._lock:
            if now - self._checked_ns >= settings.REPLICA_CHECK_S * 1e9:
                self._checked_ns = now
                self._as_of = self._check(now)
            return self._as_of

    def _check(self, now: int) -> int | None:
        try:
            primary = _lsn(DEFAULT_DB_ALIAS, "pg_current_wal_lsn()")
            replayed = _lsn(REPLICA, "pg_last_wal_replay_lsn()")
        except DatabaseError as exc:
            log.warning("read replica not asked (%s): pages read the primary", exc)
            _close(REPLICA)
            return None
        self._marks.append((now, primary))
        horizon = now - settings.REPLICA_MAX_LAG_S * 1e9
        while len(self._marks) > 1 and self._marks[1][0] <= horizon:
            self._marks.popleft()  # keep the newest mark past the horizon: it may still be the replica's position
        if replayed is None:
            return None  # not a replica (pg_last_wal_replay_lsn() is null on a primary): never read it as one
        return replayed_as_of(self._marks, replayed)


def replayed_as_of(marks, replayed: int):
    """The latest of `marks` ((time, the primary's WAL position then), oldest first) whose position a replica that has
    replayed up to `replayed` holds: the time as of which it has the primary's record; None if none."""
    caught_up = [at for at, position in marks if position <= replayed]
    return caught_up[-1] if caught_up else None


def _lsn(alias: str, expression: str) -> int | None:
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT {expression} - '0/0'::pg_lsn")
        value = cursor.fetchone()[0]
    return None if value is None else int(value)


def _close(alias: str) -> None:
    try:
        connections[alias].close()
    except DatabaseError:
        pass


_freshness = _Freshness()


def _page_reader(request) -> bool:
    if request.method not in _SAFE or request.path.startswith(_NOT_PAGES):
        return False
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class ReplicaReadsMiddleware:
    """After AuthenticationMiddleware: a page the replica can answer freshly enough reads the record there."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        as_of = _freshness.as_of() if _page_reader(request) else None
        fresh = (
            as_of is not None
            and time.time_ns() - as_of <= settings.REPLICA_MAX_LAG_S * 1e9
            and as_of >= request.session.get(WRITES, 0)
        )
        token = _as_of.set(as_of if fresh else None)
        setattr(request, READ_AS_OF, as_of if fresh else None)
        try:
            return self.get_response(request)
        finally:
            _as_of.reset(token)
