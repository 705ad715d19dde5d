"""One engine's knobs (EngineConfig) and the counters it keeps (EngineStats)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..caching.checkpoints import CheckpointConfig
from ..caching.prompt_cache import PromptCacheConfig

# Prompts prefilled together on the CPU: the setting the CPU figures were measured with.
CPU_PREFILL_BATCH_SIZE = 4


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of one engine; defaults suit a small CPU machine."""

    max_batch_size: int = 8
    # Prompts prefilled together; None: chosen for the device (for_device).
    prefill_batch_size: int | None = None
    prefill_step_size: int = 512
    prompt_cache: PromptCacheConfig = field(default_factory=PromptCacheConfig)
    checkpoints: CheckpointConfig = field(default_factory=CheckpointConfig)
    warm_up: bool | None = None  # compile the serving shapes before ready; None: on a GPU only
    # Speculative decoding (speculative.py): the most batch rows x positions one verifying
    # pass may hold (below the quantized kernel's BLAS threshold, so that a pass computes
    # each position as a plain step would), and whether attention runs query by query.
    max_verify_rows: int = 15
    exact_verification: bool = True

    def __post_init__(self) -> None:
        prefill = self.prefill_batch_size
        if self.max_batch_size < 1 or (prefill is not None and prefill < 1):
            raise ValueError("batch sizes must be at least 1")
        if self.prefill_step_size < 1:
            raise ValueError("prefill_step_size must be at least 1")
        if self.max_verify_rows < 0:
            raise ValueError("max_verify_rows must be at least 0")

    def for_device(self, gpu: bool) -> EngineConfig:
        """This config with the choices left to the device made; an explicit value stays.

        On a GPU a whole batch's prompts prefill in one group: mlx-lm's prefill waits on
        the device and clears MLX's buffer cache after every group, and rows joined the
        batch a group a step. On an H200 a 32-row run read 1.10-1.57x the tok/s of groups
        of 8 and 1.42-1.76x of 4, best of 3 each (docs/BENCHMARKS.md).
        """
        if self.prefill_batch_size is not None:
            return self
        size = self.max_batch_size if gpu else CPU_PREFILL_BATCH_SIZE
        return replace(self, prefill_batch_size=size)


@dataclass
class EngineStats:
    requests_completed: int = 0
    requests_failed: int = 0
    requests_cancelled: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    warm_up_seconds: float = 0.0
    kv_bytes: dict[str, int] = field(default_factory=dict)  # live KV cache bytes by scheme
    kv_peak_bytes: dict[str, int] = field(default_factory=dict)
    kv_peak_total: int = 0
    verify_steps: int = 0  # speculative decoding: verifying passes, drafted and kept tokens
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    fast_forwarded_tokens: int = 0  # of the accepted: a grammar's forced tokens
    draft_models: tuple[str, ...] = ()  # the draft models' folders loaded in this worker

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0
