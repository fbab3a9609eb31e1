"""Severity graded from impact (incidents/domain/severity.py): the thresholds and worked examples of docs/DOMAIN.md
section 6, at the default $2.50 a GPU-hour."""

import pytest

from incidents.domain.severity import SEV1, SEV2, Figures, Thresholds, describe, grade, more_severe

PRICE = 2.5


def _figures(gpus: int, runs: int, lost: float | None = None, **kwargs) -> Figures:
    return Figures(gpus_idled=gpus, runs_affected=runs, gpu_hours_lost=lost, usd_per_min=gpus * PRICE / 60, **kwargs)


@pytest.mark.parametrize(
    ("figures", "expected", "because"),
    [
        # docs/DOMAIN.md's worked examples
        (_figures(16, 1, 1.2), "SEV3", "below SEV2"),  # the README's 16-GPU run: $0.67/min
        (_figures(256, 1, 67.4), "SEV3", "below SEV2"),  # the demo's 256-GPU run, just stopped: $10.67/min
        (_figures(256, 1, 201.3), "SEV2", "201.3 GPU-h lost, SEV2 at 200 GPU-h"),  # the same, 47 min of it lost
        (_figures(512, 1, 0.0), "SEV2", "512 GPUs idled ($21.33/min), SEV2 at 512 GPUs ($21.33/min)"),
        (_figures(16, 2, 3.0), "SEV2", "2 runs affected, SEV2 at 2"),  # a switch took two small jobs down
        (_figures(16, 3, 3.0), "SEV1", "3 runs affected, SEV1 at 3"),
        (_figures(2048, 1, 0.0), "SEV1", "2,048 GPUs idled ($85.33/min), SEV1 at 1,024 GPUs ($42.67/min)"),
        (_figures(64, 1, 1024.0), "SEV1", "1,024.0 GPU-h lost, SEV1 at 1,000 GPU-h"),  # a 64-GPU run down 16 h
        (_figures(0, 0), "SEV4", "no GPU idled"),  # a node's warning, no run on it
        (_figures(0, 0, critical_alert=True), "SEV3", "a critical alert"),
    ],
)
def test_it_grades_the_documented_examples(figures, expected, because):
    graded = grade(figures, usd_per_gpu_hour=PRICE)
    assert graded.severity == expected
    assert because in graded.because


@pytest.mark.parametrize(
    ("gpus", "runs", "lost", "expected"),
    [
        (1024, 1, 0.0, "SEV1"),
        (1023, 1, 0.0, "SEV2"),
        (512, 1, 0.0, "SEV2"),
        (511, 1, 0.0, "SEV3"),
        (0, 3, 0.0, "SEV1"),
        (0, 2, 0.0, "SEV2"),
        (0, 1, 0.0, "SEV3"),
        (0, 0, 1000.0, "SEV1"),
        (0, 0, 999.9, "SEV2"),
        (0, 0, 200.0, "SEV2"),
        (0, 0, 199.9, "SEV3"),
        (0, 0, 0.1, "SEV3"),
        (1, 0, 0.0, "SEV3"),
        (0, 0, 0.0, "SEV4"),
    ],
)
def test_each_threshold_holds_at_its_edge(gpus, runs, lost, expected):
    assert grade(_figures(gpus, runs, lost), usd_per_gpu_hour=PRICE).severity == expected


def test_dollar_thresholds_grade_only_when_set():
    # 64 GPUs at $5 an hour burn $5.33 a minute: SEV3 by GPUs; with a $5 SEV2 threshold, SEV2.
    burning = Figures(gpus_idled=64, runs_affected=1, usd_per_min=5.33)
    assert grade(burning, usd_per_gpu_hour=5).severity == "SEV3"
    sev2 = Thresholds(gpus=512, runs=2, gpu_hours=200, usd_per_min=5)
    graded = grade(burning, sev2=sev2, usd_per_gpu_hour=5)
    assert (graded.severity, graded.because) == ("SEV2", "$5.33/min burning, SEV2 at $5.00/min")
    assert grade(burning, sev1=Thresholds(1024, 3, 1000, usd_per_min=5), usd_per_gpu_hour=5).severity == "SEV1"


def test_it_takes_thresholds_as_parameters():
    figures = _figures(64, 1)
    assert grade(figures, sev1=Thresholds(gpus=64, runs=3, gpu_hours=1000), usd_per_gpu_hour=PRICE).severity == "SEV1"
    assert grade(figures, sev2=Thresholds(gpus=64, runs=2, gpu_hours=200), usd_per_gpu_hour=PRICE).severity == "SEV2"


def test_thresholds_read_with_their_price():
    assert describe(SEV1, PRICE) == "1,024 GPUs ($42.67/min) idled, 3 runs affected or 1,000 GPU-h lost ($2,500)"
    assert describe(SEV2, PRICE) == "512 GPUs ($21.33/min) idled, 2 runs affected or 200 GPU-h lost ($500)"


def test_figures_in_words_leave_out_what_was_not_priced():
    assert _figures(256, 1, 67.4).words() == "256 GPUs idled ($10.67/min), 67.4 GPU-h lost, 1 run affected"
    assert _figures(256, 1).words() == "256 GPUs idled ($10.67/min), 1 run affected"


def test_more_severe_picks_the_worse():
    assert more_severe("SEV3", "SEV1") == more_severe("SEV1", "SEV3") == "SEV1"
    assert more_severe("SEV4", "SEV4") == "SEV4"
