"""incidents.domain.playbooks: approval policy, circuit breaker, backoff, spare pool size."""

import math

import pytest

from incidents.domain.playbooks import (
    DRAIN_AND_REPLACE,
    PLAYBOOKS,
    SHRINK_AND_CONTINUE,
    approver_for,
    backoff_s,
    breaker_open,
    spares_needed,
)


def test_it_drains_automatically_at_high_severity_and_asks_oncall_otherwise():
    assert approver_for(action="drain", severity="SEV1") == ""
    assert approver_for(action="drain", severity="SEV4") == "oncall"
    assert approver_for(action="drain", severity=None) == "oncall"  # started by hand: the least automatic rule
    assert approver_for(action="resume", severity="SEV1") == "oncall"  # back to service always needs a person
    assert approver_for(action="read", severity="SEV4") == ""


def test_a_policy_can_require_an_admin():
    assert approver_for(action="drain", severity="SEV2", policy={"drain": {"SEV2": "admin"}}) == "admin"


def test_the_breaker_opens_past_the_share():
    assert not breaker_open(taken_out=3, fleet=100, max_share=0.05)  # 4 of 100
    assert breaker_open(taken_out=5, fleet=100, max_share=0.05)  # 6 of 100
    assert breaker_open(taken_out=0, fleet=0, max_share=0.5)


def test_backoff_doubles_and_caps():
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert backoff_s(20) == 60


@pytest.mark.parametrize(("rate", "repair_h", "target"), [(0.05, 48, 0.01), (0.3, 72, 0.001), (1.0, 24, 0.05)])
def test_the_spare_pool_is_the_smallest_that_meets_the_target(rate, repair_h, target):
    mean = rate * repair_h
    spares = spares_needed(failures_per_hour=rate, repair_hours=repair_h, target=target)

    def overflow(k):  # P(N > k) for N ~ Poisson(mean)
        return 1 - sum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(k + 1))

    assert overflow(spares) < target <= overflow(spares - 1)


def test_llama3_scale_needs_a_handful_of_spares():
    # 419 failures in 54 days is 0.32 an hour; a 2-day repair window means about 15.5 failures on average.
    spares = spares_needed(failures_per_hour=419 / (54 * 24), repair_hours=48, target=0.01)
    assert 20 <= spares <= 30


def test_drain_and_replace_drains_before_it_requeues():
    operations = [s["operation"] for s in DRAIN_AND_REPLACE["steps"]]
    assert operations.index("drain_node") < operations.index("requeue_job") < operations.index("send_to_repair")
    assert set(PLAYBOOKS) == {"drain-and-replace", "return-to-service", "shrink-and-continue"}


def test_shrink_and_continue_drains_and_chooses_before_it_shrinks_and_grows_back_only_onto_a_spare():
    operations = [s["operation"] for s in SHRINK_AND_CONTINUE["steps"]]
    order = ["drain_node", "choose_shrink", "shrink_job", "send_to_repair", "wait_spare", "grow_job"]
    assert [operations.index(op) for op in order] == sorted(operations.index(op) for op in order)
    assert operations[-1] == "wait_job_running" and SHRINK_AND_CONTINUE["steps"][-1]["full"]
    polled = next(s for s in SHRINK_AND_CONTINUE["steps"] if s["operation"] == "wait_spare")
    assert polled["poll_s"] > 0 and polled["wait_s"] >= 7 * 86400  # a repair takes days
