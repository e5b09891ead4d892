"""The ``memory.*`` settings of memory=v2 and their startup validation.

Hydra hands the provider plain dicts (``memory.write``, ``memory.writer``,
``memory.program_exemplars``, ``memory.store``); ``MemorySettings.parse``
turns them into frozen records, refusing unknown keys, wrong types, values
out of range and combinations that contradict each other, each with a
one-line ``MemoryConfigError`` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gigaevo.memory.v2.errors import CardFormatError, MemoryConfigError
from gigaevo.memory.v2.records import from_json

Cadence = Literal["live", "end_of_run", "none"]


def _at_least(name: str, value: float | None, minimum: float) -> None:
    if value is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class WriteSettings:
    """``memory/write``: when outcomes reach the librarian.

    ``live`` ingests each strictly valid outcome as it is committed,
    ``end_of_run`` queues them and ingests at close, ``none`` writes nothing.
    """

    cadence: Cadence = "live"


@dataclass(frozen=True)
class WriterSettings:
    """``memory.writer``: the librarian.

    Attributes:
        authoring_enabled: author new cards (false: a fixed shared card set).
        max_ingest_attempts: chain attempts per outcome or exemplar before it is dropped.
        ingest_call_timeout_s: bound on one author -> retrieve -> judge chain.
        neighbours_k: same-kind neighbours shown to the equivalence judge.
        scope: ``task`` (this task's cards) or ``bank`` (whole bank; multitask).
        max_cards_per_task: insight cards a task may hold (None: unbounded).
        max_program_chars, max_diff_lines, max_note_chars: bounds on what the
            author is shown (each program, the unified diff, report and explanation).
        llm_max_attempts: structured-output attempts per agent call.
        audit_duplicates: at close, judge each card of the task against its
            neighbours and report the residual duplicate rate (skipped when
            authoring is off: a fixed card set builds no judge).
        audit_max_cards: cards the audit checks at most (the newest).
    """

    authoring_enabled: bool = True
    max_ingest_attempts: int = 3
    ingest_call_timeout_s: float = 120.0
    neighbours_k: int = 5
    scope: Literal["task", "bank"] = "task"
    max_cards_per_task: int | None = None
    max_program_chars: int = 8000
    max_diff_lines: int = 200
    max_note_chars: int = 2000
    llm_max_attempts: int = 2
    audit_duplicates: bool = True
    audit_max_cards: int = 300

    def __post_init__(self) -> None:
        _at_least("max_ingest_attempts", self.max_ingest_attempts, 1)
        if self.ingest_call_timeout_s <= 0:
            raise ValueError(f"ingest_call_timeout_s must be > 0, got {self.ingest_call_timeout_s}")
        _at_least("neighbours_k", self.neighbours_k, 1)
        _at_least("max_cards_per_task", self.max_cards_per_task, 1)
        _at_least("max_program_chars", self.max_program_chars, 200)
        _at_least("max_diff_lines", self.max_diff_lines, 10)
        _at_least("max_note_chars", self.max_note_chars, 100)
        _at_least("llm_max_attempts", self.llm_max_attempts, 1)
        _at_least("audit_max_cards", self.audit_max_cards, 1)


@dataclass(frozen=True)
class ExemplarSettings:
    """``memory.program_exemplars``: program cards authored from strong programs.

    Attributes:
        enabled: author a program card when a child is the run's new best.
        max_per_task: program families a task may hold; a better newcomer evicts
            the weakest (fitness compared within the task only).
        store_code: keep the representative's source on the card.
    """

    enabled: bool = True
    max_per_task: int = 8
    store_code: bool = False

    def __post_init__(self) -> None:
        _at_least("max_per_task", self.max_per_task, 1)


@dataclass(frozen=True)
class StoreSettings:
    """``memory.store``: the bank's locks.

    Attributes:
        lock: ``os`` (kernel file locks) or ``soft`` (marker files; use on NFS).
        lock_timeout_s: wait for ``cards.json.lock``.
        authoring_lock_timeout_s: wait for ``cards.json.authoring.lock``.
        soft_lock_lifetime_s: with ``lock=soft``, age after which a bank-lock
            marker is broken (frees a marker left empty by a killed holder).
    """

    lock: Literal["os", "soft"] = "os"
    lock_timeout_s: float = 30.0
    authoring_lock_timeout_s: float = 300.0
    soft_lock_lifetime_s: float = 5.0

    def __post_init__(self) -> None:
        if self.lock_timeout_s <= 0 or self.authoring_lock_timeout_s <= 0:
            raise ValueError("lock_timeout_s and authoring_lock_timeout_s must be > 0")
        if self.soft_lock_lifetime_s <= 0:
            raise ValueError("soft_lock_lifetime_s must be > 0")


@dataclass(frozen=True)
class MemorySettings:
    """Every validated knob of memory=v2."""

    write: WriteSettings
    writer: WriterSettings
    exemplars: ExemplarSettings
    store: StoreSettings

    @classmethod
    def parse(
        cls,
        *,
        write: Mapping[str, Any] | None = None,
        writer: Mapping[str, Any] | None = None,
        program_exemplars: Mapping[str, Any] | None = None,
        store: Mapping[str, Any] | None = None,
    ) -> MemorySettings:
        """Validate the four ``memory.*`` dicts (missing keys take the defaults).

        Raises:
            MemoryConfigError: an unknown key, a bad value, or an inconsistent combination.
        """
        try:
            settings = cls(
                write=from_json(WriteSettings, dict(write or {}), "memory.write"),
                writer=from_json(WriterSettings, dict(writer or {}), "memory.writer"),
                exemplars=from_json(
                    ExemplarSettings, dict(program_exemplars or {}), "memory.program_exemplars"
                ),
                store=from_json(StoreSettings, dict(store or {}), "memory.store"),
            )
        except CardFormatError as exc:
            raise MemoryConfigError(str(exc)) from exc
        settings.check_consistency()
        return settings

    def check_consistency(self) -> None:
        """Refuse combinations of valid values that contradict each other.

        Raises:
            MemoryConfigError: naming both keys.
        """
        if self.store.authoring_lock_timeout_s < self.writer.ingest_call_timeout_s:
            raise MemoryConfigError(
                f"memory.store.authoring_lock_timeout_s={self.store.authoring_lock_timeout_s} is "
                f"shorter than memory.writer.ingest_call_timeout_s="
                f"{self.writer.ingest_call_timeout_s}: a waiting process would give up before "
                "the lock holder's chain may finish"
            )
        if self.exemplars.store_code and not self.exemplars.enabled:
            raise MemoryConfigError(
                "memory.program_exemplars.store_code=true has no effect with "
                "memory.program_exemplars.enabled=false"
            )
