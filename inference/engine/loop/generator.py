"""Continuous batching over one model: queued rows, prefilling rows, decoding rows.

Each call (`next`) runs one decode step of the decoding rows, then, while they leave room,
admits queued rows to the prefill batch, joins the rows whose prompt is down to its last
token (their first tokens come out of this very call), prefills one chunk of the others,
and joins the rows that chunk finished. The prompt cache reads finished segments between
the chunk and the join (`after_prefill`), while each row's cache is its segment's own.

It stands on mlx-lm's public surface only: the model's `__call__(inputs, cache=...)`, the
caches' public methods (and our own batch caches, kv/rows.py), its samplers and logits
processors, `StopSequences` and `make_prompt_cache`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Set

import mlx.core as mx
from mlx_lm.generate import StopSequences
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler
from mlx_lm.utils import maybe_set_recommended_wired_limit

from . import batch_caches
from .decoding import Decoding
from .prefill import Prefilling
from .rows import Generated, PromptProgress, Row

NO_STOPS = StopSequences()


class Generator:
    """One batch of sequences of one model, its rows numbered from `first_uid`."""

    # (generator, the call's prompt progress), after its chunk, before rows join
    after_prefill: Callable[[Generator, list], None] | None = None

    def __init__(
        self,
        model,
        *,
        speculation=None,
        logprob_uids: Set[int] = frozenset(),
        completion_batch_size: int = 32,
        prefill_batch_size: int = 8,
        prefill_step_size: int = 2048,
        stream=None,
        first_uid: int = 0,
    ) -> None:
        self.model = model
        self.completion_batch_size = max(completion_batch_size, prefill_batch_size)
        self.prefill_batch_size = prefill_batch_size
        self.stream = stream or mx.default_stream(mx.default_device())
        self.queued: deque[Row] = deque()
        self.prefilling = Prefilling(model, prefill_step_size)
        self.decoding = Decoding(
            model, greedy_sampler, logprob_uids=logprob_uids, speculation=speculation
        )
        self._next_uid = first_uid
        self._wired_limit = maybe_set_recommended_wired_limit()

    def close(self) -> None:
        if self._wired_limit is not None:
            mx.synchronize(self.stream)
            mx.set_wired_limit(self._wired_limit)
            self._wired_limit = None

    # -- rows in -------------------------------------------------------------------

    def insert(self, prompts: list[list[int]], max_tokens: list[int], **options) -> list[int]:
        """Insert prompts of one segment each; their uids."""
        return self.insert_segments([[prompt] for prompt in prompts], max_tokens, **options)

    def insert_segments(
        self,
        segments: list[list[list[int]]],
        max_tokens: list[int],
        *,
        caches: list | None = None,
        all_tokens: list[list[int]] | None = None,
        samplers: list | None = None,
        logits_processors: list | None = None,
        stop_sequences: list[StopSequences] | None = None,
        media: list | None = None,
    ) -> list[int]:
        """Queue sequences, each given as prompt segments (the prefill pauses at each
        segment's end), the cache holding `all_tokens` before them; their uids. A media
        row's `media` (media/rows.py RowMedia) covers its whole prompt, cached part and all."""
        count = len(segments)
        caches = caches or [None] * count
        all_tokens = all_tokens or [[] for _ in range(count)]
        samplers = samplers or [None] * count
        logits_processors = logits_processors or [()] * count
        stop_sequences = stop_sequences or [NO_STOPS] * count
        media = media or [None] * count
        options = (max_tokens, caches, all_tokens, samplers, logits_processors, stop_sequences,
                   media)  # fmt: skip
        if any(len(option) != count for option in options):
            raise ValueError("every option needs one entry per sequence")
        rows = []
        for uid, parts, limit, cache, tokens, sampler, processors, stops, inputs in zip(
            range(self._next_uid, self._next_uid + count), segments, *options, strict=True
        ):
            parts = [list(segment) for segment in parts if segment]
            if not parts:
                raise ValueError(f"sequence {uid} has an empty prompt")
            if limit <= 0:
                raise ValueError(f"sequence {uid}'s max_tokens must be above 0")
            if len(parts[-1]) != 1:  # the last token is the first token's forward's
                parts[-1], last = parts[-1][:-1], parts[-1][-1:]
                parts.append(last)
            rows.append(
                Row(
                    uid,
                    list(tokens),
                    limit,
                    sampler,
                    tuple(processors or ()),
                    stops.matcher(),
                    segments=parts,
                    cache=cache if cache is not None else make_prompt_cache(self.model),
                    total=sum(map(len, parts)),
                    media=inputs,
                    position_delta=inputs.delta if inputs is not None else 0,
                )
            )
        self.queued.extend(rows)
        self._next_uid += count
        return [row.uid for row in rows]

    # -- one call ---------------------------------------------------------------------

    def next(self) -> tuple[list[PromptProgress], list[Generated]]:
        """One decode step, then prefill work while the decoding rows leave room."""
        with mx.stream(self.stream):
            generated = self.decoding.step()
            if len(self.decoding) >= self.completion_batch_size:
                return [], generated
            self._admit()
            progress = self._join(generated)
            chunk = self.prefilling.chunk()
            if self.after_prefill is not None and chunk:
                self.after_prefill(self, chunk)
            return progress + chunk + self._join(generated), generated

    def next_generated(self) -> list[Generated]:
        """The next call's generated tokens, calling on through prefill-only calls."""
        while True:
            progress, generated = self.next()
            if generated or not progress:
                return generated

    def _admit(self) -> None:
        # A row starts prefilling only with a decoding place waiting for it: rows joining
        # together never take the decoding rows past their batch size.
        count = min(
            self.prefill_batch_size - len(self.prefilling),
            self.completion_batch_size - len(self.decoding) - len(self.prefilling),
            len(self.queued),
        )
        if count > 0:
            self.prefilling.admit([self.queued.popleft() for _ in range(count)])

    def _join(self, generated: list[Generated]) -> list[PromptProgress]:
        """Move the rows down to their last token into decoding, their first tokens into
        `generated`; their progress."""
        rows, caches, last = self.prefilling.take_ready()
        if not rows:
            return []
        generated += self.decoding.join(rows, caches, last)
        return [PromptProgress(row.uid, (row.total, row.total), True, True) for row in rows]

    # -- rows out -------------------------------------------------------------------

    def remove(self, uids: list[int]) -> None:
        gone = set(uids)
        self.queued = deque(row for row in self.queued if row.uid not in gone)
        self.prefilling.remove(gone)
        self.decoding.remove(gone)

    def extract_cache(self, uids: list[int]) -> dict[int, tuple[list, list[int]]]:
        """uid -> (its single-sequence caches, the tokens they hold), wherever it is."""
        wanted, found = set(uids), {}
        for row in self.queued:
            if row.uid in wanted:
                found[row.uid] = (row.cache, row.tokens)
        for stage in (self.prefilling, self.decoding):
            for i, row in enumerate(stage.rows):
                if row.uid in wanted:
                    found[row.uid] = (stage.extract(i), row.tokens)
        return found

    @property
    def prompt_cache_nbytes(self) -> int:
        total = sum(batch_caches.nbytes(row.cache) for row in self.queued)
        return (
            total
            + batch_caches.nbytes(self.prefilling.caches)
            + batch_caches.nbytes(self.decoding.caches)
        )

    def __len__(self) -> int:
        return len(self.queued) + len(self.prefilling) + len(self.decoding)
