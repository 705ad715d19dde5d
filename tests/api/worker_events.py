"""GET /api/events read as an operator reads it: on a thread, event by event."""

from __future__ import annotations

import json
import threading
import time

import httpx


class EventReader:
    """GET /api/events read on a thread: (id, kind, data) as they arrive."""

    def __init__(self, server, after: int | None = None, headers: dict | None = None) -> None:
        self.events: list[tuple[int, str, dict]] = []
        self.comments: list[str] = []
        self.status: int | None = None
        self._client = server.staff_client(timeout=httpx.Timeout(10, read=60))
        headers = {"Accept": "text/event-stream", **(headers or {})}  # as EventSource sends
        query = "" if after is None else f"?after={after}"
        self._thread = threading.Thread(target=self._read, args=(query, headers), daemon=True)
        self._thread.start()

    def _read(self, query: str, headers: dict) -> None:
        try:
            with self._client.stream("GET", f"/api/events{query}", headers=headers) as response:
                self.status = response.status_code
                fields: dict[str, str] = {}
                for line in response.iter_lines():
                    if line.startswith(":"):
                        self.comments.append(line)
                    elif line:
                        key, _, value = line.partition(": ")
                        fields[key] = value
                    elif "data" in fields:
                        self.events.append(
                            (int(fields["id"]), fields["event"], json.loads(fields["data"]))
                        )
                        fields = {}
        except (httpx.HTTPError, RuntimeError):  # closed by close()
            pass

    def wait_for(
        self, kind: str, model: str, after: int = 0, timeout: float = 90, worker: str = ""
    ) -> tuple:
        """The first event of `kind` for `model` (and `worker`, when named) after `after`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                ours = event[2]["model"] == model and worker in ("", event[2]["worker"])
                if event[0] > after and event[1] == kind and ours:
                    return event
            time.sleep(0.05)
        raise AssertionError(f"no {kind} event for {model}: {self.events}")

    def close(self) -> None:
        self._client.close()
