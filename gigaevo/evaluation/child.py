"""Code that runs inside the forked, untrusted child: confine, run, serialise, exit.

The child never validates anything. It executes the program, calls the entry
function, turns the return value into JSON and writes it to the result pipe;
the trusted worker reads that with a size cap and runs the validator.
"""

from __future__ import annotations

import io
import json
import linecache
import os
import signal
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any, NoReturn

from gigaevo.evaluation.guard import ProcessCreationGuard
from gigaevo.evaluation.isolation import drop_capabilities
from gigaevo.evaluation.limits import apply_rlimits, die_with_parent, point_home_at
from gigaevo.evaluation.seccomp import ChildFilter

PROBLEM_DIR_VARIABLE = "GIGAEVO_PROBLEM_DIR"
PROGRAM_FILENAME = "<program>"
PROGRAM_MODULE = "program"
RESULT_FD = 3
MAX_FD = 1 << 20
_TRACEBACK_FRAMES = 8
_WRITE_CHUNK = 1 << 16


@dataclass(frozen=True)
class ChildSpec:
    """Everything the forked child needs; built by the worker before ``fork``.

    ``output_fd`` is the write end of the pipe that becomes stdout and
    stderr; ``result_fd`` the write end of the result pipe (fd 3 in the
    child). ``run_as_uid`` (root only) is the dedicated uid to switch to.
    ``seccomp`` is installed last; None where the machine has no filter.
    ``problem_dir`` (read-only in the child's view) is announced to the
    program as ``GIGAEVO_PROBLEM_DIR``, so that a harness can read data files.
    """

    code: str
    entry_function: str
    workdir: str
    output_fd: int
    result_fd: int
    memory_mb: int
    cpu_seconds: float
    max_file_bytes: int
    max_tasks: int
    max_files: int
    run_as_uid: int | None = None
    seccomp: ChildFilter | None = None
    problem_dir: str = ""


class NotSerialisableError(TypeError):
    """The entry function returned something that has no JSON form."""


def _numpy_default(value: Any) -> Any:
    """``json`` fallback: numpy arrays via ``tolist``, numpy scalars via ``item``."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.ndarray):
            return value.tolist()  # object and complex elements come back here
        if isinstance(value, numpy.generic):
            item = value.item()
            if type(item) is not type(value):
                return item
    raise NotSerialisableError(f"entry returned a non-serialisable {type(value).__name__}")


def encode_output(value: Any) -> str:
    """JSON text of the entry function's return value (tuples become lists; NaN allowed).

    Raises:
        NotSerialisableError: an element, a dict key or the nesting has no JSON
            form (the message names the offending type where it can).
    """
    try:
        return json.dumps(value, allow_nan=True, default=_numpy_default)
    except NotSerialisableError:
        raise
    except TypeError as exc:  # json only raises this itself for bad dict keys
        raise NotSerialisableError(f"entry returned a non-serialisable dict ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise NotSerialisableError(f"entry returned a non-serialisable value ({exc})") from None


class ChunkedTextWriter(io.TextIOWrapper):
    """Text stream that encodes huge strings piecewise.

    ``print("x" * 10**9)`` then trips the output cap after the first chunk
    instead of first needing another gigabyte for the encoded copy.
    """

    def write(self, text: str) -> int:
        for start in range(0, len(text), _WRITE_CHUNK):
            super().write(text[start : start + _WRITE_CHUNK])
        return len(text)


def _confine(spec: ChildSpec, guard: ProcessCreationGuard) -> None:
    """Own session, closed stdin, output to the worker's pipe, its scratch, its uid, limits.

    Then no capabilities, the parent-death signal, the Python-level block on
    process creation and, last, the seccomp filter. The capabilities go after
    ``setuid`` and the rlimits (both need them) and before the parent-death
    signal, which a credential change would clear.
    """
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(spec.output_fd, 1)
    os.dup2(spec.output_fd, 2)
    os.dup2(spec.result_fd, RESULT_FD)
    os.closerange(RESULT_FD + 1, MAX_FD)
    os.chdir(spec.workdir)
    point_home_at(spec.workdir)
    if spec.problem_dir:
        os.environ[PROBLEM_DIR_VARIABLE] = spec.problem_dir
    if spec.run_as_uid is not None:
        os.setgroups([])
        os.setgid(spec.run_as_uid)
        os.setuid(spec.run_as_uid)
    apply_rlimits(
        memory_mb=spec.memory_mb,
        cpu_seconds=spec.cpu_seconds,
        max_file_bytes=spec.max_file_bytes,
        max_tasks=spec.max_tasks,
        max_files=spec.max_files,
    )
    drop_capabilities()  # also: the rlimits can no longer be raised
    die_with_parent()  # after setuid: a credential change clears the death signal
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    # Line-buffered so that the tail survives a SIGKILL at the timeout.
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.BufferedWriter(io.FileIO(fd, "w", closefd=False))
        setattr(sys, name, ChunkedTextWriter(raw, line_buffering=True))
    guard.block()
    if spec.seccomp is not None:
        spec.seccomp.install()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"program called sys.exit({exc.code!r})"
    if isinstance(exc, MemoryError):
        detail = f": {exc}" if str(exc) else ""
        return f"memory limit exceeded (MemoryError{detail})"
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _print_traceback(exc: BaseException) -> None:
    """Print the exception to the child's stderr, showing only the program's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != PROGRAM_FILENAME:
        tb = tb.tb_next
    try:
        lines = traceback.format_exception(type(exc), exc, tb, limit=-_TRACEBACK_FRAMES)
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
    except (OSError, ValueError, MemoryError):
        pass


def _run_program(spec: ChildSpec) -> Any:
    """Execute the program as module ``program`` and call its entry function."""
    source = spec.code if spec.code.endswith("\n") else spec.code + "\n"
    linecache.cache[PROGRAM_FILENAME] = (len(source), None, source.splitlines(True), "")
    compiled = compile(source, PROGRAM_FILENAME, "exec")
    module = types.ModuleType(PROGRAM_MODULE)
    module.__file__ = os.path.join(spec.workdir, "program.py")
    sys.modules[PROGRAM_MODULE] = module
    exec(compiled, module.__dict__)
    entry = module.__dict__.get(spec.entry_function)
    if entry is None:
        raise NameError(f"entry function {spec.entry_function!r} is not defined")
    if not callable(entry):
        raise TypeError(f"entry {spec.entry_function!r} is not callable")
    return entry()


def _write_result(payload: str) -> None:
    view = memoryview(payload.encode("utf-8"))
    while view:
        view = view[os.write(RESULT_FD, view) :]


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            continue


def _execute(spec: ChildSpec) -> str:
    """Run the program; return the JSON payload for the result pipe.

    The payload carries no timing: the worker measures the child itself.
    """
    try:
        output = encode_output(_run_program(spec))
    except NotSerialisableError as exc:
        return json.dumps({"ok": False, "reason": str(exc)})
    except BaseException as exc:  # the untrusted program's boundary: record and report
        _flush_streams()
        _print_traceback(exc)
        return json.dumps({"ok": False, "reason": _describe(exc)})
    return f'{{"ok": true, "output": {output}}}'


def run_child(spec: ChildSpec, guard: ProcessCreationGuard) -> NoReturn:
    """Confine this freshly forked process, run the program, report, and ``_exit``.

    ``guard`` was refreshed by the worker just before ``fork``.
    """
    status = 0
    try:
        _confine(spec, guard)
        payload = _execute(spec)
        _flush_streams()
        _write_result(payload)
    except BaseException:  # never unwind into the worker's code after fork
        status = 70
    finally:
        os._exit(status)
