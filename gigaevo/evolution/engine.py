"""The steady-state engine: dispatch mutations, run them in worker threads, commit the results.

Up to ``max_in_flight`` attempts call the model or are evaluated at once;
there is no generation barrier. Two dispatch modes (``EngineSettings.dispatch``;
what each guarantees is in docs/running.md, "Dispatch modes"):

- **strict**: results are committed in attempt order, and attempt
  ``a + max_in_flight`` is dispatched right after attempt ``a`` commits, so
  every dispatch sees the same archive state in every run: the history depends
  on the seed and ``max_in_flight``, never on ``max_workers`` or timing.
- **arrival**: results are committed as they arrive and a freed slot is
  refilled at once; ``dispatch_ahead`` more attempts are decided while the
  slots are busy. One slow answer never idles the other slots; the history
  depends on timing.

An optional ramp (``in_flight_ramp``, off by default) starts either mode with
one attempt outstanding and widens to the full number as mutants commit
(``EngineSettings.width``): the first choices wait on fewer unknown results.

In both modes, each dispatch (parent, inspirations, memory decision, seed, and the
scratchpad prefix its prompt carries) is persisted before the model is called
and replayed verbatim on resume. The memory's decisions and observations run
on their own thread (``MemoryLane``), beside the model calls. An exception in
one attempt becomes a failed attempt (``AttemptRunner``); only the errors in
``RUN_STOPPERS`` and Ctrl-C stop the run, which then stays resumable.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from gigaevo.evaluation.base import Evaluator
from gigaevo.evaluation.pool import SandboxError
from gigaevo.evolution.attempt import RUN_STOPPERS, AttemptRunner
from gigaevo.evolution.committer import Committer
from gigaevo.evolution.events import EventLog, Progress
from gigaevo.evolution.feedback import FeedbackSettings
from gigaevo.evolution.islands import IslandModel
from gigaevo.evolution.memory_lane import MemoryLane
from gigaevo.evolution.migration import RingMigration
from gigaevo.evolution.outbox import inline
from gigaevo.evolution.records import AttemptResult, Dispatch, EngineSettings
from gigaevo.evolution.selection import InspirationSampler, IslandScheduler, ParentSelector
from gigaevo.evolution.state import RunCounters
from gigaevo.evolution.stoppers import RunState, Stopper
from gigaevo.evolution.store import ProgramStore
from gigaevo.llm import abort_calls, wait_for_first
from gigaevo.llm.call_log import UsageTally
from gigaevo.llm.errors import LLMStopError
from gigaevo.memory.base import MemoryProvider, MutationContext
from gigaevo.mutation.base import Mutator
from gigaevo.problems.spec import Problem
from gigaevo.programs import clip_text
from gigaevo.scratchpad import RunOutcome, RunScratchpad
from gigaevo.util import derive_rng, derive_seed

log = logging.getLogger("gigaevo")

__all__ = ["AttemptResult", "EngineSettings", "EvolutionEngine"]


def stop_reason_of(exc: BaseException) -> str:
    """The ``summary.json`` stop reason of an exception that ended a session."""
    if isinstance(exc, LLMStopError):
        return exc.stop_reason
    if isinstance(exc, SandboxError):
        return "sandbox_failed"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "memory_failed"


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
        self.lane = MemoryLane(memory, store)
        self._pending_parent: dict[int, str] = {}  # attempt in flight -> its parent's id
        self.committer = Committer(
            problem=problem,
            islands=islands,
            migration=migration,
            observe=self.lane.observe_here if settings.dispatch == "strict" else self.lane.observe,
            store=store,
            events=events,
            checkpoint_dir=checkpoint_dir,
            seed=settings.seed,
            llm_usage=llm_usage,
            feedback=feedback,
        )
        self.runner = AttemptRunner(
            problem=problem,
            mutator=mutator,
            evaluator=evaluator,
            program=self.committer.program,
            known_digest=self.committer.known_digest,
            prefix=self._notes_prefix,
            claim_in_flight=settings.dispatch == "strict",
        )
        self._started = time.monotonic()
        self._wall_base = 0.0

    # -- public ---------------------------------------------------------------
    @property
    def counters(self) -> RunCounters:
        return self.committer.counters

    @property
    def mutator(self) -> Mutator:
        return self.runner.mutator

    @mutator.setter
    def mutator(self, mutator: Mutator) -> None:
        self.runner.mutator = mutator

    @property
    def evaluator(self) -> Evaluator:
        return self.runner.evaluator

    @evaluator.setter
    def evaluator(self, evaluator: Evaluator) -> None:
        self.runner.evaluator = evaluator

    def run(self) -> RunCounters:
        """Evolve until the budget or a stopper ends the run; returns the counters.

        Raises:
            RUN_STOPPERS (credentials refused, server unreachable, sandbox or
            memory unusable) and KeyboardInterrupt: the summary says so and
            the run stays resumable.
        """
        c = self.committer
        committed = self.store.count()
        resumed = committed > 0
        if resumed:
            c.restore()
            self._wall_base = c.counters.wall_seconds
            log.info("resumed: %d mutants already committed", c.counters.n_mutants)
        initial = self.problem.initial_programs
        if committed < len(initial):  # a fresh run, or one killed among its initial commits
            c.commit_initial(initial, self.evaluator, start=committed)
        # attempts dispatched before a kill are replayed verbatim (within the budget)
        pending = [
            d for d in self.store.pending_dispatches() if d.attempt < self.settings.max_mutants
        ]
        self.lane.expect_replays(d.attempt for d in pending)
        wait_for_first()  # the modules the memory's first decision needs, imported behind
        self._notes_start(resumed, pending)
        stop = self._stop_reason()
        if stop is None and not pending and c.counters.n_mutants >= self.settings.max_mutants:
            stop = "max_mutants"
        progress = Progress(
            self.settings.max_mutants, c.counters.n_mutants, enabled=self.show_progress
        )
        try:
            stop = self._loop(pending, stop, progress)
            self.lane.flush()  # the memory has seen every commit before the summary
        except (KeyboardInterrupt, *RUN_STOPPERS) as exc:
            try:
                self.lane.close()  # the memory sees every commit before the summary
            finally:
                self._count_lane_errors()
                reason = stop_reason_of(exc)
                # the last commit's events and observation, if cut short (the lane is idle;
                # after a fatal memory error the observations wait for the next resume)
                if self.lane.fatal is None:
                    c.outbox.replay(observe=inline(self.memory.observe))
                else:
                    c.outbox.replay(events_only=True)
                c.counters = c.committed_counters()
                c.events.emit("stop", reason=reason, n_mutants=c.counters.n_mutants)
                c.write_summary(self._wall(), reason, **self._session())
                self._notes_interrupted()
            raise
        finally:
            progress.close()
            self.lane.close()
        self._count_lane_errors()
        c.events.emit("stop", reason=stop, n_mutants=c.counters.n_mutants)
        c.write_summary(self._wall(), stop, **self._session())
        self._notes_finish(stop)
        return c.counters

    # -- loop -----------------------------------------------------------------
    def _loop(self, pending: list[Dispatch], stop: str | None, progress: Progress) -> str:
        c, s = self.committer, self.settings
        k = c.counters
        last = pending[-1].attempt + 1 if pending else 0
        next_attempt = max(k.next_attempt, k.n_mutants, last)
        outstanding: dict[Future[AttemptResult], int] = {}
        pool = ThreadPoolExecutor(s.max_in_flight, thread_name_prefix="mutant")
        try:
            for d in pending:
                self._pending_parent[d.attempt] = d.parent_id
                outstanding[pool.submit(self.runner.run, d)] = d.attempt
            while True:
                while stop is None and len(outstanding) < s.width(k.n_mutants):
                    if next_attempt >= s.max_mutants:
                        break
                    decided = self._dispatch(next_attempt, outstanding.values())
                    outstanding[pool.submit(self.runner.run, decided)] = next_attempt
                    next_attempt += 1
                if not outstanding:
                    break
                for future in self._ready(outstanding):
                    attempt = outstanding.pop(future)
                    self._commit(future.result(), attempt)
                    progress.update(k.best_fitness, c.valid_share())
                    if stop is None:
                        stop = self._stop_reason()
                self.lane.check()
                if stop is not None:
                    _cancel_unstarted(outstanding)  # arrival order: decided ahead, not started
        except BaseException as exc:  # dispatched attempts stay stored and replay on resume
            self._halt(exc, pool)
            raise
        pool.shutdown(wait=True)
        return stop or "max_mutants"

    def _halt(self, exc: BaseException, pool: ThreadPoolExecutor) -> None:
        """Stop the workers at once: no new model call, calls in flight aborted, then wait."""
        self.runner.stop(exc)
        self.lane.cancel_decisions()
        abort_calls()
        pool.shutdown(wait=True, cancel_futures=True)  # what is left: evaluations in flight

    def _ready(self, outstanding: dict[Future[AttemptResult], int]) -> list[Future[AttemptResult]]:
        """Results to commit now: the lowest attempt (strict), or all that have arrived."""
        if self.settings.dispatch == "strict":
            first = min(outstanding, key=outstanding.__getitem__)
            first.result()
            return [first]
        done, _ = wait(outstanding, return_when=FIRST_COMPLETED)
        return sorted(done, key=outstanding.__getitem__)

    def _commit(self, result: AttemptResult, attempt: int) -> None:
        # strict order: the memory thread decides beside the workers, but the store and
        # the memory see the same sequence as when the main thread called the memory
        # itself: every earlier dispatch is stored before this commit, and the commit's
        # observation is made here, inline (a kill then resumes to the uninterrupted
        # history, and checkpoints write every note the memory staged)
        if self.settings.dispatch == "strict":
            self.lane.flush()
        self._count_lane_errors()
        self._pending_parent.pop(attempt, None)
        self.committer.commit_attempt(result, self._wall())
        self._count_lane_errors()
        self._notes_commit(attempt)

    def _session(self) -> dict[str, object]:
        """How this session ran, for summary.json: the dispatch mode, the memory thread's time."""
        seconds = {k: round(v, 3) for k, v in self.lane.seconds.items()}
        return {"dispatch": self.settings.dispatch, "memory_seconds": seconds}

    def _count_lane_errors(self) -> None:
        for _ in range(self.lane.take_observe_errors()):
            self.counters.count_error("memory observe")

    def _stop_reason(self) -> str | None:
        k = self.counters
        state = RunState(
            n_mutants=k.n_mutants,
            wall_seconds=self._wall(),
            best_fitness=k.best_fitness,
            mutants_since_improvement=k.mutants_since_improvement,
            llm_cost_usd=(
                self.llm_usage.cost_usd() if self.llm_usage is not None else k.llm_cost_usd
            ),
        )
        return self.stopper.check(state)

    def _wall(self) -> float:
        return self._wall_base + (time.monotonic() - self._started)

    # -- dispatch (main thread; the decision on the memory lane) -----------------
    def _dispatch(self, attempt: int, in_flight: Iterable[int]) -> Future[Dispatch]:
        in_flight = tuple(in_flight)
        seed = self.settings.seed
        island = self.scheduler.island_for(attempt, self.islands.n_islands)
        skeleton = Dispatch(attempt, island, "", (), derive_seed(seed, "mutate", attempt))
        context = None
        try:
            skeleton, context = self._select(skeleton, in_flight)
        except Exception as exc:  # one attempt's selection: it fails, the run goes on
            log.warning("selection for attempt %d failed: %r", attempt, exc)
            best = self.islands.elites(island)[0]
            failure = clip_text(f"selection: {type(exc).__name__}: {exc}", 600)
            skeleton = Dispatch(
                attempt, island, best.program_id, (), skeleton.seed, failure=failure
            )
        self._pending_parent[attempt] = skeleton.parent_id
        if self.scratchpad is not None:  # recorded first: a replay must see the same prompt
            oldest = min([attempt, *in_flight])
            self.scratchpad.prefix_for_dispatch(attempt, oldest)
        return self.lane.decide(context, skeleton)

    def _select(
        self, skeleton: Dispatch, in_flight: Iterable[int] = ()
    ) -> tuple[Dispatch, MutationContext]:
        """The parent and inspirations of ``skeleton``'s attempt, and the memory's context.

        The selector is told how many children of each program are still in flight
        (in strict dispatch the same attempts every run, so the choice stays seeded).
        """
        attempt, island = skeleton.attempt, skeleton.island
        rng = derive_rng(self.settings.seed, "select", attempt)
        elites = self.islands.elites(island)
        parents = (self._pending_parent.get(a) for a in in_flight)
        pending = Counter(p for p in parents if p)
        parent = self.selector.select(elites, self.problem.metrics, rng, pending=pending)
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
        ids = tuple(e.program_id for e in others)
        feedback = self.committer.feedback.for_parent(parent_prog)
        d = Dispatch(attempt, island, parent.program_id, ids, skeleton.seed, feedback=feedback)
        return d, context

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


def _cancel_unstarted(outstanding: dict[Future[AttemptResult], int]) -> None:
    """Drop attempts not yet started (they stay dispatched and replay on resume)."""
    for future in [f for f in outstanding if f.cancel()]:
        del outstanding[future]
