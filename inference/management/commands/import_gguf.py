from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from inference.gguf.convert import GGUFImportError
from inference.model_registry import model_import_gguf


class Command(BaseCommand):
    help = "Convert a GGUF file into an MLX model folder and register it."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--name", help="registry name (default: from the file name)")

    def handle(self, *args, path: Path, name: str | None, **options):
        try:
            record = model_import_gguf(gguf_path=path, name=name)
        except GGUFImportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"imported {record.name} ({record.quantization}) into {record.path}")
