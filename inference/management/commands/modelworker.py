"""Run one model worker in the foreground (the supervisor starts them the same way)."""
# ruff: noqa: E402  (the engine's imports below bring in mlx.core: the process is prepared first)

from __future__ import annotations

from inference.engine.process.startup import prepare_mlx_process

prepare_mlx_process()

from django.core.management.base import BaseCommand, CommandError

from inference.engine import EngineConfig, load_model
from inference.engine.acceleration.accelerator import use_kernel_cache
from inference.engine.acceleration.dense_weights import FastPathOptions
from inference.engine.caching.checkpoints import CheckpointConfig
from inference.engine.caching.prompt_cache import PromptCacheConfig
from inference.engine.process.companion import CompanionServer
from inference.engine.process.embedding_worker import EmbeddingWorkerServer
from inference.engine.process.worker import WorkerServer
from inference.engine.prompting.prompt import PromptLimits
from inference.model_registry import model_named
from inference.protocol.embedding_folder import embedding_support
from labsettings import lab_settings
from labsettings.parsers import reaches_beyond_loopback


def engine_config() -> EngineConfig:
    return EngineConfig(
        max_batch_size=lab_settings.max_batch_size,
        prefill_step_size=lab_settings.prefill_step_size,
        warm_up={"auto": None, "on": True, "off": False}[lab_settings.warm_up],
        prompt_cache=PromptCacheConfig(
            max_entries=lab_settings.prompt_cache_entries,
            max_bytes=lab_settings.prompt_cache_mb << 20,
            max_sessions=lab_settings.prompt_cache_sessions,
            disk_dir=lab_settings.prompt_cache_dir,
            disk_max_bytes=lab_settings.prompt_cache_disk_mb << 20,
        ),
        checkpoints=CheckpointConfig(
            folder=lab_settings.checkpoint_dir,
            every=lab_settings.checkpoint_every,
            max_bytes=lab_settings.checkpoint_mb << 20,
            max_age_seconds=lab_settings.checkpoint_max_age_seconds,
        ),
    )


def fast_path_options() -> FastPathOptions:
    return FastPathOptions(
        enabled=lab_settings.cpu_fast_path,
        dense_weight_budget_bytes=lab_settings.dense_weight_budget_mb << 20,
        weights=lab_settings.cpu_weights,
    )


def prompt_limits() -> PromptLimits:
    return PromptLimits(
        render_seconds=lab_settings.template_render_seconds,
        grammar_seconds=lab_settings.grammar_compile_seconds,
        grammar_cache_bytes=lab_settings.grammar_cache_mb << 20,
        grammar_enabled=lab_settings.grammar,
        fill=lab_settings.fill,
    )


class Command(BaseCommand):
    help = (
        "Serve one registered model at ADDRESS (ipc:///path.sock or tcp://host:port): a chat "
        "model's engine, or an embedding model's (its folder says which). "
        "Beyond loopback, MLXLAB_WORKER_SECRET is required: only peers holding it are served."
    )

    def add_arguments(self, parser):
        parser.add_argument("--model", required=True, help="a model name from the registry")
        parser.add_argument("--listen", required=True, help="ipc:///path.sock or tcp://host:port")
        parser.add_argument("--path", help="the model folder (default: the registry's)")
        parser.add_argument(
            "--exit-with-parent", action="store_true", help="exit when the parent process exits"
        )
        parser.add_argument(
            "--distributed", action="store_true",
            help="one rank of an mx.distributed ring (mlx.launch --backend ring): the model is "
            "sharded across the ranks; rank 0 serves at --listen",
        )  # fmt: skip
        parser.add_argument(
            "--companion", action="store_true",
            help="serve the model as a draft model's companion worker: drafts for its target's "
            "worker (speculative decoding), no generations",
        )  # fmt: skip

    def handle(self, *args, model: str, listen: str, path: str | None, **options):
        secret = lab_settings.worker_secret
        if not listen.startswith(("tcp://", "ipc://")):
            raise CommandError(f"--listen {listen}: not tcp://HOST:PORT or ipc:///path")
        if reaches_beyond_loopback(listen) and not secret:
            raise CommandError(
                f"refusing to listen on {listen} without MLXLAB_WORKER_SECRET: anyone who "
                "reaches that port could run generations (set the secret here and on the web tier)"
            )
        if path is None:
            record = model_named(model)
            if record is None:
                raise CommandError(f"no model named {model!r} in the registry")
            path = record.path
        if options["distributed"]:
            from inference.engine.process.distributed import DistributedWorker

            DistributedWorker(
                model=model, path=path, address=listen,
                secret=secret if listen.startswith("tcp://") else "",
                link_timeout=lab_settings.worker_link_timeout_seconds,
                padded_dir=lab_settings.var_dir / "sharded",
            ).serve_forever()  # fmt: skip
            return
        if options["companion"]:
            use_kernel_cache(lab_settings.kernel_cache_dir)
            CompanionServer(
                model=model, path=path, address=listen,
                exit_with_parent=options["exit_with_parent"],
            ).serve_forever()  # fmt: skip
            return
        embedding = embedding_support(path).spec
        if embedding is not None:
            EmbeddingWorkerServer(
                model=model, path=path, spec=embedding, address=listen,
                batch_tokens=lab_settings.embedding_batch_tokens,
                exit_with_parent=options["exit_with_parent"],
                secret=secret if listen.startswith("tcp://") else "",
                link_timeout=lab_settings.worker_link_timeout_seconds,
            ).serve_forever()  # fmt: skip
            return
        fast_path = fast_path_options()
        use_kernel_cache(lab_settings.kernel_cache_dir)
        WorkerServer(
            model=model,
            address=listen,
            loader=lambda: load_model(path, fast_path=fast_path),
            config=engine_config(),
            limits=prompt_limits(),
            exit_with_parent=options["exit_with_parent"],
            secret=secret if listen.startswith("tcp://") else "",
            link_timeout=lab_settings.worker_link_timeout_seconds,
        ).serve_forever()
