"""Running tallies of a run's JSONL logs, updated from ``JsonlTail`` reads.

Each feed keeps counts and small tables whose size depends on the number of
models, cards or event kinds, not on the length of the run (the per-attempt
decision series of the memory is the exception: one byte and one integer per
decision, for its plot).
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from pathlib import Path
from typing import Any

from gigaevo.analysis.memory import event_card_ids
from gigaevo.analysis.tail import JsonlTail

RECENT_EVENTS = 40
ACTIONS = ("abstain", "offer", "withhold")


class EventFeed:
    """``events.jsonl``: the latest events, counts by kind, start, resumes and the last stop."""

    def __init__(self, run_dir: Path) -> None:
        self.tail = JsonlTail(run_dir / "events.jsonl")
        self.clear()

    def clear(self) -> None:
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)
        self.counts: Counter[str] = Counter()
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.stopped: dict[str, Any] | None = None  # the stop event, while no event follows it

    def update(self) -> None:
        read = self.tail.read()
        if read.restarted:
            self.clear()
        for row in read.rows:
            kind = str(row.get("event"))
            self.counts[kind] += 1
            t = row.get("time")
            if isinstance(t, int | float):
                self.first_time = t if self.first_time is None else min(self.first_time, t)
                self.last_time = t if self.last_time is None else max(self.last_time, t)
            self.stopped = row if kind == "stop" else None
            self.recent.append({k: v for k, v in row.items() if not isinstance(v, dict | list)})


class LlmFeed:
    """``llm_calls.jsonl`` (remote models): calls, failures, tokens, cost and latency per model."""

    KEYS = ("calls", "failed", "retries", "prompt_tokens", "completion_tokens", "cost_usd")

    def __init__(self, run_dir: Path) -> None:
        self.tail = JsonlTail(run_dir / "llm_calls.jsonl")
        self.by_model: dict[tuple[str, str], dict[str, float]] = {}

    def update(self) -> None:
        read = self.tail.read()
        if read.restarted:
            self.by_model = {}
        for row in read.rows:
            key = (str(row.get("role") or "?"), str(row.get("model") or "?"))
            agg = self.by_model.setdefault(key, dict.fromkeys((*self.KEYS, "latency_s"), 0.0))
            agg["calls"] += 1
            agg["failed"] += row.get("outcome") != "ok"
            agg["retries"] += max(0, _num(row.get("attempts"), 1) - 1)
            for name in ("prompt_tokens", "completion_tokens", "cost_usd", "latency_s"):
                agg[name] += _num(row.get(name), 0)

    def table(self) -> list[dict[str, Any]]:
        """One row per (role, model) with the sums and the mean latency."""
        rows = []
        for (role, model), agg in sorted(self.by_model.items()):
            mean = agg["latency_s"] / agg["calls"] if agg["calls"] else 0.0
            rows.append({"role": role, "model": model, **agg, "mean_latency_s": mean})
        return rows


def _num(value: Any, default: float) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if number else default


class MemoryFeed:
    """``memory_events.jsonl`` and ``write_ledger.jsonl`` (memory=v2): offers, controls, citations.

    Attributes:
        actions: decisions by action (abstain, offer, withhold).
        outcomes: terminal outcomes by status (valid, invalid, censored).
        cited: outcomes whose child cited at least one card.
        per_card: card id -> [offered, withheld, cited].
        retired: ids of retired cards, in order.
        writes: write-ledger rows by (item, outcome).
        attempts, codes: each decision's attempt and action (index in ``ACTIONS``).
    """

    def __init__(self, run_dir: Path) -> None:
        self.events = JsonlTail(run_dir / "memory_events.jsonl")
        self.ledger = JsonlTail(run_dir / "write_ledger.jsonl")
        self.clear_events()
        self.writes: Counter[tuple[str, str]] = Counter()

    def clear_events(self) -> None:
        self.actions: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.cited = 0
        self.per_card: dict[str, list[int]] = {}
        self.retired: list[str] = []
        self.attempts = array("l")
        self.codes = array("b")

    @property
    def present(self) -> bool:
        return self.events.lines > 0 or self.ledger.lines > 0

    def update(self) -> None:
        read = self.events.read()
        if read.restarted:
            self.clear_events()
        for row in read.rows:
            self._event(row)
        read = self.ledger.read()
        if read.restarted:
            self.writes = Counter()
        for row in read.rows:
            self.writes[(str(row.get("item")), str(row.get("outcome")))] += 1

    def _card(self, card_id: Any) -> list[int]:
        return self.per_card.setdefault(str(card_id), [0, 0, 0])

    def _event(self, row: dict[str, Any]) -> None:
        kind = row.get("event")
        if kind == "assignment":
            abstain = row.get("abstain", row.get("proposed_id") is None)
            action = "abstain" if abstain else ("offer" if row.get("z") == 1 else "withhold")
            self.actions[action] += 1
            self.attempts.append(int(_num(row.get("attempt"), -1)))
            self.codes.append(ACTIONS.index(action))
            if action != "abstain":
                self._card(row.get("proposed_id"))[0 if action == "offer" else 1] += 1
        elif kind == "outcome":
            self.outcomes[str(row.get("status"))] += 1
            cited = row.get("cited_ids") or []
            self.cited += bool(cited)
            for card in cited if isinstance(cited, list) else []:
                self._card(card)[2] += 1
        elif kind == "retired":
            self.retired.extend(event_card_ids(row))
