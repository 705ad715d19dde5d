"""One engine's knobs (EngineConfig) and the counters it keeps (EngineStats)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checkpoints import CheckpointConfig
from .prompt_cache import PromptCacheConfig


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of one engine; defaults suit a small CPU machine."""

    max_batch_size: int = 8
    prefill_batch_size: int = 4
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
        if self.max_batch_size < 1 or self.prefill_batch_size < 1:
            raise ValueError("batch sizes must be at least 1")
        if self.prefill_step_size < 1:
            raise ValueError("prefill_step_size must be at least 1")
        if self.max_verify_rows < 0:
            raise ValueError("max_verify_rows must be at least 0")


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
