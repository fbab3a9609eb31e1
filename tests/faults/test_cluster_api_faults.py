"""The cluster's API hanging, then refusing, in the middle of a playbook; then back.

Real parts only: a real Slurm cluster (tests/slurm.py), a `celery worker` process running drain-and-replace,
and a TCP proxy (a thread here) between Slurm's clients and slurmctld that forwards, hangs (accepts and never
answers) or refuses (accepts and resets the connection), as a dying controller or a firewall would.
"""

import json
import socket
import threading
from datetime import UTC, datetime, timedelta

import pytest

from incidents.models import PlaybookExecution, StepExecution
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig
from runs.models import Cluster
from tests.services import Worker, free_ports, wait_for
from tests.slurm import put_back, start_training_job
from tests.stories import event

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
BATCH = "application/cloudevents-batch+json"
TIMEOUT_S = 5  # the adapter's per-call timeout in the worker (SLURM_TIMEOUT_S)


class Proxy:
    """127.0.0.1:port -> slurmctld; `mode` is "pass", "hang" or "reset" and may change at any time."""

    def __init__(self, upstream: int):
        self.upstream, self.mode, self.port = upstream, "pass", free_ports()
        self.connections = {"pass": 0, "hang": 0, "reset": 0}
        self._held: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            mode = self.mode
            self.connections[mode] += 1
            if mode == "hang":
                self._held.append(client)  # read nothing, answer nothing
            elif mode == "reset":
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()  # RST
            else:
                upstream = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stopped.set()
        self._server.close()
        for held in self._held:
            held.close()


def _proxied_conf(slurm_conf: str, port: int, folder) -> str:
    """The cluster's slurm.conf for the clients, with slurmctld behind the proxy. MessageTimeout is raised so
    that a hung controller is ended by FleetOps' own timeout, not by the client's."""
    lines = [
        f"SlurmctldPort={port}" if line.startswith("SlurmctldPort=") else line
        for line in open(slurm_conf).read().splitlines()
    ]
    path = folder / "slurm.conf"
    path.write_text("\n".join([*lines, "MessageTimeout=60", ""]))
    return str(path)


def _controller_port(slurm_conf: str) -> int:
    return next(int(line.split("=")[1]) for line in open(slurm_conf) if line.startswith("SlurmctldPort="))


@pytest.mark.reliability(
    "Cluster API timing out, then refusing, mid-playbook",
    how="a TCP proxy in front of a real slurmctld hangs (longer than SLURM_TIMEOUT_S) during the drain step's "
    "first try, resets connections during its second, then passes",
    outcome="each failure is a transient error recorded on the step and retried with backoff (no crash); "
    "the third try drains the node; the playbook succeeds with the node drained once and the job requeued once",
)
def test_a_hanging_then_refusing_slurm_controller_delays_the_playbook_without_a_double_action(
    writer, broker, slurm_cluster, tmp_path
):
    slurm = SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))  # the test's own, direct
    proxy = Proxy(_controller_port(slurm_cluster.conf))
    Cluster.objects.create(
        name="proxied", scheduler="slurm", api_url=_proxied_conf(slurm_cluster.conf, proxy.port, tmp_path)
    )
    job_id, job = start_training_job(slurm_cluster, slurm)
    worker = Worker(PLAYBOOK_MAX_OUT_SHARE="0.5", SLURM_TIMEOUT_S=str(TIMEOUT_S))
    bad = spare = None
    errors: list[str] = []
    try:
        bad, now = job.nodes[0], datetime.now(UTC)
        started = event(
            "run.started", now - timedelta(minutes=5), "start", run="llm", cluster="proxied", gpus=16, nodes=job.nodes,
            job_id=job_id,
        )  # fmt: skip
        xids = [
            event("gpu.xid", now + timedelta(milliseconds=i), f"xid-{i}", node=bad, gpu=1, xid=79, message="fell off")
            for i in range(5)
        ]
        proxy.mode = "hang"
        assert writer.post("/api/v1/events", json.dumps([started, *xids]), content_type=BATCH).status_code == 202

        def drain_error():
            step = StepExecution.objects.filter(name="drain").first()
            if step and step.error and step.error not in errors:
                errors.append(step.error)
                return step
            return None

        first = wait_for(drain_error, timeout=90, what="the drain step's first failure", every=0.1)
        proxy.mode = "reset"  # before the retry, due in 2 s
        assert first.attempts == 1 and first.status == "pending"
        assert f"did not answer within {TIMEOUT_S:g} s" in first.error
        second = wait_for(drain_error, timeout=30, what="the drain step's second failure", every=0.1)
        proxy.mode = "pass"  # before the next retry, due in 4 s
        assert second.attempts == 2 and second.status == "pending"
        assert "did not answer" not in second.error  # the controller's refusal, not a timeout
        assert "DRAIN" not in slurm.node_status(bad).raw_state  # neither try got as far as the change

        execution = wait_for(
            lambda: PlaybookExecution.objects.exclude(status="running").first(),
            timeout=120,
            what="the playbook to finish",
        )
        assert execution.status == "succeeded", execution.error
        steps = {s.name: s for s in execution.steps.all()}
        assert (steps["drain"].attempts, steps["drain"].status, steps["drain"].error) == (3, "succeeded", "")
        assert steps["drain"].output["changed"] is True
        assert steps["requeue job"].attempts == 1 and steps["requeue job"].output["changed"] is True
        spare = steps["pick spare"].output["spare"]
        running = slurm.job_status(job_id)
        assert running.restart_count == 1 and spare in running.nodes and bad not in running.nodes
        assert proxy.connections["hang"] >= 1 and proxy.connections["reset"] >= 1
    except BaseException:
        print("".join(worker.lines[-80:]))
        print(errors, list(PlaybookExecution.objects.values_list("status", "error")))
        raise
    finally:
        worker.stop()
        proxy.close()
        put_back(slurm_cluster, slurm, job_id=job_id, bad=bad, spare=spare)
