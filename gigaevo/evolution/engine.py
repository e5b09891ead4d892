"""The steady-state engine: dispatch mutations, evaluate in parallel, commit in order.

Up to ``max_in_flight`` mutation attempts are outstanding at once; there is no
generation barrier. Results are committed strictly in attempt order, and
attempt ``a + max_in_flight`` is dispatched right after attempt ``a`` commits,
so every dispatch sees the same archive state in every run: the history
depends on the seed and ``max_in_flight``, never on ``max_workers`` or timing.
Each dispatch (parent, inspirations, memory decision, seed, and the
scratchpad prefix its prompt carries) is persisted before the LLM is called
and replayed verbatim on resume.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gigaevo.evaluation.base import EvaluationResult, Evaluator
from gigaevo.evolution.committer import AUTH_FAILED, Committer
from gigaevo.evolution.events import EventLog, Progress
from gigaevo.evolution.feedback import FeedbackSettings
from gigaevo.evolution.islands import IslandModel
from gigaevo.evolution.migration import RingMigration
from gigaevo.evolution.selection import InspirationSampler, IslandScheduler, ParentSelector
from gigaevo.evolution.state import RunCounters
from gigaevo.evolution.stoppers import RunState, Stopper
from gigaevo.evolution.store import Dispatch, ProgramStore
from gigaevo.llm.call_log import UsageTally
from gigaevo.llm.errors import LLMAuthenticationError
from gigaevo.memory.base import MemoryProvider, MutationContext
from gigaevo.mutation.base import MutationOutcome, MutationRequest, Mutator
from gigaevo.problems.spec import Problem
from gigaevo.programs import Program, code_digest
from gigaevo.scratchpad import RunOutcome, RunScratchpad
from gigaevo.util import derive_rng, derive_seed

log = logging.getLogger("gigaevo")


@dataclass(frozen=True)
class AttemptResult:
    """What a worker thread hands back for one attempt."""

    dispatch: Dispatch
    outcome: MutationOutcome
    digest: str | None
    evaluation: EvaluationResult | None  # None: failed mutation or skipped duplicate


@dataclass(frozen=True)
class EngineSettings:
    """Plain knobs of the loop."""

    seed: int
    max_mutants: int
    max_in_flight: int = 4
    task_key: str = ""


class EvolutionEngine:
    """Runs one evolutionary search over a problem until a stopper fires.

    Construct it with built components; ``run`` returns the counters. The
    store may already hold a run (resume): initial programs are then not
    re-added and pending dispatches are replayed first. ``llm_usage`` (the
    tally of the run's LLM call log) feeds the stoppers' ``llm_cost_usd``
    and the summary.
    """

    def __init__(
        self,
        *,
        problem: Problem,
        mutator: Mutator,
        evaluator: Evaluator,
        memory: MemoryProvider,
        islands: IslandModel,
        selector: ParentSelector,
        inspirations: InspirationSampler,
        scheduler: IslandScheduler,
        migration: RingMigration,
        stopper: Stopper,
        store: ProgramStore,
        events: EventLog,
        checkpoint_dir: Path,
        settings: EngineSettings,
        show_progress: bool = True,
        llm_usage: UsageTally | None = None,
        scratchpad: RunScratchpad | None = None,
        feedback: FeedbackSettings | None = None,
    ) -> None:
        self.problem = problem
        self.mutator = mutator
        self.evaluator = evaluator
        self.memory = memory
        self.islands = islands
        self.selector = selector
        self.inspirations = inspirations
        self.scheduler = scheduler
        self.stopper = stopper
        self.store = store
        self.settings = settings
        self.show_progress = show_progress
        self.llm_usage = llm_usage
        self.scratchpad = scratchpad  # the run's notes: read once at build, written at checkpoints
        if scratchpad is not None:
            scratchpad.attach_prefix_log(store)
        self.committer = Committer(
            problem=problem,
            islands=islands,
            migration=migration,
            memory=memory,
            store=store,
            events=events,
            checkpoint_dir=checkpoint_dir,
            seed=settings.seed,
            llm_usage=llm_usage,
            feedback=feedback,
        )
        self._digest_claims: dict[str, int] = {}
        self._claims_lock = threading.Lock()
        self._started = time.monotonic()
        self._wall_base = 0.0

    # -- public ---------------------------------------------------------------
    @property
    def counters(self) -> RunCounters:
        return self.committer.counters

    def run(self) -> RunCounters:
        """Evolve until the budget or a stopper ends the run; returns the counters.

        Raises:
            LLMAuthenticationError: the model refused the credentials; the
                summary says so and the run stays resumable.
        """
        c = self.committer
        resumed = self.store.count() > 0
        if not resumed:
            c.commit_initial(self.problem.initial_programs, self.evaluator)
        else:
            c.restore()
            self._wall_base = c.counters.wall_seconds
            log.info("resumed: %d mutants already committed", c.counters.n_mutants)
        # attempts dispatched before a kill are replayed verbatim (within the budget)
        pending = [
            d for d in self.store.pending_dispatches() if d.attempt < self.settings.max_mutants
        ]
        self._notes_start(resumed, pending)
        stop = self._stop_reason()
        if stop is None and not pending and c.counters.n_mutants >= self.settings.max_mutants:
            stop = "max_mutants"
        progress = Progress(
            self.settings.max_mutants, c.counters.n_mutants, enabled=self.show_progress
        )
        try:
            stop = self._loop(pending, stop, progress)
        except (KeyboardInterrupt, LLMAuthenticationError) as exc:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else AUTH_FAILED
            c.events.emit("stop", reason=reason, n_mutants=c.counters.n_mutants)
            c.write_summary(self._wall(), reason)
            self._notes_interrupted()
            raise
        finally:
            progress.close()
        c.events.emit("stop", reason=stop, n_mutants=c.counters.n_mutants)
        c.write_summary(self._wall(), stop)
        self._notes_finish(stop)
        return c.counters

    # -- loop -----------------------------------------------------------------
    def _loop(self, pending: list[Dispatch], stop: str | None, progress: Progress) -> str:
        c = self.committer
        next_attempt = pending[-1].attempt + 1 if pending else c.counters.n_mutants
        futures: dict[int, Future[AttemptResult]] = {}
        pool = ThreadPoolExecutor(self.settings.max_in_flight, thread_name_prefix="mutant")
        interrupted = False
        try:
            for d in pending:
                futures[d.attempt] = pool.submit(self._attempt, d)
            while stop is None and len(futures) < self.settings.max_in_flight:
                if next_attempt >= self.settings.max_mutants:
                    break
                futures[next_attempt] = pool.submit(self._attempt, self._dispatch(next_attempt))
                next_attempt += 1
            while futures:
                attempt = min(futures)
                result = futures.pop(attempt).result()
                c.commit_attempt(result, self._wall())
                self._notes_commit(attempt)
                progress.update(c.counters.best_fitness, c.valid_share())
                if stop is None:
                    stop = self._stop_reason()
                if stop is None and next_attempt < self.settings.max_mutants:
                    futures[next_attempt] = pool.submit(self._attempt, self._dispatch(next_attempt))
                    next_attempt += 1
        except KeyboardInterrupt:
            interrupted = True  # dispatched attempts stay in the store and replay on resume
            raise
        finally:
            pool.shutdown(wait=not interrupted, cancel_futures=True)
        if stop is None:
            stop = "max_mutants"
        return stop

    def _stop_reason(self) -> str | None:
        k = self.counters
        state = RunState(
            n_mutants=k.n_mutants,
            wall_seconds=self._wall(),
            best_fitness=k.best_fitness,
            mutants_since_improvement=k.mutants_since_improvement,
            llm_cost_usd=(
                self.llm_usage.totals().cost_usd if self.llm_usage is not None else k.llm_cost_usd
            ),
        )
        return self.stopper.check(state)

    def _wall(self) -> float:
        return self._wall_base + (time.monotonic() - self._started)

    # -- scratchpad (main thread, except _notes_prefix) -------------------------
    def _notes_start(self, resumed: bool, pending: list[Dispatch]) -> None:
        if self.scratchpad is None:
            return
        k = self.counters
        self.scratchpad.start_session(
            resumed=resumed,
            n_mutants=k.n_mutants,
            best_id=k.best_id,
            best_fitness=k.best_fitness,
            pending={d.attempt: d.parent_id for d in pending},
        )

    def _notes_commit(self, attempt: int) -> None:
        if self.scratchpad is not None:
            k = self.counters
            self.scratchpad.after_commit(attempt, k.n_mutants, k.best_id, k.best_fitness)

    def _notes_finish(self, stop: str) -> None:
        if self.scratchpad is None:
            return
        k = self.counters
        outcome = RunOutcome(k.n_mutants, k.n_valid, k.n_invalid, k.n_duplicate, stop)
        self.scratchpad.finish(outcome, k.best_id, k.best_fitness)

    def _notes_interrupted(self) -> None:
        if self.scratchpad is not None:
            pending = {d.attempt: d.parent_id for d in self.store.pending_dispatches()}
            self.scratchpad.interrupted(self.counters.n_mutants, pending)

    def _notes_prefix(self, attempt: int) -> str:
        """The scratchpad prefix of ``attempt``'s prompt (the one it was dispatched with)."""
        return "" if self.scratchpad is None else self.scratchpad.prefix_for_attempt(attempt)

    # -- dispatch (main thread) ------------------------------------------------
    def _dispatch(self, attempt: int) -> Dispatch:
        seed = self.settings.seed
        rng = derive_rng(seed, "select", attempt)
        island = self.scheduler.island_for(attempt, self.islands.n_islands)
        elites = self.islands.elites(island)
        parent = self.selector.select(elites, self.problem.metrics, rng)
        others = self.inspirations.sample(elites, parent, self.problem.metrics, rng)
        parent_prog = self.committer.program(parent.program_id)
        context = MutationContext(
            task_key=self.settings.task_key,
            attempt=attempt,
            parent_id=parent.program_id,
            parent_fitness=parent.fitness,
            island=island,
            cell=tuple(parent.cell),
            coordinates=self.committer.coordinates(parent_prog),
            progress=min(1.0, attempt / max(1, self.settings.max_mutants)),
            parent_code=parent_prog.code,
        )
        decision = self.memory.decide(context)
        d = Dispatch(
            attempt=attempt,
            island=island,
            parent_id=parent.program_id,
            inspiration_ids=tuple(e.program_id for e in others),
            seed=derive_seed(seed, "mutate", attempt),
            slate=decision.slate,
            card_ids=decision.card_ids,
            feedback=self.committer.feedback.for_parent(parent_prog),
        )
        if self.scratchpad is not None:  # recorded first: a replay must see the same prompt
            self.scratchpad.prefix_for_dispatch(attempt, self.counters.n_mutants)
        self.store.add_dispatch(d)
        return d

    # -- attempt (worker thread) ----------------------------------------------
    def _attempt(self, d: Dispatch) -> AttemptResult:
        parent = self.committer.program(d.parent_id)
        insp: Sequence[Program] = [self.committer.program(i) for i in d.inspiration_ids]
        request = MutationRequest(
            task_description=self.problem.description,
            metrics=self.problem.metrics,
            parent=parent,
            inspirations=tuple(insp),
            seed=d.seed,
            memory_slate=d.slate,
            scratchpad=self._notes_prefix(d.attempt),
            feedback=d.feedback,
        )
        outcome = self.mutator.mutate(request)
        if outcome.child_code is None:
            return AttemptResult(d, outcome, None, None)
        digest = code_digest(outcome.child_code)
        if self._is_known_duplicate(digest, d.attempt):
            return AttemptResult(d, outcome, digest, None)
        return AttemptResult(d, outcome, digest, self.evaluator.evaluate(outcome.child_code))

    def _is_known_duplicate(self, digest: str, attempt: int) -> bool:
        """True when an earlier attempt or committed program has this code.

        The commit step decides duplicates authoritatively (in order); this
        only spares evaluations whose verdict is already certain.
        """
        if self.committer.known_digest(digest):
            return True
        with self._claims_lock:
            claim = self._digest_claims.get(digest)
            if claim is not None and claim < attempt:
                return True
            self._digest_claims[digest] = attempt if claim is None else min(claim, attempt)
            return False
