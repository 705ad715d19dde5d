"""Anthropic Messages requests, parsed into the ChatCall every surface shares.

Anthropic's own fields (system, content blocks, tools, tool_choice, thinking,
stop_sequences, output_config) are translated here; the fields it names as the chat
path does (temperature, top_p, top_k, and extras such as guided_regex or
chat_template_kwargs from the SDK's `extra_body`) go through the shared readers.
Messages name the field as Anthropic's API does (`messages.0.content.1.text: ...`).
"""

from __future__ import annotations

from ..chat import fields
from ..chat.call import ChatCall
from ..chat.messages import check_reasoning_effort, template_kwargs
from ..chat.structured import parse_structured_output, response_format_spec
from ..chat.tools import tool_plan
from ..errors import ApiError
from ..media.fetch import image_from_base64, image_from_url
from ..protocol.media import TEXT

TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
USER_BLOCKS = ("text", "image", "tool_result")
ASSISTANT_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")
BLOCK_SEPARATOR = "\n\n"


def invalid(param: str, message: str) -> ApiError:
    return ApiError(f"{param}: {message}", param=param)


def _required(body: dict, name: str):
    if body.get(name) is None:
        raise invalid(name, "Field required")
    return body[name]


def _string(value, param: str) -> str:
    if not isinstance(value, str):
        raise invalid(param, "Input should be a valid string")
    return value


def _object(value, param: str) -> dict:
    if not isinstance(value, dict):
        raise invalid(param, "Input should be a valid dictionary")
    return value


def _max_tokens(body: dict) -> int:
    value = _required(body, "max_tokens")
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("max_tokens", "Input should be a valid integer")
    if value < 1:
        raise invalid("max_tokens", "Input should be greater than or equal to 1")
    return value


def _text_of_blocks(blocks, param: str) -> str:
    """Text blocks (a system prompt, a tool result) as one string."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise invalid(param, "Input should be a valid string or a list of text blocks")
    texts = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise invalid(f"{param}.{index}", "only text blocks are supported here")
        texts.append(_string(block.get("text"), f"{param}.{index}.text"))
    return BLOCK_SEPARATOR.join(texts)


def _system(body: dict) -> list[dict]:
    if body.get("system") is None:
        return []
    text = _text_of_blocks(body["system"], "system")
    return [{"role": "system", "content": text}] if text else []


def _blocks(message: dict, param: str, allowed: tuple[str, ...]) -> list[dict]:
    content = message.get("content")
    if content is None:
        raise invalid(f"{param}.content", "Field required")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise invalid(f"{param}.content", "Input should be a valid string or a list of blocks")
    for index, block in enumerate(content):
        where = f"{param}.content.{index}"
        kind = _object(block, where).get("type")
        if kind not in allowed:
            raise invalid(
                f"{where}.type",
                f"content blocks of type '{kind}' are not supported in "
                f"{message['role']} messages (supported: {', '.join(allowed)})",
            )
    return content


def _tool_result(block: dict, param: str) -> dict:
    call_id = _string(block.get("tool_use_id"), f"{param}.tool_use_id")
    content = block.get("content")
    text = "" if content is None else _text_of_blocks(content, f"{param}.content")
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _image(block: dict, param: str) -> dict:
    """An image block's source: base64 with its media type, or a URL."""
    source = _object(block.get("source"), f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        mime = _string(source.get("media_type"), f"{param}.source.media_type")
        data = _string(source.get("data"), f"{param}.source.data")
        return image_from_base64(data, mime=mime, param=f"{param}.source")
    if kind == "url":
        url = _string(source.get("url"), f"{param}.source.url")
        return image_from_url(url, param=f"{param}.source.url")
    raise invalid(f"{param}.source.type", "Input should be 'base64' or 'url'")


def _user_content(parts: list[dict]) -> str | list[dict]:
    """A user message's content: its text blocks as one string, or, with images, text and
    images in their order (neighbouring text blocks joined)."""
    texts = [part["text"] for part in parts if part["type"] == TEXT]
    if len(texts) == len(parts):
        return BLOCK_SEPARATOR.join(texts)
    content: list[dict] = []
    for part in parts:
        if part["type"] == TEXT and content and content[-1]["type"] == TEXT:
            content[-1] = {
                "type": TEXT,
                "text": content[-1]["text"] + BLOCK_SEPARATOR + part["text"],
            }
        else:
            content.append(part)
    return content


def _user_turn(blocks: list[dict], param: str) -> list[dict]:
    """Tool results become `tool` messages; the text and images around them, user messages."""
    messages, parts = [], []

    def flush() -> None:
        if parts:
            messages.append({"role": "user", "content": _user_content(parts)})
            parts.clear()

    for index, block in enumerate(blocks):
        where = f"{param}.content.{index}"
        if block["type"] == "text":
            parts.append({"type": TEXT, "text": _string(block.get("text"), f"{where}.text")})
        elif block["type"] == "image":
            parts.append(_image(block, where))
        else:
            flush()
            messages.append(_tool_result(block, where))
    flush()
    return messages or [{"role": "user", "content": ""}]


def _tool_call(block: dict, param: str) -> dict:
    return {
        "id": _string(block.get("id"), f"{param}.id"),
        "type": "function",
        "function": {
            "name": _string(block.get("name"), f"{param}.name"),
            "arguments": _object(block.get("input"), f"{param}.input"),
        },
    }


def _assistant_turn(blocks: list[dict], param: str) -> dict:
    texts, thoughts, calls = [], [], []
    for index, block in enumerate(blocks):
        where = f"{param}.content.{index}"
        if block["type"] == "text":
            texts.append(_string(block.get("text"), f"{where}.text"))
        elif block["type"] == "thinking":
            thoughts.append(_string(block.get("thinking"), f"{where}.thinking"))
        elif block["type"] == "tool_use":
            calls.append(_tool_call(block, where))
        # redacted_thinking is opaque: nothing of it can reach the prompt.
    message = {"role": "assistant", "content": BLOCK_SEPARATOR.join(texts)}
    if thoughts:  # templates know earlier reasoning by this name
        message["reasoning_content"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _messages(body: dict) -> list[dict]:
    messages = _required(body, "messages")
    if not isinstance(messages, list):
        raise invalid("messages", "Input should be a valid list")
    if not messages:
        raise invalid("messages", "at least one message is required")
    out = []
    for index, message in enumerate(messages):
        param = f"messages.{index}"
        role = _object(message, param).get("role")
        if role == "user":
            out.extend(_user_turn(_blocks(message, param, USER_BLOCKS), param))
        elif role == "assistant":
            out.append(_assistant_turn(_blocks(message, param, ASSISTANT_BLOCKS), param))
        else:
            raise invalid(f"{param}.role", "Input should be 'user' or 'assistant'")
    return out


def _tools(body: dict) -> list[dict]:
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "Input should be a valid list")
    functions = []
    for index, tool in enumerate(tools):
        param = f"tools.{index}"
        kind = _object(tool, param).get("type") or "custom"
        if kind != "custom":
            raise invalid(
                f"{param}.type",
                f"tool type '{kind}' is not supported: only custom tools with an input_schema",
            )
        function = {
            "name": _string(_required_in(tool, "name", param), f"{param}.name"),
            "parameters": _object(
                _required_in(tool, "input_schema", param), f"{param}.input_schema"
            ),
        }
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        functions.append({"type": "function", "function": function})
    return functions


def _required_in(value: dict, name: str, param: str):
    if value.get(name) is None:
        raise invalid(f"{param}.{name}", "Field required")
    return value[name]


def _tool_choice(body: dict, tools: list[dict]):
    """Anthropic's tool_choice as the chat path's, or None for its default."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    kind = _object(choice, "tool_choice").get("type")
    if kind not in (*TOOL_CHOICES, "tool"):
        raise invalid("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
    names = {tool["function"]["name"] for tool in tools}
    if kind in ("any", "tool") and not names:
        raise invalid("tool_choice", f"tool_choice of type '{kind}' needs at least one tool")
    if kind != "tool":
        return TOOL_CHOICES[kind]
    name = _string(_required_in(choice, "name", "tool_choice"), "tool_choice.name")
    if name not in names:
        raise invalid("tool_choice.name", f"tool '{name}' is not among the request's tools")
    return {"type": "function", "function": {"name": name}}


def _reasoning_effort(body: dict) -> str | None:
    thinking = body.get("thinking")
    if thinking is None:
        return None
    kind = _object(thinking, "thinking").get("type")
    if kind == "enabled":
        budget = _required_in(thinking, "budget_tokens", "thinking")
        # Anthropic's minimum of 1024 is not enforced: small local models think briefly.
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise invalid("thinking.budget_tokens", "Input should be a positive integer")
        return "high"
    if kind == "disabled":
        return "none"
    if kind == "adaptive":
        return None  # the chat template's own default
    raise invalid("thinking.type", "Input should be 'enabled', 'disabled' or 'adaptive'")


def _stop_sequences(body: dict) -> tuple[str, ...]:
    """A list; its entries that are not nonempty strings are dropped, as on the OpenAI
    surfaces (mlx-bun prepares every chat surface's stop alike)."""
    stop = body.get("stop_sequences")
    if stop is None:
        return ()
    if not isinstance(stop, list):
        raise invalid("stop_sequences", "Input should be a valid list")
    return fields.check_stop(stop, "stop_sequences")


def _metadata(body: dict) -> None:
    """Anthropic's metadata holds one `user_id` of at most 256 characters; nothing else."""
    if body.get("metadata") is None:
        return
    metadata = _object(body["metadata"], "metadata")
    for key, value in metadata.items():
        if key != "user_id":
            raise invalid(f"metadata.{key}", "Extra inputs are not permitted")
        if value is not None and (not isinstance(value, str) or len(value) > 256):
            raise invalid("metadata.user_id", "Input should be a string of at most 256 characters")


def _response_format(body: dict):
    """output_config.format (Anthropic's structured outputs) as a response_format spec."""
    config = body.get("output_config")
    if config is None or _object(config, "output_config").get("format") is None:
        return None
    output_format = _object(config["format"], "output_config.format")
    if output_format.get("type") != "json_schema":
        raise invalid("output_config.format.type", "Input should be 'json_schema'")
    schema = _object(
        _required_in(output_format, "schema", "output_config.format"),
        "output_config.format.schema",
    )
    return response_format_spec(
        {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    )


def parse_messages_request(body: dict, *, count_only: bool = False) -> ChatCall:
    """A Messages (or count_tokens) body as a ChatCall; an ApiError (400) names the
    first invalid field."""
    model = _string(_required(body, "model"), "model")
    max_tokens = None if count_only else _max_tokens(body)
    _metadata(body)
    tools = _tools(body)
    messages = [*_system(body), *_messages(body)]
    stop = _stop_sequences(body)
    choice = _tool_choice(body, tools)
    # `thinking` wins over a reasoning_effort sent through extra_body.
    effort = _reasoning_effort(body)
    effort = check_reasoning_effort(body) if effort is None else effort
    structured = parse_structured_output(body, response_format=_response_format(body))
    return ChatCall(
        model=model,
        messages=messages,
        tools=tool_plan(tools, choice),
        structured=structured,
        template_kwargs=template_kwargs(effort, body.get("chat_template_kwargs")),
        reasoning_effort=effort,
        sampling=fields.sampling(body),
        max_tokens=max_tokens,
        stop=stop,
        stream=fields.stream(body),
        adapter=fields.adapter(body),
        cache_session=fields.cache_session(body),
        kv=fields.kv_cache(body),
        draft=fields.drafting(body),
    )
