"""Row factories for the causal-ledger tests."""

from __future__ import annotations

from gigaevo.memory.v2.evidence import (
    Candidate,
    CardSnapshot,
    DecisionRow,
    FrozenContext,
    RewardDefinition,
    TerminalRow,
    decision_key_id,
)
from gigaevo.memory.v2.evidence.owner import session_owner

CARDS = ("c1", "c2", "c3")
RHO0 = 0.2


def snapshot(card_id: str, absorbed: tuple[str, ...] = ()) -> CardSnapshot:
    return CardSnapshot(card_id, absorbed, "insight", f"text of {card_id}", f"digest-{card_id}")


def _candidates(proposed: str, rho: float, offer: float) -> tuple[Candidate, ...]:
    """Masses: ``rho`` for the proposed card, the rest shared so that they sum to 1."""
    rest = (1.0 - rho - RHO0) / (len(CARDS) - 1)
    return tuple(
        Candidate(c, m, offer, m * offer, m * (1 - offer), True)
        for c in CARDS
        for m in [rho if c == proposed else rest]
    )


def make_decision(
    attempt: int,
    *,
    z: int | None = 1,
    proposed: str = "c1",
    run_id: str = "run",
    owner: str | None = None,
    parent_fitness: float = 0.5,
    rho: float = 0.5,
    offer: float = 0.7,
) -> DecisionRow:
    """A decision (abstention when ``z`` is None) over the universe ``CARDS``."""
    base = dict(
        decision_id=decision_key_id(run_id, attempt),
        run_id=run_id,
        seed=7,
        attempt=attempt,
        event_ordinal=attempt,
        owner=owner or session_owner(),
        context=FrozenContext(
            "task", f"p{attempt}", parent_fitness, 0, (1, 2), (0.1, 0.2), 0.0, (1.0, 0.0, 0.0)
        ),
        reward=RewardDefinition("score", "higher", 0.0, 1.0),
        universe=tuple(snapshot(c) for c in CARDS),
        pending=(),
        candidates=_candidates(proposed, rho, offer),
        fit=(),
        fitted_row_ids=(),
        evidence_version="v0",
    )
    if z is None:
        return DecisionRow(**base, abstain=True, rho0=RHO0)  # type: ignore[arg-type]
    joint = rho * (offer if z == 1 else 1 - offer)
    return DecisionRow(
        **base,  # type: ignore[arg-type]
        abstain=False,
        rho0=RHO0,
        proposed_id=proposed,
        z=z,
        offer=offer,
        rho=rho,
        joint=joint,
        q0=0.0,
        q1=0.01,
        r0=0.05,
        r1=0.05,
    )


def make_terminal(
    decision: DecisionRow,
    status: str = "valid",
    *,
    cited: tuple[str, ...] = (),
    gain: float | None = 0.1,
) -> TerminalRow:
    return TerminalRow(
        decision_id=decision.decision_id,
        child_id=f"child-{decision.attempt}" if status != "censored" else "no-child:test",
        base_id=decision.context.parent_id,
        metric="score",
        direction="higher",
        status=status,  # type: ignore[arg-type]
        cited_ids=cited,
        gain=gain if status == "valid" else None,
        censor_reason="test" if status == "censored" else None,
    )
