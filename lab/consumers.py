"""The chat websocket: one socket per chat page, one reply generated at a time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from access.callers import acaller_for_user
from inference import json_body
from inference.accounting import CALLER
from inference.api.limits import admission_of
from inference.chat.call import ChatCall
from inference.chat.plan import plan_generation
from inference.errors import ApiError
from inference.protocol.events import Failed, Finished, ReasoningDelta, TextDelta
from inference.serve import start
from inference.workers.streams import EngineUnavailable, RequestStream, WorkerStopped

from .chat_settings import ChatInputError, chat_call, parse_settings
from .conversations import (
    Turn,
    conversation_summary,
    message_dict,
    new_user_message,
    plan_edit,
    plan_regenerate,
    plan_send,
    save_reply,
)

log = logging.getLogger(__name__)

UNAUTHENTICATED = 4401  # the websocket counterpart of HTTP 401
RUN_KEY = re.compile(r"[A-Za-z0-9-]{1,64}")


def _plan(user, message: dict) -> tuple[Turn, ChatCall]:
    """Work out an action and its chat call without changing anything yet: off the event
    loop, since reading attachments (base64, headers, an mp3's frames) is CPU work."""
    turn = _plan_turn(user, message)
    call = chat_call(turn.settings, turn.turns)
    turn.keep_attachments(call.messages)
    return turn, call


def _plan_turn(user, message: dict) -> Turn:
    settings = parse_settings(message)
    kind = message.get("type")
    if kind == "send":
        text, files = message.get("content"), attached(message.get("attachments"))
        if not isinstance(text, str) or not (text.strip() or files):
            raise ChatInputError("content must be a non-empty string")
        run = side_by_side_run(message.get("side_by_side_run"))
        return plan_send(user, message.get("conversation"), text, settings, run, files)
    if kind == "regenerate":
        return plan_regenerate(user, message.get("conversation"), settings)
    text = message.get("content")
    if not isinstance(text, str) or not text.strip():
        raise ChatInputError("content must be a non-empty string")
    return plan_edit(user, message.get("conversation"), message.get("message"), text, settings)


def attached(value) -> list[str]:
    """The data: URLs of the images and audio the page attached (the API's chat parser
    checks each); the page sends files, never an address for the server to fetch."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(url, str) and url[:5].lower() == "data:" for url in value
    ):
        raise ChatInputError("attachments must be a list of data: URLs")
    return value


def side_by_side_run(value) -> str:
    """The key a side-by-side page gives its run's conversations (None: a chat)."""
    if value is None:
        return ""
    if not isinstance(value, str) or not RUN_KEY.fullmatch(value):
        raise ChatInputError("side_by_side_run must be 1 to 64 letters, digits or '-'")
    return value


class LiveStats:
    """Time to first token and decode speed, as the reply streams. Both count from the
    request's arrival (`started`): a model loaded for it is part of the wait."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.first: float | None = None
        self.tokens = 0

    def token(self) -> None:
        self.first = self.first or time.monotonic()
        self.tokens += 1

    def snapshot(self, tokens: int | None = None) -> dict:
        tokens = self.tokens if tokens is None else tokens
        now = time.monotonic()
        decode = now - self.first if self.first else 0.0
        return {
            "ttft_ms": round((self.first - self.started) * 1000) if self.first else None,
            "completion_tokens": tokens,
            # The first token ends the prefill; speed counts the tokens after it.
            "tokens_per_second": round((tokens - 1) / decode, 2) if decode > 0 else None,
            "duration_ms": round((now - self.started) * 1000),
        }


class GenerationError(RuntimeError):
    """The engine could not finish the reply."""


class Reply:
    """The reply so far: its text, its reasoning and its live figures."""

    def __init__(self, started: float | None = None) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.stats = LiveStats(started)

    def add(self, event: TextDelta | ReasoningDelta) -> str:
        self.stats.token()
        if isinstance(event, TextDelta):
            self.content.append(event.text)
            return "delta"
        self.reasoning.append(event.text)
        return "reasoning"


class ChatConsumer(AsyncJsonWebsocketConsumer):
    # A chat socket talks to no other process: no channel layer, no Redis round trips.
    channel_layer_alias = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.user = user
        self.reply: asyncio.Task | None = None
        await self.accept()

    async def disconnect(self, code) -> None:
        await self._stop()

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        try:
            message = json_body.loads(text_data or "")
        except ValueError:
            await self._error("messages must be JSON objects")
            return
        await self.receive_json(message)

    async def receive_json(self, message, **kwargs) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "stop":
            await self._stop()
        elif kind not in {"send", "regenerate", "edit"}:
            await self._error("type must be one of 'send', 'regenerate', 'edit', 'stop'")
        elif self.reply is not None and not self.reply.done():
            await self._error("a reply is still being generated: stop it first")
        else:
            await self._start(message)

    async def _start(self, message: dict) -> None:
        received = time.monotonic()  # the reply's figures count from here, loading included
        try:
            turn, call = await database_sync_to_async(_plan)(self.user, message)
            plan = await plan_generation(call, caller=f"user:{self.user.pk}")
            # The user's limits and budget, as the API's; their usage is recorded the same.
            caller = await acaller_for_user(self.user)
            refusal, _ = await admission_of(caller)
            if refusal is not None:
                raise refusal
            # The worker's verdict comes before anything is saved: a refusal changes nothing.
            token = CALLER.set(caller)
            try:
                events, accepted = await start(plan)
            finally:
                CALLER.reset(token)
        except (ChatInputError, ApiError) as error:
            await self._error(str(error))
            return
        except (EngineUnavailable, WorkerStopped) as error:
            await self._error(error.message)
            return
        try:
            await self._begin(turn, plan.model_name, events, accepted.prompt_tokens, received)
        except BaseException:
            events.close()
            raise

    async def _begin(
        self, turn: Turn, model: str, events: RequestStream, prompt_tokens: int, received: float
    ):
        conversation, user_message, parent = await database_sync_to_async(turn.commit)(
            self.user, model
        )
        await self.send_json(
            {"type": "conversation", "conversation": conversation_summary(conversation)}
        )
        if turn.hides:  # what a regenerate or an edit replaces leaves the shown branch
            await self.send_json(
                {"type": "truncated", "conversation": conversation.id, "after": turn.hides_after}
            )
        if user_message is not None:
            shown = await database_sync_to_async(new_user_message)(user_message)
            await self.send_json({"type": "user_message", "message": shown})
        self.reply = asyncio.create_task(
            self._generate(conversation, parent, model, events, prompt_tokens, received)
        )

    async def _generate(
        self, conversation, parent, model: str, events, prompt_tokens: int, received: float
    ) -> None:
        await self.send_json({"type": "start", "model": model})
        reply = Reply(received)
        interrupted = None
        try:
            finish = await self._stream(events, reply)
        except asyncio.CancelledError:
            finish = None  # stopped by the user or the socket closed: keep what was generated
        except GenerationError as error:
            await self._error(str(error))
            return
        except WorkerStopped as error:  # keep the partial reply, marked interrupted
            finish, interrupted = None, error.stream_message
        stats = {
            **reply.stats.snapshot(finish.completion_tokens if finish else None),
            "prompt_tokens": finish.prompt_tokens if finish else prompt_tokens,
            "cached_tokens": finish.cached_tokens if finish else 0,
            # Speculative decoding (docs/API.md, "Speculative decoding"): drafts kept and refused,
            # and a grammar's forced tokens verified in one pass.
            "accepted_prediction_tokens": finish.accepted_prediction_tokens if finish else 0,
            "rejected_prediction_tokens": finish.rejected_prediction_tokens if finish else 0,
            "fast_forwarded_tokens": finish.fast_forwarded_tokens if finish else 0,
            "finish_reason": finish.finish_reason
            if finish
            else ("interrupted" if interrupted else "cancelled"),
            "model": model,
        }
        saved, versions = await database_sync_to_async(save_reply)(
            conversation, parent, "".join(reply.content), "".join(reply.reasoning), stats
        )
        with contextlib.suppress(Exception):  # the socket may be gone
            await self.send_json({"type": "done", "message": message_dict(saved, versions)})
            if interrupted:
                await self._error(interrupted)

    async def _stream(self, events: RequestStream, reply: Reply) -> Finished | None:
        """Forward the reply's text as it comes; closing the stream cancels it in the worker."""
        async with contextlib.aclosing(events.events()) as stream:
            async for event in stream:
                if isinstance(event, Finished):
                    return event
                if isinstance(event, Failed):
                    log.error("lab generation failed: %s", event.message)
                    raise GenerationError(f"generation failed: {event.message}")
                if isinstance(event, TextDelta | ReasoningDelta):
                    kind = reply.add(event)
                    await self.send_json(
                        {"type": kind, "text": event.text, "stats": reply.stats.snapshot()}
                    )
        return None

    async def _stop(self) -> None:
        reply, self.reply = getattr(self, "reply", None), None
        if reply is not None and not reply.done():
            reply.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reply

    async def _error(self, text: str) -> None:
        await self.send_json({"type": "error", "message": text})
