"""Resumable generation: durable checkpoints of a generation, found again by an identical
retry, which replays what was generated and continues it.

Identity. A checkpoint is keyed by the sha256 of the canonical JSON of everything that can
change a continuation (object keys sorted, arrays in order, as mlx-bun 0.4 keys them): the
prompt's token ids, every sampling field (HLG's curve among them), the stop list,
max_tokens, the KV scheme (per layer with a kv_config), the adapter set, the grammar and tool choice, tool-call fill, the model and its
execution (path, device), the caller's scope, and the seed only when the client set it. A
request without a seed gets one drawn by the worker; it travels in the checkpoint, not in
the key, so that an identical retry finds the checkpoint and restores it.

State. Sampling re-seeds from (seed, step) at every step (sampling.py), so a generation's
whole random state is its seed and how many tokens it has; a checkpoint holds the seed
and the token ids. Replayed as a prompt (prompt + tokens) with the sampler at that step,
the retry continues as the first attempt would have.

Durability. A file per key under var/checkpoints: a JSON header line (seed), then lines
of `[start, [tokens...]]`, appended by the engine's DiskWriter thread every `every`
tokens and when the generation is interrupted (cancelled, failed, the worker stopping);
deleted when it finishes. A SIGKILLed worker writes nothing more: its retry finds the last
periodic checkpoint (at most `every - 1` tokens behind) and regenerates the rest. A line
is written whole or not read (a reader takes complete lines only); files are bounded in
bytes and age, the oldest deleted first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..prompting.request import GenerationRequest, Resume
from .disk_writer import DiskWriter
from .identity import adapters_identity, digest, kv_identity

log = logging.getLogger(__name__)

VERSION = 1
SUFFIX = ".ckpt"
_entropy = random.SystemRandom()


@dataclass(frozen=True)
class CheckpointConfig:
    """Where and how often (MLXLAB_CHECKPOINT_*); `every` 0 or no folder: no checkpoints."""

    folder: Path | None = None
    every: int = 8  # tokens between periodic checkpoints
    max_bytes: int = 64 << 20
    max_age_seconds: float = 86400.0

    def __post_init__(self) -> None:
        if self.every < 0 or self.max_bytes < 0 or self.max_age_seconds < 0:
            raise ValueError("checkpoint settings must be at least 0")

    @property
    def enabled(self) -> bool:
        return self.folder is not None and self.every > 0 and self.max_bytes > 0


def policy(request: GenerationRequest, call, model: dict, *, seed_explicit: bool) -> dict:
    """Everything that can change `request`'s continuation (`call`: its wire.GenerateCall)."""
    # Every field but the seed, nested ones (hlg's knobs) as objects of their own.
    sampling = {name: value for name, value in asdict(request.sampling).items() if name != "seed"}
    chat = call.chat
    return {
        "version": VERSION,
        "model": {"path": model["path"], "weights": model["weights"]},
        "execution": {"path": model["execution"], "device": model["device"], "batch": "continuous"},
        "prompt": list(request.prompt_tokens),
        "sampling": sampling,
        "seed_mode": "explicit" if seed_explicit else "server",
        "seed": request.sampling.seed if seed_explicit else None,
        "max_tokens": request.max_tokens,
        "stop": list(request.stop),
        "kv": kv_identity(request.kv),
        "adapters": adapters_identity(request.adapters),
        "structured": asdict(chat.structured) if chat and chat.structured else None,
        "tools": {"choice": chat.tool_choice, "names": chat.tool_names} if chat else None,
        "scope": request.cache_scope,
        # Images change the continuation, and their placeholders' ids do not say which.
        **({"media": list(request.media.hashes)} if request.media is not None else {}),
        # Filled drafts are verified, but as mlx-bun keys them: a verifying pass sums
        # attention in another order off the kernel path.
        **({"fill": request.fill.mode} if request.fill and not request.fill.refused else {}),
    }


class CheckpointStore:
    """One model's checkpoints. `plan` runs on the worker's main thread; `save` and `finish`
    on the engine thread, whose writes the DiskWriter's thread carries out."""

    def __init__(self, config: CheckpointConfig, writer: DiskWriter) -> None:
        self.config = config
        self.folder = Path(config.folder)
        self.writer = writer
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._ending: set[str] = set()  # finished, their files not yet deleted
        self.written = 0
        self.resumed = 0
        self._since_prune = 0
        writer.submit(self._prune)

    # -- the worker's main thread ------------------------------------------------------

    def plan(self, call, request: GenerationRequest, model: dict) -> GenerationRequest:
        """`request` with its checkpoint identity and what an earlier attempt left of it;
        unchanged for what is not resumed (logprobs, which a replay cannot give again)."""
        if request.logprobs or not getattr(call, "resumable", True):
            return request
        explicit = request.sampling.seed is not None
        key = digest(policy(request, call, model, seed_explicit=explicit))
        found = self.read(key)
        seed = request.sampling.seed
        if not explicit and not request.sampling.is_greedy:
            # The first attempt's seed, restored; or a fresh one, to be checkpointed.
            seed = found[0] if found and found[0] is not None else _entropy.getrandbits(63)
        tokens = tuple(found[1][: request.max_tokens - 1]) if found else ()
        if tokens:
            with self._lock:
                self.resumed += 1
        sampling = replace(request.sampling, seed=seed)
        return replace(request, sampling=sampling, resume=Resume(key, tokens, seed))

    def read(self, key: str) -> tuple[int | None, list[int]] | None:
        """(seed, tokens) of the checkpoint under `key`, or None."""
        with self._lock:
            if key in self._ending:  # its generation finished a moment ago
                return None
        try:
            text = (self.folder / f"{key}{SUFFIX}").read_text()
        except OSError:
            return None
        lines = text.split("\n")[:-1]  # the last piece has no newline yet: not complete
        try:
            header = json.loads(lines[0])
            if header.get("version") != VERSION or header.get("key") != key:
                return None
            tokens: list[int] = []
            for line in lines[1:]:
                start, more = json.loads(line)
                if start > len(tokens):
                    break  # a gap: what follows cannot be trusted
                tokens[start:] = more
        except (ValueError, IndexError, TypeError):
            return None
        return header.get("seed"), tokens

    # -- the engine thread -------------------------------------------------------------

    def save(self, resume: Resume, tokens: list[int], saved: int) -> int:
        """Checkpoint `tokens` (the first `saved` of which are on disk); the new count."""
        if len(tokens) <= saved:
            return saved
        path = self.folder / f"{resume.key}{SUFFIX}"
        if saved == 0:
            header = {"version": VERSION, "key": resume.key, "seed": resume.seed}
            text = json.dumps(header) + "\n" + json.dumps([0, list(tokens)]) + "\n"
            job = lambda: self._replace(path, text)  # noqa: E731
        else:
            line = json.dumps([saved, list(tokens[saved:])]) + "\n"
            job = lambda: self._append(path, line)  # noqa: E731
        if not self.writer.submit(job, 64 + 8 * (len(tokens) - saved)):
            return saved
        return len(tokens)

    def finish(self, resume: Resume) -> None:
        """The generation ended: its checkpoint has served its purpose."""
        with self._lock:
            self._ending.add(resume.key)
        self.writer.submit(lambda: self._delete(resume.key))

    # -- the writer's thread -----------------------------------------------------------

    def _replace(self, path: Path, text: str) -> None:
        temporary = self.folder / f".{uuid.uuid4().hex}{SUFFIX}"
        temporary.write_text(text)
        os.replace(temporary, path)
        self._wrote()

    def _delete(self, key: str) -> None:
        (self.folder / f"{key}{SUFFIX}").unlink(missing_ok=True)
        with self._lock:
            self._ending.discard(key)

    def _append(self, path: Path, line: str) -> None:
        if path.exists():  # pruned meanwhile: the retry starts afresh
            with open(path, "a") as file:
                file.write(line)
        self._wrote()

    def _wrote(self) -> None:
        with self._lock:
            self.written += 1
            self._since_prune += 1
            due = self._since_prune >= 64
        if due:
            self._prune()

    def _prune(self) -> None:
        """Delete checkpoints past their age, then the oldest past the byte bound."""
        with self._lock:
            self._since_prune = 0
        now = time.time()
        files = []
        for path in self.folder.iterdir():
            with contextlib.suppress(OSError):
                stat = path.stat()
                if now - stat.st_mtime > self.config.max_age_seconds:
                    path.unlink()
                else:
                    files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.config.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

    def stats(self) -> dict:
        with self._lock:
            return {"enabled": True, "written": self.written, "resumed": self.resumed}
