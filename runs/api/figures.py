"""What the goodput, advice, levers and checkpoint I/O endpoints answer (runs/api/goodput.py), for the OpenAPI schema.

The views build their JSON by hand (report_json, advice_json, levers_json, checkpoint_io_json); these serializers only
declare it, field by field, with its type, whether it can be null and its unit. Nothing is serialized through them:
tests/test_figures_schema.py holds each endpoint's answer to the schema generated from them, undeclared keys
refused, so a figure added to a view and not here fails.

Units: seconds (`_s`); GPU-seconds where the fleet weighs its runs by their GPUs; GPU-hours; USD; fractions of
wall-clock time (goodput held in 0..1; a waste W can pass 1, where the first-order model has no answer); bytes; GB/s
(10^9 bytes a second); times ISO 8601 in UTC. No figure is a non-finite float: the renderer writes strict JSON (an
infinity would be a 500, not an answer), and the one the domain can give, a tier plan's waste where faults outrun
restarts, is written as null. The meaning of each figure: docs/DOMAIN.md sections 2 (goodput) and 3 (the interval,
tiers, levers, checkpoint I/O).
"""

from rest_framework import serializers

from runs.domain.goodput import STAGES

# What each badput stage holds (docs/DOMAIN.md section 2); every stage of the engine needs a line here.
STAGE_MEANINGS = {
    "detection": "Fault to detection",
    "rescheduling": "Detection to running again",
    "reload": "Running again to training again (processes start, the checkpoint loads)",
    "other": "Downtime none of detection, rescheduling and reload explains (the restart time unknown)",
    "rewound": "Work done after the checkpoint the restore loaded, lost with the fault and done again",
    "checkpoint": "Checkpoint writes blocking training, where no interruption owns the time",
    "shrunk": "Throughput lost training on fewer GPUs than the run's own (the missing GPUs' share)",
}
STAGE_KEYS = ", ".join(f"{stage}_s" for stage in STAGES)
TIME = "ISO 8601, UTC."


def _number(help_text: str, **kwargs) -> serializers.FloatField:
    return serializers.FloatField(help_text=help_text, **kwargs)


def _stages(name: str, *, unit: str, suffix: str, extra: tuple[tuple[str, str], ...] = ()) -> type:
    """A serializer with one figure a stage (in STAGES order), named stage + suffix, after the `extra` ones."""
    fields = {f"{key}{suffix}": _number(f"{what}, {unit}.") for key, what in extra}
    fields |= {f"{stage}{suffix}": _number(f"{STAGE_MEANINGS[stage]}, {unit}.") for stage in STAGES}
    return type(name, (serializers.Serializer,), fields)


RunBadputSerializer = _stages("RunBadputSerializer", unit="seconds", suffix="_s")
FleetBadputSerializer = _stages("FleetBadputSerializer", unit="GPU-seconds", suffix="_s")
FleetGpuHoursSerializer = _stages(
    "FleetGpuHoursSerializer",
    unit="GPU-hours",
    suffix="",
    extra=(("wall_clock", "Wall-clock time of the runs in the window"), ("productive", "Productive time")),
)


# -- goodput ---------------------------------------------------------------------------------------------------


class RunBreakdownSerializer(serializers.Serializer):
    """Where a run's wall-clock time went, in seconds: productive_s + the badput stages = wall_clock_s."""

    wall_clock_s = _number("Wall-clock time of the run inside the window, seconds.")
    productive_s = _number("Time spent on training progress that was kept, seconds.")
    goodput = _number("productive_s / wall_clock_s, a fraction 0..1 (0 for an empty window).")
    badput = RunBadputSerializer(help_text="The lost time by stage, seconds; keys: " + STAGE_KEYS + ".")
    interruptions = serializers.IntegerField(help_text="Faults in the window, a count.")


class FleetBreakdownSerializer(serializers.Serializer):
    """The fleet's runs together, weighted by their GPUs: GPU-seconds, and goodput weighted by GPU-hours."""

    wall_clock_s = _number("Wall-clock time of the runs inside the window, GPU-seconds.")
    productive_s = _number("Productive time kept, GPU-seconds.")
    goodput = _number("productive_s / wall_clock_s (GPU-hour weighted), a fraction 0..1 (0 for an empty window).")
    badput = FleetBadputSerializer(help_text="The lost time by stage, GPU-seconds; keys: " + STAGE_KEYS + ".")
    interruptions = serializers.IntegerField(help_text="Faults in the window over all runs, a count (not weighted).")


class RunDaySerializer(RunBreakdownSerializer):
    date = serializers.DateField(help_text="The UTC day (YYYY-MM-DD); the window's edge days counted in part.")


class FleetDaySerializer(FleetBreakdownSerializer):
    date = serializers.DateField(help_text="The UTC day (YYYY-MM-DD); the window's edge days counted in part.")


class FindingSerializer(serializers.Serializer):
    """A data-quality finding (docs/DOMAIN.md section 7): what the record will not believe, and how it was counted."""

    code = serializers.CharField(help_text="For machines, e.g. gpus_beyond_nodes, durable_time_implausible.")
    what = serializers.CharField(help_text="What was found, in words, with the figures.")
    at = serializers.DateTimeField(allow_null=True, help_text="When it happened, as the events say; " + TIME)
    events = serializers.ListField(child=serializers.CharField(), help_text="The events it rests on, 'source#id'.")
    resolution = serializers.CharField(help_text="How FleetOps counted it.")


class _RunFields(serializers.Serializer):
    run = serializers.CharField(help_text="The run's name.")
    gpus = serializers.IntegerField(
        help_text="The run's GPUs as every GPU-hour figure counts them (the most a run.started claimed, at most what "
        "its nodes hold)."
    )


class _RunGpusFields(_RunFields):
    gpus_claimed = serializers.IntegerField(
        allow_null=True, help_text="The most GPUs a run.started said; null before any said."
    )


class RunGoodputSerializer(_RunGpusFields, RunBreakdownSerializer):
    since = serializers.DateTimeField(
        help_text="The window's start: as asked, else the run's start (else now); " + TIME
    )
    until = serializers.DateTimeField(
        help_text="The window's end (exclusive): as asked, else the run's end or now; " + TIME
    )
    daily = RunDaySerializer(many=True, help_text="One breakdown a UTC day of the window, in seconds; adds up to it.")
    data_quality = FindingSerializer(
        many=True, help_text="The run's findings in the window the request names (all of them with none)."
    )


class FleetRunSerializer(_RunGpusFields, RunBreakdownSerializer):
    """One run of the fleet in its own seconds (not weighted)."""


class FleetGoodputSerializer(FleetBreakdownSerializer):
    since = serializers.DateTimeField(help_text="The window's start: as asked, else 30 days before until; " + TIME)
    until = serializers.DateTimeField(help_text="The window's end (exclusive): as asked, else now; " + TIME)
    daily = FleetDaySerializer(many=True, help_text="One breakdown a UTC day of the window, in GPU-seconds.")
    gpu_hours = FleetGpuHoursSerializer(
        help_text="The window's wall-clock, productive and each stage's time, GPU-hours; keys: wall_clock, "
        "productive, " + ", ".join(STAGES) + "."
    )
    runs = FleetRunSerializer(many=True, help_text="Every run that overlaps the window, by name, in its own seconds.")
    lost_gpu_hours_by_cause = serializers.DictField(
        child=serializers.FloatField(),
        help_text="GPU-hours lost to the interruptions whose fault is in the window, keyed by cause (the taxonomy's "
        "slugs, e.g. faulty_gpu, nic, unknown); only the causes seen.",
    )


# -- checkpoint advice -------------------------------------------------------------------------------------------


class CurvePointSerializer(serializers.Serializer):
    interval_s = _number("A checkpoint interval, seconds.")
    waste = _number("The first-order expected waste W there, a fraction of wall-clock time (can pass 1).")


class AdviceSerializer(serializers.Serializer):
    """The advisor's answer for one (delta, M, R): docs/DOMAIN.md section 3."""

    delta_s = _number("Blocking checkpoint cost delta, seconds.")
    mtbf_s = _number("Job mean time between failures M, seconds.")
    restart_s = _number("Restart cost R (detection + rescheduling + reload), seconds.")
    young_s = _number("Young's interval sqrt(2 delta M), seconds.")
    daly_s = _number("Daly's interval, seconds.")
    waste_at_young = _number("First-order expected waste W at Young's interval, a fraction of wall-clock (can pass 1).")
    waste_at_daly = _number("W at Daly's interval, a fraction of wall-clock (can pass 1).")
    goodput_at_daly = _number("1 - W at Daly's interval, held in 0..1.")
    floor = _number(
        "The least waste any interval reaches, sqrt(2 delta / M) + R / M, a fraction (1 or more: no answer)."
    )
    in_range = serializers.BooleanField(help_text="floor < 1: the first-order model has an answer.")
    current_s = _number("The interval in use, seconds; null without one.", allow_null=True)
    waste_at_current = _number("W at the interval in use, a fraction; null without one.", allow_null=True)
    goodput_at_current = _number("1 - W at the interval in use, 0..1; null without one.", allow_null=True)
    curve = CurvePointSerializer(
        many=True, help_text="W on 41 log-spaced intervals from a tenth to ten times the best."
    )


class AdviceSourcesSerializer(serializers.Serializer):
    delta_s = serializers.CharField(allow_null=True, help_text="'record', 'override', or null: unknown.")
    mtbf_s = serializers.CharField(allow_null=True, help_text="'record', 'override', or null: unknown.")
    restart_s = serializers.CharField(allow_null=True, help_text="'record', 'override', or null: unknown.")


class FailureRateSerializer(serializers.Serializer):
    """The fleet's failure rate per GPU, from its whole record up to now, with its exact Poisson interval."""

    failures = serializers.IntegerField(help_text="Unplanned interruptions in the fleet's record, a count.")
    gpu_hours = _number("GPU-hours the fleet's runs ran, GPU-hours.")
    per_gpu_hour = _number("failures / gpu_hours, failures per GPU-hour.")
    lower = _number("The confidence interval's lower bound, failures per GPU-hour.")
    upper = _number("The confidence interval's upper bound, failures per GPU-hour.")
    confidence = _number("The interval's confidence, a fraction (0.9).")


class ScalePointSerializer(serializers.Serializer):
    """The same job at another size, at the per-GPU failure rate its M implies (Kokolis et al.'s projection)."""

    gpus = serializers.IntegerField(help_text="The job's size, GPUs.")
    nodes = serializers.IntegerField(help_text="Its nodes, 8 GPUs a node.")
    mttf_s = _number("The job's mean time to failure 1 / (N_nodes r_f), seconds.")
    interval_s = _number("Daly's interval at that MTTF, seconds.")
    waste = _number("The first-order W at that interval, a fraction of wall-clock (can pass 1).")
    goodput = _number("1 - waste, a fraction; null where waste reaches 1.", allow_null=True)
    ettr = _number("Meta's expected ETTR there, a fraction; null outside its model's range.", allow_null=True)


class TierPlanSerializer(serializers.Serializer):
    fast_interval_s = _number("Training between two writes (a fast copy, or the durable one), seconds.")
    durable_every = serializers.IntegerField(help_text="Every m-th write durable, a count (1: every write durable).")
    durable_interval_s = _number("fast_interval_s x durable_every, seconds.")
    waste = _number(
        "Expected waste, a fraction of wall-clock time; null where faults come faster than the job restarts.",
        allow_null=True,
    )


class TierSourcesSerializer(serializers.Serializer):
    fast_s = serializers.CharField(help_text="'record', 'default' or 'override'.")
    durable_s = serializers.CharField(help_text="'record', 'default' or 'override'.")
    survive = serializers.CharField(help_text="'record', 'default' or 'override'.")
    fast_restart_s = serializers.CharField(help_text="'record', 'default' or 'override'.")
    durable_restart_s = serializers.CharField(help_text="'record', 'default' or 'override'.")


class TierAdviceSerializer(serializers.Serializer):
    """Two checkpoint tiers: a fast copy every few minutes beside a durable one (docs/DOMAIN.md section 3)."""

    fast_s = _number("Blocking of a fast-tier (memory or local) write, seconds.")
    durable_s = _number("Blocking of a durable write, seconds.")
    survive = _number("Share of faults the fast copy survives, a fraction 0..1.")
    fast_restart_s = _number("Fault to training again from a fast copy, seconds.")
    durable_restart_s = _number("Fault to training again from the durable copy, seconds.")
    mtbf_s = _number("Job mean time between failures M, seconds.")
    sources = TierSourcesSerializer(help_text="Where each input came from.")
    plan = TierPlanSerializer(help_text="The best pair of intervals.")
    one_tier = TierPlanSerializer(
        help_text="Every write durable, at its best interval: what the plan is weighed against."
    )


class RunAdviceSerializer(_RunFields):
    """advice, scale and tiers are there only when delta, M and R are all known; detail only when one is not."""

    sources = AdviceSourcesSerializer(help_text="Where delta_s, mtbf_s and restart_s came from.")
    missing = serializers.ListField(
        child=serializers.CharField(),
        help_text="Inputs neither the record nor the request gives: delta_s, mtbf_s, restart_s.",
    )
    failure_rate = FailureRateSerializer(required=False, help_text="Absent before the fleet has run a GPU-hour.")
    mtbf_range_s = serializers.ListField(
        child=serializers.FloatField(),
        min_length=2,
        max_length=2,
        required=False,
        help_text="[shortest, longest] job MTBF over the failure rate's interval, seconds; absent before the fleet has "
        "failed once, or for a run with no GPUs.",
    )
    advice = AdviceSerializer(allow_null=True, help_text="null when an input is missing.")
    detail = serializers.CharField(required=False, help_text="Only when advice is null: which inputs to pass.")
    scale = ScalePointSerializer(
        many=True,
        required=False,
        help_text="The job at 1,024 to 131,072 GPUs and its own size; absent when advice is null, empty where M is "
        "infinite or the run has no GPUs.",
    )
    tiers = TierAdviceSerializer(
        allow_null=True,
        required=False,
        help_text="The two-tier plan; absent when advice is null, null where none can be made.",
    )


# -- levers ----------------------------------------------------------------------------------------------------


class LeverSerializer(serializers.Serializer):
    lever = serializers.CharField(
        help_text="detection, rescheduling, reload, checkpoint, interval, lemons; or together (all but lemons)."
    )
    label = serializers.CharField(help_text="The lever in words.")
    target_s = _number(
        "The stage's target, seconds (checkpoint: the blocking of a write; interval: the interval); null for lemons "
        "and together.",
        allow_null=True,
    )
    affected = serializers.IntegerField(help_text="Stops or writes it changed, or faults it removed, a count.")
    goodput = _number("The run's goodput with the fix applied, a fraction 0..1.")
    returned_gpu_hours = _number("Badput the fix removes, GPU-hours.")
    returned_usd = _number("The same in USD, at usd_per_gpu_hour.")


class LeverTargetsSerializer(serializers.Serializer):
    """What each fix brings its stage down to; null leaves that lever out (nothing to measure it by)."""

    detection_s = _number("Detection target, seconds.", allow_null=True)
    rescheduling_s = _number("Rescheduling target, seconds.", allow_null=True)
    reload_s = _number("Reload target, seconds.", allow_null=True)
    blocking_s = _number("Blocking of a checkpoint write, seconds.", allow_null=True)
    interval_s = _number("Checkpoint interval, seconds.", allow_null=True)
    lemons = serializers.BooleanField(help_text="Whether lemon nodes are taken out.")


class LeverSourcesSerializer(serializers.Serializer):
    detection_s = serializers.CharField(help_text="'record', 'setting' or 'override'.")
    rescheduling_s = serializers.CharField(help_text="'record', 'setting' or 'override'.")
    reload_s = serializers.CharField(help_text="'record', 'setting' or 'override'.")
    blocking_s = serializers.CharField(help_text="'record', 'setting' or 'override'.")
    interval_s = serializers.CharField(help_text="'record', 'setting' or 'override'.")
    lemons = serializers.CharField(help_text="'record', 'setting' or 'override'.")


class RunLeversSerializer(serializers.Serializer):
    """A run that has not started answers only run, detail and an empty levers; the other fields need a start."""

    run = serializers.CharField(help_text="The run's name.")
    detail = serializers.CharField(required=False, help_text="Only for a run that has not started: nothing to weigh.")
    gpus = serializers.IntegerField(required=False, help_text="The run's GPUs, as its GPU-hours count them.")
    since = serializers.DateTimeField(required=False, help_text="The run's start; " + TIME)
    until = serializers.DateTimeField(
        required=False, help_text="The end of its record: its end, else now (no later than it was heard from); " + TIME
    )
    goodput = _number("The run's goodput over its whole record, a fraction 0..1.", required=False)
    lost_gpu_hours = _number("Its badput over the whole record, GPU-hours.", required=False)
    usd_per_gpu_hour = _number("The price of a GPU-hour the returns are counted at, USD.", required=False)
    mtbf_s = _number(
        "Job MTBF M (the advised interval's), seconds; null before the fleet has failed once.",
        allow_null=True,
        required=False,
    )
    targets = LeverTargetsSerializer(required=False, help_text="The targets each lever was taken at.")
    sources = LeverSourcesSerializer(required=False, help_text="Where each target came from.")
    levers = LeverSerializer(many=True, help_text="Each lever, the largest return first; empty before a start.")
    together = LeverSerializer(
        allow_null=True, required=False, help_text="Every fix but lemons at once; null when no lever applies."
    )
    floor = _number(
        "The share of the run's time all fixes together still lose, a fraction; null without together.",
        allow_null=True,
        required=False,
    )


# -- checkpoint I/O ----------------------------------------------------------------------------------------------


class NoteSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="For machines, e.g. drain_behind, never_durable, bytes_missing.")
    text = serializers.CharField(help_text="For people.")
    steps = serializers.ListField(child=serializers.IntegerField(), help_text="The steps it rests on (may be empty).")


class CheckpointWriteSerializer(serializers.Serializer):
    """A completed write, measured."""

    step = serializers.IntegerField(help_text="The training step written.")
    completed_at = serializers.DateTimeField(help_text="Its completion; " + TIME)
    tier = serializers.CharField(help_text="memory, local or durable.")
    blocking_s = _number("Training blocked for it, seconds (0 where the record says 0, a negative or not a number).")
    bytes = serializers.IntegerField(
        allow_null=True, help_text="The whole checkpoint, every rank's shard, bytes; null where the trainer said none."
    )
    bytes_per_rank = _number("bytes / ranks, bytes; null where bytes or ranks are unknown.", allow_null=True)
    bandwidth_gb_s = _number(
        "bytes_per_rank / blocking_s, GB/s a rank; null where either is unknown or it blocked for no time.",
        allow_null=True,
    )
    drain_s = _number(
        "Completion to durable, seconds; null where never durable (or durable before its completion).",
        allow_null=True,
    )


class CheckpointRecordSerializer(serializers.Serializer):
    """What the run's writes say: medians over the completed writes that have the figure, counts over all writes."""

    ranks = serializers.IntegerField(help_text="The run's world size, one rank a GPU.")
    completed = serializers.IntegerField(help_text="Completed writes, a count.")
    failed = serializers.IntegerField(help_text="Failed writes, a count.")
    lost = serializers.IntegerField(help_text="Writes started and never completed nor failed, a later one begun.")
    never_durable = serializers.IntegerField(help_text="Completed writes never durable (memory or local copies).")
    bytes = _number("Median checkpoint size, all ranks, bytes; null without one.", allow_null=True)
    bytes_per_rank = _number("Median bytes a rank, bytes; null without one.", allow_null=True)
    blocking_s = _number("Median blocking, seconds; null without a completed write.", allow_null=True)
    bandwidth_gb_s = _number("Median per-rank bandwidth, GB/s; null without one.", allow_null=True)
    drain_s = _number("Median completion to durable, seconds; null without one.", allow_null=True)
    drain_max_s = _number("Longest completion to durable, seconds; null without one.", allow_null=True)
    interval_s = _number(
        "The interval: the run's policy, else the median gap between its writes' starts, seconds; null without.",
        allow_null=True,
    )
    interval_source = serializers.CharField(allow_null=True, help_text="'policy', 'record', or null without one.")
    drains_over_interval = serializers.ListField(
        child=serializers.IntegerField(), help_text="Steps whose drain took longer than the interval."
    )
    blocking_trend_s = serializers.ListField(
        child=serializers.FloatField(),
        min_length=2,
        max_length=2,
        allow_null=True,
        help_text="[first third, last third] median blocking, seconds; null under 3 writes a third.",
    )
    last_durable_step = serializers.IntegerField(allow_null=True, help_text="The newest durable write's step, or null.")
    writes = CheckpointWriteSerializer(many=True, help_text="The completed writes, by completion.")


class CheckpointSourcesSerializer(serializers.Serializer):
    gpu_host = serializers.CharField(help_text="'override', 'cluster' or 'setting'.")
    nvme = serializers.CharField(help_text="'override', 'cluster' or 'setting'.")
    storage = serializers.CharField(help_text="'override', 'cluster' or 'setting'.")
    peer = serializers.CharField(help_text="'override', 'cluster' or 'setting'.")
    state_bytes = serializers.CharField(allow_null=True, help_text="'override', 'record', or null: unknown.")
    mtbf_s = serializers.CharField(allow_null=True, help_text="'record', or null: unknown.")
    restart_s = serializers.CharField(help_text="'record' (the run's median restart) or 'setting' (the default).")


class HopsSerializer(serializers.Serializer):
    gpu_host = _number("GPU to pinned host memory, GB/s a GPU.")
    nvme = _number("Host to local NVMe, GB/s a node.")
    storage = _number("Host to shared storage, GB/s, the file system's aggregate.")
    peer = _number("Host to a peer's host memory, GB/s a node.")


class DesignSerializer(serializers.Serializer):
    """One way to write the checkpoint, priced at the advisor's interval for its blocking."""

    design = serializers.CharField(help_text="sync, async, local or peer.")
    label = serializers.CharField(help_text="The design in words.")
    durable = serializers.BooleanField(help_text="Each write lands on shared storage.")
    blocking_s = _number("Training stands still, seconds.")
    background_s = _number("The copy after training resumed, until it is safe, seconds.")
    interval_s = _number("Daly's interval for the blocking, never shorter than the background copy, seconds.")
    overhead = _number("blocking_s / interval_s, a fraction of the run's time.")
    waste = _number("The first-order W at interval_s, a fraction of wall-clock (can pass 1).")
    storage_gb_s = _number("The shared storage's load from the run's writes, GB/s; 0 for local and peer.")
    limit = serializers.CharField(
        help_text="The hop that sets the blocking or the interval: gpu_host, nvme, storage, peer."
    )
    meets_target = serializers.BooleanField(help_text="overhead <= target.")
    target_interval_s = _number("The interval at which blocking / interval is the target, seconds.")
    waste_at_target = _number("W at target_interval_s, a fraction (can pass 1).")


class FrontPointSerializer(serializers.Serializer):
    delta_s = _number("A design's blocking write, seconds.")
    restart_s = _number("Restart cost R, seconds.")
    interval_s = _number("The interval of least waste for it, seconds.")
    waste = _number("W there, a fraction.")


class TodaySerializer(serializers.Serializer):
    interval_s = _number("The run's interval, seconds.")
    blocking_s = _number("Its median blocking, seconds.")
    waste = _number("The advisor's W there, a fraction.")


class CheckpointDesignsSerializer(serializers.Serializer):
    state_bytes = _number("The training state, all ranks, bytes.")
    ranks = serializers.IntegerField(help_text="Ranks writing, one a GPU.")
    gpus_per_node = serializers.IntegerField(help_text="GPUs a node.")
    bytes_per_rank = _number("state_bytes / ranks, bytes.")
    hops_gb_s = HopsSerializer(help_text="Each hop's bandwidth, GB/s; keys: gpu_host, nvme, storage, peer.")
    mtbf_s = _number("Job MTBF M, seconds.")
    restart_s = _number("Restart cost R, seconds.")
    target = _number("The share of the run's time the writes may cost, a fraction (0.01: 1%).")
    chosen = serializers.CharField(allow_null=True, help_text="The most durable design that meets the target, or null.")
    best = serializers.CharField(help_text="The design of least overhead.")
    shortfall = _number("best's overhead - target, a fraction; 0 when one meets it.")
    limit = serializers.CharField(help_text="The hop that limits the best design.")
    designs = DesignSerializer(many=True, help_text="sync, async, local, peer, in that order.")
    front = FrontPointSerializer(many=True, help_text="The Pareto front of interval against waste, by interval.")
    today = TodaySerializer(
        allow_null=True, help_text="Where the run sits now; null without an interval and a blocking."
    )


class RunCheckpointIOSerializer(_RunFields):
    since = serializers.DateTimeField(allow_null=True, help_text="The first write's completion, or null; " + TIME)
    until = serializers.DateTimeField(allow_null=True, help_text="The last write's completion, or null; " + TIME)
    as_of = serializers.DateTimeField(help_text="When this was computed (the cluster's load up to it); " + TIME)
    record = CheckpointRecordSerializer(help_text="The run's writes measured.")
    warnings = NoteSerializer(many=True, help_text="What a reliability lead must hear.")
    data_quality = NoteSerializer(many=True, help_text="Inconsistent or missing data, and how it was counted.")
    cluster_storage_load_gb_s = _number("What the cluster's other runs made durable over the last 24 h, GB/s.")
    sources = CheckpointSourcesSerializer(help_text="Where each input came from.")
    missing = serializers.ListField(
        child=serializers.CharField(), help_text="Inputs that leave the designs unpriced: state_bytes, mtbf_s, ranks."
    )
    designs = CheckpointDesignsSerializer(
        allow_null=True, help_text="The designs priced; null while missing is not empty."
    )
