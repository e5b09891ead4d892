"""The card model: insight and program cards, the evidence pooled into them, their ids.

A card is a hypothesis, never a proven truth: one conditional treatment
("When C, try A because M") with its proposed mechanism, the task it was
authored for, the programs it came from and the outcomes pooled into it.
Cards are immutable records: every change (pooled evidence, a better program
representative, a use trial) makes a new record with ``revision + 1``; the
treatment text (description and explanation) is never rewritten.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Literal

CardKind = Literal["insight", "program"]
KINDS: tuple[CardKind, ...] = ("insight", "program")

# bounds that keep one card small however often it is pooled into
MAX_EVIDENCE = 32  # the founding row plus the most recent ones; n_evidence counts all
MAX_PROVENANCE = 64  # founding ids plus the most recent ones
# usefulness-eligible trials stamped per card, newest kept (memory-model.md "Multitask transfer")
MAX_USE_TRIALS = 2048
MAX_TASK_CONTEXT = 400  # characters of the task description kept as context
MAX_BRIEF = 1200  # characters of card_brief embedded for retrieval

_SPACE_RE = re.compile(r"\s+")
_EDGE_PUNCT = " .;:,!?\"'`"


@dataclass(frozen=True)
class Evidence:
    """One mutation outcome pooled into a card (the founding one or an equivalent's)."""

    task_key: str
    run_id: str
    attempt: int
    parent_id: str
    child_id: str
    parent_fitness: float
    child_fitness: float
    normalised_gain: float
    archive_status: str
    candidate_id: str
    recorded_at: float


@dataclass(frozen=True)
class Representative:
    """The best program of one task for a program card's strategy family.

    ``code`` is kept only when ``program_exemplars.store_code=true``.
    """

    task_key: str
    run_id: str
    program_id: str
    fitness: float
    higher_is_better: bool
    code: str | None = None

    def beats(self, other: Representative) -> bool:
        """True when this program is strictly better; fitness is compared within one task only.

        Raises:
            ValueError: the two representatives belong to different tasks.
        """
        if self.task_key != other.task_key:
            raise ValueError("raw fitness never competes across tasks")
        if self.higher_is_better:
            return self.fitness > other.fitness
        return self.fitness < other.fitness


@dataclass(frozen=True)
class UseTrial:
    """One usefulness-eligible randomised use trial of a card (memory-model.md "Multitask
    transfer"), compact.

    Stamped by the live updater (``trials.stamp_trial``) onto the owning card
    for withheld controls (``z = 0``, valid or invalid) and cited deliveries
    (``z = 1``); never for uncited deliveries, abstentions or censored
    terminals. ``success`` is ``valid and g > 0``. Gains never cross tasks, so
    none is kept.
    """

    decision_id: str
    run_id: str
    task_key: str
    z: int
    success: bool

    def __post_init__(self) -> None:
        if self.z not in (0, 1):
            raise ValueError(f"a trial's z must be 0 or 1, got {self.z}")


@dataclass(frozen=True)
class Card:
    """One banked card (see the module docstring).

    Attributes:
        id: stable bank id; the treatment identity the read side credits.
        kind: ``insight`` (a mutation hypothesis) or ``program`` (a strategy family).
        revision: 1 at admission, +1 on every change to the record.
        task_key, task_context: the task it was authored for and a bounded excerpt
            of that task's description.
        description: one conditional treatment hypothesis, "When C, try A because M".
        explanation_summary: its proposed mechanism.
        provenance: program ids (parents and children) of every pooled outcome.
        evidence: pooled outcomes, founding row first (bounded, see ``n_evidence``).
        n_evidence: how many outcomes were ever pooled (>= ``len(evidence)``).
        derived_from: card ids the founding mutation cited (historical lineage).
        aliases: ids of cards absorbed into this one (the read side's lineage).
        representatives: program cards only; at most one best program per task.
        author_model, created_by: the authoring model and the run id that admitted it.
        created_at, updated_at: unix seconds.
        use_trials: usefulness-eligible randomised trials stamped by the live updater,
            deduplicated by decision id (newest ``MAX_USE_TRIALS``); banks written
            before the field existed load with none.
    """

    id: str
    kind: CardKind
    revision: int
    task_key: str
    task_context: str
    description: str
    explanation_summary: str
    provenance: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    n_evidence: int
    derived_from: tuple[str, ...]
    aliases: tuple[str, ...]
    representatives: tuple[Representative, ...]
    author_model: str
    created_by: str
    created_at: float
    updated_at: float
    use_trials: tuple[UseTrial, ...] = ()

    def __post_init__(self) -> None:
        if not self.id or not self.description.strip():
            raise ValueError("a card needs an id and a description")
        if self.revision < 1 or self.n_evidence < len(self.evidence):
            raise ValueError("revision must be >= 1 and n_evidence >= len(evidence)")
        tasks = [r.task_key for r in self.representatives]
        if len(tasks) != len(set(tasks)):
            raise ValueError("at most one representative per task")
        if self.kind == "insight" and self.representatives:
            raise ValueError("insight cards have no program representatives")

    @property
    def brief(self) -> str:
        """The text retrieval embeds (``card_brief``)."""
        return card_brief(self.description, self.explanation_summary)

    @property
    def text_digest(self) -> str:
        """Digest of the delivered treatment text (stable for the card's life)."""
        return payload_digest(self.kind, self.description, self.explanation_summary)

    def representative(self, task_key: str) -> Representative | None:
        """This task's representative program, if any."""
        return next((r for r in self.representatives if r.task_key == task_key), None)


def card_brief(description: str, explanation_summary: str) -> str:
    """``description + explanation_summary`` on one line, bounded: the retrieval text."""
    text = f"{description.strip()} {explanation_summary.strip()}"
    return _SPACE_RE.sub(" ", text).strip()[:MAX_BRIEF]


def normalise_text(text: str) -> str:
    """Lower case, single spaces, no punctuation at the ends."""
    return _SPACE_RE.sub(" ", text.lower()).strip(_EDGE_PUNCT)


def payload_digest(kind: str, description: str, explanation_summary: str) -> str:
    """SHA-256 of the exact normalised authored payload (tombstones compare these)."""
    payload = "\x1f".join((kind, normalise_text(description), normalise_text(explanation_summary)))
    return hashlib.sha256(payload.encode()).hexdigest()


def new_card_id(kind: CardKind, run_id: str, attempt: int, stage: str) -> str:
    """A deterministic id for the candidate authored from one outcome of one run.

    The same run, attempt and stage always give the same id; different runs
    sharing a bank give different ids. ``ins-`` / ``prg-`` prefixes name the kind.
    """
    digest = hashlib.sha256(f"{run_id}|{attempt}|{stage}".encode()).hexdigest()[:12]
    return f"{'ins' if kind == 'insight' else 'prg'}-{digest}"


def bounded_context(task_description: str) -> str:
    """The bounded task-description excerpt stored on every card."""
    return _SPACE_RE.sub(" ", task_description).strip()[:MAX_TASK_CONTEXT]


def founding_card(
    *,
    card_id: str,
    kind: CardKind,
    task_key: str,
    task_context: str,
    text: tuple[str, str],
    evidence: Evidence,
    provenance: tuple[str, ...],
    representative: Representative | None,
    lineage: tuple[str, ...],
    author_model: str,
    run_id: str,
) -> Card:
    """Revision 1 of a newly authored card; ``text`` is (description, explanation_summary)."""
    return Card(
        id=card_id,
        kind=kind,
        revision=1,
        task_key=task_key,
        task_context=task_context,
        description=text[0],
        explanation_summary=text[1],
        provenance=provenance,
        evidence=(evidence,),
        n_evidence=1,
        derived_from=lineage,
        aliases=(),
        representatives=() if representative is None else (representative,),
        author_model=author_model,
        created_by=run_id,
        created_at=evidence.recorded_at,
        updated_at=evidence.recorded_at,
    )


def pool_into(card: Card, evidence: Evidence, provenance: tuple[str, ...], now: float) -> Card:
    """``card`` with one more outcome pooled in; the treatment text is untouched."""
    rows = (*card.evidence, evidence)
    if len(rows) > MAX_EVIDENCE:
        rows = (rows[0], *rows[len(rows) - MAX_EVIDENCE + 1 :])
    return replace(
        card,
        revision=card.revision + 1,
        provenance=_merge_ids(card.provenance, provenance),
        evidence=rows,
        n_evidence=card.n_evidence + 1,
        updated_at=now,
    )


def with_representative(card: Card, rep: Representative, now: float) -> Card:
    """``card`` whose representative for ``rep.task_key`` is ``rep`` (added or replaced)."""
    others = tuple(r for r in card.representatives if r.task_key != rep.task_key)
    return replace(
        card,
        revision=card.revision + 1,
        representatives=(*others, rep),
        updated_at=now,
    )


def with_use_trial(card: Card, trial: UseTrial, now: float) -> Card:
    """``card`` with ``trial`` stamped (the newest ``MAX_USE_TRIALS`` are kept).

    The caller deduplicates by decision id (``trials.stamp_trial``).
    """
    trials = (*card.use_trials, trial)[-MAX_USE_TRIALS:]
    return replace(card, revision=card.revision + 1, use_trials=trials, updated_at=now)


def _merge_ids(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    merged = list(old) + [i for i in dict.fromkeys(new) if i not in set(old)]
    if len(merged) <= MAX_PROVENANCE:
        return tuple(merged)
    keep_first = 2  # the founding parent and child
    return (*merged[:keep_first], *merged[len(merged) - MAX_PROVENANCE + keep_first :])


def render_card(card: Card) -> str:
    """The card as a mutation prompt shows it: ``[id]`` at the start of its first line."""
    return (
        f"[{card.id}] {card.description.strip()}\n  Mechanism: {card.explanation_summary.strip()}"
    )
