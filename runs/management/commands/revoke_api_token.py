from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.models import ApiToken


class Command(BaseCommand):
    help = "Revoke an API token by name: it is refused (401) from now on. The row stays, for the record."

    def add_arguments(self, parser):
        parser.add_argument("name", help="The token's name, as given to create_api_token.")

    def handle(self, *args, name, **options):
        row = ApiToken.objects.filter(name=name).first()
        if row is None:
            raise CommandError(f"No token named {name!r}.")
        # A conditional update: revoking twice keeps the first revocation's time.
        if ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) == 0:
            row.refresh_from_db()
            self.stdout.write(f"Token {name!r} was already revoked at {row.revoked_at:%Y-%m-%d %H:%M:%S} UTC.")
            return
        self.stdout.write(f"Token {name!r} revoked.")
