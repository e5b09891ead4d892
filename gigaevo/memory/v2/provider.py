"""``CardBankMemory``: the memory=v2 provider (write side and causal read side).

With ``selection="causal"`` (``memory.selection``, the config default)
``decide`` delegates to ``reader.CausalReader`` (posterior, randomised
offer/withhold, leases, evidence ledger) and ``observe`` first records the
outcome with ``outcomes.OutcomeRecorder``. With ``selection="none"`` (the
constructor default) ``decide`` returns an empty ``Decision`` (no slate, no
card, no randomised control) on every attempt, so such a run mutates exactly
like memory=none while it fills the bank.

``observe`` feeds strictly valid outcomes to the librarian with the
configured cadence (``memory/write``): ``live`` ingests as outcomes arrive,
``end_of_run`` at ``close``, ``none`` never. ``close`` drains what is left,
runs the residual-duplicate audit and writes ``memory_stats.json``.

Unless the cadence is ``none``, every usefulness-eligible terminal also stamps
one compact trial onto its owning shared card (``trials.TrialStamper``);
``memory.transfer`` (on in memory=v2_multitask) turns other runs' trials into
the immediate head's transfer prior (``causal.transfer``). Startup refuses a
bank whose ``cards.json`` or ``selection_leases.json`` could not be written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gigaevo.llm.base import LLMClient
from gigaevo.memory.base import Decision, MemoryRuntime, MutationContext, MutationResult
from gigaevo.memory.v2.bank.cards import KINDS, bounded_context
from gigaevo.memory.v2.bank.embed import Embedder
from gigaevo.memory.v2.bank.recordjournal import RUN_COMPACT_FROM_BYTES, RUN_JOURNAL_FROM_BYTES
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.bank.tombstones import Tombstones
from gigaevo.memory.v2.blas import hold, one_blas_thread, release
from gigaevo.memory.v2.causal.transfer import TransferConfig
from gigaevo.memory.v2.errors import (
    BankLockTimeout,
    CorruptBankError,
    MemoryConfigError,
)
from gigaevo.memory.v2.evidence import LeaseLockTimeoutError, decision_key_id
from gigaevo.memory.v2.read.applicability import ApplicabilityAssessor, ApplicabilitySettings
from gigaevo.memory.v2.read.evictor import CausalEvictor, EvictorSettings, Retire
from gigaevo.memory.v2.read.outcomes import OutcomeRecorder
from gigaevo.memory.v2.read.reader import SELECTION_MODES, CausalReader, ReaderSettings
from gigaevo.memory.v2.read.trials import (
    TrialStamper,
    check_bank_writable,
    check_shared_bank,
    parse_transfer,
)
from gigaevo.memory.v2.settings import MemorySettings, ReadSideSettings
from gigaevo.memory.v2.write.agents import AgentUsage, CardAuthor, EquivalenceJudge, TaskView
from gigaevo.memory.v2.write.audit import DuplicateAudit, audit_duplicates
from gigaevo.memory.v2.write.cards_out import retire_cards
from gigaevo.memory.v2.write.ledger import LEDGER_FILE, WriteLedger
from gigaevo.memory.v2.write.librarian import Librarian
from gigaevo.memory.v2.write.outcome import is_strictly_valid, writer_outcome
from gigaevo.memory.v2.write.resume import LibrarianState, added_cards, resume_writes
from gigaevo.util import add_counters, atomic_write_json

log = logging.getLogger(__name__)

STATS_FILE = "memory_stats.json"


def _under(prefix: str, names: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{name}" for name in names.split())


# memory_stats.json adds these up over a run's sessions, so a resumed run reports its
# totals; every other field is the state at the last close (a new numeric field belongs
# here or in STATE_FIELDS of tests/memory/test_stats_sessions.py)
SESSION_COUNTERS = (
    *_under(
        "",
        "sessions outcomes_observed outcomes_strictly_valid outcomes_ingested exemplars_queued "
        "exemplars_ingested failed_attempts exhausted_items fail_open judge_calls "
        "ingest_seconds bank.reloads bank.writes",
    ),
    *_under("memory_llm.", "calls failures prompt_tokens completion_tokens cost_usd"),
    *_under(
        "decide.",
        "decisions abstain offered withheld head_fits lease_errors lease_redrafts outcomes "
        "lineage_versions terminals_rejected resumed_decisions lost_outcomes trials_stamped "
        "trials_duplicate trials_orphan trial_lock_timeouts trials_deferred trials_recovered",
    ),
    *_under("decide.applicability.", "decisions calls failures cache_hits labelled"),
    *_under(
        "evictor.",
        "sweeps cards_judged cards_not_due viability_evaluations judgements_reused verdicts "
        "retired disabled_sweeps sweep_seconds keep_reasons gate",
    ),
)
ABSTAIN_REASON = "memory.selection=none: the provider abstains"


def run_identity(runtime: MemoryRuntime) -> str:
    """A short stable id of this run; resumes keep it.

    Card ids, decision ids and the selection draws derive from it. With the
    run's own bank (``memory_bank_dir`` = ``checkpoint_dir``, the default) it
    is (task, seed), so a seeded run gives the same history in any directory.
    With a shared bank the checkpoint directory joins the key, so that runs
    writing to one bank never mint the same ids.
    """
    key = f"{runtime.task_key}|{runtime.seed}"
    checkpoint = Path(runtime.checkpoint_dir).resolve()
    if Path(runtime.bank_dir).resolve() != checkpoint:
        key += f"|{checkpoint}"
    return "run-" + hashlib.sha256(key.encode()).hexdigest()[:10]


@dataclasses.dataclass(frozen=True)
class _Options:
    """The ``memory.*`` options of ``CardBankMemory`` parsed, before anything is opened."""

    settings: MemorySettings
    read: ReadSideSettings
    transfer: TransferConfig
    applicability: ApplicabilitySettings
    reader: ReaderSettings
    evictor: EvictorSettings

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> _Options:
        """Every option checked alone and against the others (not against the bank).

        Raises:
            MemoryConfigError: one line naming the key.
        """
        get = raw.get  # a key left out is the constructor's default (None; selection: none)
        settings = MemorySettings.parse(
            write=get("write"),
            writer=get("writer"),
            program_exemplars=get("program_exemplars"),
            store=get("store"),
        )
        read = ReadSideSettings.parse(
            posterior_config=get("posterior_config"),
            context=get("context"),
            excluder=get("excluder"),
            no_card_evidence=get("no_card_evidence"),
        )
        moved = parse_transfer(get("transfer"))
        labels = ApplicabilitySettings.parse(get("applicability"))
        llm = get("llm")
        if labels.mode == "agentic" and llm is None:
            raise MemoryConfigError(
                "memory.applicability.mode=agentic needs memory.llm (it labels the cards)"
            )
        authoring = settings.writer.authoring_enabled
        if llm is None and authoring and settings.write.cadence != "none":
            raise MemoryConfigError("memory.llm must be set when memory.writer.authoring_enabled")
        if get("selection", "none") not in SELECTION_MODES:
            raise MemoryConfigError(f"memory.selection must be one of {list(SELECTION_MODES)}")
        try:
            reader = ReaderSettings.parse(get("causal"))
        except (TypeError, ValueError) as exc:
            raise MemoryConfigError(str(exc)) from exc
        return cls(settings, read, moved, labels, reader, EvictorSettings.parse(get("evictor")))


def check_options(**options: Any) -> None:
    """Refuse a bad ``memory.*`` option of memory=v2 before the run opens its files.

    ``options``: the ``memory`` config node's keys (``_target_``-style keys and the
    ``embedder`` are not options and are ignored; ``llm`` only counts as set or not).
    The pipeline calls it before the run folder gets its scratchpad, so a refused
    setting leaves nothing behind and prints nothing but its one error line.

    Raises:
        MemoryConfigError: one line naming the key.
    """
    _Options.parse(options)


class CardBankMemory:
    """memory=v2 (see the module docstring).

    Args:
        runtime: task, metrics, directories and seed of the run.
        llm: the memory LLM (card author and equivalence judge).
        embedder: embeds card briefs for retrieval.
        write, writer, program_exemplars, store: the ``memory.*`` settings as
            plain dicts (validated by ``MemorySettings.parse``).
        posterior_config, context, excluder, no_card_evidence: the read side's
            ``memory.*`` groups as plain dicts (validated by ``ReadSideSettings.parse``
            at startup, whatever ``selection`` is).
        evictor: ``memory/evictor`` (``mode: causal`` builds a ``CausalEvictor`` that sweeps
            every ``sweep_every`` outcomes on the live cadence and at close; validated at
            startup by ``EvictorSettings.parse``).
        applicability: ``memory.applicability`` (``ApplicabilitySettings``); with
            ``mode: agentic`` the memory LLM labels each decision's cards for the parent.

    Raises:
        MemoryConfigError: a setting is unusable or contradicts another.
        CorruptBankError: ``cards.json`` exists and does not parse.
    """

    # the pipeline refuses a bad option before the run folder gets its scratchpad
    check_options = staticmethod(check_options)

    def __init__(
        self,
        runtime: MemoryRuntime,
        *,
        llm: LLMClient | None,
        embedder: Embedder,
        write: dict[str, Any] | None = None,
        writer: dict[str, Any] | None = None,
        program_exemplars: dict[str, Any] | None = None,
        store: dict[str, Any] | None = None,
        selection: str = "none",
        causal: dict[str, Any] | None = None,
        transfer: dict[str, Any] | None = None,
        posterior_config: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        excluder: dict[str, Any] | None = None,
        no_card_evidence: dict[str, Any] | None = None,
        applicability: dict[str, Any] | None = None,
        evictor: dict[str, Any] | None = None,
    ) -> None:
        self.runtime = runtime
        raw = dict(
            llm=llm, write=write, writer=writer, program_exemplars=program_exemplars,
            store=store, selection=selection, causal=causal, transfer=transfer,
            posterior_config=posterior_config, context=context, excluder=excluder,
            no_card_evidence=no_card_evidence, applicability=applicability, evictor=evictor,
        )  # fmt: skip
        options = _Options.parse(raw)
        self.settings, self.read_settings = options.settings, options.read
        self.transfer, self.applicability = options.transfer, options.applicability
        if self.transfer.enabled:
            check_shared_bank(runtime, self.settings)
        if self.settings.write.cadence != "none":
            check_bank_writable(Path(runtime.bank_dir))
        authoring = self.settings.writer.authoring_enabled
        writes = self.settings.write.cadence != "none"
        self.llm = llm
        self.run_id = run_identity(runtime)
        self._earlier = _earlier_stats(Path(runtime.checkpoint_dir) / STATS_FILE, self.run_id)
        s = self.settings.store
        self.store = LocalMemoryStore(
            runtime.bank_dir,
            embedder=embedder,
            lock=s.lock,
            lock_timeout_s=s.lock_timeout_s,
            authoring_lock_timeout_s=s.authoring_lock_timeout_s,
            soft_lock_lifetime_s=s.soft_lock_lifetime_s,
            journal_from_bytes=RUN_JOURNAL_FROM_BYTES,  # compacted at close (_compact_bank)
            compact_from_bytes=RUN_COMPACT_FROM_BYTES,
        ).open()
        self.ledger = WriteLedger(Path(runtime.checkpoint_dir) / LEDGER_FILE)
        self.tombstones = Tombstones()
        # a resumed run: finish a bank write a kill interrupted, take over the tombstones
        done = resume_writes(self.ledger, self.store, self.tombstones, self.run_id)
        self.usage = AgentUsage()
        self.judge: EquivalenceJudge | None = None
        self.librarian = (
            self._librarian(done) if (llm is not None and authoring and writes) else None
        )
        self.librarian_state = LibrarianState(Path(runtime.checkpoint_dir), self.run_id)
        if self.librarian is not None:
            self.librarian_state.load(self.librarian)
            if done:  # a resumed run: notes of admitted cards a kill kept from the scratchpad
                self.librarian.restage_notes(added_cards(self.ledger, self.run_id))
        self.audit: DuplicateAudit | None = None
        self._observed = 0
        self._eligible = 0
        self._closed = False
        self._bank_error: str | None = None
        self.reader, self.recorder = self._reader(selection, options.reader)
        # outcomes of the run so far (the retirement cadence counts them across sessions)
        self._run_outcomes = 0 if self.reader is None else len(self.reader.evidence.edges())
        self.stamper: TrialStamper | None = None
        if self.reader is not None and writes:
            self.stamper = TrialStamper(self.store, self.reader.evidence)
            self.stamper.recover()  # a resumed run stamps what a kill left unstamped
        self.evictor = self._evictor(options.evictor)
        # one BLAS thread in the process until close (``blas``); released if never closed
        hold()
        self._blas = weakref.finalize(self, release)

    def _evictor(self, settings: EvictorSettings) -> CausalEvictor | None:
        """``memory/evictor=causal``: needs the causal ledger and a writing cadence."""
        if settings.mode == "none" or self.reader is None:
            return None
        if self.settings.write.cadence == "none":
            return None

        def retire(ids: list[str], reason: str, gate: Any) -> list[str]:
            return retire_cards(
                self.store,
                self.ledger,
                self.tombstones,
                ids,
                reason,
                run_id=self.run_id,
                still_retirable=gate,
            )

        run: Retire = retire
        return CausalEvictor(self.reader, settings, retire=run, task_key=self.runtime.task_key)

    def _reader(
        self, selection: str, settings: ReaderSettings
    ) -> tuple[CausalReader | None, OutcomeRecorder | None]:
        """The causal read side when ``memory.selection`` is ``causal`` (``none``: abstain)."""
        if selection == "none":
            return None, None
        rs = self.read_settings
        settings = dataclasses.replace(
            settings, posterior=rs.posterior, context=rs.context, excluder=rs.excluder
        )
        reader = CausalReader(
            self.runtime,
            self.store,
            run_id=self.run_id,
            settings=settings,
            transfer=self.transfer,
            assessor=self._assessor(),
        )
        return reader, OutcomeRecorder(reader)

    def _assessor(self) -> ApplicabilityAssessor | None:
        """The applicability labeller of ``memory/applicability=agentic`` (None for ``none``)."""
        if self.applicability.mode != "agentic" or self.llm is None:
            return None
        rt = self.runtime
        return ApplicabilityAssessor(
            self.llm,
            store=self.store,
            task=TaskView(rt.task_key, bounded_context(rt.task_description)),
            settings=self.applicability,
            usage=self.usage,
            seed=rt.seed,
        )

    def _librarian(self, done: set[tuple[int, str]]) -> Librarian:
        assert self.llm is not None
        w, rt = self.settings.writer, self.runtime
        task = TaskView(rt.task_key, bounded_context(rt.task_description))
        author = CardAuthor(
            self.llm,
            task=task,
            max_attempts=w.llm_max_attempts,
            max_program_chars=w.max_program_chars,
            max_diff_lines=w.max_diff_lines,
            max_note_chars=w.max_note_chars,
            usage=self.usage,
        )
        self.judge = EquivalenceJudge(self.llm, max_attempts=w.llm_max_attempts, usage=self.usage)
        return Librarian(
            store=self.store,
            author=author,
            judge=self.judge,
            ledger=self.ledger,
            tombstones=self.tombstones,
            writer=w,
            exemplars=self.settings.exemplars,
            task_key=rt.task_key,
            task_description=rt.task_description,
            run_id=self.run_id,
            seed=rt.seed,
            notes=rt.scratchpad,
            done=done,
        )

    # -- MemoryProvider --------------------------------------------------------
    def decide(self, context: MutationContext) -> Decision:
        """The causal decision (``selection: causal``), else abstain: no slate, no card."""
        if self.reader is not None:
            with one_blas_thread():
                return self.reader.decide(context)
        return Decision(attempt=context.attempt, record={"memory": "v2", "action": "abstain"})

    def observe(self, result: MutationResult) -> None:
        """Queue a strictly valid outcome for the librarian; ingest now when the cadence is live.

        Raises:
            CorruptBankError: the bank stopped parsing (the run must stop).
        """
        with one_blas_thread():
            self._observe(result)

    def _observe(self, result: MutationResult) -> None:
        """Every step is idempotent: an outcome observed again on resume (a kill came
        between its commit and the end of its observation) finishes what is missing."""
        again = self.reader is not None and self.reader.evidence.edge(result.child_id) is not None
        if not again:
            self._observed += 1
            self._run_outcomes += 1
        if self.recorder is not None:
            self.recorder.observe(result)
        if self.stamper is not None:
            self.stamper.observe(decision_key_id(self.run_id, result.attempt))
        if is_strictly_valid(result):
            self._eligible += 0 if again else 1
            if self.librarian is not None:
                self.librarian.submit(writer_outcome(result, self.runtime.metrics))
                if self.settings.write.cadence == "live":
                    self._drain(final=False)
                self.librarian_state.save(self.librarian)
        if self.evictor is not None and self.settings.write.cadence == "live":
            self._retire(self._run_outcomes)

    def close(self) -> None:
        """Ingest what is queued, audit duplicates, write ``memory_stats.json``. Idempotent.

        Raises:
            CorruptBankError: the bank stopped parsing (nothing was overwritten).
        """
        if self._closed:
            return
        self._closed = True
        try:
            with one_blas_thread():
                self._close(final=True)
        finally:
            self._blas()  # this provider's hold (``blas``), once

    def suspend(self) -> None:
        """Close a run that stopped before its end and will be resumed (Ctrl-C, a lost
        model server, a full disk). Idempotent.

        What ``close`` persists is persisted (the librarian's queue, the trial stamps,
        ``ope_summary.json``, ``memory_stats.json``), but none of the end of the run is
        done: no last drain of the queue, no duplicate audit, no closing retirement
        sweep, and the leases of the attempts in flight are kept (their dispatches are
        replayed on resume). Doing that work at an arbitrary point changed the bank and
        the leases that the resumed run's decisions read, so that its history differed
        from the uninterrupted run's; now a resume continues from what a kill -9 would
        have left, which resumes exactly, and ``close`` does the work once, at the end.
        """
        if self._closed:
            return
        self._closed = True
        try:
            with one_blas_thread():
                self._close(final=False)
        finally:
            self._blas()

    def _close(self, *, final: bool) -> None:
        try:
            if self.librarian is not None and self._bank_error is None:
                if final:
                    self._drain(final=True)
                self.librarian_state.save(self.librarian)
                if final:
                    self._audit()
        finally:
            if self.stamper is not None and self._bank_error is None:
                self.stamper.flush()
            if self.recorder is not None and self.reader is not None:
                if final:
                    self.reader.release_all()
                    if self.evictor is not None and self._bank_error is None:
                        self._retire(None)
                else:  # the resolved attempts' releases (a kill would leave them reclaimable)
                    self.reader.flush_releases()
                self.recorder.write_ope()
            if self._bank_error is None:  # after the last bank write of the session
                self._compact_bank()
            path = Path(self.runtime.checkpoint_dir) / STATS_FILE
            atomic_write_json(path, add_counters(self._earlier, self.stats(), SESSION_COUNTERS))
            if self.reader is not None:
                self.reader.evidence.close()

    # -- internals -------------------------------------------------------------
    def _compact_bank(self) -> None:
        """Fold the bank's record journal into ``cards.json`` (readers of plain JSON find the
        whole bank there once a run stopped); a lock timeout leaves it to a later writer."""
        try:
            self.store.compact()
        except BankLockTimeout as exc:
            log.warning("memory v2: cards.json not compacted at close: %s", exc)

    def _drain(self, *, final: bool) -> None:
        assert self.librarian is not None
        try:
            self.librarian.drain(final=final)
        except CorruptBankError as exc:
            self._bank_error = str(exc)
            raise

    def _retire(self, outcomes: int | None) -> None:
        """A retirement sweep on the cadence (``outcomes``) or now (None: at close)."""
        assert self.evictor is not None
        due = outcomes is None or outcomes % self.evictor.settings.sweep_every == 0
        if due and self.stamper is not None:
            self.stamper.flush()  # the sweep judges the cards as written, stamps included
        try:
            if outcomes is None:
                self.evictor.run()
            else:
                self.evictor.maybe_run(outcomes)
        except (BankLockTimeout, LeaseLockTimeoutError) as exc:  # retry at the next sweep
            log.warning("memory v2 retirement sweep skipped: %s", exc)

    def _audit(self) -> None:
        w = self.settings.writer
        if not w.audit_duplicates or self.judge is None:
            return
        self.audit = audit_duplicates(
            self.store,
            self.judge,
            task_key=self.runtime.task_key if w.scope == "task" else None,
            k=w.neighbours_k,
            max_cards=w.audit_max_cards,
            seed=self.runtime.seed,
        )

    def _read_stats(self) -> dict[str, Any]:
        assert self.reader is not None and self.recorder is not None
        stamps: dict[str, Any] = {**self.stamper.stats()} if self.stamper is not None else {}
        if self.transfer.enabled:
            fit = self.reader.transfer_fit
            stamps["transfer"] = {
                "strata": fit.strata,
                "p_help": {k: round(v, 6) for k, v in sorted(fit.p_help.items())},
                "failure": fit.failure or None,
            }
        assessor = self.reader.assessor
        labels = {"applicability": assessor.summary()} if assessor is not None else {}
        return {**self.reader.stats(), **self.recorder.stats(), **stamps, **labels}

    def stats(self) -> dict[str, Any]:
        """What the memory did in this session (``memory_stats.json`` adds earlier sessions)."""
        lib = self.librarian
        c = lib.counters if lib is not None else None
        task_cards = {
            k: len(self.store.cards(kind=k, task_key=self.runtime.task_key)) for k in KINDS
        }
        return {
            "memory": "v2",
            "sessions": 1,
            "run_id": self.run_id,
            "task_key": self.runtime.task_key,
            "decide": ABSTAIN_REASON if self.reader is None else self._read_stats(),
            "cadence": self.settings.write.cadence,
            "authoring_enabled": self.settings.writer.authoring_enabled,
            "scope": self.settings.writer.scope,
            "outcomes_observed": self._observed,
            "outcomes_strictly_valid": self._eligible,
            "outcomes_ingested": c.ingested_insights if c else 0,
            "outcomes_pending": lib.pending if lib else 0,
            "exemplars_queued": c.queued_exemplars if c else 0,
            "exemplars_ingested": c.ingested_exemplars if c else 0,
            "ledger": {i: self.ledger.outcome_counts(i) for i in ("insight", "program", "card")},
            "failed_attempts": c.failed_attempts if c else 0,
            "exhausted_items": c.exhausted if c else 0,
            "fail_open": {
                "retrieval": c.fail_open_retrieval if c else 0,
                "judge": c.fail_open_judge if c else 0,
            },
            "judge_calls": c.judge_calls if c else 0,
            "ingest_seconds": round(c.ingest_seconds, 6) if c else 0.0,
            "bank": {
                "path": str(self.store.path),
                "generation": self.store.generation,
                "n_cards": len(self.store),
                "n_cards_this_task": task_cards,
                "reloads": self.store.stats.reloads,
                "writes": self.store.stats.writes,
                "error": self._bank_error,
            },
            "memory_llm": {
                "model": self.llm.name if self.llm is not None else None,
                "calls": self.usage.calls,
                "failures": self.usage.failures,
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
                "cost_usd": round(self.usage.cost_usd, 6),
            },
            "duplicate_audit": None if self.audit is None else self.audit.to_dict(),
            "evictor": {"mode": "none"} if self.evictor is None else self._evictor_stats(),
        }

    def _evictor_stats(self) -> dict[str, Any]:
        """The evictor's counts, and how many judgements its memo supplied (kept out of
        ``CausalEvictor.stats``, which is the same with and without the memo)."""
        assert self.evictor is not None
        return {**self.evictor.stats(), "judgements_reused": self.evictor.counts.reused}


def _earlier_stats(path: Path, run_id: str) -> dict[str, Any] | None:
    """The totals an earlier session of this run closed with (None for a new run)."""
    try:
        earlier = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # torn by hand: start the totals again, say so
        log.warning("%s: unreadable (%s); session totals start again", path, exc)
        return None
    return earlier if isinstance(earlier, dict) and earlier.get("run_id") == run_id else None
