"""A bounded retirement sweep (memory-model.md "A bounded sweep", issue 16).

On the cadence a sweep judges every card its cheap support checks keep, every card cited
among the last ``sweep_every`` eligible rows, and a window of ``sweep_budget`` supported
cards rotating by sweep ordinal; at close (no ordinal) or with budget 0 it judges all.
A judged card is judged exactly as before (``judge_card``, same RNG keys), so the harmful
card of ``test_evictor`` is retired by a bounded sweep too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.causal.retirement import CardSupport, SupportContext
from gigaevo.memory.v2.errors import MemoryConfigError
from gigaevo.memory.v2.read.evictor import CausalEvictor, EvictorSettings
from tests.memory.ledger_rows import fast_dir, put_card
from tests.memory.test_evictor import CARD, Run, build_run, gate_once


@pytest.fixture
def harmful(tmp_path: Path) -> Iterator[Run]:
    with fast_dir(tmp_path) as base:
        run = build_run(base, effect=-0.05, p_invalid=0.35)
        yield run
        run.reader.evidence.close()


def _evictor(run: Run, **keys: object) -> CausalEvictor:
    settings = EvictorSettings.parse({"mode": "causal", **keys})
    return CausalEvictor(run.reader, settings, retire=run.evictor.retire, task_key="toy")


def _support(card_id: str, supported: bool) -> CardSupport:
    contexts = tuple(
        SupportContext(island, (0,), (1.0, 0.0, 0.5, 0.0), (-0.5, 0.5)) for island in (0, 1)
    )
    return CardSupport(card_id, card_id, "insight", 0, 5 if supported else 1, contexts)


def _bank(run: Run, n: int) -> tuple[list[Card], list[CardSupport]]:
    """``n`` decoy cards (every third unsupported) besides the harmful one, in id order."""
    for i in range(n):
        put_card(run.store, f"ins-decoy-{i:02d}")
    cards = sorted(run.store.cards(task_key="toy"), key=lambda c: c.id)
    supports = [_support(c.id, c.id == CARD or int(c.id[-2:]) % 3 != 0) for c in cards]
    return cards, supports


def test_the_window_rotates_through_every_supported_card(harmful: Run) -> None:
    ev = _evictor(harmful, sweep_every=1, sweep_budget=4)
    ev._rows()  # the last eligible row is a control: nothing cited since the last sweep
    cards, supports = _bank(harmful, 14)
    supported = {s.card_id for s in supports if s.treated >= 2}
    unsupported = {c.id for c in cards} - supported
    assert len(supported) == 10
    seen: set[str] = set()
    for ordinal in range(math.ceil(len(supported) / 4)):
        due = ev.due(cards, supports, n_controls=90, theta=0.0, ordinal=ordinal)
        judged = {k for k, v in due.items() if v}
        assert unsupported <= judged  # the cheap checks keep them: always judged
        assert len(judged & supported) == 4  # the budget, no more
        seen |= judged & supported
    assert seen == supported  # every supported card within ceil(10 / 4) sweeps
    # at close, or with budget 0, every card
    assert all(ev.due(cards, supports, 90, 0.0, None).values())
    zero = _evictor(harmful, sweep_every=1, sweep_budget=0)
    assert all(zero.due(cards, supports, 90, 0.0, 7).values())


def test_a_card_cited_since_the_last_sweep_is_judged_at_every_sweep(harmful: Run) -> None:
    # the harmful card's cited rows are rows 1-200 of 290: within the last 300 eligible rows
    ev = _evictor(harmful, sweep_every=300, sweep_budget=1)
    ev._rows()
    cards, supports = _bank(harmful, 14)
    for ordinal in range(12):
        due = ev.due(cards, supports, 90, 0.0, ordinal)
        assert due[CARD]
        assert sum(due[s.card_id] for s in supports if s.treated >= 2) <= 2
    # cited 90 rows ago: not among the last 50, so only the window brings it
    late = _evictor(harmful, sweep_every=50, sweep_budget=1)
    late._rows()
    judged = [late.due(cards, supports, 90, 0.0, k)[CARD] for k in range(10)]
    assert judged.count(True) == 1


def test_a_bounded_sweep_judges_as_the_full_one_when_the_card_is_due(harmful: Run) -> None:
    # a second supported card, cited in the last 4 rows: two supported cards, budget 1
    put_card(harmful.store, "ins-other")
    for i in range(4):
        row = harmful.row(z=1, parent=5.0, island=i % 2, cell=i % 3, proposed="ins-other")
        harmful.commit(row, y=0.02)
    full = harmful.evictor.sweep()
    assert CARD in full
    ev = _evictor(harmful, sweep_every=4, sweep_budget=1)
    harmful.evictor = ev
    # window of ordinal 1: "ins-other" (id order); the harmful card was not cited lately
    assert ev.sweep(ordinal=1) == {}
    assert ev.counts.not_due == 1
    bounded = ev.sweep(ordinal=2)  # its turn in the window: the very same verdict
    assert bounded[CARD] == full[CARD]
    removed, _ = gate_once(harmful)
    assert removed == [CARD]


def test_a_negative_budget_is_one_line_naming_the_key() -> None:
    with pytest.raises(MemoryConfigError, match=r"memory\.evictor\.sweep_budget"):
        EvictorSettings.parse({"mode": "causal", "sweep_budget": -1})


def test_a_cards_support_kept_as_rows_arrive_is_the_one_read_from_its_rows(
    harmful: Run,
) -> None:
    """The contexts ``support`` keeps row by row (issue 16) are those of the card's cited
    treated rows read whole from the ledger: each (island, cell) with its latest row, in
    the order of its first row, across the card's aliases too."""
    from collections import Counter

    ev = harmful.evictor
    for i in range(6):
        proposed = "ins-absorbed" if i % 2 else CARD
        row = harmful.row(z=1, parent=4.0 + i, island=i % 2, cell=(i + 1) % 4, proposed=proposed)
        harmful.commit(row, y=-0.02 * i)
    ev._rows()
    card = next(c for c in harmful.store.cards() if c.id == CARD)
    card = dataclasses.replace(card, aliases=("ins-absorbed",))
    # the rows the support is read from, as the ledger holds them
    rows = [
        o
        for o in harmful.reader.evidence.eligible_since(0)
        if o.cited and o.decision.proposed_id in (CARD, "ins-absorbed")
    ]
    latest: dict[tuple[int, tuple[int, ...]], object] = {}
    for o in sorted(rows, key=lambda o: (o.decision.attempt, o.decision.decision_id)):
        latest[(o.decision.context.island, tuple(o.decision.context.cell))] = o
    reward = harmful.reader.causal_reward
    want = tuple(
        SupportContext(
            island,
            cell,
            tuple(o.decision.context.features),  # type: ignore[attr-defined]
            reward.feasible_interval(o.decision.context.parent_fitness),  # type: ignore[attr-defined]
        )
        for (island, cell), o in latest.items()
    )
    got = ev.support(card, Counter())
    assert any(o.decision.proposed_id == "ins-absorbed" for o in rows)
    assert got.treated == len(rows) > 200 and len(want) == 7
    assert got.contexts == want


def test_a_support_kept_between_sweeps_is_rebuilt_when_its_rows_or_aliases_move(
    harmful: Run,
) -> None:
    """A sweep reuses a card's support while its rows and aliases stand (issue 16: every
    sweep rebuilt every card's contexts); with new cited rows, or an alias, it equals the
    support a fresh evictor reads from the whole ledger. The practical threshold kept from
    the sorted control magnitudes equals ``practical_threshold`` over every control."""
    from collections import Counter

    from gigaevo.memory.v2.causal.retirement import practical_threshold, sorted_threshold

    ev = harmful.evictor
    ev._rows()
    card = next(c for c in harmful.store.cards() if c.id == CARD)
    first = ev.support(card, Counter())
    assert ev.support(card, Counter()).contexts is first.contexts  # kept, not rebuilt
    for i in range(4):
        proposed = "ins-absorbed" if i % 2 else CARD
        row = harmful.row(z=1, parent=4.5 + i, island=i % 2, cell=(i + 5) % 7, proposed=proposed)
        harmful.commit(row, y=-0.03 * i)
        harmful.commit(harmful.row(z=0, parent=3.0 + i, island=0, cell=1), y=0.01 * (i - 1))
    ev._rows()
    aliased = dataclasses.replace(card, aliases=("ins-absorbed",))
    for c in (card, aliased):
        fresh = _evictor(harmful)
        fresh._rows()
        assert ev.support(c, Counter()) == fresh.support(c, Counter())
    assert ev.support(card, Counter()).treated == first.treated + 2
    cfg = ev.config
    assert len(ev._controls) > 50
    assert sorted_threshold(
        ev._magnitudes, cfg.min_global_control, cfg.practical_effect_quantile
    ) == practical_threshold(ev._controls, cfg.min_global_control, cfg.practical_effect_quantile)
