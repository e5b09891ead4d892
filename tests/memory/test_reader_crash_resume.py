"""Crash and resume through the provider: one decision and one terminal per attempt, always.

(a) A process killed between decisions and terminals: a new provider on the same
    checkpoint resumes its own orphans (the re-dispatched attempt keeps its committed
    decision and terminates once; one committed but never observed is censored),
    takes their leases again and leaves none behind.
(b) ``python run.py memory=v2 pipeline=memory_guided`` killed with SIGKILL mid-run and
    resumed: the ledger, lineage rows and history equal an uninterrupted run's.
(c) Hallucinated, foreign or malformed cited ids earn no credit.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gigaevo.llm.answer_format import render_answer, render_program
from gigaevo.memory.base import Decision, MutationContext, ground_citations
from gigaevo.memory.v2 import CardBankMemory
from gigaevo.memory.v2.evidence import STARTUP_ORPHAN, SelectionEvidence
from gigaevo.memory.v2.evidence.queries import usefulness_eligible
from gigaevo.memory.v2.read.leases import LEASE_FILE
from gigaevo.memory.v2.read.outcomes import LOST_OUTCOME
from gigaevo.mutation.response import parse_answer
from gigaevo.pipeline.build import STORE_FILE
from tests.conftest import ROOT, STEADY_EVAL, committed_count, kill_9_when, program_ids, run_py
from tests.memory.helpers import memory_provider, result

SCOPES = ("f0", "f1", "f2", "f3")


def provider(tmp_path: Path) -> CardBankMemory:
    return memory_provider(tmp_path, selection="causal")


def context(attempt: int) -> MutationContext:
    coordinate = 0.1 + 0.8 * ((attempt * 37) % 100) / 100
    return MutationContext("toy", attempt, f"parent-{attempt}", 5.0, 0, (0,), (coordinate,), 0.0)


def leases(ckpt: Path) -> list[dict[str, Any]]:
    path = ckpt / LEASE_FILE
    return json.loads(path.read_text())["leases"] if path.exists() else []


def one_terminal_each(ckpt: Path) -> SelectionEvidence:
    """Open (and hash-verify) the ledger; every decision has exactly one terminal."""
    ev = SelectionEvidence(ckpt).open(censor_orphans=False)
    ev.verify()
    decisions = ev.decisions()
    terminals = [t.decision_id for t in ev.terminals()]
    assert len(terminals) == len(set(terminals)) == len(decisions)
    assert set(terminals) == {d.decision_id for d in decisions}
    return ev


# -- (a) a process killed between decision and terminal ---------------------------------

WORKER = """
import json, sys, time
from pathlib import Path
from gigaevo.llm.offline_memory import OfflineMemoryLLM
from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder
from tests.memory.helpers import result, runtime

SCOPES = ("f0", "f1", "f2", "f3")
def context(a):  # as in the test module (imported there, not here: it is heavy)
    c = 0.1 + 0.8 * ((a * 37) % 100) / 100
    return MutationContext("toy", a, f"parent-{a}", 5.0, 0, (0,), (c,), 0.0)
mem = CardBankMemory(
    runtime(Path(sys.argv[1])), llm=OfflineMemoryLLM(seed=0), embedder=HashingEmbedder(),
    write={"cadence": "live"}, selection="causal",
)
for a in range(6):  # committed outcomes: cards in the bank, evidence in the ledger
    mem.decide(context(a))
    mem.observe(result(a, scope=SCOPES[a % 4], gain=0.01 * (a + 1)))
open_ = []
a = 6
while len([o for o in open_ if o["proposed"]]) < 2 and a < 300:  # decided, never terminated
    d = mem.decide(context(a))
    open_.append({"attempt": a, "proposed": d.record["proposed_id"], "z": d.record["z"]})
    if not d.record["proposed_id"]:  # an abstention: let it terminate, keep looking
        mem.observe(result(a, scope="f0"))
        open_.pop()
    a += 1
print(json.dumps(open_), flush=True)
time.sleep(600)
"""


def _killed_worker(tmp_path: Path, source: str = WORKER) -> list[dict[str, Any]]:
    """Run the worker ``source`` on ``tmp_path``, SIGKILL it once it printed its open leases."""
    proc = subprocess.Popen(
        [sys.executable, "-c", source, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert line, "the worker died before deciding"
    return list(json.loads(line))


def test_orphans_of_a_killed_process_are_resumed_or_censored_never_doubled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    orphans = _killed_worker(tmp_path)
    ckpt = tmp_path / "run"
    assert len(orphans) == 2 and all(o["proposed"] for o in orphans)
    dead = leases(ckpt)  # the killed process still "holds" its two leases on file
    assert sorted(lease["attempt"] for lease in dead) == [o["attempt"] for o in orphans]

    with caplog.at_level(logging.INFO, logger="gigaevo.memory.v2.read.outcomes"):
        mem = provider(tmp_path)  # a new session on the same checkpoint (same run id)
    assert "memory v2: resuming 2 open decision(s)" in [r.getMessage() for r in caplog.records]
    assert mem.reader is not None and mem.recorder is not None
    ev = mem.reader.evidence
    resumed, lost = orphans
    # kept open (not censored at startup) and re-leased by this process
    assert set(mem.recorder.resumed) == {resumed["attempt"], lost["attempt"]}
    assert {t.censor_reason for t in ev.terminals()} <= {None}
    mine = leases(ckpt)
    assert sorted(lease["attempt"] for lease in mine) == [resumed["attempt"], lost["attempt"]]
    assert {lease["pid"] for lease in mine} == {os.getpid()}

    # the first orphan is re-dispatched: its committed decision stands ...
    again = mem.decide(context(resumed["attempt"]))
    assert (again.record["proposed_id"], again.record["z"]) == (resumed["proposed"], resumed["z"])
    n_decisions = len(ev.decisions())
    cited = again.card_ids
    mem.observe(result(resumed["attempt"], scope="f1", gain=0.03, cited=cited))
    # ... and the engine then moves past the second (committed before the kill, never observed)
    nxt = max(o["attempt"] for o in orphans) + 1
    mem.decide(context(nxt))
    mem.observe(result(nxt, scope="f2"))
    mem.observe(result(resumed["attempt"], scope="f1", gain=0.03))  # a duplicate delivery
    assert len(ev.decisions()) == n_decisions + 1
    did = str(again.record["decision_id"])
    term = ev.terminal(did)
    assert term is not None and term.status == "valid" and term.gain == pytest.approx(0.3)
    assert term.cited_ids == (tuple(cited) if resumed["z"] == 1 else ())
    lost_row = next(t for t in ev.terminals() if t.censor_reason == LOST_OUTCOME)
    lost_decision = ev.decision(lost_row.decision_id)
    assert lost_decision is not None and lost_decision.attempt == lost["attempt"]
    assert mem.recorder.stats()["lost_outcomes"] == 1
    assert mem.reader.held == {}
    mem.close()
    assert leases(ckpt) == []
    with one_terminal_each(ckpt) as ledger:
        assert ledger.open_decisions() == ()
        assert len({e.attempt for e in ledger.edges()}) == len(ledger.edges())


def test_a_session_abandoned_without_close_leaves_no_lease(
    tmp_path: Path,
) -> None:
    first = provider(tmp_path)
    assert first.reader is not None
    for a in range(8):
        first.decide(context(a))
        first.observe(result(a, scope=SCOPES[a % 4], gain=0.01 * (a + 1)))
    open_attempts = []
    for a in range(8, 200):
        d = first.decide(context(a))
        if d.record["proposed_id"]:
            open_attempts.append(a)
            first_record = d.record
            break
        first.observe(result(a, scope="f0"))
    assert open_attempts and leases(tmp_path / "run")
    # abandoned without close (same process: its session is alive, nothing is censored)
    second = provider(tmp_path)
    assert second.reader is not None and second.recorder is not None
    assert second.recorder.resumed == {}
    a = open_attempts[0]
    assert second.decide(context(a)).record == first_record  # the committed decision stands
    second.observe(result(a, scope="f1"))
    second.close()
    assert leases(tmp_path / "run") == []  # the abandoned session's lease went with its terminal
    with one_terminal_each(tmp_path / "run") as ledger:
        assert ledger.open_decisions() == ()
        assert all(t.censor_reason != STARTUP_ORPHAN for t in ledger.terminals())


# -- (b) run.py killed with SIGKILL mid-run, resumed --------------------------------------

ARGS = [
    "problem=rastrigin",
    "max_mutants=60",
    "progress=false",
    "seed=5",
    "memory=v2",
    "pipeline=memory_guided",
    "memory.causal.lineage_budget=4",  # so that lineage rows mature within the run
    STEADY_EVAL,
]


def _edges(ckpt: Path) -> int:
    path = ckpt / "memory_v2_selection_evidence.sqlite3"
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(path, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM edges").fetchone()[0])
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


def _ledger_view(ckpt: Path) -> dict[str, Any]:
    with one_terminal_each(ckpt) as ev:
        by_id = {d.decision_id: d for d in ev.decisions()}
        terminals = {by_id[t.decision_id].attempt: t for t in ev.terminals()}
        all_lineage = ev.lineage(latest=False)
        versions: dict[str, list[int]] = {}
        for row in all_lineage:
            versions.setdefault(row.root_decision_id, []).append(row.version)
        assert all(sorted(v) == list(range(1, len(v) + 1)) for v in versions.values())
        assert all(by_id[root].attempt >= 0 for root in versions)  # roots are decisions
        eligible = {o.decision.decision_id for o in ev.observations() if usefulness_eligible(o)}
        assert set(versions) <= eligible
        return {
            "decisions": sorted(
                (d.attempt, d.event_ordinal, d.proposed_id, d.z, d.rho0, d.rho, d.joint, d.q0, d.q1)
                for d in by_id.values()
            ),
            "terminals": sorted(
                (a, t.status, t.child_id, t.cited_ids, t.gain, t.censor_reason)
                for a, t in terminals.items()
            ),
            "edges": sorted(
                (e.attempt, e.island, e.ordinal, e.parent_id, e.child_id, e.status, e.gain)
                for e in ev.edges()
            ),
            "lineage": sorted(
                (
                    by_id[r.root_decision_id].attempt,
                    r.status,
                    r.maturity_ordinal,
                    r.best_descendant_id,
                    r.best_depth,
                    r.best_gain,
                    r.residual,
                    r.credit_owner,
                )
                for r in ev.lineage()
            ),
        }


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_matches_uninterrupted_memory_v2_run(tmp_path: Path) -> None:
    ckpt = tmp_path / "killed"
    kill_9_when(ARGS, ckpt, tmp_path, lambda: _edges(ckpt) >= 27, poll=0.005)
    done = committed_count(ckpt / STORE_FILE) - 1
    assert 27 <= done < 60, "the run should have been killed mid-way"
    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        assert ev.open_decisions(), "attempts in flight at the kill"
    assert leases(ckpt), "the killed run held leases"

    code, _, err = run_py(*ARGS, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err
    code, _, err = run_py(*ARGS, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err

    assert program_ids(ckpt) == program_ids(tmp_path / "whole")
    killed, whole = _ledger_view(ckpt), _ledger_view(tmp_path / "whole")
    assert [d[0] for d in killed["decisions"]] == list(range(60))
    assert [e[0] for e in killed["edges"]] == list(range(60))
    assert killed["lineage"], "no lineage row matured: the check would be vacuous"
    assert killed == whole
    assert leases(ckpt) == []
    stats = json.loads((ckpt / "memory_stats.json").read_text())["decide"]
    assert stats["resumed_decisions"] >= 1 and stats["lost_outcomes"] == 0
    assert stats["leases_held"] == 0


# -- (c) hallucinated and malformed citations ----------------------------------------------


def _answer(ids: str) -> str:
    text = render_answer("tactic: x", "because", (), render_program("x = 1\n"))
    return text.replace("card_ids_used: []", f"card_ids_used: {ids}")


def test_malformed_card_id_lines_parse_to_no_ids() -> None:
    for raw in ('{"a": 1}', "[[1, 2]]", "[null]", "card-1, card-2", '"ins-1"', "[1.5]"):
        assert parse_answer(_answer(raw)).card_ids_used == (), raw
    # numbers are ids written without quotes; they still must be on the slate to count
    assert parse_answer(_answer("[42]")).card_ids_used == ("42",)
    slate = Decision(0, slate="[ins-1] ...", card_ids=("ins-1",))
    assert ground_citations(("42", "ins-2", "", "INS-1", " ins-1"), slate) == ()
    assert ground_citations(("ins-2", "ins-1", "ins-1"), slate) == ("ins-1",)


def test_foreign_invented_and_control_citations_earn_no_credit(tmp_path: Path) -> None:
    mem = provider(tmp_path)
    assert mem.reader is not None
    for a in range(8):
        mem.decide(context(a))
        mem.observe(result(a, scope=SCOPES[a % 4], gain=0.01 * (a + 1)))
    cards = {c.id for c in mem.store.cards(task_key="toy")}
    assert len(cards) >= 2, cards
    seen: dict[int, int] = {}
    for a in range(8, 300):
        d = mem.decide(context(a))
        pid, z = d.record["proposed_id"], d.record["z"]
        if not pid:
            mem.observe(result(a, scope="f0"))
            continue
        other = sorted(cards - {pid})[0]  # a real card of the bank, not on this slate
        if z == 1:
            # the engine grounds against the slate; the recorder must hold even if it did not
            cited: tuple[str, ...] = (other, "ins-invented", "", "42")
        else:
            cited = (str(pid),)  # a withheld control "citing" the card it never saw
        mem.observe(result(a, scope="f1", cited=cited))
        term = mem.reader.evidence.terminal(str(d.record["decision_id"]))
        assert term is not None and term.cited_ids == ()
        seen[int(z)] = seen.get(int(z), 0) + 1
        if seen.get(0) and seen.get(1):
            break
    assert seen.get(0) and seen.get(1), seen
    ev = mem.reader.evidence
    for o in ev.observations():
        if o.decision.z == 1 and not o.terminal.cited_ids:
            assert not usefulness_eligible(o)  # uptake observation only
        if o.decision.z == 0 and o.decision.attempt >= 8:
            assert usefulness_eligible(o) and not o.cited  # a control, never a citation
    mem.close()


def test_startup_keeps_the_resumed_runs_orphans_and_censors_other_runs(tmp_path: Path) -> None:
    from tests.memory.evidence.factories import make_decision

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    dead = f"{socket.gethostname()}:{pid}:gone"
    with SelectionEvidence(tmp_path, owner=dead).open() as first:
        first.append_decision(make_decision(0, run_id="mine", owner=dead))
        first.append_decision(make_decision(1, run_id="theirs", owner=dead))
    with SelectionEvidence(tmp_path).open(resume_run="mine") as ledger:
        assert [d.run_id for d in ledger.open_decisions()] == ["mine"]
        assert [d.attempt for d in ledger.resumable("mine")] == [0]
        assert [t.censor_reason for t in ledger.terminals()] == [STARTUP_ORPHAN]
    with SelectionEvidence(tmp_path).open() as ledger:  # no resume: every dead orphan goes
        assert ledger.open_decisions() == ()
