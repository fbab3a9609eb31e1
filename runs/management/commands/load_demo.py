import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.demo import demo_events
from runs.domain.cloudevents import parse_events
from runs.services import events_ingest


class Command(BaseCommand):
    help = "Load a small simulated fleet through the event intake, and create the demo login."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--login", action="store_true", help="Also create (or reset) a demo superuser.")
        parser.add_argument("--username", default="demo")

    def handle(self, *args, seed, login, username, **options):
        events, problems = parse_events(demo_events(now=timezone.now(), seed=seed), max_batch=10**6)
        if problems:
            raise CommandError(f"demo events are invalid: {problems[:3]}")
        result = events_ingest(events=events)
        self.stdout.write(f"Demo fleet: {len(result.accepted)} events stored, {len(result.duplicates)} already there.")
        if not login:
            return
        password = secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": True})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(self.style.SUCCESS(f"Demo login: {username} / {password}"))
