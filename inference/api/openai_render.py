"""Engine events rendered as OpenAI chat and text completion objects and chunks."""

from __future__ import annotations

import importlib.metadata
import time
import uuid
from dataclasses import dataclass, field

from ..protocol.events import (
    Event,
    Failed,
    Finished,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCall,
)
from ..workers.streams import Indexed

# The installed MLX's version, read from its metadata: the web tier never imports MLX.
SYSTEM_FINGERPRINT = f"fp_mlxlab_mlx{importlib.metadata.version('mlx')}"


@dataclass
class Collected:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finished: Finished | None = None


def tool_call_object(call: ToolCall, index: int | None = None) -> dict:
    out = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    return out if index is None else {"index": index, **out}


def usage(finished: list[Finished]) -> dict:
    """One prompt, and the tokens of every choice generated from it."""
    prompt = finished[0].prompt_tokens
    completion = sum(each.completion_tokens for each in finished)
    body = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": finished[0].cached_tokens},
    }
    if details := speculation_details(finished):
        body["completion_tokens_details"] = details
    return {**body, **resumed(finished[0]), **fill_usage(finished)}


def speculation_details(finished: list[Finished]) -> dict:
    """Drafted tokens kept and refused (OpenAI's Predicted Outputs' names) when the request
    drafted, and a grammar's fast-forwarded tokens (docs/API.md, "Speculative decoding");
    {} when neither happened.
    Chat completions, Responses and Anthropic usage all report them."""
    details = {}
    if any(each.speculative for each in finished):
        details["accepted_prediction_tokens"] = sum(e.accepted_prediction_tokens for e in finished)
        details["rejected_prediction_tokens"] = sum(e.rejected_prediction_tokens for e in finished)
    if forwarded := sum(each.fast_forwarded_tokens for each in finished):
        details["fast_forwarded_tokens"] = forwarded
    return details


def fill_usage(finished: list[Finished]) -> dict:
    """`fill` for a usage object, where MLXLAB_FILL is on and the request offered tools
    (docs/API.md, "Tool-call fast-forwarding"): every choice's filled and drafted tokens,
    whether a parse failure disarmed it, or why it did not fill; else absent."""
    plans = [each.fill for each in finished if each.fill is not None]
    if not plans:
        return {}
    body = {
        "mode": plans[0].mode,
        "filled_tokens": sum(plan.filled_tokens for plan in plans),
        "proposed_tokens": sum(plan.proposed_tokens for plan in plans),
        "parse_fallback": any(plan.parse_fallback for plan in plans),
    }
    return {"fill": {**body, "refused": plans[0].refused} if plans[0].refused else body}


def resumed(finished: Finished) -> dict:
    """`resumed_from` for a usage object: the completion tokens an earlier, interrupted
    attempt had generated (replayed from its checkpoint); absent when not resumed."""
    return {"resumed_from": finished.resumed_from} if finished.resumed_from else {}


def chat_logprobs(entries: list[TokenLogprob]) -> dict:
    return {
        "content": [
            {
                "token": entry.token,
                "logprob": entry.logprob,
                "bytes": entry.bytes,
                "top_logprobs": [
                    {"token": top.token, "logprob": top.logprob, "bytes": top.bytes}
                    for top in entry.top
                ],
            }
            for entry in entries
        ]
    }


def completion_logprobs(entries: list[TokenLogprob], offset: int) -> dict:
    """The legacy completions shape: parallel arrays, offsets into the text."""
    offsets = []
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    return {
        "tokens": [entry.token for entry in entries],
        "token_logprobs": [entry.logprob for entry in entries],
        "top_logprobs": [{top.token: top.logprob for top in entry.top} for entry in entries],
        "text_offset": offsets,
    }


class Renderer:
    """One response's identity, and its shape on the wire (chat or text)."""

    object_name = ""
    chunk_name = ""
    id_prefix = ""

    def __init__(
        self, model: str, *, logprobs: bool, include_usage: bool = False, n: int = 1
    ) -> None:
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.logprobs = logprobs
        self.include_usage = include_usage
        self.choices = [Collected() for _ in range(n)]  # OpenAI's `n`: one per choice
        self.failure: str | None = None

    @property
    def collected(self) -> Collected:
        return self.choices[0]

    def _finished(self) -> list[Finished]:
        return [choice.finished for choice in self.choices if choice.finished is not None]

    def _envelope(self, object_name: str, choices: list[dict]) -> dict:
        return {
            "id": self.id,
            "object": object_name,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }

    def feed(self, event: Event | Indexed) -> list[dict]:
        """Take one engine event (of one choice, when `n` > 1); the chunks it makes (a
        failure: an OpenAI error object)."""
        index = 0
        if isinstance(event, Indexed):
            index, event = event.index, event.event
        result = self.choices[index]
        if isinstance(event, TextDelta):
            offset = len(result.text)
            result.text += event.text
            result.logprobs.extend(event.logprobs)
            return [self._chunk(self._delta_choice(event, offset), index)]
        if isinstance(event, ReasoningDelta | ToolCall):
            if isinstance(event, ReasoningDelta):
                result.reasoning += event.text
            choice = self._side_choice(event, len(result.tool_calls))
            if isinstance(event, ToolCall):
                result.tool_calls.append(event)
            return [] if choice is None else [self._chunk(choice, index)]
        if isinstance(event, Finished):
            result.finished = event
            chunks = [self._chunk(self._final_choice(event), index)]
            finished = self._finished()
            if self.include_usage and len(finished) == len(self.choices):
                body = self._envelope(self.chunk_name, [])
                body["usage"] = usage(finished)
                chunks.append(body)
            return chunks
        if isinstance(event, Failed):
            self.failure = event.message
            return [{"error": {"message": event.message, "type": "server_error"}}]
        return []

    def result(self) -> dict:
        choices = [
            {**self._full_choice(choice), "index": index}
            for index, choice in enumerate(self.choices)
        ]
        body = self._envelope(self.object_name, choices)
        body["usage"] = usage(self._finished())
        return body

    def start(self) -> list[dict]:
        first = self._first_chunk()
        if first is None:
            return []
        return [self._chunk(first, index) for index in range(len(self.choices))]

    def _chunk(self, choice: dict, index: int = 0) -> dict:
        body = self._envelope(self.chunk_name, [{**choice, "index": index}])
        if self.include_usage:
            body["usage"] = None
        return body

    def _first_chunk(self) -> dict | None:
        return None

    def _side_choice(self, event: ReasoningDelta | ToolCall, index: int) -> dict | None:
        """Reasoning and tool calls, for surfaces that show them."""
        return None

    def _full_choice(self, result: Collected) -> dict:
        raise NotImplementedError

    def _delta_choice(self, delta: TextDelta, offset: int) -> dict:
        raise NotImplementedError

    def _final_choice(self, finished: Finished) -> dict:
        raise NotImplementedError


class ChatRenderer(Renderer):
    object_name = "chat.completion"
    chunk_name = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def _full_choice(self, result: Collected) -> dict:
        message = {"role": "assistant", "content": result.text}
        if result.reasoning:
            message["reasoning_content"] = result.reasoning
        if result.tool_calls:
            message["content"] = result.text or None
            message["tool_calls"] = [tool_call_object(call) for call in result.tool_calls]
        return {
            "index": 0,
            "message": message,
            "logprobs": chat_logprobs(result.logprobs) if self.logprobs else None,
            "finish_reason": result.finished.finish_reason,
        }

    def _side_choice(self, event: ReasoningDelta | ToolCall, index: int) -> dict:
        if isinstance(event, ReasoningDelta):
            delta = {"reasoning_content": event.text}
        else:
            delta = {"tool_calls": [tool_call_object(event, index)]}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}

    def _first_chunk(self) -> dict:
        return {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }

    def _delta_choice(self, delta: TextDelta, offset: int) -> dict:
        return {
            "index": 0,
            "delta": {"content": delta.text},
            "logprobs": chat_logprobs(delta.logprobs) if self.logprobs else None,
            "finish_reason": None,
        }

    def _final_choice(self, finished: Finished) -> dict:
        return {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finished.finish_reason}


class CompletionRenderer(Renderer):
    object_name = "text_completion"
    chunk_name = "text_completion"
    id_prefix = "cmpl"

    def _full_choice(self, result: Collected) -> dict:
        return {
            "index": 0,
            "text": result.text,
            "logprobs": completion_logprobs(result.logprobs, 0) if self.logprobs else None,
            "finish_reason": result.finished.finish_reason,
        }

    def _delta_choice(self, delta: TextDelta, offset: int) -> dict:
        return {
            "index": 0,
            "text": delta.text,
            "logprobs": completion_logprobs(delta.logprobs, offset) if self.logprobs else None,
            "finish_reason": None,
        }

    def _final_choice(self, finished: Finished) -> dict:
        return {"index": 0, "text": "", "logprobs": None, "finish_reason": finished.finish_reason}
