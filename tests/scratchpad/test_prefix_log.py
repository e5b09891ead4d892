"""The prompt-prefix log: a replayed attempt gets the prefix it was dispatched with."""

from __future__ import annotations

from typing import Any

from gigaevo.scratchpad.prefix_log import META_KEY, PromptPrefixLog


class _Meta:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.writes = 0

    def get_meta(self, key: str) -> Any:
        return self.data.get(key)

    def set_meta(self, key: str, value: Any) -> None:
        self.writes += 1
        self.data[key] = value


def test_prefix_per_attempt_survives_a_reload() -> None:
    meta = _Meta()
    log = PromptPrefixLog(meta)
    for attempt in range(4):
        log.record(attempt, "A", oldest_uncommitted=0)
    log.record(4, "B", oldest_uncommitted=1)
    log.record(5, "B", oldest_uncommitted=2)
    assert meta.writes == 2  # only changes are persisted
    reloaded = PromptPrefixLog(meta)  # as after a reset
    assert [reloaded.text_for(a) for a in range(1, 6)] == ["A", "A", "A", "B", "B"]


def test_entries_no_uncommitted_attempt_needs_are_trimmed() -> None:
    meta = _Meta()
    log = PromptPrefixLog(meta)
    log.record(0, "A", 0)
    log.record(3, "B", 2)
    log.record(6, "C", 5)  # attempts < 5 are committed: "A" is no longer needed
    assert [t for _, t in meta.data[META_KEY]] == ["B", "C"]
    assert log.text_for(5) == "B" and log.text_for(6) == "C"


def test_unknown_attempt_has_no_prefix() -> None:
    log = PromptPrefixLog(_Meta())
    assert log.text_for(0) is None
