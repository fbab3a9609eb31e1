from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.domain import trust
from runs.models import ApiToken

# A quarter: long enough that a node agent's token is not rotated every few weeks, short enough that a token
# copied somewhere it should not be stops working on its own. A token that never expires must be asked for.
DEFAULT_EXPIRES_IN_DAYS = 90


def _days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        raise CommandError(f"--expires-in: {value!r} is not a whole number of days") from None
    if not 1 <= days <= 3650:
        raise CommandError(f"--expires-in: {days} is outside 1..3650 days")
    return days


class Command(BaseCommand):
    help = "Create an API token and print it once; only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("name", help="What the token is for, e.g. 'slurm-prolog'.")
        parser.add_argument(
            "--scopes",
            default="events:write",
            help=f"Comma-separated, from: {', '.join(ApiToken.Scope.values)} (default: events:write).",
        )
        parser.add_argument(
            "--role",
            choices=trust.ROLES,
            default=trust.TRAINER,
            help="What it speaks for: scheduler (runs and nodes of its clusters), agent (its own node and GPUs), "
            "trainer (its runs; the default). Only schedulers and agents may send node and GPU state.",
        )
        parser.add_argument("--clusters", default="", help="Comma-separated cluster names (default: every cluster).")
        parser.add_argument("--node", default="", help="A node agent's own node (required with --role agent).")
        parser.add_argument(
            "--sources",
            default=None,
            help="Comma-separated CloudEvents sources it may use, each with what lies under it; '' for any. Default: "
            "what the shipped sender of its role uses (an agent fleetops-agent://CLUSTER/NODE, a scheduler "
            "slurm/CLUSTER for each of its clusters, a trainer fleetops-client:), which no other token may then use.",
        )
        parser.add_argument(
            "--quota-bytes",
            metavar="BYTES",
            type=int,
            default=None,
            help="Bytes of requests it may send per quota window, over EVENTS_QUOTA_BYTES_PER_WINDOW (the default); "
            "0: no limit. For a sender whose legitimate batches are larger than most.",
        )
        lifetime = parser.add_mutually_exclusive_group()
        lifetime.add_argument(
            "--expires-in",
            metavar="DAYS",
            default=None,
            help=f"Refuse the token after this many days (default: {DEFAULT_EXPIRES_IN_DAYS}).",
        )
        lifetime.add_argument("--no-expiry", action="store_true", help="The token never expires (until revoked).")

    def handle(self, *args, name, scopes, role, clusters, node, sources, quota_bytes, expires_in, no_expiry, **options):
        wanted = [s.strip() for s in scopes.split(",") if s.strip()]
        unknown = set(wanted) - set(ApiToken.Scope.values)
        if unknown or not wanted:
            raise CommandError(f"--scopes: unknown scope(s) {sorted(unknown)}; choose from {ApiToken.Scope.values}")
        days = None if no_expiry else _days(expires_in) if expires_in is not None else DEFAULT_EXPIRES_IN_DAYS
        if ApiToken.objects.filter(name=name).exists():
            raise CommandError(f"A token named {name!r} exists already.")
        row = ApiToken(name=name, scopes=wanted, role=role, clusters=_names(clusters), node=node.strip())
        row.sources = default_sources(row) if sources is None else _names(sources)
        row.quota_bytes = quota_bytes
        try:
            row.clean()
        except ValidationError as exc:
            problems = exc.message_dict.items()
            raise CommandError("; ".join(f"--{k.replace('_', '-')}: {' '.join(v)}" for k, v in problems)) from None
        row.expires_at = None if days is None else timezone.now() + timedelta(days=days)
        token = row.set_new_token()
        row.save()
        self.stdout.write(token)
        when = "never expires" if row.expires_at is None else f"expires {row.expires_at:%Y-%m-%d %H:%M} UTC"
        self.stderr.write(f"Token {name!r} ({', '.join(wanted)}; {row.bounds().describe()}) {when}.")


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def default_sources(row: ApiToken) -> list[str]:
    """The sources the shipped sender of the token's role posts from (docs/EVENTS.md, "Token bounds"): the node agent
    fleetops-agent://CLUSTER/NODE ("default" without --cluster), the Slurm hooks slurm/CLUSTER, the training client
    fleetops-client://RUN/rank-N. A scheduler bound to no cluster gets none: it may be any scheduler."""
    if row.role == trust.AGENT:
        return [f"fleetops-agent://{cluster}/{row.node}" for cluster in row.clusters or ["default"]]
    if row.role == trust.SCHEDULER:
        return [f"slurm/{cluster}" for cluster in row.clusters]
    return ["fleetops-client:"]
