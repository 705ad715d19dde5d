"""Drive the engine from plain threads, the way the asyncio bridge does."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from inference.engine import Engine, GenerationRequest
from inference.protocol.events import Failed, Finished, TextDelta, ToolCall


@dataclass
class Run:
    request_id: int = 0
    text: str = ""
    deltas: list[TextDelta] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    end: Finished | Failed | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def emit(self, event) -> None:
        if isinstance(event, TextDelta):
            self.deltas.append(event)
            self.text += event.text
        elif isinstance(event, ToolCall):
            self.calls.append(event)
        else:
            self.end = event
            self.done.set()

    def wait(self, timeout: float = 120) -> Run:
        assert self.done.wait(timeout), "generation did not finish in time"
        return self


def submit(engine: Engine, request: GenerationRequest) -> Run:
    run = Run()
    run.request_id = engine.submit(request, run.emit)
    return run


def generate(engine: Engine, request: GenerationRequest) -> Run:
    return submit(engine, request).wait()


def chat_tokens(engine: Engine, text: str) -> list[int]:
    return list(
        engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )
    )
