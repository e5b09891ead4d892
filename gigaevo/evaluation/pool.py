"""Main-process handle on one warm worker: spawn, handshake, request with watchdog, kill."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gigaevo
from gigaevo.evaluation.limits import kill_group, sandbox_environment
from gigaevo.evaluation.protocol import (
    FrameTimeoutError,
    PipeClosedError,
    ProtocolError,
    read_frame,
    write_frame,
)

_LOG_TAIL_BYTES = 4000
WORKER_HOME = "/tmp"


class SandboxError(RuntimeError):
    """The sandbox cannot run programs: a worker failed to start, or the evaluator is closed."""


class WorkerLostError(SandboxError):
    """A worker died or stopped answering during an evaluation (it has been killed)."""


def worker_command() -> list[str]:
    """``python -I -c <bootstrap>`` running ``gigaevo.evaluation.worker`` from this ``gigaevo``.

    Isolated mode (``-I``): no ``PYTHON*`` variable, no user site-packages and
    no working directory on ``sys.path``. The bootstrap imports the engine's
    own ``gigaevo`` from the directory that holds it, then takes that
    directory off ``sys.path`` again (submodules resolve through the
    package), so nothing else is ever imported from a source checkout.
    """
    root = str(Path(gigaevo.__file__).resolve().parent.parent)
    bootstrap = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "import gigaevo.evaluation.worker as w; "
        f"sys.path.remove({root!r}); sys.exit(w.main())"
    )
    return [sys.executable, "-I", "-c", bootstrap]


def launch_worker(log_path: Path) -> subprocess.Popen[bytes]:
    """Start one worker interpreter (``worker_command``), its stderr appended to ``log_path``.

    The process imports the worker module and then waits for its config frame:
    nothing about the problem or the limits is needed to start it, so the
    evaluator may send the config later (``WorkerProcess.spawn``).

    Raises:
        SandboxError: the log cannot be opened or the interpreter cannot be started.
    """
    try:
        log = open(log_path, "ab")  # noqa: SIM115 (closed below, after the fork)
    except OSError as exc:
        raise SandboxError(f"cannot prepare a sandbox worker: {exc}") from exc
    with log:
        try:
            return subprocess.Popen(
                worker_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=sandbox_environment(WORKER_HOME),
                cwd="/",
                start_new_session=True,
                close_fds=True,
                bufsize=0,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start a sandbox worker: {exc}") from exc


class WorkerProcess:
    """One ``python -m gigaevo.evaluation.worker`` process and its pipes.

    Not thread-safe by itself: the evaluator hands each worker to one thread at
    a time. ``kill`` may be called from another thread (on close).
    """

    def __init__(self, config: Mapping[str, Any], log_path: Path) -> None:
        self.config = dict(config)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._child_pid: int | None = None
        self.layers: dict[str, Any] = {}

    @property
    def alive(self) -> bool:
        """True while the worker process exists and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The pid of the process this handle started, if any.

        With namespaces (``layers["namespaces"]``) that process only waits for
        its child, the real worker; killing its process group kills both, and
        with them the whole namespace.
        """
        return None if self._proc is None else self._proc.pid

    def spawn(self, launched: subprocess.Popen[bytes] | None = None) -> None:
        """Start the process and send its config (does not wait for ``ready``).

        ``launched``: a process that ``launch_worker`` started earlier, with this
        handle's ``log_path``, and that has read nothing yet (``start_workers_early``):
        it is adopted instead of starting one.

        Raises:
            SandboxError: the interpreter could not be started.
        """
        try:  # a program may have removed the scratch root (without namespaces): recreate it
            os.makedirs(self.config["work_dir"], mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SandboxError(f"cannot prepare a sandbox worker: {exc}") from exc
        self._proc = launch_worker(self.log_path) if launched is None else launched
        # If the worker already died, wait_ready reports why.
        with contextlib.suppress(PipeClosedError):
            write_frame(self._stdin_fd(), {"config": self.config})

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the worker's ``ready`` frame and return it.

        Raises:
            SandboxError: the worker reported an error, died, or stayed silent;
                the message names the validator file.
        """
        validator = self.config["validator_path"]
        try:
            frame = read_frame(self._stdout_fd(), time.monotonic() + timeout_s)
        except FrameTimeoutError:
            self.kill()
            raise SandboxError(
                f"sandbox worker for validator {validator} not ready after {timeout_s:g} s"
            ) from None
        except ProtocolError:
            self.kill()
            raise SandboxError(
                f"sandbox worker for validator {validator} died at start-up:\n{self._log_tail()}"
            ) from None
        if not isinstance(frame, dict) or frame.get("type") != "ready":
            self.kill()
            stage = frame.get("stage", "?") if isinstance(frame, dict) else "?"
            error = frame.get("error", frame) if isinstance(frame, dict) else frame
            what = "cannot import validator" if stage == "validator" else f"{stage} failed for"
            raise SandboxError(f"sandbox worker start-up: {what} {validator}:\n{error}")
        self.layers = dict(frame.get("layers") or {})
        return frame

    def start(self, timeout_s: float) -> None:
        """``spawn`` then ``wait_ready``; raises ``SandboxError`` like them."""
        self.spawn()
        self.wait_ready(timeout_s)

    def run(self, code: str, answer_within_s: float) -> dict[str, Any]:
        """Send one program and return the worker's ``result`` frame.

        Raises:
            WorkerLostError: the worker died, sent garbage, or did not answer in
                ``answer_within_s`` (the watchdog); it has been killed.
        """
        deadline = time.monotonic() + answer_within_s
        try:
            write_frame(self._stdin_fd(), {"op": "run", "code": code})
            while True:
                frame = read_frame(self._stdout_fd(), deadline)
                if isinstance(frame, dict) and frame.get("type") == "started":
                    # No pid from a namespaced worker: its pids mean nothing here.
                    child = frame.get("pid")
                    self._child_pid = None if child is None else int(child)
                    continue
                if isinstance(frame, dict) and frame.get("type") == "result":
                    self._child_pid = None
                    return frame
                raise ProtocolError(f"unexpected frame from worker: {frame!r:.200}")
        except FrameTimeoutError:
            self.kill()
            raise WorkerLostError(
                f"sandbox worker did not answer within {answer_within_s:g} s (watchdog killed it)"
            ) from None
        except PipeClosedError:
            self.kill()
            raise WorkerLostError(
                "sandbox worker died during the evaluation (killed by the program?)"
            ) from None
        except ProtocolError as exc:
            self.kill()
            raise WorkerLostError(f"sandbox worker protocol failure: {exc}") from None

    def kill(self) -> None:
        """SIGKILL the worker's process group and its current child's group; reap the worker.

        A namespaced worker is its namespace's init: its death kills every
        process in the namespace.
        """
        if self._child_pid is not None:
            kill_group(self._child_pid)
            self._child_pid = None
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            kill_group(proc.pid)  # the worker leads its own session and group
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    def discard(self) -> None:
        """``kill`` and close the pipes; the handle can be ``start``-ed again."""
        self.kill()
        proc, self._proc = self._proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    def _stdin_fd(self) -> int:
        assert self._proc is not None and self._proc.stdin is not None
        return self._proc.stdin.fileno()

    def _stdout_fd(self) -> int:
        assert self._proc is not None and self._proc.stdout is not None
        return self._proc.stdout.fileno()

    def _log_tail(self) -> str:
        try:
            data = self.log_path.read_bytes()[-_LOG_TAIL_BYTES:]
        except OSError as exc:
            return f"(no worker log: {exc})"
        return data.decode("utf-8", errors="replace")
