"""Agentic applicability labels (``memory/applicability=agentic``): the RAG contrast r of
memory-model.md "Immediate head".

For one decision, ``ApplicabilityAssessor.assess`` labels eligible cards
``applicable`` or ``not_applicable`` for the parent program with one
structured-output call to the memory LLM. It labels and never removes or
reorders a card (there is no separate lane): a label enters the design rows as
r = +0.5 / -0.5, and every card it did not label is ``unassessed`` (r = 0).

Bounds: at most ``max_cards`` cards are labelled per decision, those whose
brief is nearest the parent's source in the store's faiss index; labels are
cached by (parent id, card id, card text digest), so later attempts from the
same parent ask only about cards not yet labelled for it (none: no call); the
call runs under ``timeout_s``. A failed, late or malformed answer labels
nothing it was asked about (those cards stay unassessed) and is counted; it
never stops the run. Only ``LLMAuthenticationError`` propagates.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from gigaevo.llm.base import LLMClient
from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.errors import (
    AgentAnswerError,
    CardFormatError,
    IngestTimeout,
    MemoryConfigError,
)
from gigaevo.memory.v2.records import from_json
from gigaevo.memory.v2.write.agents import AgentUsage, TaskView, _Agent, _card_block, template
from gigaevo.memory.v2.write.deadline import Deadline, call_before
from gigaevo.memory.v2.write.outcome import clip
from gigaevo.util import derive_seed

APPLICABLE = "applicable"
NOT_APPLICABLE = "not_applicable"
UNASSESSED = "unassessed"
LABELS = (APPLICABLE, NOT_APPLICABLE)
RagLabel = Literal["applicable", "not_applicable", "unassessed"]

APPLICABILITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "labels": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "card_id": {"type": "string"},
                    "label": {"type": "string", "enum": list(LABELS)},
                },
                "required": ["card_id", "label"],
                "additionalProperties": False,
            },
        },
        "reason": {"type": "string", "maxLength": 600},
    },
    "required": ["labels", "reason"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class ApplicabilitySettings:
    """``memory.applicability`` (config group ``memory/applicability``).

    Attributes:
        mode: ``agentic`` (label with the memory LLM) or ``none`` (no labels, no r column).
        max_cards: cards labelled per decision at most (the nearest to the parent).
        timeout_s: bound on one labelling call (all its structured-output attempts).
        llm_max_attempts: structured-output answers per call.
        max_program_chars: parent source shown to the LLM (and used as the search query).
        cache_size: (parent, card, text) labels kept; the oldest go first.
    """

    mode: Literal["agentic", "none"] = "none"
    max_cards: int = 24
    timeout_s: float = 30.0
    llm_max_attempts: int = 2
    max_program_chars: int = 8000
    cache_size: int = 50_000

    def __post_init__(self) -> None:
        for name, minimum in (
            ("max_cards", 1),
            ("llm_max_attempts", 1),
            ("max_program_chars", 200),
            ("cache_size", 1),
        ):
            if getattr(self, name) < minimum:
                raise ValueError(f"{name} must be >= {minimum}, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ApplicabilitySettings:
        """Settings from the ``memory.applicability`` dict (missing keys take the defaults).

        Raises:
            MemoryConfigError: an unknown key or a bad value, naming it.
        """
        try:
            return from_json(cls, dict(raw or {}), "memory.applicability")
        except CardFormatError as exc:
            raise MemoryConfigError(str(exc)) from exc


@dataclass(frozen=True)
class Assessment:
    """The labels of one decision.

    Attributes:
        labels: card id -> ``applicable`` | ``not_applicable`` (labelled cards only).
        candidates: eligible cards of the decision.
        asked: cards sent to the memory LLM (0 when every chosen label was cached).
        cache_hits: chosen cards whose label came from the cache.
        calls, failures: memory LLM calls made (0 or 1) and failed (0 or 1).
        error: why the call failed ("" otherwise).
    """

    labels: Mapping[str, RagLabel] = field(default_factory=dict)
    candidates: int = 0
    asked: int = 0
    cache_hits: int = 0
    calls: int = 0
    failures: int = 0
    error: str = ""

    def label(self, card_id: str) -> RagLabel:
        return self.labels.get(card_id, "unassessed")

    def counts(self) -> dict[str, int]:
        """How many candidates got each label (``unassessed`` included)."""
        out = {name: sum(1 for v in self.labels.values() if v == name) for name in LABELS}
        out[UNASSESSED] = self.candidates - len(self.labels)
        return out


@dataclass
class AssessorStats:
    """Run totals (``memory_stats.json``)."""

    decisions: int = 0
    calls: int = 0
    failures: int = 0
    cache_hits: int = 0
    labelled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LABELS, 0))


class ApplicabilityAssessor(_Agent):
    """Labels the eligible cards of a decision for its parent (see the module docstring).

    Args:
        llm: the memory LLM.
        store: the card bank; its faiss index ranks cards by brief similarity.
        task: the task identity shown in the prompt.
        settings: bounds (``max_cards``, ``timeout_s``, ...).
        usage: shared memory LLM usage counters.
        seed: run seed (call seeds derive from it and the attempt).
    """

    def __init__(
        self,
        llm: LLMClient,
        *,
        store: LocalMemoryStore,
        task: TaskView,
        settings: ApplicabilitySettings,
        usage: AgentUsage,
        seed: int,
    ) -> None:
        super().__init__(llm, max_attempts=settings.llm_max_attempts, usage=usage)
        self.store = store
        self.task = task
        self.settings = settings
        self.seed = seed
        self.stats = AssessorStats()
        self._cache: OrderedDict[tuple[str, str, str], RagLabel] = OrderedDict()

    def assess(self, context: MutationContext, cards: Sequence[Card]) -> Assessment:
        """Labels of the ``max_cards`` cards of ``cards`` nearest to the parent.

        Raises:
            LLMAuthenticationError: the memory LLM refused the credentials.
        """
        if not cards or not context.parent_code.strip():
            reason = "" if not cards else "no parent source in the mutation context"
            return self._tally(Assessment(candidates=len(cards), error=reason))
        chosen = self.nearest(context.parent_code, cards)
        key = {c.id: (context.parent_id, c.id, c.text_digest) for c in chosen}
        labels = {c.id: self._cache[key[c.id]] for c in chosen if key[c.id] in self._cache}
        ask = [c for c in chosen if c.id not in labels]
        done = Assessment(labels, candidates=len(cards), cache_hits=len(labels))
        if not ask:
            return self._tally(done)
        asked = dataclasses.replace(done, asked=len(ask), calls=1)
        timeout = self.settings.timeout_s
        try:
            answered = call_before(
                Deadline(timeout), lambda: self._label(context, ask), "applicability"
            )
        except IngestTimeout:
            error = f"no answer within memory.applicability.timeout_s={timeout:g}"
            return self._tally(dataclasses.replace(asked, failures=1, error=error))
        except AgentAnswerError as exc:  # malformed or failed: these cards stay unassessed
            return self._tally(dataclasses.replace(asked, failures=1, error=str(exc)))
        for card in ask:
            self._remember(key[card.id], answered[card.id])
        return self._tally(dataclasses.replace(asked, labels={**labels, **answered}))

    def nearest(self, parent_code: str, cards: Sequence[Card]) -> list[Card]:
        """The ``max_cards`` cards whose brief is nearest the parent source (ties: card id)."""
        if len(cards) <= self.settings.max_cards:
            return sorted(cards, key=lambda c: c.id)
        query = clip(parent_code, self.settings.max_program_chars)
        by_id = {c.id: c for c in cards}
        # enough hits that max_cards of them are eligible even if every other card ranks first
        k = min(len(self.store), self.settings.max_cards + len(self.store) - len(by_id))
        hits: list[tuple[float, str]] = []
        for kind in sorted({c.kind for c in cards}):
            found = self.store.search(query, kind=kind, task_key=None, k=k)
            hits += [(-s, card.id) for card, s in found if card.id in by_id]
        chosen = [cid for _, cid in sorted(hits)[: self.settings.max_cards]]
        if len(chosen) < self.settings.max_cards:  # cards the index does not hold: by id
            rest = sorted(set(by_id) - set(chosen))
            chosen += rest[: self.settings.max_cards - len(chosen)]
        return [by_id[cid] for cid in chosen]

    def _label(self, context: MutationContext, cards: Sequence[Card]) -> dict[str, RagLabel]:
        """One call: a label for each of ``cards``.

        Raises:
            AgentAnswerError: no usable answer, or ids that are not exactly those offered.
        """
        user = template("applicability_user").format(
            task_key=self.task.task_key,
            task_context=self.task.task_context,
            parent_code=clip(context.parent_code, self.settings.max_program_chars),
            cards="\n\n".join(
                f"### id: {c.id}\n{_card_block(c.description, c.explanation_summary)}"
                for c in cards
            ),
        )
        seed = derive_seed(self.seed, "applicability", context.attempt)
        value, _ = self._ask(
            template("applicability_system"),
            user,
            APPLICABILITY_SCHEMA,
            "applicability_assessor",
            seed,
        )
        answered = [(item["card_id"], item["label"]) for item in value["labels"]]
        ids = [cid for cid, _ in answered]
        offered = {c.id for c in cards}
        if len(set(ids)) != len(ids) or set(ids) != offered:
            unknown = sorted(set(ids) - offered)
            missing = sorted(offered - set(ids))
            raise AgentAnswerError(
                f"applicability labels must cover each offered id once "
                f"(unknown {unknown}, missing {missing}, repeated {len(ids) - len(set(ids))})"
            )
        return {cid: cast(RagLabel, label) for cid, label in answered}  # schema enum: LABELS

    def _remember(self, key: tuple[str, str, str], label: RagLabel) -> None:
        self._cache[key] = label
        while len(self._cache) > self.settings.cache_size:
            self._cache.popitem(last=False)

    def _tally(self, assessment: Assessment) -> Assessment:
        s = self.stats
        s.decisions += 1
        s.calls += assessment.calls
        s.failures += assessment.failures
        s.cache_hits += assessment.cache_hits
        for name, n in assessment.counts().items():
            if name in s.labelled:
                s.labelled[name] += n
        return assessment

    def summary(self) -> dict[str, Any]:
        """Run totals for ``memory_stats.json``."""
        s = self.stats
        return {
            "decisions": s.decisions,
            "calls": s.calls,
            "failures": s.failures,
            "cache_hits": s.cache_hits,
            "labelled": dict(s.labelled),
            "cached_labels": len(self._cache),
        }
