"""``memory_events.jsonl`` in ``checkpoint_dir``: structured runtime events of the read side.

One JSON line per event, appended with ``gigaevo.util.append_jsonl`` (a line
torn by a kill is fenced off by the next append; ``read_events`` skips it).
Kinds:

- ``assignment``: a decision was committed (proposal, Z, propensities).
- ``outcome``: its terminal was committed (status, cited, gain).
- ``retired``: a retirement sweep and its admission gate ran; ``retired_card_ids``
  is the exact list of cards deleted (empty when every verdict was rescued).
- ``applicability``: the memory LLM labelled candidate cards (labels only;
  they never remove a card).

Exactly once across kills and resumes (issue 16). An event about a decision
(``assignment``, ``outcome``, ``applicability``) is keyed by (kind, decision id): ``emit``
never appends a key the file already holds (a resumed attempt that emits again writes
nothing). The ledger commits a row before its event is appended, so a kill can only lose
the events of the last commit: ``recover`` (at start-up, from the ledger) appends the
``assignment`` of every committed decision of the run and the ``outcome`` of every
committed terminal that the file lacks, oldest first, so the file ends as an
uninterrupted run's would (times aside).

``applicability`` labels and ``retired`` sweeps are not in the ledger, so their events
are saved first as an intent (``.memory_events.intent.json``, keyed like the line):
the applicability event of a decision before the decision is committed, a retirement's
event inside the bank transaction (the admission gate updates it as it deletes cards),
each with a witness of its commit (the decision in the ledger; the retired ids gone from
the bank). ``recover`` appends an intent whose witness holds and whose key the file
lacks, and drops the others; a ``retired`` event is keyed by its ``sweep`` id.

Start-up cost (issue 16): ``recover`` reads only the tail a kill may have left
incomplete. ``.memory_events.mark.json`` records a byte size of the file and ledger
sequence numbers (decisions, terminals) such that every event of this run's rows up to
them is in the file's first bytes; it is written after ``recover`` and every
``MARK_EVERY`` lines when no intent is pending and no append failed. ``recover`` then
reads the lines after that size and the ledger rows after those numbers; a row at or
before them counts as present. A missing, foreign or longer-than-the-file mark is
ignored (the whole file is read, as before).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from gigaevo.memory.v2.bank.bankfile import utc_now
from gigaevo.memory.v2.evidence.rows import DecisionRow, TerminalRow
from gigaevo.util import append_jsonl, atomic_write_text

if TYPE_CHECKING:
    from gigaevo.memory.v2.evidence.ledger import SelectionEvidence

EVENTS_FILE = "memory_events.jsonl"
INTENT_FILE = ".memory_events.intent.json"
MARK_FILE = ".memory_events.mark.json"
MARK_EVERY = 256  # lines appended between two marks
EventKind = Literal["assignment", "outcome", "applicability", "retired"]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)


class MemoryEvents:
    """Appends events of one run to ``checkpoint_dir/memory_events.jsonl``."""

    def __init__(self, checkpoint_dir: str | Path, *, run_id: str) -> None:
        self.path = Path(checkpoint_dir) / EVENTS_FILE
        self.intent_path = self.path.with_name(INTENT_FILE)
        self.mark_path = self.path.with_name(MARK_FILE)
        self.run_id = run_id
        self._keys: set[tuple[str, str]] | None = None  # (kind, key) in the file (its tail)
        self._mark: dict[str, int] | None = None  # the mark the tail starts at (None: all)
        self._evidence: SelectionEvidence | None = None  # set by ``recover``
        self._pending: dict[str, dict[str, Any]] = {}  # intents by "kind:key"
        self._since_mark = 0  # lines appended since the last mark
        self._failed = False  # an append failed this session: no more marks
        self.recovered = 0  # events ``recover`` appended

    def keys(self) -> set[tuple[str, str]]:
        """The (kind, key) of every whole event line after the mark (read once, then kept);
        of the whole file when there is no usable mark."""
        if self._keys is None:
            self._mark = self._read_mark()
            start = 0 if self._mark is None else self._mark["size"]
            lines = read_events(self.path, start=start)
            self._keys = {k for k in map(event_key, lines) if k is not None}
        return self._keys

    def holds(self, key: tuple[str, str]) -> bool:
        """Whether the file holds the event ``key`` (in its tail, or covered by the mark)."""
        if key in self.keys():
            return True
        mark, evidence = self._mark, self._evidence
        if mark is None or evidence is None or key[0] == "retired":
            return False
        table = "terminals" if key[0] == "outcome" else "decisions"
        seq = evidence.seq_of(table, key[1])
        return seq is not None and seq <= mark[table]

    def recover(
        self, evidence: SelectionEvidence, *, card: Callable[[str], Any] | None = None
    ) -> int:
        """Append the events of this run's committed rows and intents that the file lacks
        (lost to a kill between a commit and its line); returns how many. Oldest first
        (decision before its outcome), then the intents.

        ``card`` looks a card up in the newest bank (id -> card or None): the witness of
        a ``retired`` intent; without it such an intent is kept for a later ``recover``.
        Reads the file after the mark and the ledger rows after its sequence numbers.
        """
        self._evidence = evidence
        keys = self.keys()
        mark = self._mark or {"decisions": 0, "terminals": 0}
        decisions = {
            d.decision_id: d
            for _, d in evidence.since("decisions", mark["decisions"])
            if d.run_id == self.run_id
        }
        missing: list[tuple[float, int, str, partial[dict[str, Any]]]] = []
        for d in decisions.values():
            if ("assignment", d.decision_id) not in keys:
                missing.append((d.created_at, 0, d.decision_id, partial(self.assignment, d)))
        for _, t in evidence.since("terminals", mark["terminals"]):
            decided = decisions.get(t.decision_id)
            if decided is None and ("outcome", t.decision_id) not in keys:
                decided = evidence.decision(t.decision_id)  # decided before the mark
            if decided is None or decided.run_id != self.run_id:
                continue
            if ("outcome", t.decision_id) not in keys:
                emit = partial(self.outcome, t, attempt=decided.attempt)
                missing.append((t.created_at, 1, t.decision_id, emit))
        for *_, emit in sorted(missing, key=lambda m: m[:3]):
            emit()
        count = len(missing) + self._recover_intents(evidence, card)
        self.recovered += count
        self.mark()
        return count

    def _recover_intents(
        self, evidence: SelectionEvidence, card: Callable[[str], Any] | None
    ) -> int:
        """Append the intents whose commit happened and whose line is missing; drop the
        intents of commits that never happened. Returns how many were appended."""
        try:
            saved = json.loads(self.intent_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return 0
        except ValueError:  # torn while being written: nothing after it had happened
            self.intent_path.unlink(missing_ok=True)
            return 0
        entries = saved.get("intents", {}) if isinstance(saved, dict) else {}
        appended = 0
        for name, entry in list(entries.items()):
            record, witness = entry.get("record", {}), entry.get("witness", {})
            key = event_key(record)
            if record.get("run_id") != self.run_id:
                continue  # another run's intent: left to it
            if key is None or self.holds(key):
                entries.pop(name)
                continue
            decided = witness.get("decision_id")
            if decided is not None:
                happened = evidence.decision(decided) is not None
            elif card is None:
                continue  # a retirement, no bank to check it against: kept for later
            else:
                happened = all(card(i) is None for i in witness.get("absent", []))
            entries.pop(name)
            if happened:
                self._append(record)
                appended += 1
        self._save_intents(entries)
        return appended

    # ---- intents ------------------------------------------------------------------

    def intend(
        self, kind: EventKind, fields: Mapping[str, Any], witness: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Save the event ``kind`` as an intent before its commit; returns the record
        (``emit_intent`` appends it once committed, ``drop_intent`` forgets it).

        ``witness``: ``{"decision_id": id}`` (committed once the ledger holds the
        decision) or ``{"absent": [ids]}`` (once the bank holds none of them).
        """
        record = self._record(kind, fields)
        key = event_key(record)
        if key is None:
            raise ValueError(f"a {kind} event without its key cannot be an intent")
        self._pending[f"{key[0]}:{key[1]}"] = {"record": record, "witness": dict(witness)}
        self._save_intents(self._pending)
        return record

    def emit_intent(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Append an intent's event (its commit happened) and drop the intent."""
        key = event_key(record)
        assert key is not None
        out = dict(record)
        if not self.holds(key):
            self._append(out)
        self.drop_intent(record)
        return out

    def drop_intent(self, record: Mapping[str, Any]) -> None:
        """Forget an intent whose commit did not happen (or whose line is written)."""
        key = event_key(record)
        if key is not None and self._pending.pop(f"{key[0]}:{key[1]}", None) is not None:
            self._save_intents(self._pending)

    def _save_intents(self, entries: Mapping[str, Any]) -> None:
        if entries:
            self.intent_path.parent.mkdir(parents=True, exist_ok=True)
            _write_state(self.intent_path, {"intents": dict(entries)})
        else:
            self.intent_path.unlink(missing_ok=True)

    # ---- the mark -----------------------------------------------------------------

    def _read_mark(self) -> dict[str, int] | None:
        try:
            mark = json.loads(self.mark_path.read_text(encoding="utf-8"))
            size = os.path.getsize(self.path)
        except (OSError, ValueError):
            return None
        names = ("size", "decisions", "terminals")
        if not isinstance(mark, dict) or mark.get("run_id") != self.run_id:
            return None
        if not all(isinstance(mark.get(n), int) for n in names) or mark["size"] > size:
            return None
        return {n: int(mark[n]) for n in names}

    def mark(self) -> bool:
        """Record that every event of this run's ledger rows so far is in the file (after
        ``recover``, or at a clean point); False when it cannot be said (no ledger, an
        intent pending, an append failed this session)."""
        evidence = self._evidence
        if evidence is None or self._pending or self._failed:
            return False
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            size = 0
        mark = {
            "run_id": self.run_id,
            "size": size,
            "decisions": evidence.last_seq("decisions"),
            "terminals": evidence.last_seq("terminals"),
        }
        _write_state(self.mark_path, mark)
        self._since_mark = 0
        return True

    def emit(self, kind: EventKind, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Append one event and return it.

        Raises:
            ValueError: unknown ``kind``, or ``fields`` reuses a reserved key
                (``event``, ``ts``, ``time``, ``run_id``).
        """
        record = self._record(kind, fields)
        key = event_key(record)
        if key is not None and self.holds(key):
            return record  # already in the file (a resumed attempt): exactly once
        self._append(record)
        if not self._pending and self._since_mark >= MARK_EVERY:
            self.mark()
        return record

    def _record(self, kind: EventKind, fields: Mapping[str, Any]) -> dict[str, Any]:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown memory event {kind!r} (known: {list(EVENT_KINDS)})")
        reserved = {"event", "ts", "time", "run_id"} & set(fields)
        if reserved:
            raise ValueError(f"event fields reuse reserved key(s) {sorted(reserved)}")
        record = {"event": kind, "ts": time.time(), "time": utc_now(), "run_id": self.run_id}
        record.update(fields)
        return record

    def _append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            append_jsonl(self.path, record)
        except BaseException:
            self._failed = True
            raise
        key = event_key(record)
        if key is not None:
            self.keys().add(key)
        self._since_mark += 1

    def assignment(self, decision: DecisionRow) -> dict[str, Any]:
        """Event for a committed decision (abstentions included)."""
        return self.emit(
            "assignment",
            {
                "decision_id": decision.decision_id,
                "attempt": decision.attempt,
                "abstain": decision.abstain,
                "proposed_id": decision.proposed_id,
                "z": decision.z,
                "offer": decision.offer,
                "rho": decision.rho,
                "rho0": decision.rho0,
                "joint": decision.joint,
                "candidates": len(decision.candidates),
                "evidence_version": decision.evidence_version,
            },
        )

    def outcome(self, terminal: TerminalRow, *, attempt: int | None = None) -> dict[str, Any]:
        """Event for a committed terminal."""
        return self.emit(
            "outcome",
            {
                "decision_id": terminal.decision_id,
                "attempt": attempt,
                "status": terminal.status,
                "child_id": terminal.child_id,
                "cited_ids": list(terminal.cited_ids),
                "gain": terminal.gain,
                "censor_reason": terminal.censor_reason,
            },
        )

    def applicability(self, attempt: int, labels: Mapping[str, str], **kw: Any) -> dict[str, Any]:
        """Event for the applicability labels (card id -> label) of one assessed decision
        (fields as ``applicability_fields``)."""
        return self.emit("applicability", applicability_fields(attempt, labels, **kw))


def applicability_fields(
    attempt: int,
    labels: Mapping[str, str],
    *,
    decision_id: str | None = None,
    candidates: int | None = None,
    asked: int = 0,
    cache_hits: int = 0,
    calls: int = 0,
    failures: int = 0,
    error: str = "",
) -> dict[str, Any]:
    """Fields of the applicability event of one assessed decision.

    ``counts`` tallies the labels; with ``candidates`` (eligible cards) the
    cards left without a label are counted as ``unassessed``. ``asked`` cards
    went to the memory LLM in ``calls`` calls (``failures`` failed, ``error``
    says why), ``cache_hits`` labels came from the cache.
    """
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    if candidates is not None:
        counts["unassessed"] = counts.get("unassessed", 0) + candidates - len(labels)
    return {
        "attempt": attempt,
        "decision_id": decision_id,
        "labels": dict(sorted(labels.items())),
        "counts": dict(sorted(counts.items())),
        "candidates": candidates,
        "asked": asked,
        "cache_hits": cache_hits,
        "calls": calls,
        "failures": failures,
        "error": error,
    }


def retired_fields(
    retired_card_ids: list[str],
    *,
    evidence_version: str,
    verdicts: int,
    kept: Mapping[str, int],
    sweep: str | None = None,
) -> dict[str, Any]:
    """Fields of one retirement's event: the exact deleted ids, why the other verdicts
    were kept, and the ``sweep`` id that keys it (the evictor's; a random one when not
    given)."""
    return {
        "retired_card_ids": list(retired_card_ids),
        "evidence_version": evidence_version,
        "verdicts": verdicts,
        "kept": dict(sorted(kept.items())),
        "sweep": sweep or uuid.uuid4().hex,
    }


def retired_event(
    events: MemoryEvents,
    retired_card_ids: list[str],
    *,
    evidence_version: str,
    verdicts: int,
    kept: Mapping[str, int],
) -> dict[str, Any]:
    """Event for one retirement: the exact deleted ids and why the other verdicts were kept."""
    fields = retired_fields(
        retired_card_ids, evidence_version=evidence_version, verdicts=verdicts, kept=kept
    )
    return events.emit("retired", fields)


def _write_state(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically without fsync: a SIGKILL leaves the old or the new file
    (as the ledger's ``synchronous=NORMAL`` commits survive it); a power loss may leave
    it empty, which reads as no intent / no mark (the whole file is then read)."""
    text = json.dumps(data, sort_keys=True, default=str) + "\n"
    atomic_write_text(path, text, durable=False, synced=False)


def event_key(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, decision id) of an event about one decision, ("retired", sweep id) of a
    retirement's, else None."""
    sweep = record.get("sweep")
    if record.get("event") == "retired" and isinstance(sweep, str):
        return "retired", sweep
    decision_id = record.get("decision_id")
    if record.get("event") in ("assignment", "outcome", "applicability") and isinstance(
        decision_id, str
    ):
        return str(record["event"]), decision_id
    return None


def read_events(path: str | Path, *, start: int = 0) -> list[dict[str, Any]]:
    """Every whole event line of ``path`` from byte ``start`` on (a line start; torn or
    non-object lines are skipped)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
