"""Warm worker process: builds the sandbox once, forks one confined child per program, validates.

Started by ``SandboxEvaluator`` as ``python -I -c <bootstrap>`` (isolated
mode: no environment-driven imports, no working directory on ``sys.path``),
with ``/`` as working directory and an allow-listed environment. The worker
speaks length-prefixed JSON over its stdin/stdout (see ``protocol``): first a
config frame (answered with ``ready``, which lists the isolation layers in
place, or ``error``), then one ``run`` frame per program, answered by a
``started`` frame carrying the child's pid (``None`` inside a PID namespace,
where the pid means nothing to the evaluator) and a ``result`` frame.

Start-up order: non-dumpable; new namespaces (``isolation``); a read-only
root holding only what the worker imports and the problem directory
(``mounts``); then the preloads and the validator, compiled from the exact
source the evaluator hashed (never re-read from disk). Per program: a fresh
scratch (``scratch``), a fork, the child's confinement (``child``), the
supervision of its pipes (``supervise``), the sweep of anything left, the
scratch discarded, and only then the validator (``verdict``).

This module imports only the standard library and the small sandbox modules.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gigaevo.evaluation.child import ChildSpec, run_child
from gigaevo.evaluation.guard import ProcessCreationGuard
from gigaevo.evaluation.isolation import (
    Namespaces,
    can_switch_uid,
    enter_namespaces,
    kill_namespace_members,
    mount_private_proc,
    set_non_dumpable,
)
from gigaevo.evaluation.limits import become_child_subreaper, kill_all_descendants, kill_group
from gigaevo.evaluation.mounts import PROBLEM_MOUNT, enter_readonly_root
from gigaevo.evaluation.protocol import PipeClosedError, ProtocolError, read_frame, write_frame
from gigaevo.evaluation.scratch import DirectoryScratch, TmpfsScratch
from gigaevo.evaluation.seccomp import ChildFilter
from gigaevo.evaluation.stages import CascadeStage, after_first_stage, merge_stages
from gigaevo.evaluation.supervise import collect, reap
from gigaevo.evaluation.verdict import ChildRun, Limits, ValidationContext, judge

VALIDATOR_MODULE = "gigaevo_problem_validator"
MAX_OPEN_FILES = 1024
_TASK_SLACK = 4  # RLIMIT_NPROC also counts the worker side of a user namespace


@dataclass(frozen=True)
class WorkerConfig:
    """Settings sent by the evaluator in the first frame."""

    validator_path: str
    validator_source: str
    entry_function: str
    primary_metric: str
    preload_modules: tuple[str, ...]
    work_dir: str
    timeout_s: float
    memory_mb: int
    cpu_seconds: float
    max_output_bytes: int
    max_result_bytes: int
    tail_bytes: int
    scratch_mb: int = 256
    max_threads: int = 64
    run_as_uid: int | None = None
    namespaces: bool = True
    network: bool = False
    seccomp: bool = True
    legacy_remount: bool = False
    problem_dir: str = ""
    cascade: CascadeStage | None = None

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> WorkerConfig:
        """Build from the config frame.

        Raises:
            KeyError, TypeError: a field is missing or has the wrong shape.
        """
        fields = dict(message["config"])
        fields["preload_modules"] = tuple(fields["preload_modules"])
        if fields.get("cascade") is not None:
            fields["cascade"] = CascadeStage(**fields["cascade"])
        return cls(**fields)


Validate = Callable[[Any, ValidationContext], Any]


def load_validator(path: str, source: str) -> Validate:
    """Compile ``validate`` from ``source`` (the text of ``path``, already hashed).

    The file's directory joins ``sys.path`` so that the validator can import
    modules beside it; the file itself is not read again. A validator that
    takes a second parameter (``validate(output, context)``) receives the
    worker's own measurements (:class:`ValidationContext`); one that takes
    the output only is called with it alone.

    Raises:
        ImportError: the source defines no callable ``validate``.
        Exception: whatever the validator module raises while executing.
    """
    module = types.ModuleType(VALIDATOR_MODULE)
    module.__file__ = path
    sys.path.insert(0, os.path.dirname(path))
    sys.modules[VALIDATOR_MODULE] = module
    exec(compile(source, path, "exec"), module.__dict__)
    validate = getattr(module, "validate", None)
    if not callable(validate):
        raise ImportError(f"{path} defines no callable validate(output)")
    if wants_context(validate):
        return validate
    return lambda output, context: validate(output)


def wants_context(validate: Callable[..., Any]) -> bool:
    """True when ``validate`` accepts a second positional argument (the context)."""
    try:
        params = list(inspect.signature(validate).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return True
    return sum(1 for p in params if p.kind in positional) >= 2


@dataclass
class Sandbox:
    """The layers one worker put in place (reported in ``ready``) and its per-child parts."""

    namespaces: Namespaces
    filesystem: bool
    filesystem_error: str | None
    child_uid: int | None
    scratch: TmpfsScratch | DirectoryScratch
    seccomp: ChildFilter | None
    engine_root: bool = False

    def layers(self) -> dict[str, Any]:
        return {
            "namespaces": self.namespaces.pid,
            "filesystem": self.filesystem,
            "network_namespace": self.namespaces.network,
            "user_namespace": self.namespaces.user,
            "seccomp": self.seccomp is not None,
            "uid": os.geteuid() if self.child_uid is None else self.child_uid,
            "dedicated_uid": self.child_uid is not None,
            "engine_root": self.engine_root,
            "refused": self.namespaces.refused,
            "filesystem_error": self.filesystem_error,
        }


class Worker:
    """Forks, supervises and judges one child per ``run`` request."""

    def __init__(self, config: WorkerConfig, validate: Validate, box: Sandbox) -> None:
        self.config = config
        self.validate = validate
        self.box = box
        self.guard = ProcessCreationGuard()

    def evaluate(self, code: str, announce: Callable[[int], None]) -> dict[str, Any]:
        """Run ``code`` in fresh confined children and return the ``result`` frame.

        With a cascade, a first child runs the cheap stage; only a program
        that passes it gets a second child for the full evaluation.
        """
        config = self.config
        cascade = config.cascade
        if cascade is None:
            verdict = self._stage(code, config.entry_function, config.timeout_s, "full", announce)
            return {"type": "result", **verdict}
        first = self._stage(code, cascade.entry_function, cascade.timeout_s, "cascade", announce)
        stopped = after_first_stage(first, cascade, config.primary_metric)
        if stopped is not None:
            return {"type": "result", **stopped}
        full = self._stage(code, config.entry_function, config.timeout_s, "full", announce)
        return {"type": "result", **merge_stages(first, full)}

    def _stage(
        self, code: str, entry: str, timeout_s: float, stage: str, announce: Callable[[int], None]
    ) -> dict[str, Any]:
        """One child running ``entry`` within ``timeout_s``, judged as ``stage``."""
        try:
            workdir = self.box.scratch.prepare()
        except OSError as exc:
            run = ChildRun(0, 0.0, False, None, False, 0, "", sandbox_error=f"no scratch: {exc}")
        else:
            run = self._fork_and_wait(code, workdir, announce, entry, timeout_s)
        config = self.config
        limits = Limits(timeout_s, config.max_output_bytes, config.max_result_bytes)
        return judge(run, limits, config.primary_metric, self.validate, stage)

    def _spec(
        self, code: str, entry: str, workdir: str, output_fd: int, result_fd: int
    ) -> ChildSpec:
        config = self.config
        return ChildSpec(
            code=code,
            entry_function=entry,
            problem_dir=PROBLEM_MOUNT if self.box.filesystem else config.problem_dir,
            workdir=workdir,
            output_fd=output_fd,
            result_fd=result_fd,
            memory_mb=config.memory_mb,
            cpu_seconds=config.cpu_seconds,
            max_file_bytes=config.scratch_mb * 2**20,
            max_tasks=config.max_threads + _TASK_SLACK,
            max_files=MAX_OPEN_FILES,
            run_as_uid=self.box.child_uid,
            seccomp=self.box.seccomp,
        )

    def _fork_and_wait(
        self,
        code: str,
        workdir: str,
        announce: Callable[[int], None],
        entry: str,
        timeout_s: float,
    ) -> ChildRun:
        config = self.config
        result_r, result_w = os.pipe()
        output_r, output_w = os.pipe()
        spec = self._spec(code, entry, workdir, output_w, result_w)
        self.guard.refresh()
        sys.stdout.flush()
        sys.stderr.flush()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            run_child(spec, self.guard)
        os.close(result_w)
        os.close(output_w)
        try:
            announce(pid)
            seen = collect(
                pid,
                result_fd=result_r,
                output_fd=output_r,
                started=started,
                timeout_s=timeout_s,
                max_result_bytes=config.max_result_bytes,
                max_output_bytes=config.max_output_bytes,
                tail_bytes=config.tail_bytes,
            )
        finally:
            kill_group(pid)  # always: anything left in the child's group dies too
            os.close(result_r)
            os.close(output_r)
        status, cpu, rss = reap(pid)
        # Escaped descendants were re-parented to us (subreaper or namespace init).
        if self.box.namespaces.pid:
            kill_namespace_members()
        else:
            kill_all_descendants()
        problem = self.box.scratch.discard()
        return ChildRun(
            status=status,
            wall_seconds=seen.wall_seconds,
            timed_out=seen.timed_out,
            result=None if seen.result_too_large else seen.result,
            result_too_large=seen.result_too_large,
            output_bytes=seen.output_bytes,
            tail=seen.tail.decode("utf-8", errors="replace"),
            output_too_large=seen.output_too_large,
            cpu_seconds=cpu,
            peak_rss_bytes=rss,
            sandbox_error=problem,
        )


def visible_paths(validator_path: str) -> list[str]:
    """What the read-only root must hold: the Python installation, ``sys.path``, the problem.

    The project root that holds ``gigaevo`` (a source checkout) is not shown
    whole: only the package itself is, so run outputs, ``.git`` or a ``.env``
    beside it stay invisible.
    """
    import gigaevo

    package = os.path.dirname(os.path.abspath(gigaevo.__file__))
    project = os.path.dirname(package)
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    inside_prefix = any(project == p or project.startswith(p.rstrip("/") + "/") for p in prefixes)
    paths = [*prefixes, package, os.path.dirname(validator_path)]
    paths += [e for e in sys.path if e and (inside_prefix or os.path.abspath(e) != project)]
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.isabs(file) and not file.startswith(project + "/"):
            paths.append(os.path.dirname(file))
    return paths


def build_sandbox(config: WorkerConfig, close_in_parent: tuple[int, ...]) -> Sandbox:
    """Enter the namespaces and the read-only root; choose the child's uid and scratch.

    Raises:
        OSError: the root became unusable half-way (never silently weaker).
    """
    engine_root = os.geteuid() == 0
    ns = Namespaces(refused="disabled by evaluator.namespaces=false")
    if config.namespaces:
        ns = enter_namespaces(network=config.network, close_in_parent=close_in_parent)
    filesystem, error = False, None
    under: tuple[tuple[str, str], ...] = ()
    if ns.mount:
        base = os.path.join(config.work_dir, "root")
        os.makedirs(base, exist_ok=True)
        try:
            under = enter_readonly_root(
                base,
                visible_paths(config.validator_path),
                legacy_remount=config.legacy_remount,
                aliases={PROBLEM_MOUNT: config.problem_dir} if config.problem_dir else None,
            )
            filesystem = True
        except OSError as exc:
            error = str(exc)
            mount_private_proc()
    child_uid = config.run_as_uid if can_switch_uid() and not ns.user else None
    if child_uid is not None and not _uid_usable(child_uid):
        child_uid = None  # e.g. not mapped in this user namespace: reported as a gap
    uid = os.geteuid() if child_uid is None else child_uid
    size = config.scratch_mb * 2**20
    scratch: TmpfsScratch | DirectoryScratch
    if filesystem:
        gid = os.getegid() if child_uid is None else child_uid
        scratch = TmpfsScratch(size, uid, gid, under, legacy_remount=config.legacy_remount)
    else:
        scratch = DirectoryScratch(os.path.join(config.work_dir, "scratch"), child_uid)
    seccomp = ChildFilter.for_machine(network=config.network) if config.seccomp else None
    return Sandbox(ns, filesystem, error, child_uid, scratch, seccomp, engine_root)


def _uid_usable(uid: int) -> bool:
    """True when a child could switch to ``uid`` (tried once, in a throwaway fork)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _prepare_process() -> tuple[int, int]:
    """Move the protocol pipes off fds 0 and 1; return ``(in_fd, out_fd)``.

    Stray prints (the validator's) then go to /dev/null instead of corrupting
    frames. The working directory is ``/`` and ``sys.path`` holds no relative
    entry: nothing a child writes is ever imported.
    """
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.chdir("/")
    sys.path[:] = [entry for entry in sys.path if os.path.isabs(entry)]
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


def _start(config: WorkerConfig, out_fd: int, in_fd: int) -> Worker | None:
    """Build the sandbox, pre-import, load the validator; answer ``ready`` or ``error``."""
    stage = "isolation"
    try:
        box = build_sandbox(config, close_in_parent=(in_fd, out_fd))
        become_child_subreaper()
        stage = "preload"
        for name in config.preload_modules:
            importlib.import_module(name)
        stage = "validator"
        validate = load_validator(config.validator_path, config.validator_source)
    except BaseException as exc:  # startup boundary: report what broke, then exit
        detail = "".join(traceback.format_exception(exc, limit=-3))
        write_frame(out_fd, {"type": "error", "stage": stage, "error": detail.strip()})
        return None
    ready = {"type": "ready", "pid": os.getpid(), "vm_bytes": _address_space()}
    write_frame(out_fd, {**ready, "layers": box.layers()})
    return Worker(config, validate, box)


def main() -> int:
    """Serve ``run`` requests until the evaluator closes the pipe; return the exit status."""
    set_non_dumpable()  # before anything else: exec made us dumpable again
    in_fd, out_fd = _prepare_process()
    config = _read_config(in_fd, out_fd)
    if config is None:
        return 1
    worker = _start(config, out_fd, in_fd)
    if worker is None:
        return 1
    namespaced = worker.box.namespaces.pid
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
