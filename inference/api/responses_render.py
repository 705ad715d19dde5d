"""Engine events as an OpenAI Responses object and its stream of typed events."""

from __future__ import annotations

import time
import uuid

from ..protocol.events import Failed, Finished, ReasoningDelta, TextDelta, ToolCall
from .openai_render import fill_usage, resumed, speculation_details
from .responses_request import item_id

ECHOED = ("instructions", "max_output_tokens", "temperature", "top_p", "previous_response_id")


class ResponseBuilder:
    """Builds one response from engine events; `feed` also returns its stream events."""

    def __init__(self, *, model: str, request: dict) -> None:
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created_at = int(time.time())
        self.model = model
        self.request = request
        self.output: list[dict] = []
        self.status = "in_progress"
        self.usage: dict | None = None
        self.incomplete: dict | None = None
        self.error: dict | None = None
        self._open: dict | None = None  # the reasoning or message item being written
        self._sequence = 0

    # -- the response object ----------------------------------------------------

    def response(self) -> dict:
        body = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "model": self.model,
            "output": self.output,
            "usage": self.usage,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "parallel_tool_calls": True,
            "tools": self.request.get("tools") or [],
            "tool_choice": self.request.get("tool_choice", "auto"),
            "text": self.request.get("text") or {"format": {"type": "text"}},
            "reasoning": self.request.get("reasoning") or {"effort": None, "summary": None},
            "store": self.request.get("store", True),
            "metadata": self.request.get("metadata") or {},
        }
        body.update({key: self.request.get(key) for key in ECHOED})
        return body

    def result(self) -> dict:
        return self.response()

    @property
    def failure(self) -> str | None:
        return self.error["message"] if self.status == "failed" else None

    # -- events -------------------------------------------------------------------

    def start(self) -> list[dict]:
        return [
            self._event("response.created", response=self.response()),
            self._event("response.in_progress", response=self.response()),
        ]

    def feed(self, event) -> list[dict]:
        if isinstance(event, TextDelta):
            return self._text("message", event.text)
        if isinstance(event, ReasoningDelta):
            return self._text("reasoning", event.text)
        if isinstance(event, ToolCall):
            return self._close() + self._function_call(event)
        if isinstance(event, Finished):
            return self._finish(event)
        if isinstance(event, Failed):
            return self._fail(event.message)
        return []

    def _event(self, kind: str, **fields) -> dict:
        self._sequence += 1
        return {"type": kind, "sequence_number": self._sequence - 1, **fields}

    def _text(self, kind: str, text: str) -> list[dict]:
        events = []
        if self._open is None or self._open["type"] != kind:
            events += self._close() + self._open_item(kind)
        index = len(self.output) - 1
        part = self._open["content"][0]
        part["text"] += text
        name = (
            "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        )
        extra = {"logprobs": []} if kind == "message" else {}
        events.append(
            self._event(
                name,
                item_id=self._open["id"],
                output_index=index,
                content_index=0,
                delta=text,
                **extra,
            )
        )
        return events

    def _open_item(self, kind: str) -> list[dict]:
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item = {
                "type": "message",
                "id": item_id("msg"),
                "status": "in_progress",
                "role": "assistant",
            }
        else:
            part = {"type": "reasoning_text", "text": ""}
            item = {
                "type": "reasoning",
                "id": item_id("rs"),
                "status": "in_progress",
                "summary": [],
            }
        self.output.append({**item, "content": []})
        index = len(self.output) - 1
        events = [
            self._event(
                "response.output_item.added",
                output_index=index,
                item={**self.output[-1], "content": []},
            )
        ]
        self._open = self.output[-1]
        self._open["content"].append(part)
        if kind == "message":
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part={**part, "text": ""},
                )
            )
        return events

    def _close(self) -> list[dict]:
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = "completed"
        index = next(i for i, candidate in enumerate(self.output) if candidate is item)
        part = item["content"][0]
        common = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "message":
            events = [
                self._event("response.output_text.done", text=part["text"], logprobs=[], **common),
                self._event("response.content_part.done", part=part, **common),
            ]
        else:
            events = [self._event("response.reasoning_text.done", text=part["text"], **common)]
        return events + [self._event("response.output_item.done", output_index=index, item=item)]

    def _function_call(self, call: ToolCall) -> list[dict]:
        item = {
            "type": "function_call",
            "id": item_id("fc"),
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }
        self.output.append(item)
        index = len(self.output) - 1
        common = {"item_id": item["id"], "output_index": index}
        return [
            self._event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            ),
            self._event("response.function_call_arguments.delta", delta=call.arguments, **common),
            self._event(
                "response.function_call_arguments.done",
                arguments=call.arguments,
                name=call.name,
                **common,
            ),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _finish(self, finished: Finished) -> list[dict]:
        events = self._close()
        self.usage = {
            "input_tokens": finished.prompt_tokens,
            "input_tokens_details": {"cached_tokens": finished.cached_tokens},
            "output_tokens": finished.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0, **speculation_details([finished])},
            "total_tokens": finished.prompt_tokens + finished.completion_tokens,
            **resumed(finished),
            **fill_usage([finished]),
        }
        if finished.finish_reason == "length":
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
            return events + [self._event("response.incomplete", response=self.response())]
        self.status = "completed"
        return events + [self._event("response.completed", response=self.response())]

    def _fail(self, message: str) -> list[dict]:
        self.status = "failed"
        self.error = {"code": "server_error", "message": message}
        return [
            self._event("error", code="server_error", message=message, param=None),
            self._event("response.failed", response=self.response()),
        ]


def output_text(output: list[dict]) -> str:
    return "".join(
        part.get("text", "")
        for item in output
        if item.get("type") == "message"
        for part in item.get("content", [])
    )
