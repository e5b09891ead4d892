"""``SandboxEvaluator``: a pool of warm workers that fork one confined child per program."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gigaevo.evaluation.base import EvaluationResult
from gigaevo.evaluation.isolation import set_non_dumpable
from gigaevo.evaluation.pool import SandboxError, WorkerLostError, WorkerProcess, worker_environment

if TYPE_CHECKING:  # only for annotations: keeps worker start-up free of the problems layer
    from gigaevo.problems.spec import Problem

STARTUP_TIMEOUT_S = 120.0
TAIL_BYTES = 2048
MEMORY_HEADROOM_BYTES = 64 * 2**20
CLOSED_DURING_RUN = "the sandbox evaluator was closed during the evaluation"


def _shutdown(workers: list[WorkerProcess], temp_root: str) -> None:
    """Kill every worker, close its pipes and remove the scratch directory.

    Runs at garbage collection or interpreter exit, when no evaluation can be in flight.
    """
    for worker in workers:
        worker.discard()
    shutil.rmtree(temp_root, ignore_errors=True)


class SandboxEvaluator:
    """Runs untrusted programs for one problem in confined, forked child processes.

    ``max_workers`` warm worker processes (scrubbed environment, ``preload_modules``
    and the validator already imported) each fork one child per program. The
    child gets its own session, a fresh temporary working directory, stdin on
    ``/dev/null``, ``RLIMIT_AS``/``RLIMIT_CPU``/``RLIMIT_FSIZE`` caps, no Linux
    capabilities at all (and ``no_new_privs``), and a Python-level block on
    process creation; its process group is SIGKILLed when it finishes or times
    out, and the worker (a child subreaper, or the init of its PID namespace)
    kills any escaped descendants. The worker, not the child, validates the
    output.

    Credentials: worker environments are scrubbed of every variable whose name
    contains KEY, TOKEN, SECRET or PASSWORD, but the engine's own initial
    environment block (``/proc/<pid>/environ``) keeps them for the life of the
    process, whatever is later deleted from ``os.environ``. So the constructor
    **marks the calling process non-dumpable** (``prctl(PR_SET_DUMPABLE, 0)``,
    for the rest of its life): it writes no core dumps, and reading its
    ``/proc/<pid>/environ`` or ``mem`` or attaching a debugger (gdb, py-spy)
    needs ``CAP_SYS_PTRACE``, which children never have. Workers mark
    themselves the same way. With ``pid_namespace`` (the default) each worker
    is also the init of its own PID and mount namespace with a private
    ``/proc``, so a child cannot even name the engine, another worker or any
    process outside: no signals, no ptrace, no ``/proc/<pid>`` (see
    ``gigaevo.evaluation.isolation``). That needs root or unprivileged user
    namespaces; ``uses_pid_namespaces`` tells whether the workers got one.

    Thread-safe: ``evaluate`` blocks until a worker is free, so at most
    ``max_workers`` programs run at once. Use as a context manager or call
    ``close``.

    Args:
        problem: supplies ``entry_function``, ``validator_path``,
            ``metrics.primary`` and the default ``timeout_s``.
        max_workers: number of warm workers (parallel evaluations).
        timeout_s: wall-clock limit per program; ``None`` uses ``problem.timeout_s``.
        memory_mb: address-space cap of each child.
        cpu_seconds: CPU-time cap of each child; ``None`` means ``2 * timeout + 1``.
        max_output_bytes: cap on the child's combined stdout/stderr.
        preload_modules: imported by each worker once, before any fork.
        max_result_bytes: cap on the JSON of the entry function's return value.
        watchdog_grace_s: a worker silent for ``timeout + grace`` is killed and restarted.
        run_as_uid: when running as root, switch each child to this uid/gid (for
            example 65534, ``nobody``) so it can neither signal the workers nor
            read other processes' ``/proc/<pid>/environ``.
        pid_namespace: run each worker in its own PID and mount namespace when
            the kernel allows it; False keeps workers in the caller's namespace.

    Raises:
        ValueError: a limit is not positive.
        SandboxError: a worker failed to start (the message names the validator file).
    """

    def __init__(
        self,
        problem: Problem,
        *,
        max_workers: int = 2,
        timeout_s: float | None = None,
        memory_mb: int = 2048,
        cpu_seconds: float | None = None,
        max_output_bytes: int = 1_000_000,
        preload_modules: Sequence[str] = ("numpy",),
        max_result_bytes: int = 32_000_000,
        watchdog_grace_s: float = 5.0,
        run_as_uid: int | None = None,
        pid_namespace: bool = True,
    ) -> None:
        self.problem = problem
        self.max_workers = max_workers
        self.timeout_s = float(problem.timeout_s if timeout_s is None else timeout_s)
        self.memory_mb = memory_mb
        self.cpu_seconds = 2 * self.timeout_s + 1 if cpu_seconds is None else cpu_seconds
        self.max_output_bytes = max_output_bytes
        self.preload_modules = tuple(preload_modules)
        self.max_result_bytes = max_result_bytes
        self.watchdog_grace_s = watchdog_grace_s
        self.run_as_uid = run_as_uid
        self.pid_namespace = pid_namespace
        self._check_limits()
        set_non_dumpable()  # the initial environ block still holds the launch credentials
        self._cond = threading.Condition()
        self._closed = False
        self._temp_root = tempfile.mkdtemp(prefix="gigaevo-sandbox-")
        self._workers = [
            WorkerProcess(self._worker_config(), worker_environment(), self._log_path(i))
            for i in range(max_workers)
        ]
        self._idle = list(self._workers)
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._temp_root)
        try:
            for worker in self._workers:
                worker.spawn()
            ready = [worker.wait_ready(STARTUP_TIMEOUT_S) for worker in self._workers]
        except SandboxError:
            self.close()
            raise
        self._warn_if_memory_is_tight(max(int(frame.get("vm_bytes", 0)) for frame in ready))

    def _warn_if_memory_is_tight(self, worker_bytes: int) -> None:
        """Children inherit the worker's address space; a cap near it starves every program."""
        if self.memory_mb * 2**20 < worker_bytes + MEMORY_HEADROOM_BYTES:
            warnings.warn(
                f"memory_mb={self.memory_mb} leaves under {MEMORY_HEADROOM_BYTES >> 20} MB "
                f"above the worker's own {worker_bytes >> 20} MB address space "
                f"(preloaded {list(self.preload_modules)}): most programs will hit MemoryError",
                RuntimeWarning,
                stacklevel=3,
            )

    def _check_limits(self) -> None:
        positive = {
            "max_workers": self.max_workers,
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "max_output_bytes": self.max_output_bytes,
            "max_result_bytes": self.max_result_bytes,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if self.watchdog_grace_s < 0:
            raise ValueError(f"watchdog_grace_s must be >= 0, got {self.watchdog_grace_s!r}")

    def _worker_config(self) -> dict[str, Any]:
        return {
            "validator_path": str(Path(self.problem.validator_path).resolve()),
            "entry_function": self.problem.entry_function,
            "primary_metric": self.problem.metrics.primary,
            "preload_modules": list(self.preload_modules),
            "temp_root": self._temp_root,
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "max_output_bytes": self.max_output_bytes,
            "max_result_bytes": self.max_result_bytes,
            "tail_bytes": TAIL_BYTES,
            "run_as_uid": self.run_as_uid,
            "pid_namespace": self.pid_namespace,
        }

    def _log_path(self, index: int) -> Path:
        return Path(self._temp_root) / f"worker-{index}.log"

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (for monitoring and tests).

        With PID namespaces these are the processes the evaluator started;
        each has one child, the namespace's init, that does the work.
        """
        return [pid for w in self._workers if w.alive and (pid := w.pid) is not None]

    @property
    def uses_pid_namespaces(self) -> bool:
        """True when every worker started as init of its own PID namespace."""
        return all(worker.pid_namespace for worker in self._workers)

    def evaluate(self, code: str) -> EvaluationResult:
        """Run ``code``'s entry function in a confined child and validate its output.

        Blocks until a worker is free. Never raises for anything the program
        does: failures come back as ``valid=False`` with a ``reason``.

        Raises:
            SandboxError: the evaluator is closed, or a dead worker could not be
                restarted.
        """
        worker = self._acquire()
        try:
            if not worker.alive:
                self._restart(worker)
            started = time.perf_counter()
            try:
                frame = worker.run(code, self.timeout_s + self.watchdog_grace_s)
            except WorkerLostError as exc:
                elapsed = time.perf_counter() - started
                reason = CLOSED_DURING_RUN if self._closed else str(exc)
                self._restart_quietly(worker)
                return EvaluationResult(valid=False, reason=reason, run_seconds=elapsed)
            elapsed = time.perf_counter() - started
        finally:
            self._release(worker)
        return _to_result(frame, elapsed)

    def _acquire(self) -> WorkerProcess:
        with self._cond:
            while not self._idle and not self._closed:
                self._cond.wait()
            if self._closed:
                raise SandboxError("the sandbox evaluator is closed")
            return self._idle.pop()

    def _release(self, worker: WorkerProcess) -> None:
        with self._cond:
            if self._closed:
                worker.discard()
                return
            self._idle.append(worker)
            self._cond.notify()

    def _restart(self, worker: WorkerProcess) -> None:
        # Under the lock so that close() cannot miss a worker started concurrently.
        with self._cond:
            if self._closed:
                raise SandboxError("the sandbox evaluator is closed")
            worker.discard()
            worker.start(STARTUP_TIMEOUT_S)

    def _restart_quietly(self, worker: WorkerProcess) -> None:
        """Restart after a lost worker; on failure leave it dead for the next caller to retry."""
        try:
            self._restart(worker)
        except SandboxError:
            worker.discard()

    def close(self) -> None:
        """Kill all workers (and any running children) and remove scratch files; idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
            self._finalizer.detach()
            for worker in self._workers:
                if worker in idle:
                    worker.discard()
                else:  # busy: its evaluating thread sees the death and closes the pipes
                    worker.kill()
            shutil.rmtree(self._temp_root, ignore_errors=True)

    def __enter__(self) -> SandboxEvaluator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _to_result(frame: dict[str, Any], elapsed: float) -> EvaluationResult:
    """Build the result record from a worker's ``result`` frame."""
    run_seconds = min(float(frame.get("run_seconds", 0.0)), elapsed)
    metrics = {str(k): float(v) for k, v in dict(frame.get("metrics") or {}).items()}
    reason = frame.get("reason")
    return EvaluationResult(
        valid=bool(frame.get("valid")) and reason is None,
        metrics=metrics,
        reason=None if reason is None else str(reason),
        run_seconds=run_seconds,
        overhead_seconds=max(0.0, elapsed - run_seconds),
        stdout_tail=str(frame.get("stdout_tail", "")),
    )
