"""Run one model worker in the foreground (the supervisor starts them the same way)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.engine import EngineConfig, load_model
from inference.engine.dense_weights import FastPathOptions
from inference.engine.prompt import PromptLimits
from inference.engine.prompt_cache import PromptCacheConfig
from inference.engine.worker import WorkerServer
from inference.model_registry import model_named


def engine_config() -> EngineConfig:
    options = settings.MLXLAB
    return EngineConfig(
        max_batch_size=options["MAX_BATCH_SIZE"],
        prefill_step_size=options["PREFILL_STEP_SIZE"],
        prompt_cache=PromptCacheConfig(
            max_entries=options["PROMPT_CACHE_ENTRIES"],
            max_bytes=options["PROMPT_CACHE_MB"] << 20,
        ),
    )


def fast_path_options() -> FastPathOptions:
    options = settings.MLXLAB
    return FastPathOptions(
        enabled=options["CPU_FAST_PATH"],
        dense_weight_budget_bytes=options["DENSE_WEIGHT_BUDGET_MB"] << 20,
    )


def prompt_limits() -> PromptLimits:
    options = settings.MLXLAB
    return PromptLimits(
        render_seconds=options["TEMPLATE_RENDER_SECONDS"],
        grammar_seconds=options["GRAMMAR_COMPILE_SECONDS"],
        grammar_cache_bytes=options["GRAMMAR_CACHE_MB"] << 20,
        grammar_enabled=options["GRAMMAR"],
    )


class Command(BaseCommand):
    help = "Serve one registered model at ADDRESS (ipc:///path.sock or tcp://host:port)."

    def add_arguments(self, parser):
        parser.add_argument("--model", required=True, help="a model name from the registry")
        parser.add_argument("--listen", required=True, help="ipc:///path.sock or tcp://host:port")
        parser.add_argument("--path", help="the model folder (default: the registry's)")
        parser.add_argument(
            "--exit-with-parent", action="store_true", help="exit when the parent process exits"
        )

    def handle(self, *args, model: str, listen: str, path: str | None, **options):
        if path is None:
            record = model_named(model)
            if record is None:
                raise CommandError(f"no model named {model!r} in the registry")
            path = record.path
        fast_path = fast_path_options()
        WorkerServer(
            model=model,
            address=listen,
            loader=lambda: load_model(path, fast_path=fast_path),
            config=engine_config(),
            limits=prompt_limits(),
            exit_with_parent=options["exit_with_parent"],
        ).serve_forever()
