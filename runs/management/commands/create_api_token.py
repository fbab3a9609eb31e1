from django.core.management.base import BaseCommand, CommandError

from runs.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token and print it once; only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("name", help="What the token is for, e.g. 'slurm-prolog'.")
        parser.add_argument(
            "--scopes",
            default="events:write",
            help=f"Comma-separated, from: {', '.join(ApiToken.Scope.values)} (default: events:write).",
        )

    def handle(self, *args, name, scopes, **options):
        wanted = [s.strip() for s in scopes.split(",") if s.strip()]
        unknown = set(wanted) - set(ApiToken.Scope.values)
        if unknown or not wanted:
            raise CommandError(f"--scopes: unknown scope(s) {sorted(unknown)}; choose from {ApiToken.Scope.values}")
        if ApiToken.objects.filter(name=name).exists():
            raise CommandError(f"A token named {name!r} exists already.")
        row = ApiToken(name=name, scopes=wanted)
        token = row.set_new_token()
        row.save()
        self.stdout.write(token)
