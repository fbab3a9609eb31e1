"""Kubernetes through the official client (package `kubernetes`), the way `kubectl drain` does it.

How the operations map:
- cordon: a strategic-merge PATCH of the Node, `spec.unschedulable: true`, with the reason in the annotation
  `fleetops.io/drain-reason` (Kubernetes keeps no reason of its own; kubectl shows annotations).
- drain: after the cordon, one policy/v1 Eviction per pod on the node, as kubectl drain does: DaemonSet pods
  (their controller ignores unschedulable and would put them back), mirror pods (the kubelet owns them),
  finished pods and pods already terminating are skipped. An eviction that a PodDisruptionBudget refuses
  (429) leaves the pod running and raises TransientError after the others were tried: the cordon holds, so
  the retry only evicts what is left.
- resume: PATCH `spec.unschedulable: null` (what kubectl uncordon sends) and drop the reason.
- pools: the label `fleetops.io/pool` (main, spare, repair). Spare and repair nodes also carry the taint
  `fleetops.io/pool=<pool>:NoSchedule`, so that ordinary pods stay off them. Taints are a list the server
  replaces whole, so the adapter reads the node and sends the full list with the resourceVersion it read:
  a concurrent change answers 409, which is transient.
- jobs are batch/v1 Jobs named "namespace/name". Requeue deletes the Job's pods (its own selector); the Job
  controller creates new ones, which the scheduler places on schedulable nodes. The pods are deleted, not
  evicted: restarting the job is the intent, and the budget that protects the job from a drain would
  otherwise block its own restart. restart_count is the Job's `status.failed` (deleted pods count as failed
  unless a podFailurePolicy ignores disruptions).
- health checks: a pod with `spec.nodeName` set (it skips the scheduler, so it runs on a cordoned node),
  tolerating every taint, running the check's command in `KubernetesConfig.check_image`; passed when the
  pod Succeeded. Labelled with the check and node, so the latest one is the result.

Errors: 404 is NotFoundError; 409, 429, 5xx and connection failures are TransientError; the rest (400, 401,
403, 422) are RefusedError, with the server's message.
"""

import hashlib
import json
import re
from dataclasses import dataclass, field

import urllib3
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from incidents.playbooks.clusters.base import (
    DEFAULT_HEALTH_CHECKS,
    OUT_OF_SERVICE,
    Census,
    ClusterAdapter,
    ClusterError,
    HealthCheck,
    JobStatus,
    NodeStatus,
    NotFoundError,
    Outcome,
    RefusedError,
    TransientError,
    check_command,
    check_pool,
    check_reason,
    unknown_operation,
)

POOL_LABEL = "fleetops.io/pool"
REASON_ANNOTATION = "fleetops.io/drain-reason"
CHECK_LABEL = "fleetops.io/health-check"
NODE_LABEL = "fleetops.io/node"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_TRANSIENT_STATUSES = {409, 429, 500, 502, 503, 504}


def classify(exc: Exception) -> ClusterError:
    """The typed error for what the client raised."""
    if isinstance(exc, ApiException):
        message = _message(exc)
        if exc.status == 404:
            return NotFoundError(message)
        if exc.status in _TRANSIENT_STATUSES:
            return TransientError(message)
        return RefusedError(message)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return TransientError(f"the Kubernetes API server did not answer: {exc}")
    return RefusedError(str(exc))


def _message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") or exc.reason or f"HTTP {exc.status}"
    causes = [c.get("message", "") for c in (body.get("details") or {}).get("causes") or [] if c.get("message")]
    return f"{message} {' '.join(causes)}".strip() + f" (HTTP {exc.status})"


@dataclass(frozen=True)
class KubernetesConfig:
    host: str = ""  # overrides the kubeconfig's server, e.g. a `kubectl proxy` at http://127.0.0.1:8001
    kubeconfig: str | None = None  # None: $KUBECONFIG or ~/.kube/config
    context: str | None = None
    namespace: str = "fleetops"  # where health-check pods run, and jobs named without a namespace live
    check_image: str = "nvcr.io/nvidia/cloud-native/dcgm:3.3.5-1-ubuntu22.04"
    health_checks: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_HEALTH_CHECKS))
    timeout_s: float = 30.0


def api_client_from(options: KubernetesConfig) -> client.ApiClient:
    """In-cluster credentials when running in a pod, the kubeconfig otherwise."""
    configuration = client.Configuration()
    try:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            kube_config.load_kube_config(
                config_file=options.kubeconfig, context=options.context, client_configuration=configuration
            )
    except (ConfigException, OSError) as exc:
        if not options.host:
            raise RefusedError(f"no Kubernetes credentials (in-cluster or kubeconfig): {exc}") from None
    if options.host:
        configuration.host = options.host
    return client.ApiClient(configuration)


class KubernetesAdapter(ClusterAdapter):
    def __init__(self, config: KubernetesConfig, api_client: client.ApiClient | None = None):
        self.config = config
        self._api_client = api_client

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._client())

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self._client())

    def _client(self) -> client.ApiClient:
        # Built on first use: a cluster row without credentials fails when a playbook touches it, not before.
        if self._api_client is None:
            self._api_client = api_client_from(self.config)
        return self._api_client

    def _call(self, method, *args, **kwargs):
        try:
            return method(*args, _request_timeout=self.config.timeout_s, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise classify(exc) from exc

    # -- reads

    def node_status(self, name: str) -> NodeStatus:
        node = self._call(self.core.read_node, name)
        return self._status(node, self._pods_on(name))

    def census(self) -> Census:
        nodes = self._call(self.core.list_node).items
        return Census(
            nodes=frozenset(node.metadata.name for node in nodes),
            out=frozenset(node.metadata.name for node in nodes if self._status(node, []).state in OUT_OF_SERVICE),
        )

    def list_spares(self) -> list[NodeStatus]:
        nodes = self._call(self.core.list_node, label_selector=f"{POOL_LABEL}=spare").items
        return [self._status(node, self._pods_on(node.metadata.name)) for node in nodes]

    def job_status(self, job_id: str) -> JobStatus:
        namespace, name = self._job_name(job_id)
        job = self._call(self.batch.read_namespaced_job, name, namespace)
        pods = self._job_pods(job)
        status = job.status
        conditions = {c.type: c for c in status.conditions or [] if c.status == "True"}
        end = conditions.get("Complete") or conditions.get("Failed")  # its time and reason: how the job ended
        if "Complete" in conditions:
            state, raw = "completed", "Complete"
        elif "Failed" in conditions:
            state, raw = "failed", "Failed"
        elif any(pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None for pod in pods):
            state, raw = "running", f"Active={status.active or 0}"
        elif any(pod.metadata.deletion_timestamp is not None for pod in pods):
            state, raw = "completing", "Terminating"
        else:
            state, raw = "pending", "Suspended" if job.spec.suspend else f"Active={status.active or 0}"
        nodes = sorted({p.spec.node_name for p in pods if p.spec.node_name and not _finished(p)})
        return JobStatus(
            f"{namespace}/{name}",
            state,
            raw,
            nodes=nodes,
            restart_count=status.failed or 0,
            ended_at=(end.last_transition_time or status.completion_time) if end else None,
            reason=": ".join(filter(None, (end.reason, end.message))) if end else "",
        )

    def health_check_result(self, name: str, check: str) -> HealthCheck:
        pods = self._check_pods(name, check)
        if not pods:
            raise NotFoundError(f"no run of health check {check!r} on {name} is known to Kubernetes")
        return self._check_result(name, check, pods[-1])

    # -- changes

    def ensure_drained(self, name: str, reason: str) -> Outcome:
        reason = check_reason(reason)
        node = self._call(self.core.read_node, name)
        did = []
        if not node.spec.unschedulable:
            body = {"spec": {"unschedulable": True}, "metadata": {"annotations": {REASON_ANNOTATION: reason}}}
            node = self._call(self.core.patch_node, name, body)
            did.append(f"cordoned {name}: {reason}")
        evicted, blocked = [], []
        for pod in self._pods_on(name):
            if not _evictable(pod) or pod.metadata.deletion_timestamp is not None:
                continue
            eviction = client.V1Eviction(
                api_version="policy/v1",
                kind="Eviction",
                metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace),
            )
            try:
                self._call(
                    self.core.create_namespaced_pod_eviction,
                    pod.metadata.name,
                    pod.metadata.namespace,
                    eviction,
                    # This endpoint's generated code drops _content_type; the API server would assume JSON anyway.
                    _headers={"Content-Type": "application/json"},
                )
            except NotFoundError:
                continue  # gone already
            except TransientError as exc:
                blocked.append(f"{pod.metadata.namespace}/{pod.metadata.name}: {exc}")
                continue
            evicted.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
        if evicted:
            did.append(f"evicted {', '.join(evicted)}")
        if blocked:
            done = f"{'; '.join(did)}; " if did else ""
            raise TransientError(f"{done}eviction refused for now: {'; '.join(blocked)}")
        if not did:
            reason_was = (node.metadata.annotations or {}).get(REASON_ANNOTATION, "no reason given")
            return Outcome(
                False, f"{name} was already cordoned and drained ({reason_was})", node=self.node_status(name)
            )
        return Outcome(True, "; ".join(did), node=self.node_status(name))

    def ensure_resumed(self, name: str) -> Outcome:
        node = self._call(self.core.read_node, name)
        if not node.spec.unschedulable:
            return Outcome(False, f"{name} was not cordoned", node=self._status(node, self._pods_on(name)))
        body = {"spec": {"unschedulable": None}, "metadata": {"annotations": {REASON_ANNOTATION: None}}}
        self._call(self.core.patch_node, name, body)
        return Outcome(True, f"uncordoned {name}", node=self.node_status(name))

    def ensure_in_pool(self, name: str, pool: str) -> Outcome:
        check_pool(pool)
        node = self._call(self.core.read_node, name)
        taints = [t for t in node.spec.taints or [] if t.key != POOL_LABEL]
        if pool != "main":
            taints.append(client.V1Taint(key=POOL_LABEL, value=pool, effect="NoSchedule"))
        current = (node.metadata.labels or {}).get(POOL_LABEL, "main")
        if current == pool and _taint_set(node.spec.taints) == _taint_set(taints):
            return Outcome(False, f"{name} was already in pool {pool}", node=self._status(node, self._pods_on(name)))
        body = {
            "metadata": {"labels": {POOL_LABEL: pool}, "resourceVersion": node.metadata.resource_version},
            "spec": {"taints": [_taint_body(t) for t in taints]},
        }
        self._call(self.core.patch_node, name, body)
        return Outcome(True, f"moved {name} to pool {pool} (label {POOL_LABEL}={pool})", node=self.node_status(name))

    def _requeue(self, job: JobStatus, *, exclude: list[str], onto: list[str], nodes: int | None = None) -> str:
        # A Job's pod template cannot change while it runs, so placement is the nodes' business: the excluded
        # ones must be cordoned (drain them first), the spares join the main pool (label and taint).
        if nodes is not None:
            # An indexed Job's completions and parallelism are its world size, fixed in its spec: resizing it is the
            # training operator's (an elastic PyTorchJob), which this adapter does not drive.
            raise RefusedError(f"job {job.job_id}: a Kubernetes Job's size is fixed in its spec; it cannot shrink here")
        for name in exclude:
            if not self._call(self.core.read_node, name).spec.unschedulable:
                raise RefusedError(f"{name} is not cordoned: drain it first, or the job's new pods may land on it")
        for name in onto:
            self.ensure_in_pool(name, "main")
        namespace, name = self._job_name(job.job_id)
        row = self._call(self.batch.read_namespaced_job, name, namespace)
        deleted = []
        for pod in self._job_pods(row):
            if _finished(pod) or pod.metadata.deletion_timestamp is not None:
                continue
            try:
                self._call(self.core.delete_namespaced_pod, pod.metadata.name, namespace)
            except NotFoundError:
                continue
            deleted.append(pod.metadata.name)
        return (
            f"deleted the pods of job {job.job_id} ({', '.join(deleted) or 'none left'}); its controller replaces them"
        )

    def health_check(self, name: str, check: str) -> HealthCheck:
        command = check_command(self.config.health_checks, check)
        self._call(self.core.read_node, name)
        pods = self._check_pods(name, check)
        if pods and not _finished(pods[-1]):
            return self._check_result(name, check, pods[-1])
        pod = self._call(self.core.create_namespaced_pod, self.config.namespace, self._check_pod(name, check, command))
        return self._check_result(name, check, pod)

    # -- dry run

    def describe_plan(self, operation: str, **args) -> str:
        name = args.get("name", "NODE")
        if operation == "ensure_drained":
            reason = args.get("reason", "REASON")
            body = {"spec": {"unschedulable": True}, "metadata": {"annotations": {REASON_ANNOTATION: reason}}}
            return (
                f"PATCH /api/v1/nodes/{name} {json.dumps(body)}; then POST /api/v1/namespaces/NS/pods/POD/eviction "
                f"(policy/v1) for each pod on {name} but DaemonSet, mirror and finished pods"
            )
        if operation == "ensure_resumed":
            return f'PATCH /api/v1/nodes/{name} {{"spec": {{"unschedulable": null}}}}'
        if operation == "ensure_in_pool":
            pool = args.get("pool", "POOL")
            taint = "no pool taint" if pool == "main" else f"taint {POOL_LABEL}={pool}:NoSchedule"
            return f"PATCH /api/v1/nodes/{name}: label {POOL_LABEL}={pool}, {taint}"
        if operation == "requeue_job":
            namespace, job = self._job_name(str(args.get("job_id", "NS/JOB")))
            steps = [self.describe_plan("ensure_in_pool", name=spare, pool="main") for spare in args.get("onto") or []]
            steps.append(
                f"DELETE /api/v1/namespaces/{namespace}/pods/POD for each running pod of Job {namespace}/{job}"
            )
            return "; ".join(steps)
        if operation in ("node_status", "list_spares", "job_status", "health_check_result"):
            namespace, job = self._job_name(str(args.get("job_id", "NS/JOB")))
            selector = f"{CHECK_LABEL}={args.get('check', 'CHECK')},{NODE_LABEL}={name}"
            return {
                "node_status": f"GET /api/v1/nodes/{name}; GET /api/v1/pods?fieldSelector=spec.nodeName={name}",
                "list_spares": f"GET /api/v1/nodes?labelSelector={POOL_LABEL}=spare",
                "job_status": f"GET /apis/batch/v1/namespaces/{namespace}/jobs/{job}; GET its pods",
                "health_check_result": (
                    f"GET /api/v1/namespaces/{self.config.namespace}/pods?labelSelector={selector}"
                ),
            }[operation]
        if operation == "health_check":
            check = args.get("check", "CHECK")
            command = self.config.health_checks.get(check, "<unknown check>")
            return (
                f"POST /api/v1/namespaces/{self.config.namespace}/pods: nodeName={name}, "
                f"image {self.config.check_image}, command {command!r}"
            )
        raise unknown_operation(operation)

    # -- helpers

    def _job_name(self, job_id: str) -> tuple[str, str]:
        namespace, _, name = job_id.rpartition("/")
        return namespace or self.config.namespace, name

    def _pods_on(self, name: str) -> list:
        return self._call(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={name}").items

    def _job_pods(self, job) -> list:
        labels = job.spec.selector.match_labels or {}
        selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        return self._call(self.core.list_namespaced_pod, job.metadata.namespace, label_selector=selector).items

    def _check_pods(self, name: str, check: str) -> list:
        selector = f"{CHECK_LABEL}={_label_value(check)},{NODE_LABEL}={_label_value(name)}"
        pods = self._call(self.core.list_namespaced_pod, self.config.namespace, label_selector=selector).items
        return sorted(pods, key=lambda pod: (pod.metadata.creation_timestamp, pod.metadata.name))

    def _check_pod(self, name: str, check: str, command: str) -> client.V1Pod:
        return client.V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=client.V1ObjectMeta(
                generate_name=f"fleetops-hc-{_dns_label(check, 30)}-",
                namespace=self.config.namespace,
                labels={CHECK_LABEL: _label_value(check), NODE_LABEL: _label_value(name)},
            ),
            spec=client.V1PodSpec(
                node_name=name,
                restart_policy="Never",
                tolerations=[client.V1Toleration(operator="Exists")],
                containers=[
                    client.V1Container(name="check", image=self.config.check_image, command=["/bin/sh", "-c", command])
                ],
            ),
        )

    @staticmethod
    def _check_result(name: str, check: str, pod) -> HealthCheck:
        phase = pod.status.phase if pod.status else None
        ref = pod.metadata.name or pod.metadata.generate_name or ""
        if phase == "Succeeded":
            return HealthCheck(name, check, "passed", ref=ref, details="exit code 0")
        if phase == "Failed":
            codes = [
                s.state.terminated.exit_code
                for s in pod.status.container_statuses or []
                if s.state and s.state.terminated is not None
            ]
            return HealthCheck(name, check, "failed", ref=ref, details=f"exit code {codes[0] if codes else '?'}")
        return HealthCheck(name, check, "running" if phase == "Running" else "pending", ref=ref, details=phase or "")

    @staticmethod
    def _status(node, pods: list) -> NodeStatus:
        labels = node.metadata.labels or {}
        annotations = node.metadata.annotations or {}
        pool = labels.get(POOL_LABEL, "main")
        ready = next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "Unknown")
        cordoned = bool(node.spec.unschedulable)
        workload = [pod for pod in pods if _evictable(pod)]
        if pool == "repair":
            state = "in_repair"
        elif cordoned:
            state = "draining" if workload else "cordoned"
        elif ready != "True":
            state = "suspect"
        elif pool == "spare":
            state = "hot_spare"
        else:
            state = "in_service"
        raw = {"True": "Ready", "False": "NotReady"}.get(ready, "Unknown") + (",SchedulingDisabled" if cordoned else "")
        jobs = sorted(
            {
                f"{pod.metadata.namespace}/{ref.name}"
                for pod in workload
                for ref in pod.metadata.owner_references or []
                if ref.kind == "Job"
            }
        )
        return NodeStatus(
            name=node.metadata.name,
            state=state,
            raw_state=raw,
            reason=annotations.get(REASON_ANNOTATION, "") if cordoned else "",
            jobs=jobs,
            pool=pool,
        )


def _finished(pod) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def _evictable(pod) -> bool:
    """Whether a drain moves this pod: not a DaemonSet's, not a mirror pod, not finished."""
    if any(ref.kind == "DaemonSet" for ref in pod.metadata.owner_references or []):
        return False
    if MIRROR_ANNOTATION in (pod.metadata.annotations or {}):
        return False
    return not _finished(pod)


def _taint_body(taint) -> dict:
    body = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        body["value"] = taint.value
    if taint.time_added is not None:
        body["timeAdded"] = taint.time_added.isoformat().replace("+00:00", "Z")
    return body


def _taint_set(taints) -> set[tuple]:
    return {(t.key, t.value, t.effect) for t in taints or []}


def _label_value(text: str) -> str:
    """A label value (63 characters of [A-Za-z0-9._-]); longer names keep a hash to stay distinct."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text).strip("-._")
    if len(value) > 63:
        value = value[:54].rstrip("-._") + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return value


def _dns_label(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")[:limit].rstrip("-") or "check"
