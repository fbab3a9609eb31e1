"""How short retention may keep the per-rank samples (rank.step_time, rank.grad_norm): the one rule the settings
(EVENTS_RANK_RETENTION_HOURS) and runs.retention.events_prune both apply. Pure: standard library only."""

from datetime import timedelta

RANK_AGE_MIN = timedelta(hours=1)


def rank_age_check(age: timedelta, *, straggler_window_s: float, straggler_consecutive: int) -> None:
    """Refuse (ValueError) keeping rank samples for less than the detectors read back.

    The floor is an hour, or the straggler detector's span if longer: `straggler_consecutive` windows of
    `straggler_window_s` seconds of step times (STRAGGLER_WINDOW_S, STRAGGLER_CONSECUTIVE). The SDC detector reads
    the last 20 gradient norms by count, whatever their age; no setting gives that a duration, so the floor cannot
    follow it: the client's gradient-norm interval x 20 is what an age must cover for it to see all 20.
    """
    span = timedelta(seconds=straggler_window_s * straggler_consecutive)
    floor = max(RANK_AGE_MIN, span)
    if age < floor:
        raise ValueError(
            f"rank samples must be kept at least {floor / timedelta(hours=1):g} h, not "
            f"{age / timedelta(hours=1):g} h: the detectors read back an hour at least, and the straggler detector "
            f"{straggler_consecutive} windows of {straggler_window_s:g} s ({span / timedelta(hours=1):g} h)"
        )
