"""Warm worker process: pre-imports, forks one confined child per program, validates.

Run as ``python -m gigaevo.evaluation.worker`` by ``SandboxEvaluator``. The
worker speaks length-prefixed JSON over its stdin/stdout (see ``protocol``):
first a config frame (answered with ``ready`` or ``error``), then one ``run``
frame per program, answered by a ``started`` frame carrying the child's pid
(``None`` inside a PID namespace, where the pid means nothing to the
evaluator) and a ``result`` frame. It is the trusted side: it reads the
child's JSON output with a size cap and calls the problem's validator itself.

The worker is non-dumpable and, when the kernel allows it, runs as init of
its own PID and mount namespace (see ``isolation``); the process the
evaluator started then only waits for it.

This module imports only the standard library and the small sandbox modules.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import select
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gigaevo.evaluation.child import ChildSpec, run_child
from gigaevo.evaluation.guard import ProcessCreationGuard
from gigaevo.evaluation.isolation import (
    enter_pid_namespace,
    kill_namespace_members,
    set_non_dumpable,
)
from gigaevo.evaluation.limits import (
    become_child_subreaper,
    kill_all_descendants,
    kill_group,
    scrub_os_environ,
)
from gigaevo.evaluation.protocol import PipeClosedError, ProtocolError, read_frame, write_frame
from gigaevo.evaluation.verdict import ChildRun, Limits, judge

_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class _Collected:
    wall_seconds: float
    timed_out: bool
    result: bytes | None
    result_too_large: bool


@dataclass(frozen=True)
class WorkerConfig:
    """Settings sent by the evaluator in the first frame."""

    validator_path: str
    entry_function: str
    primary_metric: str
    preload_modules: tuple[str, ...]
    temp_root: str
    timeout_s: float
    memory_mb: int
    cpu_seconds: float
    max_output_bytes: int
    max_result_bytes: int
    tail_bytes: int
    run_as_uid: int | None = None
    pid_namespace: bool = True

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> WorkerConfig:
        """Build from the config frame.

        Raises:
            KeyError, TypeError: a field is missing or has the wrong shape.
        """
        fields = dict(message["config"])
        fields["preload_modules"] = tuple(fields["preload_modules"])
        return cls(**fields)


def load_validator(path: str) -> Callable[[Any], Any]:
    """Import ``validate`` from the validator file (its directory joins ``sys.path``).

    Raises:
        ImportError: the file cannot be loaded or defines no callable ``validate``.
        Exception: whatever the validator module raises while importing.
    """
    file = Path(path)
    spec = importlib.util.spec_from_file_location("gigaevo_problem_validator", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    sys.path.insert(0, str(file.parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    validate = getattr(module, "validate", None)
    if not callable(validate):
        raise ImportError(f"{file} defines no callable validate(output)")
    return validate


class Worker:
    """Forks, supervises and judges one child per ``run`` request."""

    def __init__(
        self, config: WorkerConfig, validate: Callable[[Any], Any], *, namespaced: bool = False
    ) -> None:
        self.config = config
        self.validate = validate
        self.namespaced = namespaced
        self.guard = ProcessCreationGuard()

    def evaluate(self, code: str, announce: Callable[[int], None]) -> dict[str, Any]:
        """Run ``code`` in a fresh confined child and return the ``result`` frame."""
        workdir = tempfile.mkdtemp(prefix="child-", dir=self.config.temp_root)
        try:
            # Anonymous (O_TMPFILE where supported): gone once closed, whatever the child does.
            with tempfile.TemporaryFile(dir=self.config.temp_root, buffering=0) as output:
                if self.config.run_as_uid is not None:
                    os.chown(workdir, self.config.run_as_uid, self.config.run_as_uid)
                run = self._fork_and_wait(code, workdir, output.fileno(), announce)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        config = self.config
        limits = Limits(config.timeout_s, config.max_output_bytes, config.max_result_bytes)
        verdict = judge(run, limits, config.primary_metric, self.validate)
        return {"type": "result", **verdict}

    def _fork_and_wait(
        self, code: str, workdir: str, output_fd: int, announce: Callable[[int], None]
    ) -> ChildRun:
        config = self.config
        read_fd, write_fd = os.pipe()
        spec = ChildSpec(
            code=code,
            entry_function=config.entry_function,
            workdir=workdir,
            output_fd=output_fd,
            result_fd=write_fd,
            memory_mb=config.memory_mb,
            cpu_seconds=config.cpu_seconds,
            max_output_bytes=config.max_output_bytes,
            run_as_uid=config.run_as_uid,
        )
        self.guard.refresh()
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            run_child(spec, self.guard)
        os.close(write_fd)
        try:
            announce(pid)
            run = self._supervise(pid, read_fd, start)
        finally:
            kill_group(pid)  # always: grandchildren in the child's group die too
            os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        # Escaped descendants were re-parented to us (subreaper or namespace init).
        if self.namespaced:
            kill_namespace_members()
        else:
            kill_all_descendants()
        size = os.fstat(output_fd).st_size
        tail = os.pread(output_fd, config.tail_bytes, max(0, size - config.tail_bytes))
        return ChildRun(
            status=status,
            wall_seconds=run.wall_seconds,
            timed_out=run.timed_out,
            result=run.result,
            result_too_large=run.result_too_large,
            output_bytes=size,
            tail=tail.decode("utf-8", errors="replace"),
        )

    def _supervise(self, pid: int, read_fd: int, start: float) -> _Collected:
        """Collect the child's result bytes until it exits, the cap trips, or time runs out."""
        cap = self.config.max_result_bytes
        deadline = start + self.config.timeout_s
        buffer = bytearray()
        timed_out = too_large = False
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        poller.register(read_fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        try:
            exited = False
            while not exited:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1)):
                    if fd == pidfd:
                        exited = True
                    elif not self._read_into(read_fd, buffer, poller):
                        too_large = len(buffer) > cap
                        if too_large:
                            break
                if too_large:
                    break
            wall = time.monotonic() - start
            if exited and not too_large:
                os.set_blocking(read_fd, False)
                while self._read_into(read_fd, buffer, poller) and len(buffer) <= cap:
                    pass
                too_large = len(buffer) > cap
        finally:
            os.close(pidfd)
        result = None if too_large else bytes(buffer)
        return _Collected(wall, timed_out, result, too_large)

    def _read_into(self, fd: int, buffer: bytearray, poller: select.poll) -> bool:
        """Read one chunk; False at end of file, when nothing is ready, or past the cap."""
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            with contextlib.suppress(KeyError):
                poller.unregister(fd)
            return False
        buffer += chunk
        return len(buffer) <= self.config.max_result_bytes


def _prepare_process() -> tuple[int, int]:
    """Move the protocol pipes off fds 0 and 1; return ``(in_fd, out_fd)``.

    Stray prints (the validator's) then go to /dev/null instead of corrupting
    frames. The working directory leaves ``sys.path``: it is the scratch root
    children write into.
    """
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    cwd = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", cwd)]
    return in_fd, out_fd


def _address_space() -> int:
    """This process's virtual memory size in bytes (what a child starts with under RLIMIT_AS)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _read_config(in_fd: int, out_fd: int) -> WorkerConfig | None:
    """Read the config frame; answer ``error`` and return None when it is unusable."""
    try:
        return WorkerConfig.from_message(read_frame(in_fd))
    except (ProtocolError, KeyError, TypeError) as exc:
        write_frame(out_fd, {"type": "error", "stage": "config", "error": str(exc)})
        return None


def _start(config: WorkerConfig, out_fd: int, namespaced: bool) -> Worker | None:
    """Pre-import, load the validator; answer ``ready`` or ``error``."""
    stage = "preload"
    try:
        for name in config.preload_modules:
            importlib.import_module(name)
        stage = "validator"
        validate = load_validator(config.validator_path)
    except BaseException as exc:  # startup boundary: report what broke, then exit
        detail = "".join(traceback.format_exception(exc, limit=-3))
        write_frame(out_fd, {"type": "error", "stage": stage, "error": detail.strip()})
        return None
    ready = {
        "type": "ready",
        "pid": os.getpid(),
        "vm_bytes": _address_space(),
        "pid_namespace": namespaced,
    }
    write_frame(out_fd, ready)
    return Worker(config, validate, namespaced=namespaced)


def main() -> int:
    """Serve ``run`` requests until the evaluator closes the pipe; return the exit status."""
    set_non_dumpable()  # before anything else: exec made us dumpable again
    in_fd, out_fd = _prepare_process()
    scrub_os_environ()
    config = _read_config(in_fd, out_fd)
    if config is None:
        return 1
    namespaced = config.pid_namespace and enter_pid_namespace(
        close_in_parent=(in_fd, out_fd),
        allow_user_namespace=config.run_as_uid is None,
    )
    become_child_subreaper()
    worker = _start(config, out_fd, namespaced)
    if worker is None:
        return 1
    while True:
        try:
            request = read_frame(in_fd)
        except PipeClosedError:
            return 0
        if not isinstance(request, dict) or request.get("op") != "run":
            return 0

        def announce(pid: int) -> None:
            write_frame(out_fd, {"type": "started", "pid": None if namespaced else pid})

        try:
            write_frame(out_fd, worker.evaluate(str(request.get("code", "")), announce))
        except PipeClosedError:
            return 0


if __name__ == "__main__":
    sys.exit(main())
