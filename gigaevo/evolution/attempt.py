"""One attempt in a worker thread: wait for its dispatch, mutate, evaluate; contain failures.

An unexpected exception anywhere in the attempt (building the prompt, the
mutator, the evaluation) becomes a failed attempt: ``AttemptResult`` with
``error_stage`` and the reason in ``info.failure``, committed and counted like
any other, and the run goes on. Errors that say every later attempt would
fail too stop the run instead (``RUN_STOPPERS``): credentials refused or the
server unreachable, a sandbox that cannot run programs, an unusable memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace

from gigaevo.evaluation.base import Evaluator
from gigaevo.evaluation.pool import SandboxError
from gigaevo.evolution.records import AttemptResult, Dispatch
from gigaevo.llm.errors import LLMStopError
from gigaevo.memory.base import MemoryUsageError
from gigaevo.mutation.base import MutationOutcome, MutationRequest, Mutator
from gigaevo.problems.spec import Problem
from gigaevo.programs import MutationInfo, Program, clip_text, code_digest

# exceptions that end the run (resumable) rather than one attempt
RUN_STOPPERS = (LLMStopError, SandboxError, MemoryUsageError)
FAILURE_CHARS = 600


def failed_attempt(d: Dispatch, stage: str, reason: str, info: MutationInfo) -> AttemptResult:
    """``d`` as an attempt that failed at ``stage`` (``info`` keeps what is known of it)."""
    failure = clip_text(f"attempt error ({stage}): {reason}", FAILURE_CHARS)
    outcome = MutationOutcome(None, replace(info, failure=failure))
    return AttemptResult(d, outcome, None, None, error_stage=stage)


class AttemptRunner:
    """Runs attempts in worker threads (thread-safe).

    Args:
        problem, mutator, evaluator: the run's components.
        program: looks a committed program up by id (the committer's cache).
        known_digest: whether a committed, evaluated program has this code digest.
        prefix: the scratchpad prefix an attempt was dispatched with.
        claim_in_flight: skip evaluating a child whose code an earlier attempt still
            in flight produced too (strict order only: there that attempt commits
            first and the child is committed as its duplicate).
    """

    def __init__(
        self,
        *,
        problem: Problem,
        mutator: Mutator,
        evaluator: Evaluator,
        program: Callable[[str], Program],
        known_digest: Callable[[str], bool],
        prefix: Callable[[int], str],
        claim_in_flight: bool = True,
    ) -> None:
        self.problem = problem
        self.mutator = mutator
        self.evaluator = evaluator
        self._program = program
        self._known = known_digest
        self._prefix = prefix
        self.claim_in_flight = claim_in_flight
        self.stopped: BaseException | None = None  # the first run stopper met
        self._claims: dict[str, int] = {}
        self._claims_lock = threading.Lock()

    def run(self, dispatch: Dispatch | Future[Dispatch]) -> AttemptResult:
        """The result of one attempt; ``dispatch`` may still be waiting for its memory decision.

        Raises:
            RUN_STOPPERS: the run must stop; the attempt stays dispatched (once one
                attempt met such an error, every later one raises it before its call).
            Exception: the dispatch could not be decided or persisted (fatal).
        """
        d = dispatch if isinstance(dispatch, Dispatch) else dispatch.result()
        if self.stopped is not None:
            raise self.stopped
        if d.failure is not None:  # "<stage>: <reason>", decided before any model call
            stage, _, reason = d.failure.partition(": ")
            return self._failed(d, stage, reason)
        stage = "prompt"
        try:
            request = self._request(d)
            if self.stopped is not None:  # the run stopped while this attempt was starting
                raise self.stopped
            stage = "mutation"
            outcome = self.mutator.mutate(request)
            if outcome.child_code is None:
                return AttemptResult(d, outcome, None, None)
            digest = code_digest(outcome.child_code)
            if self._is_known_duplicate(digest, d.attempt):
                return AttemptResult(d, outcome, digest, None)
            stage = "evaluation"
            return AttemptResult(d, outcome, digest, self.evaluator.evaluate(outcome.child_code))
        except RUN_STOPPERS as exc:
            self.stop(exc)
            raise
        except Exception as exc:  # one attempt's failure: recorded, counted, the run goes on
            return self._failed(d, stage, f"{type(exc).__name__}: {exc}")

    def stop(self, exc: BaseException) -> None:
        """Make every attempt not yet calling the model raise ``exc`` (the first one kept)."""
        if self.stopped is None:
            self.stopped = exc

    def _request(self, d: Dispatch) -> MutationRequest:
        return MutationRequest(
            task_description=self.problem.description,
            metrics=self.problem.metrics,
            parent=self._program(d.parent_id),
            inspirations=tuple(self._program(i) for i in d.inspiration_ids),
            seed=d.seed,
            memory_slate=d.slate,
            scratchpad=self._prefix(d.attempt),
            feedback=d.feedback,
        )

    def _failed(self, d: Dispatch, stage: str, reason: str) -> AttemptResult:
        model = getattr(getattr(self.mutator, "llm", None), "name", type(self.mutator).__name__)
        info = MutationInfo(model=model, inspiration_ids=d.inspiration_ids)
        return failed_attempt(d, stage, reason, info)

    def _is_known_duplicate(self, digest: str, attempt: int) -> bool:
        """True when an earlier attempt or a committed program has this code.

        The commit step decides duplicates authoritatively; this only spares
        evaluations whose verdict is already certain. In arrival order an
        earlier attempt may commit later, so only committed code counts.
        """
        if self._known(digest):
            return True
        if not self.claim_in_flight:
            return False
        with self._claims_lock:
            claim = self._claims.get(digest)
            if claim is not None and claim < attempt:
                return True
            self._claims[digest] = attempt if claim is None else min(claim, attempt)
            return False
