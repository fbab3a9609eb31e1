"""Redis killed and started again (empty) in the middle of a stream: the events are durable in PostgreSQL
before the 202, and those whose apply task was lost with Redis are applied by the sweeper, once.

Real parts only: a private Redis (SIGKILL, then a new redis-server on the same port), a private PostgreSQL,
gunicorn serving fleetops.wsgi and a `celery worker` process.
"""

import json

import pytest
import requests

from tests.faults.conftest import app_env, make_private_token, probe, send_sweeper, stream, wait_for
from tests.services import Gunicorn, Worker

pytestmark = pytest.mark.services  # private servers started from the machine's binaries (conftest.py)
BATCH = "application/cloudevents-batch+json"


@pytest.mark.reliability(
    "Redis restarted in the middle of a stream",
    how="private Redis killed (SIGKILL, no persistence) while events are posted through gunicorn by one sender, then "
    "started again empty on the same port and the stream finished by a second sender",
    outcome="every POST is 202 while Redis is down (the events are in PostgreSQL); the second sender's turns apply its "
    "events, and exactly the first sender's lost ones stay unapplied until the apply_pending_events sweeper applies "
    "them (a batch of the first sender would have: its turn takes its whole backlog); every event stored once; the "
    "record equals a rebuild from the log",
)
def test_redis_restart_mid_stream_loses_no_event_and_applies_none_twice(private_postgres, private_redis, tmp_path):
    pg, url = private_postgres, private_postgres.url(private_postgres.database)
    events = stream()
    batches = [events[i : i + 250] for i in range(0, len(events), 250)]
    first, middle, last = batches[:6], batches[6:12], batches[12:]
    token, second = make_private_token(url), make_private_token(url, "fault-tests-2")
    env = app_env(url, private_redis.url)
    web, worker = Gunicorn(tmp_path, env), Worker(**env)

    def post(batch, token=token):
        headers = {"Authorization": f"Bearer {token}", "Content-Type": BATCH}
        answer = requests.post(web.url + "/api/v1/events", data=json.dumps(batch), headers=headers, timeout=60)
        assert answer.status_code == 202, answer.text[:500]

    def unapplied() -> set[str]:
        return {row[0] for row in pg.query(pg.database, "SELECT event_id FROM runs_event WHERE applied_at IS NULL")}

    try:
        for batch in first:
            post(batch)
        wait_for(
            lambda: pg.query(pg.database, "SELECT count(*) FROM runs_event")[0][0] == 1500 and not unapplied(),
            timeout=120,
            what="the first batches applied by the worker",
        )

        private_redis.stop()
        for batch in middle:  # durable before the answer: the lost message is the sweeper's business
            post(batch)
        private_redis.start()
        for batch in last:
            post(batch, second)

        lost = {e["id"] for batch in middle for e in batch}
        wait_for(lambda: unapplied() == lost, timeout=180, what="the worker to apply the last batches", every=1)
        send_sweeper(private_redis.url)
        wait_for(lambda: not unapplied(), timeout=120, what="the sweeper to apply the lost events", every=1)

        # The reference rebuild is one process's: no worker beside it, whose queued turn or sweeper would take
        # rows the rebuild (skipping locked rows) then leaves out of its snapshot.
        worker.stop()
        state = probe(url, rebuild=True)
        assert (state["events"], state["doubled"], state["unapplied"]) == (len(events), 0, 0)
        assert state["snapshot"]["interruptions"] and state["snapshot"] == state["rebuilt"]
        assert "Internal Server Error" not in web.log.read_text()
    except BaseException:
        print(web.log.read_text()[-4000:])
        print("".join(worker.lines[-60:]))
        raise
    finally:
        web.stop()
        worker.stop()
