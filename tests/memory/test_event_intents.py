"""``applicability`` and ``retired`` events are exactly once across a SIGKILL (issue 16).

A real process is killed at the instant after its commit (the decision, the bank's
deletion) and before the event's line, or at the instant before the commit. A new
session on the same directories appends the lost event once (the same fields as the
intent saved before the commit), or nothing when the commit never happened; a third
session adds nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gigaevo.memory.v2.read.events import EVENTS_FILE, INTENT_FILE, MemoryEvents, read_events

ROOT = Path(__file__).resolve().parents[2]
VOLATILE = {"ts", "time"}


def _kill_self(*_: object, **__: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def worker(kind: str, where: str, base: str) -> None:
    """Run up to the ``kind`` event and die by SIGKILL ``where``
    (``after_commit`` / ``before_commit``)."""
    real = MemoryEvents.emit_intent

    def emit_intent(self: MemoryEvents, record: dict) -> dict:  # type: ignore[type-arg]
        if record["event"] == kind:
            _kill_self()
        return real(self, record)

    if where == "after_commit":
        MemoryEvents.emit_intent = emit_intent  # type: ignore[method-assign]
    if kind == "applicability":
        from gigaevo.llm.offline_memory import OfflineMemoryLLM
        from tests.memory.test_applicability import LOOP_PARENT, _bank, ctx, provider

        mem = provider(Path(base), OfflineMemoryLLM(seed=0))
        _bank(mem)
        if where == "before_commit":
            from gigaevo.memory.v2.evidence import SelectionEvidence

            SelectionEvidence.append_decision = _kill_self  # type: ignore[method-assign]
        mem.decide(ctx(10, "parent-10", LOOP_PARENT))
    else:
        from tests.memory.test_evictor import build_run

        run = build_run(Path(base), effect=-0.05, p_invalid=0.35)
        if where == "before_commit":
            run.store._persist = _kill_self  # type: ignore[method-assign]
        run.evictor.run()
    raise AssertionError("the worker was not killed")


def _run_killed(kind: str, where: str, base: Path) -> None:
    call = f"worker({kind!r}, {where!r}, {str(base)!r})"
    code = f"from tests.memory.test_event_intents import worker; {call}"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]


def _events(ckpt: Path, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [e for e in read_events(ckpt / EVENTS_FILE) if e["event"] == kind]


def _resume(kind: str, base: Path) -> None:
    """A new session on the directories (its reader recovers at start-up)."""
    if kind == "applicability":
        from gigaevo.llm.offline_memory import OfflineMemoryLLM
        from tests.memory.test_applicability import provider

        provider(base, OfflineMemoryLLM(seed=0)).close()
    else:
        from gigaevo.memory.v2.read.reader import CausalReader
        from tests.memory.helpers import open_store, runtime

        rt = runtime(base, task="toy")
        reader = CausalReader(rt, open_store(Path(rt.bank_dir)), run_id="run-test")
        reader.evidence.close()


def _checkpoint(base: Path) -> Path:
    from tests.memory.helpers import runtime

    return Path(runtime(base).checkpoint_dir)


@pytest.mark.parametrize("kind", ["applicability", "retired"])
def test_a_kill_after_the_commit_loses_no_event_and_doubles_none(tmp_path: Path, kind: str) -> None:
    _run_killed(kind, "after_commit", tmp_path)
    ckpt = _checkpoint(tmp_path)
    before = _events(ckpt, kind)
    saved = json.loads((ckpt / INTENT_FILE).read_text())["intents"]
    (intent,) = [e["record"] for e in saved.values() if e["record"]["event"] == kind]
    if kind == "retired":
        assert intent["retired_card_ids"] == ["ins-harmful"]  # the deletion committed
        from gigaevo.memory.v2 import read_bank

        assert "ins-harmful" not in {c.id for c in read_bank(ckpt / "cards.json").cards}
    else:
        assert intent["labels"], "the killed decision was assessed"
    assert all(e.get("decision_id") != intent.get("decision_id") for e in before) or (
        kind == "retired"
    )
    _resume(kind, tmp_path)
    after = _events(ckpt, kind)
    assert len(after) == len(before) + 1
    strip = lambda e: {k: v for k, v in e.items() if k not in VOLATILE}  # noqa: E731
    assert strip(after[-1]) == strip(intent)
    assert not (ckpt / INTENT_FILE).exists()
    _resume(kind, tmp_path)
    assert len(_events(ckpt, kind)) == len(after)  # nothing twice


@pytest.mark.parametrize("kind", ["applicability", "retired"])
def test_a_kill_before_the_commit_appends_nothing(tmp_path: Path, kind: str) -> None:
    _run_killed(kind, "before_commit", tmp_path)
    ckpt = _checkpoint(tmp_path)
    assert (ckpt / INTENT_FILE).exists()
    before = _events(ckpt, kind)
    _resume(kind, tmp_path)
    assert _events(ckpt, kind) == before
    assert not (ckpt / INTENT_FILE).exists()
