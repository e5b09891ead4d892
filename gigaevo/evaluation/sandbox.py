"""``SandboxEvaluator``: a pool of warm workers that fork one confined child per program."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gigaevo.evaluation.base import EvaluationResult
from gigaevo.evaluation.isolation import can_switch_uid, set_non_dumpable
from gigaevo.evaluation.layers import dedicated_uids, describe_gaps
from gigaevo.evaluation.limits import kill_group
from gigaevo.evaluation.pool import SandboxError, WorkerLostError, WorkerProcess, launch_worker
from gigaevo.evaluation.scratch import remove_tree
from gigaevo.evaluation.trusted import TrustedFile
from gigaevo.util import pid_alive

if TYPE_CHECKING:  # only for annotations: keeps worker start-up free of the problems layer
    from gigaevo.problems.spec import Problem

STARTUP_TIMEOUT_S = 120.0
TAIL_BYTES = 2048
MEMORY_HEADROOM_BYTES = 64 * 2**20
CLOSED_DURING_RUN = "the sandbox evaluator was closed during the evaluation"
ROOT_PREFIX = "gigaevo-sandbox-"
ABANDONED_UNNAMED_AGE_S = 86_400.0
_ROOT_NAME = re.compile(rf"^{ROOT_PREFIX}(?:(?P<pid>\d+)-)?[^/]+$")

log = logging.getLogger("gigaevo.sandbox")


def _shutdown(workers: list[WorkerProcess], temp_root: str) -> None:
    """Kill every worker, close its pipes and remove the scratch directory.

    Runs at garbage collection or interpreter exit, when no evaluation can be in flight.
    """
    for worker in workers:
        worker.discard()
    _remove_quietly(temp_root)


def sweep_abandoned_roots(directory: str | None = None, *, now: float | None = None) -> list[str]:
    """Remove the scratch roots that killed evaluators left in ``directory`` (default: tmp).

    A root is named after the pid of the process that made it; it is abandoned
    when that pid is dead. Roots named before pids were part of the name are
    abandoned once a day old. Only roots this user owns are touched, and never
    one whose process is alive (another run on the same machine).
    """
    directory = tempfile.gettempdir() if directory is None else directory
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    now = time.time() if now is None else now
    for entry in entries:
        match = _ROOT_NAME.match(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid != os.geteuid():
            continue
        pid = match["pid"]
        if pid is not None:
            if int(pid) == os.getpid() or pid_alive(int(pid)):
                continue
        elif now - info.st_mtime < ABANDONED_UNNAMED_AGE_S:
            continue
        _remove_quietly(entry.path)
        if not os.path.exists(entry.path):
            removed.append(entry.path)
    if removed:
        log.info(
            "removed %d scratch folder(s) left by killed evaluators in %s", len(removed), directory
        )
    return removed


def _remove_quietly(path: str) -> None:
    """Remove the evaluator's directory; what a child left there must not fail the run."""
    with contextlib.suppress(OSError):
        remove_tree(path)


@dataclass
class _EarlyWorkers:
    """Workers started before their evaluator (``start_workers_early``)."""

    pid: int  # the process that started them: a forked child must not adopt them
    root: str  # their scratch root, adopted by the evaluator with them
    launched: list[subprocess.Popen[bytes]]


_early_lock = threading.Lock()
_early: _EarlyWorkers | None = None


def start_workers_early(count: int) -> bool:
    """Start ``count`` sandbox workers now; the next ``SandboxEvaluator`` adopts them.

    Most of a worker's start is its interpreter and imports, which need nothing
    of the run: ``run.py`` starts the workers before Hydra composes the config,
    so that they start on the other core while the engine loads, and the
    evaluator then sends them their config (problem, limits, isolation) as it
    would to workers it had just started. A started worker only waits for that
    config; the process is the one the evaluator would start (same command,
    allow-listed environment, working directory and session). The evaluator
    adopts as many as it needs in the process that started them; the rest, and
    all of them when no evaluator comes, are killed (``discard_early_workers``,
    also at exit; a worker whose engine died reads the end of its pipe and exits).

    Best effort: returns False, with nothing started, when a worker cannot be
    started (the evaluator then starts its own and reports the failure).
    """
    global _early
    if count < 1:
        return False
    with _early_lock:
        if _early is not None:
            return False
        try:
            set_non_dumpable()  # as the evaluator does before its workers start
            root = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-")
        except OSError:
            return False
        launched: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(count):
                launched.append(launch_worker(Path(root) / f"worker-{i}.log"))
        except SandboxError:
            _kill_launched(launched)
            _remove_quietly(root)
            return False
        _early = _EarlyWorkers(os.getpid(), root, launched)
    atexit.register(discard_early_workers)
    return True


def _take_early_workers(count: int) -> tuple[str, list[subprocess.Popen[bytes]]] | None:
    """The early workers' root and up to ``count`` of them; the others are killed."""
    global _early
    with _early_lock:
        early = _early
        if early is None or early.pid != os.getpid():
            return None
        _early = None
    _kill_launched(early.launched[count:])
    return early.root, early.launched[:count]


def discard_early_workers() -> None:
    """Kill the early workers no evaluator adopted and remove their root (idempotent)."""
    taken = _take_early_workers(0)
    if taken is not None:
        _remove_quietly(taken[0])


def _kill_launched(launched: list[subprocess.Popen[bytes]]) -> None:
    for proc in launched:
        if proc.poll() is None:
            kill_group(proc.pid)  # it leads its own session and group
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


class SandboxEvaluator:
    """Runs untrusted programs for one problem in confined, forked child processes.

    ``max_workers`` warm worker processes each build the sandbox once and then
    fork one child per program (no interpreter start-up per child). What a
    child gets, by default, whether the engine runs as root or not (details
    and the reasons for each choice in docs/sandbox.md):

    * Filesystem: its worker's own mount namespace, with a read-only root that
      holds only the system directories, the Python installation, the
      ``gigaevo`` package and the problem directory; the checkpoint
      directory, the card bank, home directories and the rest of the machine
      do not exist for it. Its one writable place is a fresh tmpfs of
      ``scratch_mb`` on ``/tmp``, which is also its working directory and
      ``HOME``; it is detached after the child, whatever is in it.
    * Trusted code: workers start in isolated mode with ``/`` as working
      directory and import only from read-only locations; the validator is
      compiled from the source read and hashed here (``validator_sha256``),
      and a change of the file on disk stops the run (``ValidatorChangedError``).
    * Network: a new network namespace per worker (only loopback, down);
      ``network=True`` opts out. Without the network, seccomp also refuses
      ``socket()``.
    * Identity: no capabilities and ``no_new_privs``; under root, a dedicated
      random uid per worker (``run_as_uid="auto"``) that owns nothing.
    * Limits over the whole tree: seccomp refuses every new process (threads
      are allowed), so address space (``memory_mb``), CPU time
      (``cpu_seconds``), tasks (``max_threads``), open files and the scratch
      size bound everything the child can hold.
    * Environment: an allow-list (PATH, HOME and TMPDIR in the scratch, a
      UTF-8 locale, BLAS/OpenMP pinned to one thread); nothing of the
      engine's environment is copied.
    * Its own session and PID namespace, stdin closed, output capped, a
      wall-clock timeout; the evaluator and workers are non-dumpable.

    Where the kernel refuses a layer, ``isolation_gaps`` holds one line
    saying so, logged once as a warning (see docs/sandbox.md for what is
    then unprotected).

    Thread-safe: ``evaluate`` blocks until a worker is free, so at most
    ``max_workers`` programs run at once. Use as a context manager or call
    ``close``.

    Args:
        problem: supplies ``entry_function``, ``validator_path`` (and
            ``validator_sha256`` when the loader recorded one),
            ``metrics.primary`` and the default ``timeout_s``.
        max_workers: number of warm workers (parallel evaluations).
        timeout_s: wall-clock limit per program; ``None`` uses ``problem.timeout_s``.
        memory_mb: address-space cap of each child.
        cpu_seconds: CPU-time cap of each child; ``None`` means ``2 * timeout + 1``.
        max_output_bytes: cap on the child's combined stdout/stderr.
        preload_modules: imported by each worker once, before any fork.
        max_result_bytes: cap on the JSON of the entry function's return value.
        watchdog_grace_s: a worker silent for ``timeout + grace`` is killed and restarted.
        run_as_uid: ``"auto"`` (a dedicated uid per worker when root; the
            engine's uid inside a user namespace otherwise) or a fixed uid
            (root only).
        namespaces: run each worker in its own namespaces when the kernel
            allows it; False keeps workers in the caller's (a gap, reported).
        network: True gives children the host's network (opt-out).
        scratch_mb: size of each child's tmpfs scratch, also its largest file.
        max_threads: threads a child may run (``RLIMIT_NPROC``, a few more
            under a user namespace).
        seccomp: False leaves out the seccomp filter (a gap, reported; for
            testing the layers behind it).

    Raises:
        ValueError: a limit is not positive, or a bad ``run_as_uid``.
        SandboxError: the validator cannot be read or differs from the hash
            recorded at load time, or a worker failed to start (the message
            names the validator file).
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
        run_as_uid: int | str = "auto",
        namespaces: bool = True,
        network: bool = False,
        scratch_mb: int = 256,
        max_threads: int = 64,
        seccomp: bool = True,
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
        self.namespaces = namespaces
        self.network = network
        self.scratch_mb = scratch_mb
        self.max_threads = max_threads
        self.seccomp = seccomp
        self._check_limits()
        child_uids = _child_uids(run_as_uid, max_workers)
        self.validator = TrustedFile(problem.validator_path, problem.validator_sha256)
        set_non_dumpable()  # the initial environ block still holds the launch credentials
        self._cond = threading.Condition()
        self._closed = False
        sweep_abandoned_roots()
        early = _take_early_workers(max_workers)  # started by run.py before the config
        root, launched = early if early is not None else (None, [])
        self._temp_root = root or tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-")
        self._workers = [
            WorkerProcess(self._worker_config(i, uid), Path(self._temp_root) / f"worker-{i}.log")
            for i, uid in enumerate(child_uids)
        ]
        self._idle = list(self._workers)
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._temp_root)
        try:
            for i, worker in enumerate(self._workers):
                worker.spawn(launched[i] if i < len(launched) else None)
            ready = [worker.wait_ready(STARTUP_TIMEOUT_S) for worker in self._workers]
        except SandboxError:
            _kill_launched(launched[sum(w.pid is not None for w in self._workers) :])
            self.close()
            raise
        self.isolation = dict(self._workers[0].layers)
        self.isolation["child_uids"] = sorted({int(w.layers.get("uid", -1)) for w in self._workers})
        self.isolation_gaps = describe_gaps(self.isolation, network=network)
        if self.isolation_gaps is not None:
            log.warning("%s", self.isolation_gaps)
        self._warn_if_memory_is_tight(max(int(frame.get("vm_bytes", 0)) for frame in ready))

    @property
    def validator_sha256(self) -> str:
        """SHA-256 of the validator source every worker compiled (fixed at start-up)."""
        return self.validator.sha256

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
            "scratch_mb": self.scratch_mb,
            "max_threads": self.max_threads,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if self.watchdog_grace_s < 0:
            raise ValueError(f"watchdog_grace_s must be >= 0, got {self.watchdog_grace_s!r}")

    @property
    def cascade_timeout_s(self) -> float:
        """Wall-clock limit of the first stage (0 without a cascade)."""
        cascade = self.problem.cascade
        if cascade is None:
            return 0.0
        return self.timeout_s if cascade.timeout_s is None else float(cascade.timeout_s)

    def _cascade(self) -> dict[str, Any] | None:
        cascade = self.problem.cascade
        if cascade is None:
            return None
        return {
            "entry_function": cascade.entry_function,
            "threshold": cascade.threshold,
            "timeout_s": self.cascade_timeout_s,
            "higher_is_better": self.problem.metrics.higher_is_better,
        }

    def _worker_config(self, index: int, child_uid: int | None) -> dict[str, Any]:
        return {
            "problem_dir": str(Path(self.validator.path).parent),
            "cascade": self._cascade(),
            "validator_path": self.validator.path,
            "validator_source": self.validator.text,
            "entry_function": self.problem.entry_function,
            "primary_metric": self.problem.metrics.primary,
            "preload_modules": list(self.preload_modules),
            "work_dir": str(Path(self._temp_root) / f"worker-{index}"),
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "max_output_bytes": self.max_output_bytes,
            "max_result_bytes": self.max_result_bytes,
            "tail_bytes": TAIL_BYTES,
            "scratch_mb": self.scratch_mb,
            "max_threads": self.max_threads,
            "run_as_uid": child_uid,
            "namespaces": self.namespaces,
            "network": self.network,
            "seccomp": self.seccomp,
        }

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (for monitoring and tests).

        With namespaces these are the processes the evaluator started; each
        has one child, the namespace's init, that does the work.
        """
        return [pid for w in self._workers if w.alive and (pid := w.pid) is not None]

    @property
    def uses_pid_namespaces(self) -> bool:
        """True when every worker started as init of its own namespaces."""
        return all(worker.layers.get("namespaces") for worker in self._workers)

    def evaluate(self, code: str) -> EvaluationResult:
        """Run ``code``'s entry function in a confined child and validate its output.

        Blocks until a worker is free. Never raises for anything the program
        does: failures come back as ``valid=False`` with a ``reason``.

        Raises:
            ValidatorChangedError: the validator file changed on disk since
                start-up (nothing was run).
            SandboxError: the evaluator is closed, or a dead worker could not be
                restarted.
        """
        self.validator.check()
        worker = self._acquire()
        try:
            if not worker.alive:
                self._restart(worker)
            started = time.perf_counter()
            try:
                frame = worker.run(
                    code, self.cascade_timeout_s + self.timeout_s + self.watchdog_grace_s
                )
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
            _remove_quietly(self._temp_root)

    def __enter__(self) -> SandboxEvaluator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _child_uids(run_as_uid: int | str, count: int) -> list[int | None]:
    """The uid each worker's children switch to (None: keep the engine's, as non-root must).

    Raises:
        ValueError: ``run_as_uid`` is neither ``"auto"`` nor a uid, or a fixed
            uid was asked for without root.
    """
    if run_as_uid == "auto":
        chosen = dedicated_uids(count) if can_switch_uid() else None
        return [None] * count if chosen is None else list(chosen)
    if isinstance(run_as_uid, bool) or not isinstance(run_as_uid, int) or run_as_uid <= 0:
        raise ValueError(f"run_as_uid must be 'auto' or a positive uid, got {run_as_uid!r}")
    if not can_switch_uid():
        raise ValueError(f"run_as_uid={run_as_uid} needs root; leave it at 'auto'")
    return [run_as_uid] * count


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
        cpu_seconds=float(frame.get("cpu_seconds", 0.0)),
        peak_memory_bytes=int(frame.get("peak_rss_bytes", 0)),
        feedback=str(frame.get("feedback") or ""),
        cascade=None if frame.get("cascade") is None else str(frame["cascade"]),
    )
