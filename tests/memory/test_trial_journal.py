"""Use trials live in ``cards.trials.jsonl`` beside ``cards.json`` (issue 16.3).

A stamp appends one line instead of rewriting the bank, so ``cards.json`` stays the size
of its cards; readers see the cards merged with their trials; a bank written before the
journal is migrated by its first write; four processes stamping and one rewriting card
records lose nothing; a line torn by a kill is cut by the next writer.
"""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gigaevo.memory.v2 import CorruptBankError, read_bank
from gigaevo.memory.v2.bank.bankfile import card_line
from gigaevo.memory.v2.bank.cards import Card, UseTrial, pool_into
from gigaevo.memory.v2.bank.store import BANK_FILE
from gigaevo.memory.v2.bank.trialjournal import JOURNAL_FILE
from gigaevo.memory.v2.read.trials import stamp_trial
from tests.memory.helpers import open_store
from tests.memory.test_card_model import card

WRITERS = 4


def _card(cid: str) -> Card:
    base = card()
    return replace(base, id=cid, task_key="toy", description=f"{base.description} ({cid})")


def _seed(bank: Path, cards: list[Card]) -> None:
    open_store(bank).transaction(lambda working: working.update({c.id: c for c in cards}))


def _trial(i: int, run: str = "run-a") -> UseTrial:
    return UseTrial(f"{run}-d{i}", run, "toy", i % 2, i % 3 == 0)


def test_a_stamp_appends_a_line_and_leaves_cards_json_alone(tmp_path: Path) -> None:
    _seed(tmp_path, [_card("ins-a"), _card("ins-b")])
    store = open_store(tmp_path)
    before = (tmp_path / BANK_FILE).read_bytes()
    for i in range(50):
        assert stamp_trial(store, ("ins-a", "ins-b")[i % 2], _trial(i)) == "stamped"
    assert (tmp_path / BANK_FILE).read_bytes() == before  # not rewritten: O(1) per stamp
    lines = (tmp_path / JOURNAL_FILE).read_text().splitlines()
    assert len(lines) == 50 and json.loads(lines[0])["card"] == "ins-a"
    # readers (a fresh read, this store, another store) see the merged cards
    fresh = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}
    assert [t.decision_id for t in fresh["ins-a"].use_trials] == [
        f"run-a-d{i}" for i in range(0, 50, 2)
    ]
    assert fresh["ins-a"].revision == 1 + 25 and fresh["ins-b"].revision == 1 + 25
    assert store.get("ins-a") == fresh["ins-a"]
    other = open_store(tmp_path)
    assert other.get("ins-b") == fresh["ins-b"]
    # a card record change rewrites cards.json without the trials, keeping them merged
    ev = card().evidence[0]
    store.transaction(lambda w: w.update({"ins-a": pool_into(w["ins-a"], ev, ("p",), 5.0)}))
    raw = [json.loads(x.rstrip(",")) for x in (tmp_path / BANK_FILE).read_text().split("\n")[1:3]]
    assert all(r["use_trials"] == [] for r in raw)
    again = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}
    assert again["ins-a"].use_trials == fresh["ins-a"].use_trials
    assert again["ins-a"].revision == fresh["ins-a"].revision + 1 and again["ins-a"].n_evidence == 2
    assert other.refresh() and other.get("ins-a") == again["ins-a"]


def test_a_revision_only_change_is_written_to_cards_json(tmp_path: Path) -> None:
    """A change of revision and time alone (no trial added) is a record change: it reaches
    the disk, not only this process's copy."""
    _seed(tmp_path, [_card("ins-a")])
    store = open_store(tmp_path)
    assert stamp_trial(store, "ins-a", _trial(0)) == "stamped"
    a = store.get("ins-a")
    assert a is not None
    store.transaction(lambda w: w.update({"ins-a": replace(a, revision=a.revision + 5)}))
    on_disk = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}["ins-a"]
    assert on_disk.revision == a.revision + 5 and on_disk.use_trials == a.use_trials


def test_a_bank_with_trials_inside_cards_json_is_migrated_on_first_write(tmp_path: Path) -> None:
    trials = tuple(_trial(i, "old") for i in range(5))
    legacy = replace(_card("ins-a"), use_trials=trials, revision=6)
    header = {"format": "gigaevo.cards/1", "generation": 3, "write_id": "ab", "written_at": "t"}
    text = json.dumps({**header, "n_cards": 2}, separators=(",", ":"))[:-1]
    text += ',"cards":[\n' + card_line(legacy) + ",\n" + card_line(_card("ins-b")) + "\n]}\n"
    (tmp_path / BANK_FILE).write_text(text)
    store = open_store(tmp_path)  # opens as it is
    assert store.get("ins-a") == legacy and not (tmp_path / JOURNAL_FILE).exists()
    assert stamp_trial(store, "ins-b", _trial(9)) == "stamped"  # the first write migrates
    raw = json.loads((tmp_path / BANK_FILE).read_text())
    assert all(c["use_trials"] == [] for c in raw["cards"])
    loaded = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}
    assert loaded["ins-a"].use_trials == trials and loaded["ins-a"].revision == 6
    assert [t.decision_id for t in loaded["ins-b"].use_trials] == ["run-a-d9"]
    assert stamp_trial(store, "ins-a", trials[0]) == "duplicate"  # still deduplicated


def test_a_line_torn_by_a_kill_is_ignored_then_cut(tmp_path: Path) -> None:
    _seed(tmp_path, [_card("ins-a")])
    store = open_store(tmp_path)
    assert stamp_trial(store, "ins-a", _trial(0)) == "stamped"
    with open(tmp_path / JOURNAL_FILE, "ab") as f:
        f.write(b'{"card":"ins-a","revision":3,"tri')  # a writer killed mid-line
    reader = open_store(tmp_path)
    assert [t.decision_id for t in reader.get("ins-a").use_trials] == ["run-a-d0"]  # type: ignore[union-attr]
    assert stamp_trial(reader, "ins-a", _trial(1)) == "stamped"
    lines = (tmp_path / JOURNAL_FILE).read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["card"] == "ins-a" for x in lines)
    assert store.refresh() and len(store.get("ins-a").use_trials) == 2  # type: ignore[union-attr]


def test_a_journal_line_that_does_not_parse_stops_the_bank(tmp_path: Path) -> None:
    _seed(tmp_path, [_card("ins-a")])
    store = open_store(tmp_path)
    assert stamp_trial(store, "ins-a", _trial(0)) == "stamped"
    with open(tmp_path / JOURNAL_FILE, "a") as f:
        f.write('{"card":"ins-a","revision":"two"}\n')  # a complete line, not a trial
    before = (tmp_path / JOURNAL_FILE).read_bytes()
    with pytest.raises(CorruptBankError, match=r"cards\.trials\.jsonl line 2"):
        store.refresh()
    with pytest.raises(CorruptBankError):  # latched: every later call raises
        stamp_trial(store, "ins-a", _trial(1))
    assert (tmp_path / JOURNAL_FILE).read_bytes() == before  # never overwritten


def _stamp_worker(bank: str, run: str, n: int, start: Any) -> None:
    # a long lock wait: five fresh processes open (import, embed) one after another
    store = open_store(Path(bank), lock_timeout_s=180.0)
    start.wait()
    for i in range(n):
        assert stamp_trial(store, ("ins-a", "ins-b")[i % 2], _trial(i, run)) == "stamped"


def _record_worker(bank: str, n: int, start: Any) -> None:
    """Pools outcomes into the cards (rewrites cards.json) while the others stamp."""
    store = open_store(Path(bank), lock_timeout_s=180.0)
    start.wait()
    ev = card().evidence[0]
    for i in range(n):
        cid = ("ins-a", "ins-b")[i % 2]
        store.transaction(lambda w, c=cid, p=f"p{i}": w.update({c: pool_into(w[c], ev, (p,), 1.0)}))


@pytest.mark.slow  # processes / a whole provider run: seconds, not milliseconds
def test_four_processes_stamping_and_one_rewriting_lose_nothing(tmp_path: Path) -> None:
    _seed(tmp_path, [_card("ins-a"), _card("ins-b")])
    ctx = multiprocessing.get_context("spawn")
    n, pools = 25, 10
    start = ctx.Barrier(WRITERS + 1)
    procs = [
        ctx.Process(target=_stamp_worker, args=(str(tmp_path), f"run-{k}", n, start))
        for k in range(WRITERS)
    ]
    procs.append(ctx.Process(target=_record_worker, args=(str(tmp_path), pools, start)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    cards = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}
    ids = [t.decision_id for c in cards.values() for t in c.use_trials]
    assert len(ids) == len(set(ids)) == WRITERS * n  # every stamp, exactly once
    assert {t.decision_id for t in cards["ins-a"].use_trials} == {
        f"run-{k}-d{i}" for k in range(WRITERS) for i in range(0, n, 2)
    }
    assert sum(c.n_evidence for c in cards.values()) == 2 + pools  # every pooled outcome
    # every stamp and pool made one revision of its card
    assert sum(c.revision for c in cards.values()) == 2 + WRITERS * n + pools


def test_staged_stamps_ride_with_the_next_write_and_survive_a_failed_one(tmp_path: Path) -> None:
    from gigaevo.memory.v2.bank.trialjournal import TrialIdSets
    from gigaevo.memory.v2.read.trials import _stamp_into

    _seed(tmp_path, [_card("ins-a"), _card("ins-b")])
    store = open_store(tmp_path)
    done: list[str] = []

    def stamp(cid: str, i: int) -> Any:
        return lambda cards: _stamp_into(cards, cid, _trial(i), 1.0, TrialIdSets())

    for i in range(3):
        store.stage(stamp("ins-a", i), done.append)
    store.stage(stamp("ins-gone", 9), done.append)
    assert store.staged == 4 and store.get("ins-a").use_trials == ()  # type: ignore[union-attr]
    assert not (tmp_path / JOURNAL_FILE).exists()  # nothing written yet

    def boom(cards: dict[str, Card]) -> None:
        raise RuntimeError("the write fails")

    with pytest.raises(RuntimeError):
        store.transaction(boom)
    assert store.staged == 4 and done == [] and not (tmp_path / JOURNAL_FILE).exists()
    # the next write (a record change) carries them, applied first, in order
    store.transaction(lambda cards: cards.update({"ins-b": replace(cards["ins-b"], revision=7)}))
    assert store.staged == 0 and done == ["stamped"] * 3 + ["orphan"]
    fresh = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}
    assert [t.decision_id for t in fresh["ins-a"].use_trials] == [f"run-a-d{i}" for i in range(3)]
    assert fresh["ins-a"].revision == 4 and fresh["ins-b"].revision == 7
    # the same decision staged twice is stamped once; flush writes without another change
    store.stage(stamp("ins-a", 0), done.append)
    store.stage(stamp("ins-b", 5), done.append)
    store.flush()
    assert done[-2:] == ["duplicate", "stamped"] and store.staged == 0
    fresh = {c.id: c for c in read_bank(tmp_path / BANK_FILE).cards}
    assert len(fresh["ins-a"].use_trials) == 3 and len(fresh["ins-b"].use_trials) == 1


class _Killed(BaseException):
    """Stands for a SIGKILL: the process stops between two writes of one transaction."""


def _legacy_bank(bank: Path, a: Card) -> None:
    """A bank written before the trial journal: ``a``'s trials inline in ``cards.json``."""
    header = {"format": "gigaevo.cards/1", "generation": 3, "write_id": "ab", "written_at": "t"}
    text = json.dumps({**header, "n_cards": 2}, separators=(",", ":"))[:-1]
    text += ',"cards":[\n' + card_line(a) + ",\n" + card_line(_card("ins-b")) + "\n]}\n"
    bank.mkdir(parents=True, exist_ok=True)
    (bank / BANK_FILE).write_text(text)


def _pool_redone_after_a_kill(
    bank: Path, monkeypatch: pytest.MonkeyPatch, kill: bool, legacy: int = 0
) -> Card:
    """Stage two stamps on ins-a, then pool one outcome into it in the next transaction;
    with ``kill`` the process dies after the stamps' journal lines and before the record,
    and a fresh process (a resumed run) pools the outcome again. The card as read back."""
    from gigaevo.memory.v2.bank.trialjournal import TrialIdSets
    from gigaevo.memory.v2.read.trials import _stamp_into

    if legacy:  # the write also migrates the bank: the journal is rewritten whole
        inline = tuple(_trial(i, "old") for i in range(legacy))
        _legacy_bank(bank, replace(_card("ins-a"), use_trials=inline, revision=1 + legacy))
    else:
        _seed(bank, [_card("ins-a")])
    store = open_store(bank)
    for i in range(2):
        store.stage(lambda c, i=i: _stamp_into(c, "ins-a", _trial(i), 1.0, TrialIdSets()), None)
    ev = replace(card().evidence[0], candidate_id="cand-redo")

    def pool(w: dict[str, Card]) -> None:
        if all(e.candidate_id != "cand-redo" for e in w["ins-a"].evidence):
            w["ins-a"] = pool_into(w["ins-a"], ev, ("p",), 5.0)

    if kill:

        def die(*_: Any) -> bool:
            raise _Killed

        monkeypatch.setattr(store, "_journal_records", die)
        monkeypatch.setattr(store, "_compact", die)
        with pytest.raises(_Killed):
            store.transaction(pool)
        monkeypatch.undo()
        # what the bank holds after the kill: the stamps, not the pooled outcome
        after = {c.id: c for c in read_bank(bank / BANK_FILE).cards}["ins-a"]
        assert len(after.use_trials) == legacy + 2 and after.n_evidence == 1
        assert after.revision == 1 + legacy + 2  # the stamps' revisions, not the record's
        store = open_store(bank)  # the resumed process
    store.transaction(pool)
    return {c.id: c for c in read_bank(bank / BANK_FILE).cards}["ins-a"]


def test_a_kill_between_the_stamps_and_the_record_of_one_write_costs_no_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15's exactly-once run (tests/pipeline/test_exactly_once.py) failed now and then
    with a write-ledger row one revision ahead of the uninterrupted run's: the stamps that
    rode with a librarian write were journalled with the revision after the whole write, so
    a kill before its record landed left the card one revision ahead of its contents, and
    the librarian's write, redone on resume, counted one revision more."""
    whole = _pool_redone_after_a_kill(tmp_path / "whole", monkeypatch, kill=False)
    killed = _pool_redone_after_a_kill(tmp_path / "killed", monkeypatch, kill=True)
    assert whole.revision == 1 + 2 + 1 and whole.n_evidence == 2
    assert (killed.revision, killed.n_evidence, killed.use_trials) == (
        whole.revision,
        whole.n_evidence,
        whole.use_trials,
    )


def test_a_kill_between_a_journal_rewrite_and_the_record_costs_no_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same window when the write migrates a bank with trials inline in ``cards.json``,
    so the journal is rewritten whole before the records: the rewritten lines carried each
    card's revision after the whole write, so a kill between the two left it one ahead."""
    whole = _pool_redone_after_a_kill(tmp_path / "whole", monkeypatch, False, legacy=5)
    killed = _pool_redone_after_a_kill(tmp_path / "killed", monkeypatch, True, legacy=5)
    assert whole.revision == 1 + 5 + 2 + 1 and whole.n_evidence == 2
    assert len(whole.use_trials) == 5 + 2
    assert (killed.revision, killed.n_evidence, killed.use_trials) == (
        whole.revision,
        whole.n_evidence,
        whole.use_trials,
    )


def test_the_kept_trial_ids_answer_as_the_card_s_trials_past_the_cap() -> None:
    """``TrialIdSets`` (each stamp's duplicate check as a set lookup) answers exactly as a walk
    over the card's trials: across the ``MAX_USE_TRIALS`` trim, for repeated decision ids,
    and when the card's trials come back as another tuple (a reload)."""
    from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS, with_use_trial
    from gigaevo.memory.v2.bank.trialjournal import TrialIdSets
    from gigaevo.memory.v2.read.trials import _stamp_into

    ids = TrialIdSets()
    with_ids, plain = {"c": _card("c")}, {"c": _card("c")}
    for i in [*range(MAX_USE_TRIALS + 40), 3, 45, MAX_USE_TRIALS + 39, 7]:
        trial = _trial(i)
        a = _stamp_into(with_ids, "c", trial, 1.0, ids)
        # the reference: a walk over the card's trials
        b = "duplicate"
        if all(t.decision_id != trial.decision_id for t in plain["c"].use_trials):
            b, plain["c"] = "stamped", with_use_trial(plain["c"], trial, 1.0)
        assert a == b and with_ids["c"] == plain["c"]
        if i == 100:  # the same trials in a new tuple: the set is built again
            with_ids["c"] = replace(with_ids["c"], use_trials=tuple(with_ids["c"].use_trials))
    assert len(plain["c"].use_trials) == MAX_USE_TRIALS
    assert _stamp_into(with_ids, "gone", _trial(0), 1.0, ids) == "orphan"


def _filtered(old: tuple[UseTrial, ...], new: tuple[UseTrial, ...]) -> list[UseTrial] | None:
    """The reference: every trial of ``new`` whose id ``old`` lacks, if ``new`` is ``old``
    with them appended (the check ``stamped`` made before it kept the ids)."""
    from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS

    ids = {t.decision_id for t in old}
    added = [t for t in new if t.decision_id not in ids]
    return added if new == (*old, *added)[-MAX_USE_TRIALS:] else None


def test_appended_trials_are_the_reference_filter_on_random_histories() -> None:
    """``appended`` (the suffix of ids ``old`` lacks, then one tuple comparison) answers as
    the filter of every trial on random pairs: appends across the cap, removals,
    reorderings, repeated ids, an emptied card; ``TrialIdSets`` kept along a card's stamps
    holds exactly its trials' ids."""
    import random

    from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS
    from gigaevo.memory.v2.bank.trialjournal import TrialIdSets, appended

    rng = random.Random(7)
    kept, trials, fresh = TrialIdSets(), (), 0
    for step in range(3000):
        roll = rng.random()
        if roll < 0.8:  # a write appending 1..40 trials (sometimes past the cap)
            n = rng.choice([1, 1, 2, 16, 40])
            new = (*trials, *(_trial(fresh + i) for i in range(n)))[-MAX_USE_TRIALS:]
            fresh += n
        elif roll < 0.86 and trials:  # trials removed from the middle
            j = rng.randrange(len(trials))
            new = trials[:j] + trials[j + 1 :]
        elif roll < 0.9 and len(trials) > 1:  # two swapped
            j = rng.randrange(len(trials) - 1)
            new = (*trials[:j], trials[j + 1], trials[j], *trials[j + 2 :])
        elif roll < 0.95 and trials:  # an old id appended again, or a new id twice
            again = rng.choice(trials) if rng.random() < 0.5 else _trial(fresh)
            new = (
                *trials,
                again,
                *((_trial(fresh),) if again.decision_id == f"run-a-d{fresh}" else ()),
            )
            fresh += 1
        elif roll < 0.97:
            new = ()
        else:
            new = tuple(trials)  # the same trials, another tuple (a reload)
        ids = kept.of("c", trials)
        assert ids == {t.decision_id for t in trials}
        got, want = appended(trials, new, ids), _filtered(trials, new)
        assert got == want, step
        assert appended(trials, new) == want
        if got is not None:
            kept.advance("c", trials, new, got)
        else:
            kept.forget("c")
        trials = new
        assert kept.of("c", trials) == {t.decision_id for t in trials}
    assert fresh > 20 * MAX_USE_TRIALS // 10  # the cap was crossed many times


def test_a_store_keeps_its_trial_ids_through_stamps_records_and_removals(tmp_path: Path) -> None:
    """A run's store (ids kept) writes the very journal and records a store checking by walks
    writes: stamps past the cap, a record change with stamps, trials removed, a card removed."""
    from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS

    for bank in (tmp_path / "a", tmp_path / "b"):
        _seed(bank, [_card("ins-a"), _card("ins-b")])
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    b._trial_ids.of = lambda cid, trials: {t.decision_id for t in trials}  # type: ignore[method-assign]
    b._trial_ids.advance = lambda *args: None  # type: ignore[method-assign]

    def stamps(lo: int, hi: int) -> Any:
        def mutate(cards: dict[str, Card]) -> None:
            for i in range(lo, hi):
                c = cards.get("ins-a" if i % 3 else "ins-b", cards["ins-a"])
                trials = (*c.use_trials, _trial(i))[-MAX_USE_TRIALS:]
                cards[c.id] = replace(c, use_trials=trials, revision=c.revision + 1)

        return mutate

    def drop_one(cards: dict[str, Card]) -> None:
        c = cards["ins-a"]
        cards["ins-a"] = replace(c, use_trials=c.use_trials[1:-1], revision=c.revision + 1)

    def edit(cards: dict[str, Card]) -> None:
        c = cards["ins-b"]
        cards["ins-b"] = replace(
            c, description=c.description + " (edited)", revision=c.revision + 1
        )

    writes = [stamps(0, 2000), stamps(2000, 2100), edit, stamps(2100, 3400), drop_one]
    writes += [stamps(3400, 3450), lambda cards: cards.pop("ins-b"), stamps(3450, 3460)]
    for write in writes:
        for store in (a, b):
            store.transaction(write)
        assert a.cards() == b.cards()
    journal = [(tmp_path / bank / JOURNAL_FILE).read_bytes() for bank in ("a", "b")]
    assert journal[0] == journal[1]
    assert (
        read_bank(tmp_path / "a" / BANK_FILE).cards == read_bank(tmp_path / "b" / BANK_FILE).cards
    )
    assert a._trial_ids.of("ins-a", a.get("ins-a").use_trials) == {  # type: ignore[union-attr]
        t.decision_id
        for t in a.get("ins-a").use_trials  # type: ignore[union-attr]
    }
