"""The commit outbox: a committed attempt's events and memory observation, delivered once.

A commit writes the program to the store; its events (``archive``,
``new_best``, ``migration``, ``mutant``) go to ``events.jsonl`` and its
terminal to the memory, two places outside the store's transaction. So the
commit carries an outbox entry (``Outbox.entry``) in the same transaction:
the events as they will be written, the byte size of ``events.jsonl`` at the
commit, the memory's ``MutationResult``, and the marker that tells the batch
(its ``mutant`` event, or an initial program's ``initial`` event).
``deliver`` then writes the events (one write), lets the memory observe, and
drops the entry. A kill anywhere in
between leaves the entry; ``replay`` (at resume, before anything else is
written) delivers it again:

- the events are written unless the log already holds the marker event after
  the recorded size (they were written together);
- the memory observes again; every step of its observation is idempotent
  (its ledgers refuse a second terminal, a second edge or a second row for
  the same item), so what the kill interrupted is finished and nothing is
  done twice.

A resumed run thus records exactly what an uninterrupted run records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gigaevo.evolution.events import EventLog
from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.base import MutationResult

_TUPLES = tuple(
    f.name for f in dataclasses.fields(MutationResult) if str(f.type).startswith("tuple")
)
_CELLS = ("parent_cell", "child_cell")


def result_to_dict(result: MutationResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def result_from_dict(data: dict[str, Any]) -> MutationResult:
    values = dict(data)
    for name in (*_TUPLES, *_CELLS):
        if values.get(name) is not None:
            values[name] = tuple(values[name])
    return MutationResult(**values)


class Outbox:
    """Delivers committed attempts' effects outside the store (see the module docstring).

    Args:
        store: the program store holding the entries.
        events: the run's event log.
        observe: hands a terminal to the memory.
    """

    def __init__(
        self,
        store: ProgramStore,
        events: EventLog,
        observe: Callable[[MutationResult], None],
    ) -> None:
        self.store = store
        self.events = events
        self.observe = observe

    def entry(
        self,
        key: int,
        records: list[dict[str, Any]],
        marker: dict[str, Any],
        result: MutationResult | None = None,
    ) -> dict[str, Any]:
        """The outbox entry of a commit about to be written (``ProgramStore.commit(outbox=)``).

        ``key``: the attempt (negative for an initial program); ``marker``: fields of one
        event of ``records`` that no other commit writes.
        """
        return {
            "key": key,
            "events": records,
            "marker": marker,
            "events_offset": self.events.size(),
            "result": None if result is None else result_to_dict(result),
        }

    def deliver(
        self,
        entry: dict[str, Any],
        observe: Callable[[MutationResult], None] | None = None,
    ) -> None:
        """Write the entry's events unless they are written, let the memory observe (through
        ``observe`` when given), drop the entry."""
        if not self.events.holds(entry["marker"], int(entry["events_offset"])):
            self.events.emit_all(list(entry["events"]))
        if entry["result"] is not None:
            (observe or self.observe)(result_from_dict(entry["result"]))
        self.store.outbox_done(int(entry["key"]))

    def replay(self, observe: Callable[[MutationResult], None] | None = None) -> list[int]:
        """Deliver every entry a stopped session left, in commit order; their keys."""
        done = []
        for entry in self.store.outbox_entries():
            self.deliver(entry, observe)
            done.append(int(entry["key"]))
        return done
