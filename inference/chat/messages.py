"""Chat messages, normalised for the chat template, and the template's own variables.

Every chat surface ends in these messages: OpenAI's as sent, the Responses API's
items and Anthropic's blocks once translated.
"""

from __future__ import annotations

import json

from ..errors import ApiError
from ..media.audio import checked_audio
from ..media.fetch import image_from_url
from ..protocol.media import TEXT

# A tuple: `in` compares; a set would hash what the client sent, and {} is a 500.
ROLES = ("system", "user", "assistant", "tool")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
MEDIA_PARTS = ("image", "image_url", "input_image", "audio", "input_audio", "audio_url", "video",
               "video_url", "file", "input_file")  # fmt: skip


def parse_messages(body: dict) -> list[dict]:
    """Validate `messages` and normalise them for the chat template.

    `developer` means `system`; text-only content-part arrays become one
    string, and those with media a list of text and media parts in their order
    (protocol/media.py); assistant tool-call arguments are parsed from their JSON
    strings, which is what chat templates expect to iterate over.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages required", param="messages")
    return normalise_messages(messages)


def normalise_messages(messages: list) -> list[dict]:
    return [_normalise(message, index) for index, message in enumerate(messages)]


def _normalise(message, index: int) -> dict:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ApiError(f"{param} must be an object", param=param)
    role = message.get("role")
    role = "system" if role == "developer" else role
    if role not in ROLES:
        raise ApiError(
            f"{param}.role must be one of 'system', 'developer', 'user', 'assistant', 'tool'",
            param=f"{param}.role",
        )
    out = {**message, "role": role, "content": _content(message.get("content"), param, role)}
    reasoning = message.get("reasoning")
    if role == "assistant" and isinstance(reasoning, str):
        # Templates know earlier reasoning as `reasoning_content`; one the client set
        # itself, even empty, wins.
        out.pop("reasoning")
        if not isinstance(message.get("reasoning_content"), str):
            out["reasoning_content"] = reasoning
    if role == "assistant" and message.get("tool_calls") is not None:
        out["tool_calls"] = _parse_tool_calls(message["tool_calls"], param)
    return out


def _content(content, param: str, role: str) -> str | list[dict]:
    """A message's content: one string, or, where it holds media, its parts in order."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(f"{param}.content must be a string or an array", param=f"{param}.content")
    parts = [_part(part, f"{param}.content[{index}]", role) for index, part in enumerate(content)]
    if all(part["type"] == TEXT for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _part(part, param: str, role: str) -> dict:
    # Any part with a string `text` is text: OpenAI's `text`, the Responses API's
    # `input_text`, whatever a client sends; media needs a model that sees it.
    kind = part.get("type", "text") if isinstance(part, dict) else None
    if not isinstance(kind, str):
        raise ApiError(f"{param} must be an object with a string 'type'", param=param)
    if kind in ACCEPTED_MEDIA:
        if role != "user":
            raise ApiError(f"{param}: {kind} parts are accepted in user messages only", param=param)
        return ACCEPTED_MEDIA[kind](part, param)
    if kind in MEDIA_PARTS:
        raise ApiError(f"{param}: content parts of type '{kind}' are not supported", param=param)
    if not isinstance(part.get("text"), str):
        raise ApiError(f"{param}: text parts need a string 'text'", param=param)
    return {"type": TEXT, "text": part["text"]}


def _image_url(part: dict, param: str) -> dict:
    """OpenAI's {"type": "image_url", "image_url": {"url": ...}} (a bare string also seen)."""
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise ApiError(f"{param}.image_url.url must be a string", param=f"{param}.image_url")
    return image_from_url(url, param=f"{param}.image_url")


def _input_audio(part: dict, param: str) -> dict:
    return checked_audio(part.get("input_audio"), param=f"{param}.input_audio")


# OpenAI chat's media parts, read into the protocol's (protocol/media.py).
ACCEPTED_MEDIA = {"image_url": _image_url, "input_audio": _input_audio}


def _parse_tool_calls(tool_calls, param: str) -> list[dict]:
    if not isinstance(tool_calls, list):
        raise ApiError(f"{param}.tool_calls must be an array", param=f"{param}.tool_calls")
    parsed = []
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise ApiError(f"{param}.tool_calls[].function must be an object", param=param)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise ApiError(
                    f"{param}.tool_calls[].function.arguments must be a JSON string", param=param
                ) from None
        parsed.append({**call, "function": {**function, "arguments": arguments}})
    return parsed


def check_reasoning_effort(body: dict) -> str | None:
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise ApiError(
            "reasoning_effort must be one of 'none', 'minimal', 'low', 'medium', 'high', 'xhigh'",
            param="reasoning_effort",
        )
    return effort


def template_kwargs(effort: str | None, extra) -> dict:
    """Chat-template variables from a checked reasoning effort and the request's own
    `chat_template_kwargs` (as sent), which win. An enable_thinking of null stays, to say
    "the template's own default": the server's and the model's defaults are applied once
    the model is known (plan.py, sampling_defaults.apply_thinking_default)."""
    kwargs = {} if effort is None else {"enable_thinking": effort != "none"}
    if extra is not None:
        if not isinstance(extra, dict):
            raise ApiError("chat_template_kwargs must be an object", param="chat_template_kwargs")
        if "chat_template" in extra:  # a template is code the worker would run
            raise ApiError(
                "chat_template_kwargs.chat_template is not accepted: "
                "the model's own chat template is used",
                param="chat_template_kwargs",
            )
        kwargs.update(extra)
    return kwargs
