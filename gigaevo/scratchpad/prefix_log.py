"""Which scratchpad prompt prefix each dispatched attempt saw, kept for replays after a reset.

The engine persists every dispatch before its LLM call and replays it verbatim
on resume. The scratchpad prefix is part of that prompt, and the notes may
have changed between a dispatch and a kill, so the prefix in force is recorded
too: as a short list of ``(first attempt, text)`` pairs, appended only when
the prefix changes and trimmed to what uncommitted attempts still need.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

META_KEY = "scratchpad_prompt_prefixes"


class MetaStore(Protocol):
    """A key/value store of JSON values (the program store's ``meta`` table)."""

    def get_meta(self, key: str) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...


class PromptPrefixLog:
    """Prefix history by attempt, persisted in ``store`` under ``META_KEY``.

    ``record`` runs on the dispatching thread before the dispatch is stored;
    ``text_for`` may be called from worker threads.
    """

    def __init__(self, store: MetaStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        saved = store.get_meta(META_KEY) or []
        self._entries: list[tuple[int, str]] = [(int(a), str(t)) for a, t in saved]

    def record(self, attempt: int, text: str, oldest_uncommitted: int) -> None:
        """Note that ``attempt`` (and later ones, until the next change) sees ``text``."""
        with self._lock:
            if self._entries and self._entries[-1][1] == text:
                return
            self._entries.append((attempt, text))
            # an entry is needed while some uncommitted attempt falls in its range
            while len(self._entries) > 1 and self._entries[1][0] <= oldest_uncommitted:
                self._entries.pop(0)
            snapshot = [[a, t] for a, t in self._entries]
        self.store.set_meta(META_KEY, snapshot)

    def text_for(self, attempt: int) -> str | None:
        """The prefix ``attempt`` was dispatched with, or None when none is recorded."""
        with self._lock:
            found = None
            for first, text in self._entries:
                if first > attempt:
                    break
                found = text
            return found
