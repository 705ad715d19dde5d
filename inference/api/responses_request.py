"""OpenAI Responses requests, parsed into the ChatCall every surface shares.

The conversation is rebuilt from stored responses (previous_response_id) and
the new input; the fields named as on chat completions go through the shared
readers, and the Responses API's own (max_output_tokens, tools, text.format,
reasoning, prompt_cache_key) are translated here.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from .. import json_body
from ..chat import fields
from ..chat.call import ChatCall
from ..chat.messages import check_reasoning_effort, normalise_messages, template_kwargs
from ..chat.structured import parse_structured_output, response_format_spec
from ..chat.tools import tool_plan
from ..errors import ApiError

# A tuple: `in` compares; a set would hash what the client sent, and {} is a 500.
TEXT_PARTS = ("input_text", "output_text", "text")
# Fields that mean the same as on chat completions, read by the shared readers: the
# sampling and penalty fields, the adapter set and the template's kwargs.
SHARED_FIELDS = (
    "model", "stream", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "logit_bias",
    "repetition_penalty", "repetition_context_size", "presence_penalty", "presence_context_size",
    "frequency_penalty", "frequency_context_size", "xtc_probability", "xtc_threshold",
    "adapter", "chat_template_kwargs", "kv_bits", "kv_group_size", "quantized_kv_start",
    "kv_config", "draft_model", "num_draft_tokens", "hlg",
)  # fmt: skip
VLLM_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ResponsesCall:
    input_items: list[dict]  # this turn's input, each with an id
    instructions: str | None
    previous_id: str | None
    store: bool
    body: dict  # the request as sent, for the echoed fields


def parse_responses_body(raw: bytes) -> dict:
    """The body as a JSON object; anything else is mlx-bun's "invalid JSON body"."""
    try:
        body = json_body.loads(raw)
    except json_body.JsonMalformed:
        raise ApiError("invalid JSON body") from None
    except json_body.JsonRejected as exc:  # JSON, but past one of our bounds: say which
        raise ApiError(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError("invalid JSON body")
    return body


def parse_responses_call(body: dict) -> ResponsesCall:
    """Validate what needs no lookup: `input`, `previous_response_id`, `store`."""
    raw = body.get("input", [])  # none: a turn that only continues previous_response_id
    previous = body.get("previous_response_id")
    if not isinstance(raw, str | list) or not isinstance(previous, str | None):
        raise ApiError("input must be a string or array; previous_response_id must be a string")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError("instructions must be a string", param="instructions")
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise ApiError("store must be a boolean", param="store")
    _check_metadata(body.get("metadata"))
    return ResponsesCall(
        input_items=[_with_id(item, i) for i, item in enumerate(items)],
        instructions=instructions,
        previous_id=previous,
        store=store,
        body=body,
    )


# OpenAI's bounds on `metadata`: 16 pairs, keys of 64 characters, string values of 512.
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


def _check_metadata(metadata) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise ApiError("metadata must be an object", param="metadata")
    if len(metadata) > METADATA_PAIRS:
        raise ApiError(f"metadata may hold at most {METADATA_PAIRS} pairs", param="metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise ApiError(
                f"metadata keys may be at most {METADATA_KEY_CHARS} characters", param="metadata"
            )
        if not isinstance(value, str) or len(value) > METADATA_VALUE_CHARS:
            raise ApiError(
                f"metadata values must be strings of at most {METADATA_VALUE_CHARS} characters",
                param=f"metadata.{key}",
            )


def _with_id(item, index: int) -> dict:
    if not isinstance(item, dict):
        raise ApiError(f"input[{index}] must be an object", param="input")
    kind = item.get("type", "message")
    if not isinstance(kind, str):  # an object here was a 500 (unhashable in the lookup below)
        raise ApiError(f"input[{index}].type must be a string", param="input")
    prefix = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}.get(
        kind, "item"
    )
    return {"type": kind, **item, "id": item.get("id") or item_id(prefix)}


# The roles a stored message may keep: a tool turn is only ever a function_call_output.
STORED_ROLES = ("system", "user", "assistant")


def _named_by_input(error: ApiError, origins: list[str | None]) -> ApiError:
    match = re.match(r"messages\[(\d+)\]", error.param or "")
    origin = origins[int(match[1])] if match and int(match[1]) < len(origins) else None
    if origin is not None:
        error.param = origin + error.param[match.end() :]
        error.message = error.message.replace(match[0], origin, 1)
    return error


def _note_origins(origins: list | None, messages: list[dict], where: str) -> None:
    if origins is not None:
        origins += [where] * (len(messages) - len(origins))


def items_to_messages(
    items: list[dict], *, strict: bool = True, origins: list | None = None
) -> list[dict]:
    """Responses items (input or earlier output) as chat messages.

    Strict, for a request: an item or content part the chat path cannot take is an
    ApiError naming it. Not strict, for stored items made into a dataset: such an item,
    part or message role is skipped, so one odd response never fails a whole build.
    """
    messages: list[dict] = []
    reasoning, where = "", "input"
    for index, item in enumerate(items):
        _note_origins(origins, messages, where)  # the last item's messages came from it
        kind = item.get("type", "message")
        where = f"input[{index}]"
        if kind == "reasoning":
            reasoning += _reasoning_text(item)
        elif kind == "message":
            message = _message(item, where, strict)
            if message is None:
                continue
            if message["role"] == "assistant" and reasoning:
                message["reasoning"], reasoning = reasoning, ""
            messages.append(message)
        elif kind == "function_call":
            _append_call(messages, item)
        elif kind == "function_call_output":
            messages.append(_call_output(item))
        elif strict:
            raise ApiError(f"{where}: unsupported item type '{kind}'", param="input")
    _note_origins(origins, messages, where)
    return messages


def _reasoning_text(item: dict) -> str:
    parts = item.get("content") or item.get("summary") or []
    parts = parts if isinstance(parts, list) else []  # `true` here was a 500
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _message(item: dict, where: str, strict: bool) -> dict | None:
    role = item.get("role")
    if not strict:
        # On a request the chat path maps developer to system and refuses roles it has
        # no turn for; stored items made into a dataset never pass through it.
        role = "system" if role == "developer" else role
        if role not in STORED_ROLES:
            return None
    return {"role": role, "content": _content(item.get("content"), where, strict)}


def _content(content, param: str, strict: bool) -> str | list[dict]:
    """A message item's content: its text, or (a request's) text and images in their
    order, as chat completions' parts, which the chat path reads (chat/messages.py)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        if strict:
            raise ApiError(f"{param}.content must be a string or an array", param="input")
        return ""
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "input_image" and strict:
            parts.append(_input_image(part, param))
        elif kind == "input_file" and strict:
            parts.append(_input_file(part, param))
        elif strict:
            raise ApiError(
                f"{param}: only text content, input_image and input_file parts are supported",
                param="input",
            )
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _input_image(part: dict, param: str) -> dict:
    """{"type": "input_image", "image_url": <URL>} as chat completions' image_url part."""
    url = part.get("image_url")
    if not isinstance(url, str):
        raise ApiError(
            f"{param}: an input_image needs an image_url (file ids are not supported)",
            param="input",
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _input_file(part: dict, param: str) -> dict:
    """{"type": "input_file", "file_data": "data:image/png;base64,..."}: an image sent as a
    file, read as an input_image (its type checked there); no other files are read."""
    data = part.get("file_data")
    if not isinstance(data, str):
        raise ApiError(
            f"{param}: an input_file needs its file_data, a data: URL of a PNG, JPEG or WebP "
            "image (file ids and file URLs are not supported)",
            param="input",
        )
    return {"type": "image_url", "image_url": {"url": data}}


def _append_call(messages: list[dict], item: dict) -> None:
    call = {
        "id": item.get("call_id") or item.get("id"),
        "type": "function",
        "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
    }
    last = messages[-1] if messages else None
    if last and last["role"] == "assistant" and last.get("tool_calls") is not None:
        last["tool_calls"].append(call)  # parallel calls share one assistant turn
    else:
        # content "" for the chat templates that read it on a tool-calling turn.
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _call_output(item: dict) -> dict:
    output = item.get("output")
    content = output if isinstance(output, str) else json.dumps(output)
    return {"role": "tool", "tool_call_id": item.get("call_id"), "content": content}


def _tools(body: dict):
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError("tools must be an array", param="tools")
        converted = []
        for tool in tools:
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise ApiError("only function tools are supported", param="tools")
            function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
            converted.append({"type": "function", "function": function})
        tools = converted
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    return tool_plan(tools, choice)


def _text_format(body: dict):
    """text.format, the Responses API's response_format (its json_schema flattened)."""
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise ApiError("text.format must be an object", param="text.format")
    if fmt.get("type") == "json_schema":
        schema = {"name": fmt.get("name", "response"), "schema": fmt.get("schema")}
        return response_format_spec({"type": "json_schema", "json_schema": schema})
    return response_format_spec(fmt)


def _reasoning_effort(body: dict) -> str | None:
    reasoning = body.get("reasoning")
    if reasoning is None:
        return None
    if not isinstance(reasoning, dict):
        raise ApiError("reasoning must be an object", param="reasoning")
    return check_reasoning_effort({"reasoning_effort": reasoning.get("effort")})


def responses_chat_call(call: ResponsesCall, history: list[dict]) -> ChatCall:
    """The chat call for this turn: instructions, history, this turn, and every option."""
    messages = []
    if call.instructions:
        messages.append({"role": "system", "content": call.instructions})
    messages += history
    from_input: list[str] = []  # which input item each of its messages came from
    messages += items_to_messages(call.input_items, origins=from_input)
    origins = [None] * (len(messages) - len(from_input)) + from_input
    if not messages:
        raise ApiError(
            "input is required when neither previous_response_id nor instructions is given",
            param="input",
        )
    try:
        messages = normalise_messages(messages)
    except ApiError as error:  # the chat path names messages[k]: this request has input[i]
        raise _named_by_input(error, origins) from None
    body = call.body
    shared = {k: body[k] for k in SHARED_FIELDS + VLLM_FIELDS if k in body}
    effort = _reasoning_effort(body)
    return ChatCall(
        model=fields.model_name(shared),
        messages=messages,
        stream=fields.stream(shared),
        max_tokens=fields.field(body, "max_output_tokens", int, low=1),
        sampling=fields.sampling(shared),
        stop=fields.stop(shared),
        tools=_tools(body),
        structured=parse_structured_output(shared, response_format=_text_format(body)),
        template_kwargs=template_kwargs(effort, shared.get("chat_template_kwargs")),
        reasoning_effort=effort,
        adapter=fields.adapter(shared),
        cache_session=fields.cache_session({"prompt_cache_key": body.get("prompt_cache_key")}),
        kv=fields.kv_cache(shared),
        draft=fields.drafting(shared),
    )
