"""The commit outbox: a committed attempt's events and memory observation, delivered once.

A commit writes the program to the store; its events (``archive``,
``new_best``, ``migration``, ``mutant``) go to ``events.jsonl`` and its
terminal to the memory, two places outside the store's transaction. So the
commit carries an outbox entry (``Outbox.entry``) in the same transaction:
the events as they will be written, the byte size of ``events.jsonl`` at the
commit, the memory's ``MutationResult``, and the marker that tells the batch
(its ``mutant`` event, or an initial program's ``initial`` event).
``deliver`` then writes the events (one write) and hands the terminal to
the memory with a callback that drops the entry once the observation is
done: in arrival order the memory observes on its own thread, later, so the
entry stays until then. A kill anywhere in between leaves the entry;
``replay`` (at resume, before anything else is written) delivers it again:

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

# hands a terminal to the memory; calls its second argument once the observation is done
# (at once, or later on another thread), and not at all when it could not be made
Observer = Callable[[MutationResult, Callable[[], None]], None]

_TUPLES = tuple(
    f.name for f in dataclasses.fields(MutationResult) if str(f.type).startswith("tuple")
)
_CELLS = ("parent_cell", "child_cell")


def inline(observe: Callable[[MutationResult], None]) -> Observer:
    """An ``Observer`` that observes on the calling thread (done once ``observe`` returns)."""

    def observer(result: MutationResult, done: Callable[[], None]) -> None:
        observe(result)
        done()

    return observer


_FIELDS = tuple(f.name for f in dataclasses.fields(MutationResult))


def result_to_dict(result: MutationResult) -> dict[str, Any]:
    """A flat copy (``dataclasses.asdict`` deep-copies every value: a cost at each commit)."""
    data = {name: getattr(result, name) for name in _FIELDS}
    data["child_metrics"] = dict(result.child_metrics)
    return data


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
        observe: hands a terminal to the memory (an ``Observer``).
    """

    def __init__(self, store: ProgramStore, events: EventLog, observe: Observer) -> None:
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

    def deliver(self, entry: dict[str, Any], observe: Observer | None = None) -> None:
        """Write the entry's events unless they are written, let the memory observe (through
        ``observe`` when given); the entry is dropped once the observation is done."""
        key = int(entry["key"])
        if not self.events.holds(entry["marker"], int(entry["events_offset"])):
            self.events.emit_all(list(entry["events"]))
        if entry["result"] is None:
            self.store.outbox_done(key)
            return
        (observe or self.observe)(
            result_from_dict(entry["result"]), lambda: self.store.outbox_done(key)
        )

    def replay(self, observe: Observer | None = None, *, events_only: bool = False) -> list[int]:
        """Deliver every entry a stopped session left, in commit order; their keys.

        ``events_only``: write the events, keep the entries that still owe an
        observation (the memory cannot take one now; the next resume delivers it).
        """
        done = []
        for entry in self.store.outbox_entries():
            self.deliver(entry, _keep if events_only else observe)
            done.append(int(entry["key"]))
        return done


def _keep(result: MutationResult, done: Callable[[], None]) -> None:
    """An ``Observer`` that observes nothing and keeps the entry."""
