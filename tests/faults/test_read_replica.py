"""The console's pages read a real streaming replica while it is fresh enough, and the primary otherwise.

Real parts only: a private PostgreSQL primary, a streaming replica of it made with pg_basebackup (a hot standby on a
port of its own), gunicorn serving fleetops.wsgi with DATABASE_URL on the primary and DATABASE_REPLICA_URL on the
replica. The replica is held back with pg_wal_replay_pause(), so what a page shows tells which server it read.
"""

import json
import re
import time

import pytest
import requests

from tests.faults.conftest import app_env, make_private_token
from tests.services import Gunicorn, console_login, wait_for
from tests.stories import T0, event

pytestmark = pytest.mark.services  # private servers started from the machine's binaries (conftest.py)
# Long enough for the steps between the pause and the last read of the replica (two sign-ins, a start, a console write)
# on a busy 2-core machine: at 8 s they outran it with the other core loaded, and the replica was rightly left.
MAX_LAG_S = 20
STAMP = re.compile(r'id="page-stamp">(.*?)</p>', re.S)


def _start_run(url: str, token: str, name: str) -> None:
    started = event("run.started", T0, f"{name}-start", run=name, cluster="c1", gpus=8, nodes=["n1"], job_id=name)
    answer = requests.post(
        url + "/api/v1/events",
        data=json.dumps([started]),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/cloudevents-batch+json"},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text


def _page(session: requests.Session, url: str, name: str) -> tuple[int, str]:
    """The run's page: its status and its time stamp ("Read 12:00:00 UTC from a read replica ...")."""
    answer = session.get(f"{url}/runs/{name}", timeout=30)
    assert answer.status_code in (200, 404), answer.text[:500]
    stamp = STAMP.search(answer.text)
    return answer.status_code, (stamp.group(1) if stamp else "")


@pytest.mark.reliability(
    "Pages read from a read replica that falls behind or stops",
    how="a real streaming replica (pg_basebackup, hot standby) held back with pg_wal_replay_pause(), then stopped, "
    "under gunicorn with DATABASE_REPLICA_URL",
    outcome="pages read the replica while it is within REPLICA_MAX_LAG_S and say so beside their time; a person's "
    "own console write shows at once (read from the primary); past the lag bound, or with the replica down, "
    "every page reads the primary, never a 500 or 503; a sign-in during the lag works",
)
def test_pages_read_the_replica_only_while_it_is_fresh(private_postgres, private_replica, tmp_path):
    primary_url = private_postgres.url(private_postgres.database)
    env = app_env(
        primary_url,
        "",
        CELERY_TASK_ALWAYS_EAGER="true",
        DATABASE_REPLICA_URL=private_replica.url(private_postgres.database),
        REPLICA_MAX_LAG_S=str(MAX_LAG_S),
        REPLICA_CHECK_S="0.2",
        PAGE_CACHE_S="0",
    )
    token = make_private_token(primary_url)
    web = Gunicorn(tmp_path, env, workers=1)  # one process: one view of the replica's freshness
    try:
        oncall, lead = console_login(web.url, primary_url), console_login(web.url, primary_url, "lead")
        _start_run(web.url, token, "before-pause")

        # Caught up: the page reads the replica and says so.
        status, stamp = wait_for(
            lambda: "read replica" in (found := _page(oncall, web.url, "before-pause"))[1] and found,
            timeout=30,
            what="the run's page read from the replica",
        )
        assert status == 200
        assert re.search(r"from a read replica at most \d+\.\d s behind", stamp), stamp

        # Held back: a run started now is on the primary only, and the page, read from the replica, does not know it.
        private_replica.pause_replay()
        paused_at = time.monotonic()
        _start_run(web.url, token, "during-pause")
        assert private_postgres.query(private_postgres.database, "SELECT count(*) FROM runs_run")[0][0] == 2
        assert _page(oncall, web.url, "during-pause")[0] == 404
        assert "read replica" in _page(oncall, web.url, "before-pause")[1]

        assert _page(lead, web.url, "during-pause")[0] == 404

        # A sign-in now works: users and sessions are read on the primary. Signing in is a write of theirs, so their
        # pages read the primary until the replica has caught up past it.
        status, stamp = _page(console_login(web.url, primary_url, "night"), web.url, "during-pause")
        assert status == 200 and "read replica" not in stamp, stamp

        # A console write of the on-call engineer's: their own pages read the primary until the replica has it.
        csrf = oncall.cookies["csrftoken"]
        saved = oncall.post(
            web.url + "/preferences/save",
            data={"csrfmiddlewaretoken": csrf, "time_zone": "UTC", "back": "/"},
            headers={"Referer": web.url + "/preferences"},
            timeout=30,
            allow_redirects=False,
        )
        assert saved.status_code == 302, saved.text[:500]
        status, stamp = _page(oncall, web.url, "during-pause")
        assert status == 200 and "read replica" not in stamp, stamp
        assert _page(lead, web.url, "during-pause")[0] == 404  # the others still read the replica
        assert time.monotonic() - paused_at < MAX_LAG_S, "the steps above took longer than the lag bound"

        # Past REPLICA_MAX_LAG_S behind: everyone reads the primary.
        status, stamp = wait_for(
            lambda: (found := _page(lead, web.url, "during-pause"))[0] == 200 and found,
            timeout=MAX_LAG_S + 20,
            what="pages to read the primary once the replica is too far behind",
        )
        assert "read replica" not in stamp
        assert time.monotonic() - paused_at >= MAX_LAG_S - 1

        # Caught up again: back on the replica, which now has the run.
        private_replica.resume_replay()
        wait_for(
            lambda: "read replica" in _page(lead, web.url, "during-pause")[1],
            timeout=30,
            what="pages to read the replica again",
        )

        # The replica stopped: pages read the primary, never an error.
        private_replica.stop()
        time.sleep(0.5)  # past REPLICA_CHECK_S: the next page asks the replica, which does not answer
        for person in (oncall, lead):
            status, stamp = _page(person, web.url, "during-pause")
            assert status == 200 and "read replica" not in stamp, stamp
        assert "Traceback" not in web.log.read_text()
    finally:
        web.stop()


def test_a_replica_that_is_not_one_is_never_read(private_postgres, tmp_path):
    """DATABASE_REPLICA_URL naming a primary (a mistake, or a replica promoted after a failover) is not read as a
    replica: pg_last_wal_replay_lsn() is null there, so pages read DATABASE_URL."""
    primary_url = private_postgres.url(private_postgres.database)
    env = app_env(primary_url, "", DATABASE_REPLICA_URL=primary_url, REPLICA_CHECK_S="0.2", PAGE_CACHE_S="0")
    env["CELERY_TASK_ALWAYS_EAGER"] = "true"
    web = Gunicorn(tmp_path, env, workers=1)
    try:
        person = console_login(web.url, primary_url)
        token = make_private_token(primary_url)
        _start_run(web.url, token, "solo")
        status, stamp = _page(person, web.url, "solo")
        assert status == 200 and "read replica" not in stamp, stamp
    finally:
        web.stop()
