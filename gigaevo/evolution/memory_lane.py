"""The memory lane: one thread that runs the memory's decisions and observations in order.

The engine never calls the memory provider itself. ``decide`` queues a
decision and returns a future of the attempt's ``Dispatch``, persisted in the
program store as soon as the decision is made (so before the model call);
``observe`` queues the terminal of a committed attempt. Both run on the
lane's single thread in the order they were queued, so the provider needs no
locking of its own. Meanwhile the main thread commits and dispatches and the
worker threads call the model: the memory never holds a free slot.

In strict order the engine waits for the lane before each commit and
observes inline (``observe_here``, the lane being idle), so the memory and
the store see exactly the sequence of a memory called on the main thread:
the history stays reproducible and a kill resumes to the uninterrupted one.
Only the decisions overlap the workers there.

Errors: a ``MemoryUsageError`` (an unreadable bank, say) is fatal: the lane
stops and ``check`` raises it on the main thread. Any other exception in a
decision makes that attempt a failed one (``Dispatch.failure``, recorded
before the model would have been called); in an observation it is logged and
counted (``take_observe_errors``) and the run goes on.

Resume: the memory censors a decision of the dead session as a lost outcome
when a later attempt is observed first (it assumes attempt order). In
arrival order a later attempt can commit before a replayed one, so the lane
holds back observations of attempts after the first replayed attempt not yet
observed, and sends them once it is: replayed attempts first (by attempt),
then the others in commit order.

Observations are queued in commit order and ``flush`` waits for all queued
work; the engine flushes before the final summary is written, at the end of
a run and when it stops early or on Ctrl-C (``close``), so a stopped run's
memory has seen every commit. Each observation carries a ``then`` callback
(the commit outbox's: drop the entry), called once the observation is done
(or failed and was counted); so a kill between a commit and its observation
loses nothing: the entry is still stored and resume delivers it. After a
fatal error the lane observes nothing more and calls no ``then``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from gigaevo.evolution.records import Dispatch
from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.base import MemoryProvider, MemoryUsageError, MutationContext, MutationResult
from gigaevo.programs import clip_text

log = logging.getLogger("gigaevo")

FAILURE_CHARS = 600
Then = Callable[[], None] | None  # run on the lane once an observation is done


class MemoryLane:
    """See the module docstring.

    Args:
        memory: the provider; only the lane's thread calls it.
        store: where each decided dispatch is persisted.
    """

    def __init__(self, memory: MemoryProvider, store: ProgramStore) -> None:
        self.memory = memory
        self.store = store
        self.fatal: MemoryUsageError | None = None
        self._observe_errors = 0
        self.seconds = {"decide": 0.0, "observe": 0.0}  # time the memory spent, this session
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="memory")
        self._replays: frozenset[int] = frozenset()
        self._replayed: set[int] = set()  # replays not yet observed
        self._held: list[tuple[MutationResult, Then]] = []
        self._decisions: list[Future[Dispatch]] = []
        self._lock = threading.Lock()

    # -- main thread ------------------------------------------------------------
    def expect_replays(self, attempts: Iterable[int]) -> None:
        """Attempts of a dead session that will be replayed (see Resume above)."""
        self._replays = frozenset(attempts)
        self._replayed = set(self._replays)

    def take_observe_errors(self) -> int:
        """Observations that raised since the last call."""
        with self._lock:
            n, self._observe_errors = self._observe_errors, 0
        return n

    def decide(self, context: MutationContext | None, skeleton: Dispatch) -> Future[Dispatch]:
        """Queue the decision of ``skeleton.attempt``; the future holds the persisted dispatch.

        A ``skeleton`` that already failed (``context`` None) is persisted as it is.
        """
        future = self._pool.submit(self._decide, context, skeleton)
        with self._lock:
            self._decisions = [f for f in self._decisions if not f.done()] + [future]
        return future

    def observe(self, result: MutationResult, then: Then = None) -> None:
        """Queue the terminal of a committed attempt (held back while a replay is ahead of it);
        ``then`` runs on the lane once it is observed."""
        self._replayed.discard(result.attempt)
        self._held.append((result, then))
        first = min(self._replayed, default=None)
        ready = [h for h in self._held if first is None or h[0].attempt < first]
        self._held = [h for h in self._held if first is not None and h[0].attempt >= first]
        replays = sorted((h for h in ready if h[0].attempt in self._replays), key=_attempt)
        for r, after in replays + [h for h in ready if h[0].attempt not in self._replays]:
            self._pool.submit(self._observe, r, after)

    def observe_here(self, result: MutationResult, then: Then = None) -> None:
        """Observe on the calling thread, now; only while the lane is idle (after ``flush``).

        Strict order observes inline, so that a kill right after a commit loses
        no more than it did when the engine called the memory itself.
        """
        self._replayed.discard(result.attempt)
        self._observe(result, then)

    def check(self) -> None:
        """Raise the lane's fatal error, if it met one."""
        if self.fatal is not None:
            raise self.fatal

    def flush(self) -> None:
        """Wait until everything queued so far has run; raise a fatal error."""
        self._pool.submit(_nothing).result()
        self.check()

    def cancel_decisions(self) -> None:
        """Drop decisions not yet started (the run is stopping: never dispatched)."""
        with self._lock:
            for f in self._decisions:
                f.cancel()

    def close(self) -> None:
        """Send held observations, wait for the queue and stop the thread (idempotent)."""
        held, self._held = self._held, []
        for r, then in held:
            self._pool.submit(self._observe, r, then)
        self._pool.shutdown(wait=True)

    # -- lane thread ------------------------------------------------------------
    def _decide(self, context: MutationContext | None, skeleton: Dispatch) -> Dispatch:
        self.check()
        if context is None or skeleton.failure is not None:
            self.store.add_dispatch(skeleton)
            return skeleton
        started = time.perf_counter()
        try:
            decision = self.memory.decide(context)
            d = replace(skeleton, slate=decision.slate, card_ids=decision.card_ids)
        except MemoryUsageError as exc:
            self.fatal = exc
            raise
        except Exception as exc:  # one attempt's decision: the attempt fails, the run goes on
            log.warning("memory decision of attempt %d failed: %r", skeleton.attempt, exc)
            failure = clip_text(f"memory decide: {type(exc).__name__}: {exc}", FAILURE_CHARS)
            d = replace(skeleton, failure=failure)
        finally:
            self.seconds["decide"] += time.perf_counter() - started
        self.store.add_dispatch(d)
        return d

    def _observe(self, result: MutationResult, then: Then = None) -> None:
        if self.fatal is not None:
            return
        started = time.perf_counter()
        try:
            self.memory.observe(result)
        except MemoryUsageError as exc:
            self.fatal = exc
            return
        except Exception as exc:  # one observation: counted in summary.json, the run goes on
            with self._lock:
                self._observe_errors += 1
            log.warning("memory observation of attempt %d failed: %r", result.attempt, exc)
        finally:
            self.seconds["observe"] += time.perf_counter() - started
        if then is not None:
            try:
                then()
            except Exception as exc:  # the outbox entry stays; resume delivers it again
                log.warning("after the observation of attempt %d: %r", result.attempt, exc)


def _nothing() -> None:
    return None


def _attempt(held: tuple[MutationResult, Then]) -> int:
    return held[0].attempt
