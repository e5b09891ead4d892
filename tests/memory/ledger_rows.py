"""Synthetic causal-ledger rows and bank cards for the reader tests (lineage head, excluder,
posterior config): decisions at chosen contexts, their terminals, edges and lineage rows."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2.bank.cards import Card, Evidence, founding_card
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.evidence import (
    Candidate,
    CardSnapshot,
    DecisionRow,
    EdgeRow,
    FrozenContext,
    LineageRow,
    TerminalRow,
    decision_key_id,
)
from gigaevo.memory.v2.read.reader import CausalReader

OFFER = 0.7
RHO = 0.5
SHM = Path("/dev/shm")


@contextmanager
def fast_dir(fallback: Path) -> Iterator[Path]:
    """A scratch directory on tmpfs when there is one (ledger commits fsync: thousands of
    synthetic rows cost seconds on a disk), else ``fallback``."""
    if not (SHM.is_dir() and shutil.disk_usage(SHM).free > 1 << 28):
        yield fallback
        return
    path = Path(tempfile.mkdtemp(prefix="gigaevo-test-", dir=SHM))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def put_card(
    store: LocalMemoryStore, card_id: str, aliases: tuple[str, ...] = (), task: str = "toy"
) -> Card:
    """Bank an insight card of ``task`` with this id (and absorbed ``aliases``)."""
    evidence = Evidence(task, "run-x", 0, "p", "c", 5.0, 5.1, 0.01, "improved", card_id, 0.0)
    card = founding_card(
        card_id=card_id,
        kind="insight",
        task_key=task,
        task_context="Maximise the score of the toy task.",
        text=(f"When {card_id} holds, try {card_id} because {card_id}.", f"mechanism {card_id}"),
        evidence=evidence,
        provenance=("p", "c"),
        representative=None,
        lineage=(),
        author_model="test",
        run_id="run-x",
    )
    if aliases:
        import dataclasses

        card = dataclasses.replace(card, aliases=aliases)

    def add(cards: dict[str, Card]) -> None:
        cards[card_id] = card

    store.transaction(add)
    return card


def snapshot(card_id: str) -> CardSnapshot:
    return CardSnapshot(card_id, (), "insight", f"text of {card_id}", f"digest-{card_id}")


def context(
    attempt: int,
    parent_id: str = "parent",
    coordinate: float = 0.5,
    parent_fitness: float = 5.0,
    task: str = "toy",
) -> MutationContext:
    """A decision context of ``task`` with one behaviour axis (C = 4)."""
    return MutationContext(task, attempt, parent_id, parent_fitness, 0, (0,), (coordinate,), 0.0)


def decision(
    reader: CausalReader,
    attempt: int,
    features: Sequence[float],
    *,
    proposed: str,
    z: int,
    parent_id: str = "parent",
    parent_fitness: float = 5.0,
    task: str = "toy",
) -> DecisionRow:
    """A randomised decision of ``reader``'s run proposing ``proposed`` with Z = ``z``."""
    joint = RHO * (OFFER if z == 1 else 1.0 - OFFER)
    return DecisionRow(
        decision_id=decision_key_id(reader.run_id, attempt),
        run_id=reader.run_id,
        seed=0,
        attempt=attempt,
        event_ordinal=attempt,
        owner=reader.evidence.owner,
        context=FrozenContext(
            task, parent_id, parent_fitness, 0, (0,), (0.5,), 0.0, tuple(features)
        ),
        reward=reader.reward,
        universe=(snapshot(proposed),),
        pending=(),
        candidates=(Candidate(proposed, RHO, OFFER, RHO * OFFER, RHO * (1 - OFFER), True),),
        fit=(),
        fitted_row_ids=(),
        evidence_version="synthetic",
        abstain=False,
        rho0=1.0 - RHO,
        proposed_id=proposed,
        z=z,
        offer=OFFER,
        rho=RHO,
        joint=joint,
        q0=0.0,
        q1=0.0,
        r0=0.05,
        r1=0.05,
    )


def observe(
    reader: CausalReader,
    row: DecisionRow,
    *,
    gain: float | None,
    cited: bool,
    child_id: str | None = None,
    status: str = "valid",
    measurement: str = "scalar",
) -> TerminalRow:
    """Commit ``row`` and its terminal (raw gain ``gain``; cited only when Z = 1; a valid
    row's ``measurement`` kind, ``scalar`` without a standard error by default)."""
    reader.evidence.append_decision(row)
    term = TerminalRow(
        decision_id=row.decision_id,
        child_id=child_id or f"child-{row.attempt}",
        base_id=row.context.parent_id,
        metric=row.reward.metric,
        direction=row.reward.direction,
        status=status,  # type: ignore[arg-type]
        cited_ids=(row.proposed_id or "",) if cited and row.z == 1 else (),
        gain=gain if status == "valid" else None,
        measurement=measurement if status == "valid" else None,  # type: ignore[arg-type]
    )
    reader.evidence.append_terminal(term)
    return term


def edge(reader: CausalReader, parent: str, child: str, row: DecisionRow | None) -> EdgeRow:
    """Record the mutation edge parent -> child (made by ``row``'s attempt when given)."""
    attempt = row.attempt if row is not None else 10_000 + len(reader.evidence.edges())
    return reader.evidence.record_edge(
        EdgeRow(
            edge_id=child,
            run_id=reader.run_id,
            attempt=attempt,
            parent_id=parent,
            child_id=child,
            island=0,
            ordinal=0,
            status="valid",
            gain=0.0,
            disposition="improved",
            decision_id=None if row is None else row.decision_id,
        )
    )


def lineage(
    reader: CausalReader,
    root: DecisionRow,
    residual: float | None,
    *,
    version: int = 1,
    status: str = "outcome",
) -> LineageRow:
    """Append a lineage row version of ``root`` (raw residual g^L)."""
    row = LineageRow(
        root_decision_id=root.decision_id,
        version=version,
        status=status,  # type: ignore[arg-type]
        depth=3,
        budget=32,
        maturity_ordinal=100 if status == "outcome" else None,
        best_descendant_id=None,
        best_depth=None,
        best_gain=None,
        residual=residual,
    )
    reader.evidence.append_lineage(row)
    return row


def commit_delivered(
    reader: CausalReader,
    attempts: range,
    context_of: Callable[[int], MutationContext],
    *,
    cite: bool,
    gain: float,
    child_prefix: str,
) -> DecisionRow:
    """Draft ``attempts`` in turn until one proposes a card, commit it as delivered (Z = 1)
    with a valid terminal citing that card (or nothing) at ``gain``; the decision row."""
    for a in attempts:
        draft = reader.draft(context_of(a))
        if draft.abstain:
            continue
        assert draft.offer is not None and draft.rho is not None
        row = dataclasses.replace(draft, z=1, joint=draft.rho * draft.offer)
        reader.evidence.append_decision(row)
        reader.evidence.append_terminal(
            TerminalRow(
                decision_id=row.decision_id,
                child_id=f"{child_prefix}{a}",
                base_id=row.context.parent_id,
                metric=row.reward.metric,
                direction=row.reward.direction,
                status="valid",
                cited_ids=(row.proposed_id or "",) if cite else (),
                gain=gain,
            )
        )
        return row
    raise AssertionError(f"no non-abstaining draft in {len(attempts)} attempts")
