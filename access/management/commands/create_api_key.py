"""Create an API key for a user and print it once."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from access.api_keys import api_key_create


class Command(BaseCommand):
    help = (
        "Create an API key for a user and print it (only its digest is stored: copy it now). "
        "An unknown user is an error unless --create-user is given, so a typo makes no account."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="the username the key acts for")
        parser.add_argument("--label", default="", help="a note telling keys apart")
        parser.add_argument(
            "--rpm", type=int, help="requests per minute (default: MLXLAB_RATE_LIMIT_RPM; 0: none)"
        )
        parser.add_argument(
            "--tpm", type=int, help="tokens per minute (default: MLXLAB_RATE_LIMIT_TPM; 0: none)"
        )
        parser.add_argument(
            "--create-user",
            action="store_true",
            help="create the user if missing (no password: it can use keys, not log in)",
        )

    def handle(self, *args, user: str, label: str, create_user: bool, rpm, tpm, **options) -> None:
        if any(limit is not None and limit < 0 for limit in (rpm, tpm)):
            raise CommandError("--rpm and --tpm are counts: 0 or more")
        owner = User.objects.filter(username=user).first()
        if owner is None:
            if not create_user:
                raise CommandError(
                    f"no user named '{user}': create it (manage.py createsuperuser) "
                    "or pass --create-user"
                )
            owner = User.objects.create_user(username=user)  # an unusable password
            self.stderr.write(f"created user '{user}' (no password; API keys only)")
        key, raw = api_key_create(user=owner, label=label[:100], rpm=rpm, tpm=tpm)
        self.stderr.write(f"API key {key.prefix}… for '{user}' - shown once, store it now:")
        self.stdout.write(raw)
