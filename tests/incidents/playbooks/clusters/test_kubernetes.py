"""The Kubernetes adapter with the real `kubernetes` client, answered from recorded API responses.

The client's urllib3 pool manager is replaced by a replayer (recordings/README.md says where the bodies come
from); everything above it, the client's serialisation, its models and its exceptions, is the real thing.
"""

import io
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import urllib3
from kubernetes import client

from incidents.playbooks.clusters.base import NotFoundError, RefusedError, TransientError
from incidents.playbooks.clusters.kubernetes import KubernetesAdapter, KubernetesConfig, api_client_from

RECORDINGS = Path(__file__).resolve().parent / "recordings"
NODE = "/api/v1/nodes/gpu-003"
PODS_ON_NODE = "/api/v1/pods?fieldSelector=spec.nodeName=gpu-003"
JOB = "/apis/batch/v1/namespaces/train/jobs/llama3-70b-pretrain"
JOB_UID = "0f6c2d3e-4b5a-4c7d-8e9f-a0b1c2d3e4f5"
JOB_PODS = f"/api/v1/namespaces/train/pods?labelSelector=batch.kubernetes.io/controller-uid={JOB_UID}"
CHECK_PODS = (
    "/api/v1/namespaces/fleetops/pods?labelSelector=fleetops.io/health-check=dcgm_diag_r1,fleetops.io/node=gpu-003"
)


class Replay:
    """Stands in for urllib3.PoolManager: answers from recordings, remembers what the client sent.

    `routes` maps "METHOD /path?query" to the recordings to answer with, in turn; the last one repeats.
    """

    def __init__(self, routes: dict[str, list[tuple[int, str]]]):
        self.routes = {key: list(answers) for key, answers in routes.items()}
        self.requests: list[dict] = []

    def request(self, method, url, body=None, headers=None, **kwargs):
        parts = urlsplit(url)
        key = f"{method} {unquote(parts.path)}" + (f"?{unquote(parts.query)}" if parts.query else "")
        self.requests.append({"key": key, "headers": dict(headers or {}), "body": json.loads(body) if body else None})
        if key not in self.routes:
            raise AssertionError(f"the client asked for {key}, which no recording answers")
        answers = self.routes[key]
        status, name = answers.pop(0) if len(answers) > 1 else answers[0]
        return urllib3.HTTPResponse(
            body=io.BytesIO((RECORDINGS / name).read_bytes()),
            status=status,
            headers={"Content-Type": "application/json"},
            preload_content=False,
        )

    def clear(self):
        pass

    def sent(self, method: str) -> list[dict]:
        return [r for r in self.requests if r["key"].startswith(method + " ")]


def adapter(routes) -> tuple[KubernetesAdapter, Replay]:
    api = client.ApiClient(client.Configuration(host="https://k8s.test:6443"))
    replay = Replay(routes)
    api.rest_client.pool_manager = replay
    checks = {"dcgm_diag_r1": "dcgmi diag -r 1"}
    return KubernetesAdapter(KubernetesConfig(health_checks=checks), api_client=api), replay


def test_it_reads_a_node_in_fleetops_terms():
    k8s, replay = adapter(
        {f"GET {NODE}": [(200, "node-gpu-003.json")], f"GET {PODS_ON_NODE}": [(200, "pods-on-gpu-003.json")]}
    )

    node = k8s.node_status("gpu-003")

    assert (node.state, node.raw_state, node.pool, node.reason) == ("in_service", "Ready", "main", "")
    assert node.jobs == ["train/llama3-70b-pretrain"]  # the finished NCCL check's Job is not running there
    assert [r["key"] for r in replay.requests] == [f"GET {NODE}", f"GET {PODS_ON_NODE}"]


def test_drain_cordons_then_evicts_and_a_budget_makes_it_transient():
    k8s, replay = adapter(
        {
            f"GET {NODE}": [(200, "node-gpu-003.json"), (200, "node-gpu-003-cordoned.json")],
            f"PATCH {NODE}": [(200, "node-gpu-003-cordoned.json")],
            f"GET {PODS_ON_NODE}": [(200, "pods-on-gpu-003.json"), (200, "pods-on-gpu-003-draining.json")],
            "POST /api/v1/namespaces/train/pods/llama3-70b-pretrain-2-x7k2p/eviction": [(429, "eviction-429-pdb.json")],
            "POST /api/v1/namespaces/train/pods/checkpoint-uploader-6f9d8b7c5-qz4lp/eviction": [
                (201, "eviction-201.json")
            ],
        }
    )

    with pytest.raises(TransientError) as raised:
        k8s.ensure_drained("gpu-003", "xid 79 on GPU 3")

    message = str(raised.value)
    assert "cordoned gpu-003" in message and "evicted train/checkpoint-uploader-6f9d8b7c5-qz4lp" in message
    assert (
        "train/llama3-70b-pretrain-2-x7k2p: Cannot evict pod as it would violate the pod's disruption budget."
        in message
    )
    assert "The disruption budget llama3-70b-pretrain needs 4 healthy pods and has 4 currently (HTTP 429)" in message
    [patch] = replay.sent("PATCH")
    assert patch["body"] == {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {"fleetops.io/drain-reason": "xid 79 on GPU 3"}},
    }
    assert patch["headers"]["Content-Type"] == "application/strategic-merge-patch+json"
    evictions = replay.sent("POST")
    assert [e["body"] for e in evictions] == [
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "train"}}
        for name in ("llama3-70b-pretrain-2-x7k2p", "checkpoint-uploader-6f9d8b7c5-qz4lp")
    ]  # not the DaemonSet's pod, not the finished one
    assert all(e["headers"]["Content-Type"] == "application/json" for e in evictions)

    # The retry, once the job's pods were requeued: the cordon holds, only terminating pods are left.
    replay.requests.clear()
    again = k8s.ensure_drained("gpu-003", "xid 79 on GPU 3")
    assert not again.changed
    assert (again.node.state, again.node.raw_state, again.node.reason) == (
        "draining",  # until the terminating worker is gone
        "Ready,SchedulingDisabled",
        "xid 79 on GPU 3",
    )
    assert not replay.sent("PATCH") and not replay.sent("POST")


def test_resume_sends_what_kubectl_uncordon_sends():
    k8s, replay = adapter(
        {
            f"GET {NODE}": [(200, "node-gpu-003-cordoned.json"), (200, "node-gpu-003.json")],
            f"PATCH {NODE}": [(200, "node-gpu-003.json")],
            f"GET {PODS_ON_NODE}": [(200, "pods-none.json")],
        }
    )

    done = k8s.ensure_resumed("gpu-003")

    assert done.changed and done.node.state == "in_service"
    [patch] = replay.sent("PATCH")
    assert patch["body"] == {
        "spec": {"unschedulable": None},
        "metadata": {"annotations": {"fleetops.io/drain-reason": None}},
    }
    assert not k8s.ensure_resumed("gpu-003").changed
    assert len(replay.sent("PATCH")) == 1


def test_spares_are_found_by_label_and_moved_by_label_and_taint():
    k8s, replay = adapter(
        {
            "GET /api/v1/nodes?labelSelector=fleetops.io/pool=spare": [(200, "nodes-spare.json")],
            "GET /api/v1/pods?fieldSelector=spec.nodeName=gpu-007": [(200, "pods-none.json")],
            "GET /api/v1/pods?fieldSelector=spec.nodeName=gpu-008": [(200, "pods-none.json")],
            "GET /api/v1/nodes/gpu-007": [(200, "node-gpu-007.json"), (200, "node-gpu-007-main.json")],
            "PATCH /api/v1/nodes/gpu-007": [(200, "node-gpu-007-main.json")],
        }
    )

    spares = k8s.list_spares()
    assert [(s.name, s.state, s.raw_state, s.pool) for s in spares] == [
        ("gpu-007", "hot_spare", "Ready", "spare"),
        ("gpu-008", "suspect", "Unknown", "spare"),  # stopped reporting: not a spare to count on
    ]

    moved = k8s.ensure_in_pool("gpu-007", "main")
    assert moved.changed and (moved.node.state, moved.node.pool) == ("in_service", "main")
    [patch] = replay.sent("PATCH")
    assert patch["body"] == {
        "metadata": {"labels": {"fleetops.io/pool": "main"}, "resourceVersion": "48209954"},
        "spec": {"taints": []},  # the pool taint goes; the list is replaced whole, hence the resourceVersion
    }
    assert not k8s.ensure_in_pool("gpu-007", "main").changed


def test_requeue_moves_the_spare_into_the_pool_and_deletes_the_jobs_pods_once():
    k8s, replay = adapter(
        {
            # Read by: the test, requeue_job's look, the requeue itself, the outcome; then the repeat's look.
            f"GET {JOB}": [
                *[(200, "job-llama3-70b-pretrain.json")] * 4,
                (200, "job-llama3-70b-pretrain-restarted.json"),
            ],
            f"GET {JOB_PODS}": [*[(200, "pods-of-job.json")] * 3, (200, "pods-of-job-terminating.json")],
            "DELETE /api/v1/namespaces/train/pods/llama3-70b-pretrain-2-x7k2p": [(200, "pod-deleted.json")],
            "DELETE /api/v1/namespaces/train/pods/llama3-70b-pretrain-3-m9w4r": [(200, "pod-deleted.json")],
            f"GET {NODE}": [(200, "node-gpu-003-cordoned.json")],
            "GET /api/v1/nodes/gpu-007": [(200, "node-gpu-007.json"), (200, "node-gpu-007-main.json")],
            "PATCH /api/v1/nodes/gpu-007": [(200, "node-gpu-007-main.json")],
            "GET /api/v1/pods?fieldSelector=spec.nodeName=gpu-007": [(200, "pods-none.json")],
        }
    )

    job = k8s.job_status("train/llama3-70b-pretrain")
    assert (job.state, job.nodes, job.restart_count) == ("running", ["gpu-003", "gpu-004"], 0)

    done = k8s.requeue_job("train/llama3-70b-pretrain", seen_restart_count=0, exclude=["gpu-003"], onto=["gpu-007"])
    assert done.changed and done.job.state == "completing"
    assert [r["key"] for r in replay.requests if r["key"].split()[0] in ("PATCH", "DELETE")] == [
        "PATCH /api/v1/nodes/gpu-007",  # the spare first, so that the new pods can land on it
        "DELETE /api/v1/namespaces/train/pods/llama3-70b-pretrain-2-x7k2p",
        "DELETE /api/v1/namespaces/train/pods/llama3-70b-pretrain-3-m9w4r",
    ]

    # The same step again after the Job controller replaced the pods: status.failed moved on, nothing is deleted.
    again = k8s.requeue_job("train/llama3-70b-pretrain", seen_restart_count=0, exclude=["gpu-003"], onto=["gpu-007"])
    assert not again.changed and again.job.restart_count == 2
    assert len(replay.sent("DELETE")) == 2 and len(replay.sent("PATCH")) == 1


def test_jobs_say_how_they_ended_and_a_deleted_one_is_left_out():
    k8s, _ = adapter(
        {
            f"GET {JOB}": [(200, "job-llama3-70b-pretrain-failed.json")],
            f"GET {JOB_PODS}": [(200, "pods-none.json")],
            "GET /apis/batch/v1/namespaces/train/jobs/nope": [(404, "status-404-job.json")],
        }
    )

    jobs = k8s.jobs_status(["train/llama3-70b-pretrain", "train/nope"])

    assert list(jobs) == ["train/llama3-70b-pretrain"]  # deleted: how it ended is not known, so it is not said
    job = jobs["train/llama3-70b-pretrain"]
    assert (job.state, job.raw_state, job.restart_count) == ("failed", "Failed", 21)
    assert job.reason == "BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert job.ended_at == datetime(2026, 11, 29, 4, 12, 41, tzinfo=UTC)


def test_requeue_refuses_to_exclude_a_node_that_still_takes_pods():
    k8s, replay = adapter(
        {
            f"GET {JOB}": [(200, "job-llama3-70b-pretrain.json")],
            f"GET {JOB_PODS}": [(200, "pods-of-job.json")],
            f"GET {NODE}": [(200, "node-gpu-003.json")],
        }
    )
    with pytest.raises(RefusedError, match="gpu-003 is not cordoned"):
        k8s.requeue_job("train/llama3-70b-pretrain", exclude=["gpu-003"])
    assert not replay.sent("DELETE")


def test_health_checks_are_pods_pinned_to_the_node():
    k8s, replay = adapter(
        {
            f"GET {NODE}": [(200, "node-gpu-003-cordoned.json")],
            f"GET {CHECK_PODS}": [
                (200, "pods-none.json"),
                (200, "healthcheck-pods-passed.json"),
                (200, "healthcheck-pods-failed.json"),
            ],
            "POST /api/v1/namespaces/fleetops/pods": [(201, "healthcheck-pod-created.json")],
        }
    )

    started = k8s.health_check("gpu-003", "dcgm_diag_r1")

    assert (started.state, started.ref) == ("pending", "fleetops-hc-dcgm-diag-r1-7hq2x")
    [post] = replay.sent("POST")
    assert post["body"]["metadata"] == {
        "generateName": "fleetops-hc-dcgm-diag-r1-",
        "namespace": "fleetops",
        "labels": {"fleetops.io/health-check": "dcgm_diag_r1", "fleetops.io/node": "gpu-003"},
    }
    spec = post["body"]["spec"]
    assert spec["nodeName"] == "gpu-003"  # past the scheduler: it runs on a cordoned node
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["containers"][0]["command"] == ["/bin/sh", "-c", "dcgmi diag -r 1"]
    assert k8s.health_check_result("gpu-003", "dcgm_diag_r1").state == "passed"
    failed = k8s.health_check_result("gpu-003", "dcgm_diag_r1")
    assert (failed.state, failed.details) == ("failed", "exit code 1")


def test_errors_are_typed():
    k8s, _ = adapter(
        {
            "GET /api/v1/nodes/gpu-999": [(404, "status-404-node.json")],
            "GET /apis/batch/v1/namespaces/train/jobs/nope": [(404, "status-404-job.json")],
            f"GET {NODE}": [(200, "node-gpu-003.json")],
            f"PATCH {NODE}": [(403, "status-403-patch-node.json")],
            f"GET {PODS_ON_NODE}": [(503, "status-404-node.json")],
        }
    )

    with pytest.raises(NotFoundError, match=r'nodes "gpu-999" not found \(HTTP 404\)'):
        k8s.node_status("gpu-999")
    with pytest.raises(NotFoundError, match="jobs.batch"):
        k8s.job_status("train/nope")
    with pytest.raises(RefusedError, match='cannot patch resource "nodes"'):
        k8s.ensure_drained("gpu-003", "xid 79")
    with pytest.raises(TransientError, match="HTTP 503"):
        k8s.node_status("gpu-003")
    with pytest.raises(RefusedError, match="unknown pool"):
        k8s.ensure_in_pool("gpu-003", "gpu")


def test_an_api_server_that_does_not_answer_is_transient():
    k8s, replay = adapter({})

    def refuse(*args, **kwargs):
        raise urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes/gpu-003", OSError("Connection refused"))

    replay.request = refuse
    with pytest.raises(TransientError, match="did not answer"):
        k8s.node_status("gpu-003")


def test_dry_run_plans_name_the_requests():
    k8s, replay = adapter({})
    assert k8s.describe_plan("ensure_drained", name="gpu-003", reason="xid 79").startswith(
        'PATCH /api/v1/nodes/gpu-003 {"spec": {"unschedulable": true}, '
        '"metadata": {"annotations": {"fleetops.io/drain-reason": "xid 79"}}}; '
        "then POST /api/v1/namespaces/NS/pods/POD/eviction"
    )
    assert (
        k8s.describe_plan("ensure_resumed", name="gpu-003")
        == 'PATCH /api/v1/nodes/gpu-003 {"spec": {"unschedulable": null}}'
    )
    assert k8s.describe_plan("ensure_in_pool", name="gpu-007", pool="spare") == (
        "PATCH /api/v1/nodes/gpu-007: label fleetops.io/pool=spare, taint fleetops.io/pool=spare:NoSchedule"
    )
    assert k8s.describe_plan("requeue_job", job_id="train/llama3-70b-pretrain") == (
        "DELETE /api/v1/namespaces/train/pods/POD for each running pod of Job train/llama3-70b-pretrain"
    )
    assert k8s.describe_plan("list_spares") == "GET /api/v1/nodes?labelSelector=fleetops.io/pool=spare"
    assert not replay.requests  # a plan asks the cluster nothing


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("node-gpu-003.json", "V1Node"),
        ("node-gpu-003-cordoned.json", "V1Node"),
        ("node-gpu-007.json", "V1Node"),
        ("node-gpu-007-main.json", "V1Node"),
        ("nodes-spare.json", "V1NodeList"),
        ("pods-on-gpu-003.json", "V1PodList"),
        ("pods-on-gpu-003-draining.json", "V1PodList"),
        ("pods-of-job.json", "V1PodList"),
        ("pods-of-job-terminating.json", "V1PodList"),
        ("pods-none.json", "V1PodList"),
        ("pod-deleted.json", "V1Pod"),
        ("job-llama3-70b-pretrain.json", "V1Job"),
        ("job-llama3-70b-pretrain-restarted.json", "V1Job"),
        ("job-llama3-70b-pretrain-failed.json", "V1Job"),
        ("healthcheck-pod-created.json", "V1Pod"),
        ("healthcheck-pods-passed.json", "V1PodList"),
        ("healthcheck-pods-failed.json", "V1PodList"),
        ("eviction-201.json", "V1Status"),
        ("eviction-429-pdb.json", "V1Status"),
        ("status-404-node.json", "V1Status"),
        ("status-404-job.json", "V1Status"),
        ("status-403-patch-node.json", "V1Status"),
    ],
)
def test_recordings_use_only_fields_the_client_knows(name, model):
    """Each recording survives a round trip through the client's model: no invented or misspelt field."""
    text = (RECORDINGS / name).read_text()
    api = client.ApiClient()
    back = api.sanitize_for_serialization(api.deserialize(text, model, "application/json"))
    # The models write times as +00:00 where the API server writes Z.
    assert json.loads(re.sub(r'(\d{2}:\d{2}:\d{2})Z"', r'\1+00:00"', text)) == back


def test_every_recording_is_listed():
    listed = set(re.findall(r"\"([a-z0-9-]+\.json)\"", Path(__file__).read_text()))
    assert {path.name for path in RECORDINGS.glob("*.json")} == listed


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: gpu, cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: fleetops, user: {token: not-a-real-token}}]
contexts: [{name: gpu, context: {cluster: gpu, user: fleetops}}]
current-context: gpu
"""


def test_credentials_come_from_the_kubeconfig_and_api_url_replaces_its_server(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(KUBECONFIG)

    assert api_client_from(KubernetesConfig(kubeconfig=str(kubeconfig))).configuration.host == "https://10.0.0.1:6443"
    proxied = KubernetesConfig(kubeconfig=str(kubeconfig), host="http://127.0.0.1:8001")
    assert api_client_from(proxied).configuration.host == "http://127.0.0.1:8001"
    with pytest.raises(RefusedError, match="no Kubernetes credentials"):
        api_client_from(KubernetesConfig(kubeconfig=str(tmp_path / "missing")))
