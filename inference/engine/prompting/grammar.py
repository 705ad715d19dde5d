"""Grammar-constrained decoding with xgrammar, one matcher per request.

The compiled grammar is shared and cached per worker (one tokenizer) by its
kind and text, in an LRU bounded by bytes; the matcher is per request, so
constrained and free requests sit side by side in one batch. Compiles run on a
thread of their own under a time budget (xgrammar releases the GIL), so one
huge schema never holds up other prompts. xgrammar is imported on the first
compile, not with this module: it imports PyTorch (`torch_free.py` says why that
matters).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

import mlx.core as mx

from ...protocol.grammar import GrammarSpec

if TYPE_CHECKING:
    import xgrammar


class GrammarError(ValueError):
    """The grammar could not be compiled; the message says why."""


class GrammarCompiler:
    """Compiles grammars for one tokenizer, each (kind, source) once while it stays cached."""

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        stop_token_ids: list[int],
        *,
        max_bytes: int = 256 << 20,
        budget_seconds: float = 10.0,
    ) -> None:
        import xgrammar

        hf_tokenizer = getattr(tokenizer, "_tokenizer", tokenizer)
        info = xgrammar.TokenizerInfo.from_huggingface(
            hf_tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids
        )
        self._compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.max_bytes = max_bytes
        self.budget_seconds = budget_seconds
        self._cache: OrderedDict[GrammarSpec, xgrammar.CompiledGrammar] = OrderedDict()
        self._running: dict[GrammarSpec, Future] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="grammar")
        self._lock = threading.Lock()
        self.compiled = 0
        self.bytes = 0

    def compile(self, spec: GrammarSpec) -> xgrammar.CompiledGrammar:
        """The compiled grammar for `spec`; GrammarError when it fails or overruns the budget.

        A compile that overruns keeps going and is cached when done, so the same
        grammar sent again waits on it instead of starting over.
        """
        with self._lock:
            cached = self._cache.get(spec)
            if cached is not None:
                self._cache.move_to_end(spec)
                return cached
            future = self._running.get(spec)
            if future is None:
                future = self._running[spec] = self._pool.submit(self._compile_and_keep, spec)
        try:
            return future.result(timeout=self.budget_seconds)
        except FutureTimeout:
            raise GrammarError(
                f"compiling the grammar took longer than {self.budget_seconds:g} s"
            ) from None

    def _compile_and_keep(self, spec: GrammarSpec) -> xgrammar.CompiledGrammar:
        try:
            compiled = self._compile(spec)
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError with its reason
            with self._lock:
                self._running.pop(spec, None)
            raise GrammarError(_reason(exc)) from exc
        self._keep(spec, compiled)
        return compiled

    def _keep(self, spec: GrammarSpec, compiled: xgrammar.CompiledGrammar) -> None:
        size = compiled.memory_size_bytes
        with self._lock:
            self._running.pop(spec, None)  # in the same lock: never neither running nor cached
            self.compiled += 1
            if size > self.max_bytes:
                return  # serves this request only: caching it would evict everything else
            self._cache[spec] = compiled
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, evicted = self._cache.popitem(last=False)
                self.bytes -= evicted.memory_size_bytes

    def _compile(self, spec: GrammarSpec) -> xgrammar.CompiledGrammar:
        if spec.kind == "json_schema":
            return self._compiler.compile_json_schema(spec.source, any_whitespace=False)
        if spec.kind == "json_object":
            return self._compiler.compile_builtin_json_grammar()
        if spec.kind == "regex":
            return self._compiler.compile_regex(spec.source)
        if spec.kind == "choice":
            return self._compiler.compile_regex(spec.source)
        return self._compiler.compile_grammar(spec.source)


def _reason(exc: Exception) -> str:
    # xgrammar prefixes its C++ source location: "[12:00:00] /project/cpp/x.cc:94: ..."
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", lines[0])


class GrammarProcessor:
    """An mlx-lm logits processor that masks every token the grammar forbids.

    mlx-lm calls it once per step with the row's tokens so far; on the first
    call the last token is still the prompt's, afterwards it is the token the
    previous step sampled, which the matcher must accept before masking.
    """

    def __init__(self, compiled: xgrammar.CompiledGrammar, replayed: tuple[int, ...] = ()) -> None:
        """`replayed`: tokens a resumed generation already holds, accepted first."""
        import xgrammar
        from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx

        self._apply_bitmask = apply_token_bitmask_mlx
        self._matcher = xgrammar.GrammarMatcher(compiled)
        self._vocab_size = compiled.tokenizer_info.vocab_size
        self._bitmask = xgrammar.allocate_token_bitmask(1, self._vocab_size)
        self._started = False
        for token in replayed:
            self._matcher.accept_token(token)
        self.accepted = 0  # tokens the matcher took, so a verifying step can take some back

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._started and self._matcher.accept_token(tokens[-1].item()):
            self.accepted += 1
        self._started = True
        if self._matcher.is_terminated():
            return logits
        self._matcher.fill_next_token_bitmask(self._bitmask)
        mask = mx.array(self._bitmask.numpy())
        masked = self._apply_bitmask(mask, logits[..., : self._vocab_size], self._vocab_size)
        if logits.shape[-1] > self._vocab_size:  # padded output layer: pad ids never allowed
            padding = mx.full((1, logits.shape[-1] - self._vocab_size), -mx.inf, logits.dtype)
            masked = mx.concatenate([masked, padding], axis=-1)
        return masked

    def forced_after(self, token: int) -> list[int]:
        """The tokens the grammar admits as the only continuation once `token` (sampled, not
        yet taken) is taken: xgrammar's jump-forward tokens; the matcher left as it was."""
        if not self._started or self._matcher.is_terminated():
            return []
        if not self._matcher.accept_token(token):
            return []
        try:
            return self._matcher.find_jump_forward_tokens()
        finally:
            self._matcher.rollback(1)

    def rollback(self, count: int) -> None:
        """Take back the last `count` tokens taken (drafts a verifying step refused)."""
        if count > 0:
            self._matcher.rollback(count)
            self.accepted -= count


# Asked for when no grammar enforces the constraint and the request named none of its own.
GENERIC_INSTRUCTION = "Follow the requested output constraint exactly."


def degrade_instruction(spec: GrammarSpec) -> str:
    """The system message that asks for what the grammar could not enforce."""
    return spec.instruction or GENERIC_INSTRUCTION
