"""The records the engine, its memory lane, the committer and the store pass between them.

- ``Dispatch``: an attempt as decided before its model call (persisted, replayed on resume);
- ``AttemptResult``: what a worker thread hands back for one attempt;
- ``EngineSettings``: the loop's knobs, with the dispatch mode (``DISPATCH_MODES``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from gigaevo.mutation.base import ParentFeedback

if TYPE_CHECKING:
    from gigaevo.evaluation.base import EvaluationResult
    from gigaevo.mutation.base import MutationOutcome

# strict: commit in attempt order, dispatch a + max_in_flight when a commits (reproducible);
# arrival: commit as results arrive, refill a slot as soon as one frees (remote models)
DISPATCH_MODES = ("strict", "arrival")


@dataclass(frozen=True)
class Dispatch:
    """A mutation attempt as decided before the LLM call; replayed verbatim on resume.

    ``feedback`` is the parent's feedback section as it stood at dispatch.
    ``failure`` is set when the memory's decision raised: the attempt is then
    recorded as failed without a model call (on replay too).
    """

    attempt: int
    island: int
    parent_id: str
    inspiration_ids: tuple[str, ...]
    seed: int
    slate: str = ""
    card_ids: tuple[str, ...] = ()
    feedback: ParentFeedback = field(default_factory=ParentFeedback)
    failure: str | None = None

    def to_json(self) -> str:
        d = asdict(self)
        d["inspiration_ids"] = list(self.inspiration_ids)
        d["card_ids"] = list(self.card_ids)
        if self.feedback:
            d["feedback"] = self.feedback.to_dict()
        else:
            del d["feedback"]  # rows without feedback stay as they were
        if self.failure is None:
            del d["failure"]  # rows of runs without a failed decision stay as they were
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Dispatch:
        d = json.loads(text)
        d["inspiration_ids"] = tuple(d["inspiration_ids"])
        d["card_ids"] = tuple(d.get("card_ids", ()))
        d["feedback"] = ParentFeedback.from_dict(d.get("feedback") or {})
        return cls(**d)


@dataclass(frozen=True)
class AttemptResult:
    """What a worker thread hands back for one attempt.

    ``evaluation`` is None for a failed mutation or a skipped duplicate.
    ``error_stage`` names where an unexpected exception was contained
    (``memory decide``, ``prompt``, ``mutation``, ``evaluation``); the outcome
    then carries the failure.
    """

    dispatch: Dispatch
    outcome: MutationOutcome
    digest: str | None
    evaluation: EvaluationResult | None
    error_stage: str | None = None


@dataclass(frozen=True)
class EngineSettings:
    """Plain knobs of the loop.

    Attributes:
        seed: the run seed.
        max_mutants: the mutation budget.
        max_in_flight: attempts calling the model or being evaluated at once.
        task_key: the memory's task identity.
        dispatch: ``strict`` or ``arrival`` (see ``DISPATCH_MODES``).
        dispatch_ahead: in arrival order, attempts dispatched beyond
            ``max_in_flight`` (their memory decisions are made while the slots
            are busy, so a freed slot starts its model call at once).
        in_flight_ramp: mutants over which the attempts outstanding widen from
            1 to ``outstanding`` (0: all from the start); see ``width``.
    """

    seed: int
    max_mutants: int
    max_in_flight: int = 4
    task_key: str = ""
    dispatch: str = "strict"
    dispatch_ahead: int = 0
    in_flight_ramp: int = 0

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCH_MODES:
            raise ValueError(f"dispatch must be one of {DISPATCH_MODES}, got {self.dispatch!r}")
        if self.dispatch_ahead < 0:
            raise ValueError(f"dispatch_ahead must be >= 0, got {self.dispatch_ahead}")
        if self.in_flight_ramp < 0:
            raise ValueError(f"in_flight_ramp must be >= 0, got {self.in_flight_ramp}")

    @property
    def outstanding(self) -> int:
        """Most attempts dispatched and not yet committed."""
        ahead = self.dispatch_ahead if self.dispatch == "arrival" else 0
        return self.max_in_flight + ahead

    def width(self, n_mutants: int) -> int:
        """Most attempts outstanding once ``n_mutants`` mutants are committed.

        Without a ramp, ``outstanding``. With ``in_flight_ramp = R``, it grows
        linearly from 1 (no mutant committed: every choice sees every result)
        to ``outstanding`` at ``R`` mutants: ``1 + n (outstanding - 1) // R``.
        A function of the committed count alone, so strict dispatch stays
        reproducible and a resumed run dispatches as the uninterrupted one.
        """
        full = self.outstanding
        if self.in_flight_ramp == 0 or n_mutants >= self.in_flight_ramp:
            return full
        return 1 + (max(0, n_mutants) * (full - 1)) // self.in_flight_ramp
