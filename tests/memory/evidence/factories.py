"""Row factories for the causal-ledger tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gigaevo.memory.v2.evidence import (
    EVIDENCE_FILE,
    Candidate,
    CardSnapshot,
    DecisionRow,
    FrozenContext,
    RewardDefinition,
    SelectionEvidence,
    TerminalRow,
    decision_key_id,
)
from gigaevo.memory.v2.evidence.bodies import body_text
from gigaevo.memory.v2.evidence.owner import session_owner
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from gigaevo.memory.v2.records import to_json

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


MANY_RHO0 = 0.25
# the causal ledger's DDL as schema version 1 wrote it (no content-addressed tables)
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, decision_id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL, attempt INTEGER NOT NULL, proposed_id TEXT,
    body TEXT NOT NULL, sha256 TEXT NOT NULL, UNIQUE (run_id, attempt));
CREATE TABLE terminals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    decision_id TEXT NOT NULL UNIQUE REFERENCES decisions (decision_id),
    body TEXT NOT NULL, sha256 TEXT NOT NULL);
CREATE TABLE edges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, edge_id TEXT NOT NULL UNIQUE,
    island INTEGER NOT NULL, ordinal INTEGER NOT NULL, body TEXT NOT NULL,
    sha256 TEXT NOT NULL, UNIQUE (island, ordinal));
CREATE TABLE lineage (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    root_decision_id TEXT NOT NULL REFERENCES decisions (decision_id),
    version INTEGER NOT NULL, body TEXT NOT NULL, sha256 TEXT NOT NULL,
    UNIQUE (root_decision_id, version));
CREATE INDEX decisions_proposed ON decisions (proposed_id);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');
"""


def card(i: int, text_chars: int = 40) -> CardSnapshot:
    """Snapshot of a synthetic card ``ins-<i>`` (every seventh absorbed an old id)."""
    text = f"card {i}: " + "x" * text_chars
    aliases = (f"old-{i}",) if i % 7 == 0 else ()
    return CardSnapshot(f"ins-{i:05d}", aliases, "insight", text, sha256_hex(text))


def decision_over(
    attempt: int, cards: tuple[CardSnapshot, ...], run_id: str = "run"
) -> DecisionRow:
    """A decision over ``cards`` (an abstention when there are none)."""
    n = len(cards)
    rho0 = 1.0 if n == 0 else MANY_RHO0
    masses = [(1.0 - rho0) / n] * n if n else []
    offer = 0.7
    candidates = tuple(
        Candidate(c.card_id, m, offer, m * offer, m * (1 - offer), True, mc_se=m / 97)
        for c, m in zip(cards, masses, strict=True)
    )
    base = make_decision(attempt, run_id=run_id, z=None)
    fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
    fields.update(universe=cards, candidates=candidates, rho0=rho0)
    if n == 0:
        return DecisionRow(**fields)
    m = masses[0]
    treatment = dict(proposed_id=cards[0].card_id, z=1, offer=offer, rho=m, joint=m * offer)
    nuisances = dict(q0=0.0, q1=1e-3, r0=0.05, r1=0.06)
    return DecisionRow(**{**fields, "abstain": False, **treatment, **nuisances})


def write_v1_ledger(directory: Path, rows: list[DecisionRow]) -> None:
    """A ledger as schema version 1 wrote it: universe inline, candidates as objects."""
    conn = sqlite3.connect(directory / EVIDENCE_FILE, isolation_level=None)
    conn.executescript(V1_SCHEMA)
    for row in rows:
        body = canonical_json(to_json(row))
        conn.execute(
            "INSERT INTO decisions (decision_id, run_id, attempt, proposed_id, body, sha256)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (row.decision_id, row.run_id, row.attempt, row.proposed_id, body, sha256_hex(body)),
        )
    conn.close()


def write_v2_ledger(directory: Path, rows: list[DecisionRow]) -> None:
    """A ledger as schema version 2 wrote it: universes by reference, candidates as
    columns, fitted row ids inline, no ``fit_sets`` table."""
    from gigaevo.memory.v2.evidence import sqlite as db
    from gigaevo.memory.v2.evidence.universe import UniverseStore

    conn = sqlite3.connect(directory / EVIDENCE_FILE, isolation_level=None)
    conn.executescript(V1_SCHEMA.replace("'1'", "'2'"))
    conn.execute("CREATE TABLE snapshots (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL)")
    conn.execute("CREATE TABLE universes (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL)")
    store = UniverseStore()
    for row in rows:
        universe = store.encode(row.universe)
        store.write(conn, universe)
        store.committed(universe)
        body, sha = db.encode_decision(row, universe.sha)  # no fit-set link: ids inline
        conn.execute(
            "INSERT INTO decisions (decision_id, run_id, attempt, proposed_id, body, sha256)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (row.decision_id, row.run_id, row.attempt, row.proposed_id, body, sha),
        )
    conn.close()


def raw_ledger(directory: Path) -> sqlite3.Connection:
    """A plain autocommit connection to the ledger file (to read or tamper with rows).

    Bodies stored compressed (schema version 4, a BLOB) read back as their JSON
    text, as ``bodies.body_text`` gives them to any reader; other values as stored.
    """
    conn = sqlite3.connect(directory / EVIDENCE_FILE, isolation_level=None)
    conn.row_factory = _texts
    return conn


def _texts(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(body_text(v) if isinstance(v, bytes) else v for v in row)


def reopen_ledger(directory: Path) -> SelectionEvidence:
    """The ledger opened again as a new session would (startup orphans left open)."""
    return SelectionEvidence(directory).open(censor_orphans=False)


def append_to_old_ledger(
    directory: Path, old: list[DecisionRow], new: DecisionRow, cited: str
) -> tuple[list[tuple[int, str, str]], list[tuple[int, str, str]], str]:
    """Open a ledger written by an older schema, check it decodes, add a terminal of its
    first decision and ``new``, reopen and check again (V too).

    Returns (decision rows before, after, the schema version now in ``meta``).
    """
    with raw_ledger(directory) as conn:
        before = conn.execute("SELECT seq, body, sha256 FROM decisions").fetchall()
    with SelectionEvidence(directory).open(censor_orphans=False) as ledger:
        assert ledger.decisions() == tuple(old)
        assert ledger.decision(old[-1].decision_id) == old[-1]
        ledger.append_terminal(make_terminal(old[0], cited=(cited,)))
        ledger.append_decision(new)
        version_v = ledger.evidence_version()
    with reopen_ledger(directory) as fresh:
        assert fresh.decisions() == (*old, new)
        assert fresh.evidence_version() == version_v
    with raw_ledger(directory) as conn:
        after = conn.execute("SELECT seq, body, sha256 FROM decisions").fetchall()
        (schema,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert after[: len(before)] == before  # old rows are never rewritten
    return before, after, schema


@contextmanager
def written_and_reopened(directory: Path, rows: list[DecisionRow]) -> Iterator[SelectionEvidence]:
    """Append ``rows`` (read back equal in the writing session), then a fresh session on them."""
    with SelectionEvidence(directory).open() as ledger:
        for row in rows:
            ledger.append_decision(row)
        assert ledger.decisions() == tuple(rows)
    with reopen_ledger(directory) as fresh:
        assert fresh.decisions() == tuple(rows)
        yield fresh
