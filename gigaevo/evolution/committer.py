"""Commits: turn an attempt's result into a Program, archive it, persist, report.

The committer runs on the engine's main thread only. It owns the counters,
a bounded cache of programs by id (the most recently committed or read
``PROGRAM_CACHE`` programs; any other is read back from the store, so a long
run does not hold every program it made) and the set of evaluated code
digests, and it is
the single writer of programs to the store, ``best_program.py`` and
``summary.json``. Each commit hands the memory its ``MutationResult``
through ``observe`` (the engine's memory lane). A failure while turning a
result into a program (a metric missing, a cell that cannot be computed) is
contained: the attempt is committed as failed at stage ``bookkeeping``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gigaevo.evaluation.base import EvaluationResult, Evaluator
from gigaevo.evolution.archive_report import ArchiveReporter
from gigaevo.evolution.attempt import failed_attempt
from gigaevo.evolution.events import EventLog
from gigaevo.evolution.feedback import FeedbackBook, FeedbackSettings
from gigaevo.evolution.islands import IslandModel
from gigaevo.evolution.migration import RingMigration
from gigaevo.evolution.outbox import Observer, Outbox
from gigaevo.evolution.records import AttemptResult
from gigaevo.evolution.state import RunCounters
from gigaevo.evolution.store import ProgramStore
from gigaevo.llm.call_log import UsageTally
from gigaevo.memory.base import Decision, MutationResult, ground_citations
from gigaevo.problems.spec import Problem
from gigaevo.programs import MutationInfo, Program, ProgramStatus, code_digest, make_program_id
from gigaevo.util import atomic_write_json, atomic_write_text

log = logging.getLogger("gigaevo")

# stop reasons of a session that ended before its budget or stoppers (the run is resumable)
UNFINISHED = (
    None,
    "interrupted",
    "llm_authentication_failed",
    "llm_unreachable",
    "sandbox_failed",
    "memory_failed",
)


OUTPUT_TAIL_CHARS = 1000  # of a program's output kept in the store (for its children's prompts)
# programs kept in memory: the latest committed or read; a miss reads the store (the same
# program, so the history does not depend on it). Parents are archive elites, read often.
PROGRAM_CACHE = 4096


class InitialProgramError(ValueError):
    """An initial program of the problem does not produce a valid solution."""


class Committer:
    """Single writer of the run's state; see the module docstring."""

    def __init__(
        self,
        *,
        problem: Problem,
        islands: IslandModel,
        migration: RingMigration,
        observe: Observer,
        store: ProgramStore,
        events: EventLog,
        checkpoint_dir: Path,
        seed: int,
        llm_usage: UsageTally | None = None,
        feedback: FeedbackSettings | None = None,
    ) -> None:
        self.problem = problem
        self.llm_usage = llm_usage
        self.metrics = problem.metrics
        self.islands = islands
        self._islands_text = IslandsText()
        self.migration = migration
        self.observe = observe
        self.store = store
        self.events = events
        self.dir = Path(checkpoint_dir)
        self.seed = seed
        self.counters = RunCounters()
        self.n_initial = 0
        self._programs: OrderedDict[str, Program] = OrderedDict()  # least recent first
        self._digests: dict[str, str] = {}
        self._coordinates: dict[tuple[str, int], tuple[float, ...]] = {}
        self.outbox = Outbox(store, events, observe)
        self._lock = threading.Lock()
        self.feedback = FeedbackBook(feedback, is_live=islands.__contains__)
        self.reporter = ArchiveReporter(islands, events)

    # -- queries (thread-safe) -------------------------------------------------
    def program(self, program_id: str) -> Program:
        """The program with this id, from the cache or the store (``KeyError`` if unknown)."""
        with self._lock:
            prog = self._programs.get(program_id)
            if prog is not None:
                self._programs.move_to_end(program_id)
                return prog
        prog = self.store.get(program_id)
        with self._lock:
            self._keep(prog)
        return prog

    def known_digest(self, digest: str) -> bool:
        with self._lock:
            return digest in self._digests

    def coordinates(self, program: Program) -> tuple[float, ...]:
        """Behaviour coordinates of ``program`` (cached: parents are chosen many times)."""
        key = (program.id, self.islands.space.version)  # an adaptive grid re-drawn: recompute
        cached = self._coordinates.get(key)
        if cached is None:
            if self._coordinates and next(iter(self._coordinates))[1] != key[1]:
                self._coordinates.clear()
            cached = tuple(self.islands.space.coordinates(program.code, program.metrics))
            self._coordinates[key] = cached
        return cached

    def valid_share(self) -> float:
        k = self.counters
        return k.n_valid / k.n_mutants if k.n_mutants else 1.0

    # -- start / resume ----------------------------------------------------------
    def commit_initial(self, sources: Sequence[str], evaluator: Evaluator, start: int = 0) -> None:
        """Evaluate and archive the problem's initial programs from ``start`` on (a fresh run,
        or one killed among its initial commits: ``start`` of them are committed).

        Raises:
            InitialProgramError: an initial program is invalid; nothing is stored.
        """
        results = [evaluator.evaluate(code) for code in sources]
        for i, res in enumerate(results):
            if not res.valid:
                raise InitialProgramError(
                    f"{self.problem.directory}: initial program {i} is invalid: {res.reason}"
                )
        self.store.set_meta("n_initial", len(sources))
        self.n_initial = len(sources)
        for i, (code, res) in enumerate(zip(sources, results, strict=True)):
            if i >= start:
                self._commit_initial_one(i, code, res)

    def _commit_initial_one(self, ordinal: int, code: str, res: EvaluationResult) -> None:
        fitness = float(res.metrics[self.metrics.primary])
        values = self.islands.space.values(code, res.metrics)
        pid = make_program_id(self.seed, ordinal, code)
        for island in range(self.islands.n_islands):
            self.islands.add(island, pid, fitness, values=values)
        cell = self.islands.space.cell_of(values)
        prog = Program(
            id=pid,
            code=code,
            ordinal=ordinal,
            cell=cell,
            metrics=dict(res.metrics),
            fitness=fitness,
            valid=True,
            status=ProgramStatus.INITIAL,
            eval_seconds=res.run_seconds,
            output_tail=res.stdout_tail[-OUTPUT_TAIL_CHARS:],
            feedback=res.feedback,
        )
        k = self.counters
        if ordinal == 0 or self.metrics.better(fitness, k.best_fitness):
            k.best_id, k.best_fitness = pid, fitness
            self._write_best(prog)
        if ordinal == 0:
            k.initial_fitness = fitness
        self._remember(prog, code_digest(code))
        with self.events.collecting() as batch:  # written with the commit's outbox entry
            self.reporter.emit_rebins()
            self.events.emit("initial", program_id=pid, fitness=fitness, cell=list(cell))
        marker = {"event": "initial", "program_id": pid}
        entry = self.outbox.entry(-1 - ordinal, batch, marker)
        self.store.commit(prog, code_digest(code), attempt=None, state=self._state(), outbox=entry)
        self.outbox.deliver(entry)

    def restore(self) -> None:
        """Reload counters, archives, programs and digests from the store."""
        state = self.store.get_meta("state")
        self.n_initial = int(self.store.get_meta("n_initial") or 0)
        self.counters = RunCounters.from_dict(state["counters"])
        self.islands.load_dict(state["islands"], values_of=self._values_of)
        self._coordinates.clear()  # keyed by the grid's version, which the load restores
        self.feedback.restore(self._kept(self.store.iter_programs()))
        self._digests = self.store.digests()
        replayed = self.outbox.replay()  # effects of commits a kill cut short, first
        if replayed:
            log.info("resume: events and memory observation of %s delivered", replayed)
        self.events.emit("resume", n_mutants=self.counters.n_mutants)

    def committed_counters(self) -> RunCounters:
        """The counters as the store holds them (an interrupted commit counts for nothing)."""
        state = self.store.get_meta("state")
        return self.counters if state is None else RunCounters.from_dict(state["counters"])

    # -- commit one attempt ------------------------------------------------------
    def commit_attempt(self, result: AttemptResult, wall_seconds: float) -> Program:
        """Turn ``result`` into a program, archive it and persist everything in one commit."""
        d = result.dispatch
        parent = self.program(d.parent_id)
        try:
            prog = self._build_program(result, parent)
        except Exception as exc:  # this attempt's bookkeeping: it fails, the run goes on
            log.warning("attempt %d: bookkeeping failed: %r", d.attempt, exc)
            reason = f"{type(exc).__name__}: {exc}"
            result = failed_attempt(d, "bookkeeping", reason, result.outcome.info)
            prog = self._build_program(result, parent)
        with self.events.collecting() as batch:  # written with the commit's outbox entry
            prog, add = self._account(result, prog)
            self.events.emit(
                "mutant",
                attempt=d.attempt,
                program_id=prog.id,
                parent_id=parent.id,
                island=d.island,
                status=str(prog.status),
                fitness=prog.fitness,
                reason=prog.invalid_reason,
                tactic=prog.mutation.tactic if prog.mutation else "",
            )
        k = self.counters
        k.wall_seconds = wall_seconds
        marker = {"event": "mutant", "attempt": d.attempt}
        memory = _memory_result(result, prog, parent, add, self.metrics, self.problem)
        entry = self.outbox.entry(d.attempt, batch, marker, memory)
        state = self._state()
        self.store.commit(prog, result.digest or "", attempt=d.attempt, state=state, outbox=entry)
        self.outbox.deliver(entry)
        if k.n_mutants % 10 == 0:
            self.write_summary(wall_seconds, None)
        return prog

    def _account(self, result: AttemptResult, prog: Program) -> tuple[Program, Any]:
        """Count ``prog`` and offer it to its island's archive; (its final record, the add)."""
        d = result.dispatch
        k = self.counters
        k.n_mutants += 1
        k.mutants_since_improvement += 1
        k.next_attempt = max(k.next_attempt, d.attempt + 1)
        if result.error_stage is not None:
            k.count_error(result.error_stage)
        self._count_llm(result)
        add = None
        if prog.status is ProgramStatus.DUPLICATE:
            k.n_duplicate += 1
        elif not prog.valid:
            k.n_invalid += 1
            k.count_reason(prog.invalid_reason or "unknown")
            if prog.mutation is not None and prog.mutation.failure is not None:
                k.n_failed_mutations += 1
        else:
            k.n_valid += 1
            add = self.islands.add(d.island, prog.id, prog.fitness, values=self._values_of(prog))
            accepted = add.status != "rejected"
            if accepted:
                k.n_accepted += 1
            prog = replace(
                prog,
                status=ProgramStatus.ACCEPTED if accepted else ProgramStatus.REJECTED,
                cell=add.cell,
            )
            self._note_archive(prog, add)
            self._maybe_new_best(prog)
        k.count_cascade(result.evaluation.cascade if result.evaluation else None)
        self.feedback.observe(prog)
        self._remember(prog, result.digest)
        self._migrate_if_due()
        self.reporter.after_commit(k.n_mutants)
        return prog, add

    def _build_program(self, result: AttemptResult, parent: Program) -> Program:
        d, out, ev = result.dispatch, result.outcome, result.evaluation
        ordinal = self.n_initial + d.attempt
        code = out.child_code or ""
        info = out.info
        if info.inspiration_ids != d.inspiration_ids:
            info = _replace_info(info, inspiration_ids=d.inspiration_ids)
        pid = make_program_id(self.seed, ordinal, code or (info.raw_answer or ""))
        base: dict[str, Any] = {
            "id": pid,
            "code": code,
            "ordinal": ordinal,
            "parent_ids": (parent.id,),
            "generation": parent.generation + 1,
            "island": d.island,
            "fitness": self.metrics.sentinel,
            "mutation": info,
        }
        if out.child_code is None:
            reason = f"mutation failed: {info.failure}"
            return Program(**base, valid=False, invalid_reason=reason, status=ProgramStatus.INVALID)
        assert result.digest is not None
        original = self._digests.get(result.digest)
        if original is not None:
            return Program(**base, status=ProgramStatus.DUPLICATE, duplicate_of=original)
        if ev is None:  # claimed as a duplicate of an attempt that never produced it
            raise RuntimeError(f"attempt {d.attempt}: evaluation skipped without an original")
        base["output_tail"] = ev.stdout_tail[-OUTPUT_TAIL_CHARS:]
        base["feedback"] = ev.feedback
        if not ev.valid:
            return Program(
                **base,
                valid=False,
                invalid_reason=ev.reason or "invalid",
                status=ProgramStatus.INVALID,
                eval_seconds=ev.run_seconds,
            )
        fitness = float(ev.metrics[self.metrics.primary])
        base["fitness"] = fitness
        return Program(
            **base,
            cell=tuple(self.islands.space.cell(code, ev.metrics)),
            metrics=dict(ev.metrics),
            valid=True,
            status=ProgramStatus.REJECTED,
            eval_seconds=ev.run_seconds,
        )

    # -- helpers -----------------------------------------------------------------
    def _values_of(self, prog: Program | str) -> tuple[float, ...]:
        """Descriptor values of a program (or of the program with this id)."""
        if isinstance(prog, str):
            prog = self.program(prog)
        return self.islands.space.values(prog.code, prog.metrics)

    def _keep(self, prog: Program) -> None:
        self._programs[prog.id] = prog
        self._programs.move_to_end(prog.id)
        while len(self._programs) > PROGRAM_CACHE:
            self._programs.popitem(last=False)

    def _kept(self, programs: Iterable[Program]) -> Iterator[Program]:
        """``programs``, each kept in the cache as it passes (the latest stay)."""
        for prog in programs:
            with self._lock:
                self._keep(prog)
            yield prog

    def _remember(self, prog: Program, digest: str | None) -> None:
        with self._lock:
            self._keep(prog)
            if digest and prog.status is not ProgramStatus.DUPLICATE:
                self._digests.setdefault(digest, prog.id)

    def _count_llm(self, result: AttemptResult) -> None:
        k, llm = self.counters, result.outcome.llm
        if llm is None:
            return
        k.llm_calls += 1
        k.prompt_tokens += llm.prompt_tokens
        k.completion_tokens += llm.completion_tokens
        k.llm_cost_usd += llm.cost_usd or 0.0

    def _note_archive(self, prog: Program, add: Any) -> None:
        if add.status == "rejected":
            return
        self.events.emit(
            "archive",
            program_id=prog.id,
            island=prog.island,
            cell=list(prog.cell or ()),
            status=add.status,
            replaced=add.replaced,
            evicted=list(add.evicted),
        )

    def _maybe_new_best(self, prog: Program) -> None:
        k = self.counters
        if not self.metrics.better(prog.fitness, k.best_fitness):
            return
        k.best_id, k.best_fitness = prog.id, prog.fitness
        k.mutants_since_improvement = 0
        self._write_best(prog)
        self.events.emit("new_best", program_id=prog.id, fitness=prog.fitness)

    def _migrate_if_due(self) -> None:
        if not self.migration.due(self.counters.n_mutants):
            return
        for m in self.migration.plan(self.islands):
            self.islands.add(m.to_island, m.program_id, m.fitness, m.cell, values=m.values or None)
            self.events.emit(
                "migration",
                program_id=m.program_id,
                from_island=m.from_island,
                to_island=m.to_island,
            )

    def _state(self) -> str:
        """The run state checkpointed with a commit: ``{"counters", "islands"}`` as JSON
        (keys sorted), the islands' text re-encoded only for the islands that changed."""
        counters = json.dumps(self.counters.to_dict(), sort_keys=True)
        return f'{{"counters": {counters}, "islands": {self._islands_text(self.islands)}}}'

    def _write_best(self, prog: Program) -> None:
        header = (
            f"# best program of run in {self.dir}\n"
            f"# id {prog.id}, {self.metrics.primary} = {prog.fitness!r}\n"
        )
        atomic_write_text(self.dir / "best_program.py", header + prog.code)

    def write_summary(self, wall_seconds: float, stop_reason: str | None, **extra: Any) -> None:
        """Write ``summary.json`` (``extra``: further fields of this session)."""
        k = self.counters
        summary = {
            "problem": self.problem.name,
            "primary_metric": self.metrics.primary,
            "higher_is_better": self.metrics.higher_is_better,
            "best_fitness": k.best_fitness,
            "best_program_id": k.best_id,
            "initial_fitness": k.initial_fitness,
            "n_mutants": k.n_mutants,
            "n_valid": k.n_valid,
            "n_invalid": k.n_invalid,
            "n_duplicate": k.n_duplicate,
            "n_failed_mutations": k.n_failed_mutations,
            "n_accepted": k.n_accepted,
            "invalid_reasons": dict(k.invalid_reasons),
            "llm_calls": k.llm_calls,
            "llm_prompt_tokens": k.prompt_tokens,
            "llm_completion_tokens": k.completion_tokens,
            "llm_cost_usd": k.llm_cost_usd,
            # every call in llm_calls.jsonl (all roles, failed and uncommitted ones too)
            "llm_usage": None if self.llm_usage is None else self.llm_usage.totals().to_dict(),
            "wall_seconds": round(wall_seconds, 3),
            "seed": self.seed,
            "stop_reason": stop_reason,
            "n_attempt_errors": sum(k.attempt_errors.values()),
            "attempt_errors": dict(k.attempt_errors),
            "finished": stop_reason not in UNFINISHED,
            **self.reporter.summary(k),
            **extra,
        }
        # rewritten from the store's counters at every checkpoint and session end; atomic,
        # not fsynced: a power loss that brings back an older or blank copy (read as
        # missing) only makes a resume run the engine, which stops at once on the restored
        # budget and rewrites it
        atomic_write_json(self.dir / "summary.json", summary, durable=False, synced=False)


def _memory_result(
    result: AttemptResult, prog: Program, parent: Program, add: Any, metrics: Any, problem: Problem
) -> MutationResult:
    """The terminal of a committed attempt as the memory sees it."""
    d, info = result.dispatch, result.outcome.info
    decision = Decision(attempt=d.attempt, slate=d.slate, card_ids=d.card_ids)
    gain = None
    if prog.valid and math.isfinite(prog.fitness):
        gain = metrics.normalised_gain(parent.fitness, prog.fitness)
    return MutationResult(
        attempt=d.attempt,
        child_id=prog.id,
        parent_id=parent.id,
        status=str(prog.status),
        valid=prog.valid,
        parent_fitness=parent.fitness,
        child_fitness=prog.fitness,
        normalised_gain=gain,
        cited_card_ids=ground_citations(info.card_ids_used, decision),
        accepted=add is not None and add.status != "rejected",
        island=d.island,
        parent_cell=tuple(parent.cell or ()),
        child_cell=prog.cell,
        archive_status=None if add is None else str(add.status),
        invalid_reason=prog.invalid_reason,
        parent_code=parent.code,
        child_code=prog.code,
        change_report=info.change_report,
        explanation=info.explanation,
        child_metrics=dict(prog.metrics),
        **problem.noise.result_fields(prog.metrics),  # se, measurement (issue 20)
    )


def _replace_info(info: MutationInfo, **changes: Any) -> MutationInfo:
    return replace(info, **changes)


class IslandsText:
    """``json.dumps(islands.to_dict(), sort_keys=True)``, the same text, made cheaply.

    The run state is checkpointed at every commit, and encoding every island's
    archive each time cost in proportion to the archive (about 30 ms a commit
    at 1,100 elites). Each island's text is kept with its ``versions()``
    counter and encoded again only when that moved; most commits change no
    island or one. A resume reads the same text, so it restores exactly.
    """

    def __init__(self) -> None:
        self._model: IslandModel | None = None
        self._texts: list[tuple[int, str]] = []

    def __call__(self, model: IslandModel) -> str:
        versions = model.versions()
        if model is not self._model:
            self._model, self._texts = model, [(-1, "")] * len(versions)
        parts = []
        for i, version in enumerate(versions):
            seen, text = self._texts[i]
            if seen != version:
                text = json.dumps(model.archive(i).to_dict(), sort_keys=True)
                self._texts[i] = (version, text)
            parts.append(text)
        islands = f"[{', '.join(parts)}]"
        # the rest of the state from to_dict itself, laid out as json.dumps(sort_keys=True)
        fields = (
            f"{json.dumps(key)}: "
            f"{islands if key == 'islands' else json.dumps(value, sort_keys=True)}"
            for key, value in sorted(model.to_dict(archives=False).items())
        )
        return f"{{{', '.join(fields)}}}"
