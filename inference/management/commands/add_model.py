from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from inference.model_registry import model_name_from, model_register
from inference.protocol.model_folder import ModelFolderError


class Command(BaseCommand):
    help = "Register an existing MLX / Hugging Face format model folder."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--name", help="registry name (default: the folder name)")

    def handle(self, *args, path: Path, name: str | None, **options):
        try:
            record = model_register(name=name or model_name_from(path), path=path)
        except ModelFolderError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"registered {record.name} ({record.architecture}) at {record.path}")
