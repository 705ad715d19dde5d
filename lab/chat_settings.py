"""The chat page's settings, turned into the ChatCall every surface of the lab shares.

The page's fields carry the API's names, and are read by the API's own readers
(inference.chat), so the page and the API refuse the same values with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.chat import fields
from inference.chat.call import ChatCall
from inference.chat.messages import normalise_messages, template_kwargs
from inference.chat.structured import parse_structured_output

SAMPLING_FIELDS = {
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": int,
    "min_p": (int, float),
    "max_tokens": int,
    "repetition_penalty": (int, float),
    "seed": int,
}
# Speculative decoding (docs/API.md, "Speculative decoding"): "ngram", "none" or a model's
# name, and the most drafts a step; empty on the page: the model's own default draft.
DRAFT_FIELDS = {"draft_model": str, "num_draft_tokens": int}
# The KV cache (docs/API.md, "Quantized KV cache"): uniform, or one scheme per layer.
KV_FIELDS = {"kv_bits": int, "kv_group_size": int, "quantized_kv_start": int, "kv_config": list}


class ChatInputError(ValueError):
    """A message from the page that cannot be acted on; the text is shown to the user."""


@dataclass(frozen=True)
class ChatSettings:
    model: str | None
    system_prompt: str
    params: dict = field(default_factory=dict)
    thinking: bool | None = None
    structured: dict | None = None
    adapter: str | None = None

    def saved(self) -> dict:
        """What the conversation remembers for the next visit."""
        return {
            **self.params,
            "thinking": self.thinking,
            "structured": self.structured,
            "adapter": self.adapter,
        }


def _text(message: dict, name: str, *, required: bool = False) -> str:
    value = message.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ChatInputError(
            f"{name} must be a non-empty string" if required else f"{name} must be a string"
        )
    return value


def _params(raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ChatInputError("params must be an object")
    params = {}
    for name, value in raw.items():
        if value is None or value == "":
            continue  # left empty on the page: the server's default
        if name == "stop":
            if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
                raise ChatInputError("stop must be a list of non-empty strings")
            params["stop"] = value
        elif name in SAMPLING_FIELDS or name in DRAFT_FIELDS or name in KV_FIELDS:
            params[name] = value  # types and ranges are checked by the API's parser
        else:
            raise ChatInputError(f"unknown parameter {name!r}")
    return params


def _structured(raw) -> dict | None:
    if raw is None:
        return None
    kind = raw.get("kind") if isinstance(raw, dict) else None
    if kind == "json_schema" and isinstance(raw.get("schema"), dict):
        return {"kind": kind, "schema": raw["schema"]}
    if kind == "regex" and isinstance(raw.get("pattern"), str) and raw["pattern"]:
        return {"kind": kind, "pattern": raw["pattern"]}
    choices = raw.get("choices") if kind == "choice" else None
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return {"kind": kind, "choices": choices}
    raise ChatInputError(
        "structured must be null, {kind: json_schema, schema: {...}}, "
        "{kind: regex, pattern: '...'} or {kind: choice, choices: [...]}"
    )


def parse_settings(message: dict) -> ChatSettings:
    model = message.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise ChatInputError("model must be a model name")
    thinking = message.get("thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise ChatInputError("thinking must be true, false or null")
    adapter = message.get("adapter")
    if adapter is not None and not isinstance(adapter, str):
        raise ChatInputError("adapter must be an adapter name, names joined with '+', or 'none'")
    return ChatSettings(
        model=model,
        system_prompt=_text(message, "system_prompt"),
        params=_params(message.get("params")),
        thinking=thinking,
        structured=_structured(message.get("structured")),
        adapter=adapter,
    )


def _constraint(structured: dict) -> dict:
    if structured["kind"] == "json_schema":
        schema = {"name": "reply", "schema": structured["schema"], "strict": True}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    if structured["kind"] == "regex":
        return {"guided_regex": structured["pattern"]}
    return {"guided_choice": structured["choices"]}


def chat_call(settings: ChatSettings, turns: list[dict]) -> ChatCall:
    """The chat call for these settings and conversation turns."""
    messages = [{"role": t["role"], "content": t["content"]} for t in turns]
    if settings.system_prompt.strip():
        messages.insert(0, {"role": "system", "content": settings.system_prompt})
    params = settings.params
    thinking = None if settings.thinking is None else {"enable_thinking": settings.thinking}
    structured = _constraint(settings.structured) if settings.structured else {}
    return ChatCall(
        model=settings.model,
        messages=normalise_messages(messages),
        structured=parse_structured_output(structured),
        template_kwargs=template_kwargs(None, thinking),
        sampling=fields.sampling(params),
        max_tokens=fields.max_tokens(params),
        stop=fields.stop(params),
        adapter=settings.adapter or None,
        draft=fields.drafting(params),
        kv=fields.kv_cache(params),
    )
