"""The circuit breaker counts what FleetOps itself drained, not only what the record's node states say (issue 15):
forged node.state events cannot talk it into draining the fleet; and it has an absolute cap and a drain rate."""

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from incidents.domain.playbooks import breaker_reason
from incidents.models import PlaybookExecution, StepExecution
from incidents.playbooks import breaker
from incidents.playbooks.clusters.base import Census, RefusedError
from incidents.playbooks.clusters.simulated import SimulatedAdapter
from runs.models import Cluster, Node

pytestmark = pytest.mark.django_db


def test_the_reason_names_the_limit_that_opened():
    ok = {"taken_out": 1, "fleet": 100, "max_share": 0.05, "max_nodes": 64, "drains_in_window": 0, "max_drains": 8}
    assert breaker_reason(**ok) is None
    assert "over the 5% cap" in breaker_reason(**{**ok, "taken_out": 5})
    assert "take 4 nodes out of service, over the cap of 3" in breaker_reason(
        **{**ok, "fleet": 10_000, "taken_out": 3, "max_nodes": 3}
    )
    assert "drain number 9 in the last hour, over the cap of 8" in breaker_reason(**{**ok, "drains_in_window": 8})


def test_a_refusal_states_the_numbers_that_refused():
    """Issue 46: "0 of 2 nodes already out of service (at most 5%)" refused a drain without saying why: it was the
    drain itself, 1 of 2 = 50%. The reason says so, and every figure beside it: out now, drains this hour, the caps."""
    why = breaker_reason(taken_out=0, fleet=2, max_share=0.05, max_nodes=64, drains_in_window=3, max_drains=8)
    assert why.startswith("the drain would take 1 of 2 nodes out of service, 50%, over the 5% cap")
    assert "out of service now: 0 of 2; with this drain: 1 of 2 = 50%" in why
    assert "drains by FleetOps in the last hour: 3" in why
    assert "caps: 5% of the cluster, 64 nodes out, 8 drains an hour" in why
    small = breaker_reason(taken_out=1, fleet=40, max_share=0.025, max_nodes=64, drains_in_window=0, max_drains=8)
    assert "2 of 40 nodes out of service, 5%, over the 2.5% cap" in small  # not rounded to a whole percent


def _fleet(n: int = 40) -> Cluster:
    cluster = Cluster.objects.create(name="c1")
    Node.objects.bulk_create([Node(hostname=f"x{i:02d}", cluster=cluster) for i in range(n)])
    return cluster


def _step(node: Node, name: str, ago: timedelta) -> None:
    at = timezone.now() - ago
    execution = PlaybookExecution.objects.create(
        playbook="drain-and-replace" if name == "drain" else "return-to-service",
        definition={},
        node=node,
        status="succeeded",
        started_by="fleetops",
        started_at=at,
        finished_at=at,
    )
    StepExecution.objects.create(execution=execution, index=0, name=name, status="succeeded", finished_at=at)


class SchedulerSays(SimulatedAdapter):
    """The simulated cluster, whose scheduler also holds `held` out of work whatever the record says."""

    def __init__(self, cluster, held=()):
        super().__init__(cluster)
        self.held = set(held)

    def census(self) -> Census:
        census = super().census()
        return Census(nodes=census.nodes, out=census.out | self.held)


def _drain(cluster, hostname: str, held=()) -> None:
    execution = SimpleNamespace(node=Node.objects.get(hostname=hostname), incident_id=None)
    breaker.check(execution=execution, cluster=cluster, adapter=SchedulerSays(cluster, held))


@pytest.mark.reliability(
    "Forged node.state events marking the nodes FleetOps drained back in service, so that more can be drained",
    how="a 40-node cluster (5% share: 2 nodes), two nodes drained by FleetOps and then reported in service, a third "
    "drain asked for",
    outcome="refused: the two stay counted until they come back through return-to-service (before: the breaker "
    "counted the reported states only, and three rounds drained 8 of 40 nodes)",
)
def test_nodes_fleetops_drained_stay_counted_whatever_is_reported(settings):
    cluster = _fleet()
    for hostname in ("x00", "x01"):
        _step(Node.objects.get(hostname=hostname), "drain", timedelta(hours=2))
    Node.objects.filter(hostname__in=["x00", "x01"]).update(state="in_service")  # what the forged events say
    with pytest.raises(RefusedError, match="out of service now: 2 of 40; with this drain: 3 of 40"):
        _drain(cluster, "x02")
    _step(Node.objects.get(hostname="x00"), "return to spares", timedelta(hours=1))  # back through the gate
    _drain(cluster, "x02")  # 1 out + this one = 5%: allowed


def test_an_absolute_cap_and_a_drain_rate_beside_the_share(settings):
    cluster = _fleet(2000)
    settings.PLAYBOOK_MAX_OUT_NODES = 3
    Node.objects.filter(hostname__in=["x00", "x01", "x02"]).update(state="in_repair")
    with pytest.raises(RefusedError, match="take 4 nodes out of service, over the cap of 3"):
        _drain(cluster, "x03")
    Node.objects.update(state="in_service")
    settings.PLAYBOOK_MAX_OUT_NODES, settings.PLAYBOOK_MAX_DRAINS_PER_HOUR = 64, 2
    for hostname in ("x10", "x11"):
        node = Node.objects.get(hostname=hostname)
        _step(node, "drain", timedelta(minutes=20))
        _step(node, "return to spares", timedelta(minutes=10))  # back already: out of service no more
    with pytest.raises(RefusedError, match="drains by FleetOps in the last hour: 2; caps: .*, 2 drains an hour"):
        _drain(cluster, "x12")


def test_the_schedulers_own_view_counts_beside_the_record():
    cluster = _fleet()  # 40 nodes, 5%: 2 out at most
    _drain(cluster, "x02", held=["x00"])  # 1 out + this one: allowed
    with pytest.raises(RefusedError, match="out of service now: 2 of 40"):
        _drain(cluster, "x02", held=["x00", "x01"])  # the record says all in service; the scheduler does not


def test_a_clusters_own_share_replaces_the_default():
    """A 40-node cluster at the default 5 % may have two nodes out: its own share (Cluster.max_out_share) lets it
    hold a usual day's repairs and still drain, and only it."""
    cluster, other = _fleet(), Cluster.objects.create(name="c2")
    Node.objects.bulk_create([Node(hostname=f"y{i:02d}", cluster=other, state="in_service") for i in range(40)])
    Node.objects.filter(hostname__in=["x00", "x01", "x02", "x03", "x04"]).update(state="in_repair")
    Node.objects.filter(hostname__in=["y00", "y01", "y02", "y03", "y04"]).update(state="in_repair")
    with pytest.raises(RefusedError, match="6 of 40 nodes out of service, 15%, over the 5% cap"):
        _drain(cluster, "x05")
    Cluster.objects.filter(pk=cluster.pk).update(max_out_share=0.2)
    cluster.refresh_from_db()
    _drain(cluster, "x05")  # 6 of 40 = 15 %: allowed
    with pytest.raises(RefusedError, match="over the 5% cap"):
        _drain(other, "y05")  # the other cluster keeps the default
    Node.objects.filter(hostname__in=["x05", "x06", "x07"]).update(state="in_repair")
    with pytest.raises(RefusedError, match="9 of 40 nodes out of service, 22.5%, over the 20% cap"):
        _drain(cluster, "x08")  # 9 of 40 > 20 %
