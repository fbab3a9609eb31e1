"""adapter_for: the adapter a Cluster row asks for, configured from the row and settings (no cluster needed)."""

import pytest

from incidents.playbooks.clusters import RefusedError, SimulatedAdapter, SlurmAdapter, adapter_for
from runs.models import Cluster


def test_a_simulated_cluster_gets_the_simulated_adapter():
    cluster = Cluster(name="demo-slurm", scheduler=Cluster.Scheduler.SIMULATED)
    adapter = adapter_for(cluster)
    assert isinstance(adapter, SimulatedAdapter) and adapter.cluster is cluster


@pytest.mark.parametrize("api_url", ["/etc/slurm/slurm.conf", "file:///etc/slurm/slurm.conf"])
def test_a_slurm_cluster_reads_slurm_conf_from_api_url(api_url):
    adapter = adapter_for(Cluster(name="c", scheduler=Cluster.Scheduler.SLURM, api_url=api_url))
    assert isinstance(adapter, SlurmAdapter)
    assert adapter.config.slurm_conf == "/etc/slurm/slurm.conf"
    assert adapter.config.partitions == {"main": "gpu", "spare": "spare", "repair": "repair"}


def test_a_slurm_cluster_without_api_url_uses_settings_then_the_environment(settings, monkeypatch):
    cluster = Cluster(name="c", scheduler=Cluster.Scheduler.SLURM)
    monkeypatch.setenv("SLURM_CONF", "/srv/env/slurm.conf")
    assert adapter_for(cluster).config.slurm_conf == "/srv/env/slurm.conf"
    settings.SLURM_CONF = "/srv/settings/slurm.conf"
    settings.SLURM_PARTITIONS = {"main": "batch", "spare": "hot", "repair": "maint"}
    settings.CLUSTER_HEALTH_CHECKS = {"gpu_burn": "gpu_burn 60"}
    adapter = adapter_for(cluster)
    assert adapter.config.slurm_conf == "/srv/settings/slurm.conf"
    assert adapter.config.partitions["spare"] == "hot"
    assert adapter.config.health_checks == {"gpu_burn": "gpu_burn 60"}


def test_a_slurmrestd_url_is_refused():
    with pytest.raises(RefusedError, match="not a slurm.conf path"):
        adapter_for(Cluster(name="c", scheduler=Cluster.Scheduler.SLURM, api_url="http://slurm:6820"))


def test_a_kubernetes_cluster_connects_only_when_used(settings):
    settings.KUBERNETES_NAMESPACE = "ops"
    adapter = adapter_for(Cluster(name="k", scheduler=Cluster.Scheduler.KUBERNETES, api_url="http://127.0.0.1:8001"))
    assert type(adapter).__name__ == "KubernetesAdapter"
    assert (adapter.config.host, adapter.config.namespace) == ("http://127.0.0.1:8001", "ops")
    assert adapter._api_client is None  # no kubeconfig is read until a playbook needs the cluster


def test_an_unknown_scheduler_is_refused():
    with pytest.raises(RefusedError, match="cannot drive"):
        adapter_for(Cluster(name="x", scheduler="lsf"))
