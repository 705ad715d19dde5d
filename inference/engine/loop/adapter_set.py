"""The adapters in one model's engine: those requests name (loaded on first use), those an
operator mounted (loaded ahead of use, kept until unmounted), and the set the batch runs
under. Only the engine thread calls it, between steps.

Unmounting never fails a request, as vLLM's `/v1/unload_lora_adapter` leaves running
requests alone: rows generating under the adapter finish under it, and its weights leave
the model once the batch no longer runs (a request naming it later loads it again, as any
registered adapter).
"""

from __future__ import annotations

from ...protocol.adapters import AdapterRef
from ..acceleration.adapters import AdapterError, activate, adapter_key, load_adapter
from ..acceleration.adapters import unload_adapter as drop_from_model
from ..caching.prompt_cache import PromptCache


class AdapterSet:
    def __init__(self, model, prompt_cache: PromptCache) -> None:
        self._model = model
        self._prompt_cache = prompt_cache
        self._loaded: dict[str, str] = {}  # name -> its folder
        self._mounted: set[str] = set()
        self._dropping: set[str] = set()  # unmounted while the batch ran under them
        self.active: tuple[str, ...] | None = ()  # the batch's set; None: to apply again
        # Read by the worker's report from another thread: replaced, never changed in place.
        self.report: dict[str, list[str]] = {"mounted": [], "loaded": []}

    def use(self, refs: tuple[AdapterRef, ...]) -> None:
        """Make `refs` the batch's set, loading those not loaded yet.

        Raises:
            AdapterError: an adapter that cannot be applied to this model.
        """
        key = adapter_key(refs)
        if key == self.active:
            return
        for ref in refs:
            if ref.name not in self._loaded:
                self._load(ref)
        activate(self._model, key)
        self.active = key
        # Caches made under other adapters must never be reused under these.
        self._prompt_cache.use_adapters(refs)

    def mount(self, ref: AdapterRef, *, busy: bool) -> None:
        """Load `ref` ahead of use and keep it until it is unmounted. `busy`: the batch has
        rows (they keep running under what they started with).

        Raises:
            AdapterError: it cannot be applied, or its folder changed while rows use it.
        """
        folder = self._loaded.get(ref.name)
        if folder is not None and folder != ref.path:  # the registry moved it: new weights
            if busy and ref.name in (self.active or ()):
                raise AdapterError(
                    f"{ref.name} is in use from {folder}: unmount it, then mount it again"
                )
            self._drop(ref.name)
        if ref.name not in self._loaded:
            self._load(ref)
        self._mounted.add(ref.name)
        self._dropping.discard(ref.name)
        self._publish()

    def unmount(self, name: str, *, busy: bool) -> bool | None:
        """Drop `name`: True when it left at once, False when rows running under it keep it
        until the batch is done (`busy`), None when it is not loaded here."""
        if name not in self._loaded:
            return None
        self._mounted.discard(name)
        if busy and name in (self.active or ()):
            self._dropping.add(name)
            self._publish()
            return False
        self._drop(name)
        return True

    def settle(self, *, busy: bool) -> None:
        """Drop the adapters unmounted while the batch used them, once it has no rows."""
        if busy or not self._dropping:
            return
        for name in list(self._dropping):
            if name in self._loaded and name not in self._mounted:
                self._drop(name)
        self._dropping.clear()
        self._publish()

    def _load(self, ref: AdapterRef) -> None:
        load_adapter(self._model, ref)
        self._loaded[ref.name] = ref.path
        self._publish()

    def _drop(self, name: str) -> None:
        drop_from_model(self._model, name)
        del self._loaded[name]
        if name in (self.active or ()):
            self.active = None  # the next batch under this set loads it again
        self._publish()

    def _publish(self) -> None:
        self.report = {"mounted": sorted(self._mounted), "loaded": sorted(self._loaded)}
