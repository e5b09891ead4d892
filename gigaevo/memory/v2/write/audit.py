"""The residual-duplicate audit: how many banked cards an exhaustive dedup pass would merge.

Online dedup can miss (a fail-open NEW, a neighbour outside the top k), and
no later consolidation pass exists, so experiments report the residue. For
each card in scope (newest first, bounded) the audit retrieves its same-kind
neighbours and asks the same equivalence judge; cards judged equivalent are
joined into classes. The residual duplicate rate is
``(cards in classes - number of classes) / cards in scope``: the share of the
bank that would disappear if every equivalence class kept one card.
"""

from __future__ import annotations

from dataclasses import dataclass

from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.errors import AgentAnswerError
from gigaevo.memory.v2.write.agents import AuthoredCard, EquivalenceJudge
from gigaevo.util import derive_seed


@dataclass(frozen=True)
class DuplicateAudit:
    """Result of one audit (all counts over the audited scope)."""

    n_cards: int
    n_checked: int
    n_redundant: int
    residual_duplicate_rate: float
    pairs: tuple[tuple[str, str], ...]
    judge_failures: int

    def to_dict(self) -> dict[str, object]:
        return {
            "n_cards": self.n_cards,
            "n_checked": self.n_checked,
            "n_redundant": self.n_redundant,
            "residual_duplicate_rate": self.residual_duplicate_rate,
            "pairs": [list(p) for p in self.pairs],
            "judge_failures": self.judge_failures,
        }


def audit_duplicates(
    store: LocalMemoryStore,
    judge: EquivalenceJudge,
    *,
    task_key: str | None,
    k: int,
    max_cards: int,
    seed: int,
) -> DuplicateAudit:
    """Judge each card in scope against its ``k`` nearest same-kind neighbours.

    ``task_key=None`` audits the whole bank (multitask scope). A judge failure
    leaves that card unmerged and is counted.
    """
    store.refresh()
    cards = store.cards(task_key=task_key)
    checked = sorted(cards, key=lambda c: (-c.created_at, c.id))[:max_cards]
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pairs: list[tuple[str, str]] = []
    failures = 0
    for n, card in enumerate(checked):
        hits = store.search(card.brief, kind=card.kind, task_key=task_key, k=k + 1)
        neighbours = [c for c, _ in hits if c.id != card.id][:k]
        if not neighbours:
            continue
        text = AuthoredCard(card.description, card.explanation_summary)
        try:
            verdict = judge.judge(card.kind, text, neighbours, derive_seed(seed, "audit", n))
        except AgentAnswerError:
            failures += 1
            continue
        if verdict.equivalent_id is not None:
            pairs.append((card.id, verdict.equivalent_id))
            parent[find(card.id)] = find(verdict.equivalent_id)
    members = set(parent)
    classes = {find(x) for x in members}
    redundant = len(members) - len(classes)
    return DuplicateAudit(
        n_cards=len(cards),
        n_checked=len(checked),
        n_redundant=redundant,
        residual_duplicate_rate=redundant / len(cards) if cards else 0.0,
        pairs=tuple(pairs),
        judge_failures=failures,
    )
