"""Engine events as an Anthropic `message` object and its stream of named events."""

from __future__ import annotations

import json
import uuid

from django.http import JsonResponse

from ..errors import ApiError
from ..protocol.events import Event, Failed, Finished, ReasoningDelta, TextDelta, ToolCall
from .openai_render import fill_usage, resumed, speculation_details

# Anthropic's error type for each status (https://docs.anthropic.com/en/api/errors).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error_body(error: ApiError) -> dict:
    default = "api_error" if error.status >= 500 else "invalid_request_error"
    kind = ERROR_TYPES.get(error.status, default)
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def error_response(error: ApiError) -> JsonResponse:
    return JsonResponse(error_body(error), status=error.status)


def stop_reason(finished: Finished) -> str:
    if finished.finish_reason == "tool_calls":
        return "tool_use"
    if finished.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if finished.stop_sequence is not None else "end_turn"


def tool_use_id(call_id: str) -> str:
    """Anthropic's `toolu_` ids for the engine's `call_` ids."""
    return "toolu_" + call_id.removeprefix("call_") if call_id.startswith("call_") else call_id


def tool_input(arguments: str) -> dict:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        value = None
    # A tool_use input is always an object; parsers hand over one.
    return value if isinstance(value, dict) else {}


def _empty_block(block: dict) -> dict:
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {**block, "input": {}}


class MessageBuilder:
    """Builds one message from engine events; `feed` also returns its stream events.

    Blocks open as their kind of text arrives (thinking, then text, or a tool
    call), so the streamed blocks and the final message's content are the same.
    """

    def __init__(self, *, model: str, input_tokens: int) -> None:
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = model
        self.content: list[dict] = []
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage = {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        }
        self.error: str | None = None
        self._open: dict | None = None  # the text or thinking block being written

    def message(self) -> dict:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.content,
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": dict(self.usage),
        }

    def result(self) -> dict:
        return self.message()

    @property
    def failure(self) -> str | None:
        return self.error

    def start(self) -> list[dict]:
        started = {**self.message(), "content": []}
        return [{"type": "message_start", "message": started}, {"type": "ping"}]

    def feed(self, event: Event) -> list[dict]:
        if isinstance(event, TextDelta):
            return self._write("text", "text", "text_delta", event.text)
        if isinstance(event, ReasoningDelta):
            return self._write("thinking", "thinking", "thinking_delta", event.text)
        if isinstance(event, ToolCall):
            return self._tool_use(event)
        if isinstance(event, Finished):
            return self._finish(event)
        if isinstance(event, Failed):
            self.error = event.message
            return [{"type": "error", "error": {"type": "api_error", "message": event.message}}]
        return []

    def _index(self) -> int:
        return len(self.content) - 1

    def _open_block(self, block: dict) -> list[dict]:
        events = self._close()
        self.content.append(block)
        start = {"type": "content_block_start", "index": self._index()}
        return [*events, {**start, "content_block": _empty_block(block)}]

    def _close(self) -> list[dict]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index()}]

    def _write(self, kind: str, key: str, delta_type: str, text: str) -> list[dict]:
        if not text:
            return []
        events = []
        if self._open is None or self._open["type"] != kind:
            events = self._open_block(_empty_block({"type": kind}))
            self._open = self.content[-1]
        self._open[key] += text
        delta = {"type": delta_type, key: text}
        return [*events, {"type": "content_block_delta", "index": self._index(), "delta": delta}]

    def _tool_use(self, call: ToolCall) -> list[dict]:
        arguments = tool_input(call.arguments)
        block = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name}
        events = self._open_block({**block, "input": arguments})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        return [
            *events,
            {"type": "content_block_delta", "index": self._index(), "delta": delta},
            {"type": "content_block_stop", "index": self._index()},
        ]

    def _finish(self, finished: Finished) -> list[dict]:
        self.stop_reason = stop_reason(finished)
        self.stop_sequence = finished.stop_sequence if self.stop_reason == "stop_sequence" else None
        self.usage.update(
            input_tokens=finished.prompt_tokens - finished.cached_tokens,
            cache_read_input_tokens=finished.cached_tokens,
            output_tokens=finished.completion_tokens,
            **resumed(finished),
            **speculation_details([finished]),  # the lab's extension, as resumed_from is
            **fill_usage([finished]),
        )
        delta = {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence}
        return [
            *self._close(),
            {"type": "message_delta", "delta": delta, "usage": dict(self.usage)},
            {"type": "message_stop"},
        ]
