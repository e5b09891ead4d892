"""Decisions left without a terminal by a dead session are censored when the ledger opens."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from gigaevo.memory.v2.evidence import STARTUP_ORPHAN, SelectionEvidence
from gigaevo.memory.v2.evidence.owner import owner_dead
from tests.memory.evidence.factories import make_decision, make_terminal

HOST = socket.gethostname()


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_orphans_of_a_dead_session_are_censored_on_open(tmp_path: Path) -> None:
    first = SelectionEvidence(tmp_path, owner=f"{HOST}:{_dead_pid()}:old").open()
    done = make_decision(0, owner=first.owner)
    first.append_decision(done)
    first.append_terminal(make_terminal(done, cited=("c1",)))
    first.append_decision(make_decision(1, owner=first.owner))
    first.append_decision(make_decision(2, z=None, owner=first.owner))
    first.close()

    ledger = SelectionEvidence(tmp_path).open()
    assert ledger.open_decisions() == ()
    censored = [t for t in ledger.terminals() if t.status == "censored"]
    assert len(censored) == 2
    assert all(
        t.censor_reason == STARTUP_ORPHAN and t.child_id.startswith("no-child:") for t in censored
    )
    assert ledger.pending_by_proposal() == {}
    assert len(ledger.ope_rows()) == 1  # only the finished row remains evidence
    again = SelectionEvidence(tmp_path).open()  # reopening adds nothing
    assert len(again.terminals()) == 3


def test_open_decisions_of_a_live_session_are_left_alone(tmp_path: Path) -> None:
    live = f"{HOST}:{os.getppid()}:other"
    writer = SelectionEvidence(tmp_path, owner=live).open()
    writer.append_decision(make_decision(0, owner=live))
    remote = "elsewhere:1:n"
    writer.append_decision(make_decision(1, owner=remote))
    ledger = SelectionEvidence(tmp_path).open()
    assert len(ledger.open_decisions()) == 2


def test_owner_dead_rules() -> None:
    me = f"{HOST}:{os.getpid()}:now"
    assert not owner_dead(f"{HOST}:{os.getpid()}:before", me)  # same process: never
    assert not owner_dead(me, me)
    assert owner_dead(f"{HOST}:{_dead_pid()}:x", me)
    assert not owner_dead("other-host:1:x", me)
    assert not owner_dead("garbled", me)
