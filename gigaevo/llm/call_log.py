"""The LLM call log: one JSON line per call in ``llm_calls.jsonl``, and running totals over it.

Every remote call (failed ones included) appends one ``CallRecord``: model,
role, outcome, attempts, the error kinds that caused retries, latency,
prompt and completion tokens, and the cost where it is known. Prompts,
answers and credentials are never written. Several clients (the mutator's and
the memory's) may append to the same file: each record is one ``write`` to a
file opened with ``O_APPEND``, so lines never interleave.

``UsageTally`` reads the file incrementally and sums it into ``LLMUsage``; the
pipeline uses it for ``summary.json`` and the cost budget. Because it reads
the file, a resumed run counts the calls of earlier sessions too.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LLM_CALLS_FILE = "llm_calls.jsonl"

OUTCOMES = ("ok", "error", "auth_error")


@dataclass(frozen=True)
class CallRecord:
    """One LLM call as the log keeps it.

    Attributes:
        time: Unix time at which the call ended.
        role: who called (``mutator``, ``memory``, ...).
        model: the model the call went to.
        outcome: ``ok``, ``error`` (gave up) or ``auth_error`` (credentials refused).
        attempts: requests sent (1 + retries).
        retried_on: error kinds of the attempts that were retried, in order.
        latency_s: wall time of the whole call, backoff included.
        prompt_tokens, completion_tokens: as the provider reported them (0 if none).
        cost_usd: the call's cost, None when no price is known.
        seed: the call seed.
        error_type: the final error's kind for failed calls.
        error: a short description of the final error (credentials removed).
    """

    time: float
    role: str
    model: str
    outcome: str
    attempts: int
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    seed: int | None = None
    retried_on: tuple[str, ...] = ()
    error_type: str | None = None
    error: str | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["retried_on"] = list(self.retried_on)
        return json.dumps(data, sort_keys=True)


class CallLog:
    """Appends ``CallRecord`` lines to ``path`` (thread-safe, shared between clients).

    Args:
        path: the JSONL file; its directory is created on the first record.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def record(self, record: CallRecord) -> None:
        """Append one line.

        Raises:
            OSError: the file cannot be written.
        """
        data = (record.to_json() + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


@dataclass
class _Bucket:
    calls: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, rec: dict[str, Any]) -> None:
        self.calls += 1
        self.failed += rec.get("outcome") != "ok"
        self.prompt_tokens += int(rec.get("prompt_tokens") or 0)
        self.completion_tokens += int(rec.get("completion_tokens") or 0)
        self.cost_usd += float(rec.get("cost_usd") or 0.0)


@dataclass(frozen=True)
class LLMUsage:
    """Totals over the call log.

    Attributes:
        calls, failed: calls recorded and those that gave up (auth errors included).
        retries: requests re-sent after a retryable error.
        prompt_tokens, completion_tokens, cost_usd: sums (unknown costs count 0).
        calls_without_price: successful calls whose cost is unknown.
        retried_on: retried error kinds and how often each caused a retry.
        failures: final error kinds of failed calls and their counts.
        by_model, by_role: ``calls``, ``failed``, tokens and ``cost_usd`` per model / role.
        unreadable_lines: lines that were not valid JSON (skipped).
    """

    calls: int = 0
    failed: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls_without_price: int = 0
    retried_on: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    by_model: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_role: dict[str, dict[str, Any]] = field(default_factory=dict)
    unreadable_lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class UsageTally:
    """Running totals of a call log file, read incrementally (thread-safe).

    Only complete lines are read; a line being written is picked up next
    time. A missing file means no calls yet.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._offset = 0
        self._total = _Bucket()
        self._retries = 0
        self._no_price = 0
        self._unreadable = 0
        self._retried_on: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        self._by_model: dict[str, _Bucket] = {}
        self._by_role: dict[str, _Bucket] = {}

    def cost_usd(self) -> float:
        """The cost of every complete line written so far (cheap: the engine asks per commit)."""
        with self._lock:
            self._read_new_lines()
            return self._total.cost_usd

    def totals(self) -> LLMUsage:
        """Totals over every complete line written so far."""
        with self._lock:
            self._read_new_lines()
            t = self._total
            return LLMUsage(
                calls=t.calls,
                failed=t.failed,
                retries=self._retries,
                prompt_tokens=t.prompt_tokens,
                completion_tokens=t.completion_tokens,
                cost_usd=t.cost_usd,
                calls_without_price=self._no_price,
                retried_on=dict(self._retried_on),
                failures=dict(self._failures),
                by_model={k: asdict(v) for k, v in sorted(self._by_model.items())},
                by_role={k: asdict(v) for k, v in sorted(self._by_role.items())},
                unreadable_lines=self._unreadable,
            )

    def _read_new_lines(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                self._unreadable += 1
                continue
            if isinstance(rec, dict):
                self._add(rec)
            else:
                self._unreadable += 1

    def _add(self, rec: dict[str, Any]) -> None:
        self._total.add(rec)
        self._by_model.setdefault(str(rec.get("model")), _Bucket()).add(rec)
        self._by_role.setdefault(str(rec.get("role")), _Bucket()).add(rec)
        retried = rec.get("retried_on") or []
        self._retries += len(retried)
        for kind in retried:
            self._retried_on[str(kind)] = self._retried_on.get(str(kind), 0) + 1
        if rec.get("outcome") != "ok":
            kind = str(rec.get("error_type") or "unknown")
            self._failures[kind] = self._failures.get(kind, 0) + 1
        elif rec.get("cost_usd") is None:
            self._no_price += 1
