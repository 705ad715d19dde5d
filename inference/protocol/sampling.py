"""How a request samples and caches: the parameters the web side validates and the
worker obeys. Plain data, no MLX."""

from __future__ import annotations

from dataclasses import dataclass

# mlx_lm.server caps top_logprobs at 11 (it mirrors the OpenAI API's old limit).
MAX_TOP_LOGPROBS = 11
MAX_DRAFT_TOKENS = 64  # the most a request may ask for (num_draft_tokens)


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is picked; names and defaults follow mlx_lm.server."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    seed: int | None = None
    logit_bias: dict[int, float] | None = None
    repetition_penalty: float = 0.0
    repetition_context_size: int = 20
    presence_penalty: float = 0.0
    presence_context_size: int = 20
    frequency_penalty: float = 0.0
    frequency_context_size: int = 20
    hlg: HlgParams | None = None  # HLG tone-curve sampling (resolve_hlg); None: off

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0, "temperature must be at least 0"),
            (0 <= self.top_p <= 1, "top_p must be between 0 and 1"),
            (self.top_k >= 0, "top_k must be at least 0"),
            (0 <= self.min_p <= 1, "min_p must be between 0 and 1"),
            (0 <= self.xtc_probability <= 1, "xtc_probability must be between 0 and 1"),
            (0 <= self.xtc_threshold <= 1, "xtc_threshold must be between 0 and 1"),
            (self.repetition_penalty >= 0, "repetition_penalty must be at least 0"),
            (self.repetition_context_size >= 0, "repetition_context_size must be at least 0"),
            (self.presence_context_size >= 0, "presence_context_size must be at least 0"),
            (self.frequency_context_size >= 0, "frequency_context_size must be at least 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class HlgParams:
    """HLG tone-curve sampling, on (None is off): a logits processor reshapes each
    distribution by its logits' distance below the top one (engine/loop/hlg.py has the
    curve). The pivot sits `pivot_offset` below the top logit (mlx-bun's pivot "top");
    within `width` around it logits pass through; the `shoulder` compresses the head
    above that band, the `toe` the tail below it."""

    width: float = 4.0
    shoulder: float = 4.0
    toe: float = 6.0
    pivot_offset: float = 6.0

    def __post_init__(self) -> None:
        for name, value in self.knobs().items():
            problem = hlg_problem(name, value)
            if problem:
                raise ValueError(problem)

    def knobs(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in HLG_KNOBS}


# mlx-bun's HLG_DEFAULTS: what a knob is when neither the request nor the server sets it.
HLG_DEFAULTS = {"width": 4.0, "shoulder": 4.0, "toe": 6.0, "pivot_offset": 6.0}
HLG_KNOBS = tuple(HLG_DEFAULTS)
# Each knob's range, in logit units (nats). The shoulder and toe divide (a zero one would
# be a hard clip, and float32 loses a knob near 0 or past 1e38); no logit distance that
# matters comes near 1000. labsettings/parsers.py bounds MLXLAB_HLG_SAMPLING alike.
HLG_LIMITS = {"width": (0.0, 1000.0), "shoulder": (0.01, 1000.0), "toe": (0.01, 1000.0),
              "pivot_offset": (0.0, 1000.0)}  # fmt: skip


def hlg_problem(name: str, value) -> str | None:
    """What is wrong with `value` for knob `name` (its message names `hlg.<name>`), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"hlg.{name} must be a number"
    low, high = HLG_LIMITS[name]
    if not low <= value <= high:  # a NaN fails this too
        return f"hlg.{name} must be between {low:g} and {high:g}"
    return None


def resolve_hlg(request: dict | None, server: dict | None) -> HlgParams | None:
    """mlx-bun's resolveHlg: on when the request's `enabled`, else the server's, says so
    (off when neither does); then each knob the request's, else the server's, else
    HLG_DEFAULTS'. `request` and `server` hold the fields they set (None: unset)."""
    request, server = request or {}, server or {}

    def first(name: str, fallback):
        for source in (request, server):
            if source.get(name) is not None:
                return source[name]
        return fallback

    if not first("enabled", False):
        return None
    return HlgParams(**{name: float(first(name, HLG_DEFAULTS[name])) for name in HLG_KNOBS})


# mlx-lm's QuantizedKVCache packs 4 or 8 bits; its quantize takes these group sizes.
KV_BITS = (4, 8)
KV_GROUP_SIZES = (32, 64, 128)
DEFAULT_QUANTIZED_KV_START = 5000  # mlx-lm's generate default
MAX_KV_LAYERS = 1024  # kv_config entries: far above any model's layer count


@dataclass(frozen=True)
class KVLayer:
    """One layer's quantized keys and values: `bits` per element in groups of `group_size`."""

    bits: int
    group_size: int = 64

    def __post_init__(self) -> None:
        if self.bits not in KV_BITS:
            raise ValueError("kv_bits must be 4 or 8")
        if self.group_size not in KV_GROUP_SIZES:
            raise ValueError("kv_group_size must be 32, 64 or 128")

    @property
    def label(self) -> str:
        return f"{self.bits}-bit/{self.group_size}"


@dataclass(frozen=True)
class KVScheme:
    """A quantized KV cache once the sequence holds `start` tokens (unquantized until then):
    every layer `bits` in groups of `group_size`, as mlx-lm's kv_bits, kv_group_size and
    quantized_kv_start mean; or, with `layers` (mlx-bun's kv_config), each layer its own
    scheme, None keeping that layer plain."""

    bits: int | None = None
    group_size: int = 64
    start: int = DEFAULT_QUANTIZED_KV_START
    layers: tuple[KVLayer | None, ...] | None = None

    def __post_init__(self) -> None:
        if self.layers is None:
            KVLayer(self.bits, self.group_size)  # checks both
        elif self.bits is not None:
            raise ValueError("kv_config replaces kv_bits: a scheme has one or the other")
        elif not 0 < len(self.layers) <= MAX_KV_LAYERS:
            raise ValueError(f"kv_config must have between 1 and {MAX_KV_LAYERS} entries")
        if self.start < 0:
            raise ValueError("quantized_kv_start must be at least 0")

    def per_layer(self, count: int) -> tuple[KVLayer | None, ...]:
        """The scheme of each of a model's `count` layers (None: plain)."""
        if self.layers is None:
            return (KVLayer(self.bits, self.group_size),) * count
        if len(self.layers) != count:
            raise ValueError(
                f"kv_config must have one entry per layer: this model has {count}, "
                f"the request gave {len(self.layers)}"
            )
        return self.layers
