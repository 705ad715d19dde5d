"""Each model's own sampling defaults, and what a request gets when it sets none.

For every field a request leaves out, the first of these that has a value wins:
the operator's `MLXLAB_DEFAULT_*`, then the model's `generation_config.json`, then the
fallback (temperature 0.7, as mlx-bun falls back; the rest off). Model authors publish
one temperature, the one for thinking turns: a turn with thinking off runs at most the
no-think cap unless the request or the operator set a temperature. The cap is the model's
own where it declares one (the registry's `no_think_temperature`), else
`MLXLAB_NO_THINK_TEMPERATURE`, the cap of a model that declares none (mlx-bun's generic
0.7). `enable_thinking`, unless the request says: the operator's `MLXLAB_THINKING`, then
the model's declared default (the registry's `thinking_default`), then the template's own.
Generation length: a chat without max_tokens runs to the end of the context, at most
65,536 tokens; a raw completion stops at 512; `MLXLAB_DEFAULT_MAX_TOKENS` caps both.
HLG tone-curve sampling (`hlg`): the request's fields over `MLXLAB_HLG_SAMPLING`'s, field
by field, then mlx-bun's 4/4/6/6, off unless one of them enables it (resolve_hlg).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from labsettings import lab_settings

from .protocol.sampling import HLG_DEFAULTS, resolve_hlg

# The fields a request, the operator and generation_config.json may each set.
FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# None: off (mlx-lm applies no repetition penalty at all, rather than a neutral 1.0).
FALLBACK = {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": None}
CHAT_MAX_TOKENS = 65_536  # mlx-bun's ceiling for a chat that sets no max_tokens
COMPLETION_MAX_TOKENS = 512  # a raw completion's default, as in mlx_lm.server


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request for one model gets for each field it leaves out, and from where."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float | None
    no_think_temperature: float  # the cap on a thinking-off turn's default temperature
    enable_thinking: bool | None  # for a request that does not say; None: the template's
    chat_max_tokens: int  # before the context's own room
    completion_max_tokens: int
    # What a request's `hlg` gets for each field it leaves out: enabled, and each knob.
    hlg: dict
    sources: dict[str, str]  # field -> "server", "model" or "fallback"

    def as_dict(self) -> dict:
        return asdict(self)


def model_generation_config(folder: Path) -> dict:
    """The sampling fields of the model's generation_config.json that are numbers."""
    path = Path(folder) / "generation_config.json"
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return {}
    return dict(_read(str(path), mtime))


@lru_cache(maxsize=64)
def _read(path: str, mtime: int) -> tuple:
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return ()
    if not isinstance(config, dict):
        return ()
    numbers = {
        name: config[name]
        for name in FIELDS
        if isinstance(config.get(name), int | float) and not isinstance(config[name], bool)
    }
    return tuple(sorted(numbers.items()))


def sampling_defaults(
    folder: Path | str, declared: ThinkingDeclaration | None = None
) -> SamplingDefaults:
    """The defaults of the model in `folder`; `declared`: what its registry row records
    about thinking (LanguageModel.thinking_declaration())."""
    server = {name: getattr(lab_settings, f"default_{name}") for name in FIELDS}
    model = model_generation_config(Path(folder))
    values, sources = {}, {}
    for name in FIELDS:
        for source, found in (("server", server), ("model", model), ("fallback", FALLBACK)):
            if found.get(name) is not None or source == "fallback":
                values[name], sources[name] = found[name], source
                break
    thinking = _thinking(declared or ThinkingDeclaration(), sources)
    cap = lab_settings.default_max_tokens
    return SamplingDefaults(
        **values,
        **thinking,
        chat_max_tokens=min(CHAT_MAX_TOKENS, cap) if cap else CHAT_MAX_TOKENS,
        completion_max_tokens=min(COMPLETION_MAX_TOKENS, cap) if cap else COMPLETION_MAX_TOKENS,
        hlg=_hlg(sources),
        sources=sources,
    )


def _hlg(sources: dict) -> dict:
    """The server's MLXLAB_HLG_SAMPLING with mlx-bun's defaults under it (its source into
    `sources`): what resolve_hlg gives a request's `hlg` for each field it leaves out."""
    server = lab_settings.hlg_sampling or {}
    sources["hlg"] = "server" if server else "fallback"
    knobs = {name: float(server.get(name, HLG_DEFAULTS[name])) for name in HLG_DEFAULTS}
    return {"enabled": bool(server.get("enabled", False)), **knobs}


def _thinking(declared: ThinkingDeclaration, sources: dict) -> dict:
    """The no-think cap (the model's over the server's generic one) and enable_thinking
    (the operator's over the model's, as mlx-bun applies a model's declarations under
    the server's settings); their sources go into `sources`."""
    cap = declared.no_think_temperature
    sources["no_think_temperature"] = "model" if cap is not None else "server"
    thinking, source = lab_settings.thinking, "server"
    if thinking is None:
        thinking, source = declared.enable_thinking, "model"
    sources["enable_thinking"] = source if thinking is not None else "fallback"
    return {
        "no_think_temperature": cap if cap is not None else lab_settings.no_think_temperature,
        "enable_thinking": thinking,
    }


@dataclass(frozen=True)
class ThinkingDeclaration:
    """What a model declares about thinking, in its generation_config.json: a default
    `enable_thinking` (`default_chat_template_kwargs`, the key vLLM's
    --default-chat-template-kwargs and model cards name) and `no_think_temperature`."""

    enable_thinking: bool | None = None
    no_think_temperature: float | None = None


def declared_thinking(folder: Path | str) -> ThinkingDeclaration:
    """The model's declaration, read once when it is registered; nothing when its
    generation_config.json is missing, unreadable or declares nothing usable."""
    try:
        config = json.loads((Path(folder) / "generation_config.json").read_text())
    except (OSError, ValueError):
        return ThinkingDeclaration()
    if not isinstance(config, dict):
        return ThinkingDeclaration()
    kwargs = config.get("default_chat_template_kwargs")
    thinking = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    cap = config.get("no_think_temperature")
    usable_cap = isinstance(cap, int | float) and not isinstance(cap, bool) and cap >= 0
    return ThinkingDeclaration(
        enable_thinking=thinking if isinstance(thinking, bool) else None,
        no_think_temperature=float(cap) if usable_cap else None,
    )


def apply_thinking_default(kwargs: dict, defaults: SamplingDefaults) -> dict:
    """The chat template's variables with enable_thinking resolved: the request's own
    (`null`: the template's own default, no other), else the defaults' (server, model)."""
    if "enable_thinking" in kwargs:
        if kwargs["enable_thinking"] is None:
            return {name: value for name, value in kwargs.items() if name != "enable_thinking"}
        return kwargs
    if defaults.enable_thinking is None:
        return kwargs
    return {**kwargs, "enable_thinking": defaults.enable_thinking}


def resolve(defaults: SamplingDefaults, explicit: dict, *, thinking: bool | None) -> dict:
    """The request's explicit fields over the defaults; a thinking-off turn's default
    temperature capped at the model's no-think value."""
    resolved = {name: getattr(defaults, name) for name in FIELDS}
    resolved = {name: value for name, value in resolved.items() if value is not None}
    if thinking is False and defaults.sources["temperature"] != "server":
        resolved["temperature"] = min(resolved["temperature"], defaults.no_think_temperature)
    hlg = resolve_hlg(explicit.get("hlg"), defaults.hlg)
    return {**resolved, **explicit, "hlg": hlg}
