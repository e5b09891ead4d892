"""The write path's state across a kill: what a resumed run takes over from its files.

A run killed at any moment resumes to the history of an uninterrupted one.
On the write side that needs, at start-up (``resume_writes``):

- the unit a kill interrupted finished (``WriteLedger.recover``: the rows of a
  bank write that landed are appended, an intent that never reached the bank
  is dropped);
- the items this run already ingested (their rows are in the ledger), so an
  outcome the engine observes again is not ingested twice;
- the tombstones of the cards this run retired (rebuilt from its ``retired`` rows);

and, through ``LibrarianState``, the exemplar trigger's best fitness and the
items waiting for a retry, saved whenever they change.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from gigaevo.memory.v2.bank.cards import payload_digest
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.bank.tombstones import Tombstones
from gigaevo.memory.v2.errors import CorruptBankError
from gigaevo.memory.v2.write.ledger import WriteLedger, read_ledger
from gigaevo.memory.v2.write.librarian import Librarian
from gigaevo.util import atomic_write_json

log = logging.getLogger(__name__)

STATE_FILE = ".librarian_state.json"


def resume_writes(
    ledger: WriteLedger, store: LocalMemoryStore, tombstones: Tombstones, run_id: str
) -> set[tuple[int, str]]:
    """Finish an interrupted bank write, rebuild the tombstones; the items already ingested.

    Returns the (attempt, stage) of every insight and exemplar row of ``run_id``.

    Raises:
        CardFormatError: the ledger or its intent holds a malformed row.
    """
    if not ledger.path.exists() and not ledger.intent_path.exists():
        return set()  # a new run
    recovered = ledger.recover(store.get)
    if recovered:
        log.info("memory v2: %d write-ledger row(s) of a killed session recovered", len(recovered))
    done: set[tuple[int, str]] = set()
    for row in read_ledger(ledger.path):
        if row.run_id != run_id:
            continue
        if row.item in ("insight", "program") and row.attempt is not None:
            done.add((row.attempt, row.item))
        elif row.outcome == "retired" and row.card_id and row.candidate is not None:
            kind = "program" if row.card_id.startswith("prg-") else "insight"
            c = row.candidate
            tombstones.remember(
                row.card_id, payload_digest(kind, c.description, c.explanation_summary)
            )
    return done


def added_cards(ledger: WriteLedger, run_id: str) -> list[str]:
    """The cards ``run_id`` admitted (its ``added`` insight and exemplar rows), in ledger order."""
    if not ledger.path.exists():
        return []
    return [
        row.card_id
        for row in read_ledger(ledger.path)
        if row.run_id == run_id
        and row.item in ("insight", "program")
        and row.outcome == "added"
        and row.card_id
    ]


class LibrarianState:
    """``.librarian_state.json`` in ``checkpoint_dir``: the librarian's state over restarts.

    Written (atomically) only when it changed since the last write: the best
    fitness moves rarely and the retry queue is usually empty. Not fsynced (issue 16):
    a kill leaves the old or the new file, as for the write ledger's rows it sits beside.
    """

    def __init__(self, checkpoint_dir: Path, run_id: str) -> None:
        self.path = Path(checkpoint_dir) / STATE_FILE
        self.run_id = run_id
        self._saved: dict[str, Any] | None = None

    def load(self, librarian: Librarian) -> None:
        """Hand a killed session's state to ``librarian`` (nothing for a new run).

        Raises:
            CorruptBankError: the file does not parse (naming it).
        """
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            # a new run: its fresh state needs no file until it changes (restoring from no
            # file gives the same state), so a run that never changes it writes none
            self._saved = librarian.state()
            return
        except (OSError, ValueError) as exc:
            raise CorruptBankError(f"{self.path}: unreadable ({exc})") from exc
        if not isinstance(data, dict) or data.get("run_id") != self.run_id:
            return  # another run's (a copied folder): this run starts afresh
        librarian.restore(data, str(self.path))
        self._saved = librarian.state()

    def save(self, librarian: Librarian) -> None:
        state = librarian.state()
        if state != self._saved:
            atomic_write_json(
                self.path, {"run_id": self.run_id, **state}, durable=False, synced=False
            )
            self._saved = state
