"""Cluster adapters: what a playbook does to a cluster, through its scheduler's own API.

`adapter_for(cluster)` picks the adapter by `Cluster.scheduler`. Where each finds its cluster:
- slurm: `Cluster.api_url` as the path of slurm.conf (or a file:// URL); blank: settings.SLURM_CONF or the
  environment's SLURM_CONF; neither: the clients' default (/etc/slurm/slurm.conf).
- kubernetes: in-cluster credentials, else the kubeconfig (settings.KUBECONFIG or $KUBECONFIG or
  ~/.kube/config); a non-blank `Cluster.api_url` replaces the kubeconfig's server.
- simulated: FleetOps' own record of the cluster (the demo).
Optional settings: CLUSTER_HEALTH_CHECKS (check name -> shell command), SLURM_PARTITIONS (pool -> partition),
SLURM_TIMEOUT_S (seconds a Slurm client call may take before it counts as a transient failure),
KUBERNETES_NAMESPACE and KUBERNETES_CHECK_IMAGE (for health-check pods).
"""

import os
from urllib.parse import urlparse

from django.conf import settings

from incidents.playbooks.clusters.base import (
    DEFAULT_HEALTH_CHECKS,
    ClusterAdapter,
    ClusterError,
    HealthCheck,
    JobStatus,
    NodeStatus,
    NotFoundError,
    Outcome,
    RefusedError,
    TransientError,
)
from incidents.playbooks.clusters.simulated import SimulatedAdapter
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig
from runs.models import Cluster

__all__ = [
    "ClusterAdapter",
    "ClusterError",
    "HealthCheck",
    "JobStatus",
    "NodeStatus",
    "NotFoundError",
    "Outcome",
    "RefusedError",
    "TransientError",
    "adapter_for",
]


def adapter_for(cluster: Cluster) -> ClusterAdapter:
    checks = dict(getattr(settings, "CLUSTER_HEALTH_CHECKS", None) or DEFAULT_HEALTH_CHECKS)
    if cluster.scheduler == Cluster.Scheduler.SLURM:
        partitions = getattr(settings, "SLURM_PARTITIONS", None) or SlurmConfig().partitions
        timeout_s = float(getattr(settings, "SLURM_TIMEOUT_S", None) or SlurmConfig().timeout_s)
        config = SlurmConfig(
            slurm_conf=_slurm_conf(cluster.api_url), partitions=partitions, health_checks=checks, timeout_s=timeout_s
        )
        return SlurmAdapter(config)
    if cluster.scheduler == Cluster.Scheduler.KUBERNETES:
        # Imported here: the client takes most of a second to import, which Slurm and demo users need not pay.
        from incidents.playbooks.clusters.kubernetes import KubernetesAdapter, KubernetesConfig

        options = {
            "namespace": getattr(settings, "KUBERNETES_NAMESPACE", None),
            "check_image": getattr(settings, "KUBERNETES_CHECK_IMAGE", None),
        }
        return KubernetesAdapter(
            KubernetesConfig(
                host=cluster.api_url.strip(),
                kubeconfig=getattr(settings, "KUBECONFIG", None) or None,
                health_checks=checks,
                **{key: value for key, value in options.items() if value},
            )
        )
    if cluster.scheduler == Cluster.Scheduler.SIMULATED:
        return SimulatedAdapter(cluster)
    raise RefusedError(f"cluster {cluster.name} has scheduler {cluster.scheduler!r}, which FleetOps cannot drive")


def _slurm_conf(api_url: str) -> str | None:
    url = (api_url or "").strip()
    if url.startswith("file://"):
        return urlparse(url).path
    if url.startswith("/"):
        return url
    if url:
        raise RefusedError(
            f"Slurm cluster api_url {url!r} is not a slurm.conf path: FleetOps drives Slurm through scontrol "
            "(slurmrestd 22.05 cannot change node state), which needs the path of slurm.conf"
        )
    return getattr(settings, "SLURM_CONF", None) or os.environ.get("SLURM_CONF") or None
