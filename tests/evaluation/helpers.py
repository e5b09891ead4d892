"""Plain helpers for the sandbox tests: problem files, inline programs, /proc inspection."""

from __future__ import annotations

import textwrap
from pathlib import Path

from gigaevo.problems.spec import MetricsSpec, Problem

LIST_VALIDATOR = """
import math

def validate(output):
    if not isinstance(output, list):
        raise ValueError("expected a list of numbers")
    values = [float(x) for x in output]
    return {"score": math.fsum(values), "count": float(len(values))}
"""


def write_problem(
    directory: Path, validator_source: str = LIST_VALIDATOR, *, timeout_s: float = 1.0
) -> Problem:
    """A problem in ``directory``: entry function ``solve``, primary metric ``score``."""
    directory.mkdir(parents=True, exist_ok=True)
    validator = directory / "validator.py"
    validator.write_text(textwrap.dedent(validator_source))
    return Problem(
        name=directory.name,
        directory=directory,
        description="test problem",
        initial_programs=("def solve():\n    return [1.0]\n",),
        entry_function="solve",
        validator_path=validator,
        metrics=MetricsSpec(
            primary="score",
            higher_is_better=True,
            lower_bound=0.0,
            upper_bound=100.0,
            sentinel=0.0,
        ),
        timeout_s=timeout_s,
    )


def program(source: str) -> str:
    """Dedent an inline program."""
    return textwrap.dedent(source).lstrip("\n")


def is_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` according to ``/proc``."""
    found: list[int] = []
    stack = [pid]
    while stack:
        task_dir = Path(f"/proc/{stack.pop()}/task")
        try:
            tids = list(task_dir.iterdir())
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                children = [int(x) for x in (tid / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            found.extend(children)
            stack.extend(children)
    return [p for p in found if is_alive(p)]


def is_worker(pid: int) -> bool:
    """True for a sandbox worker process (also the namespace init it forks)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return b"gigaevo.evaluation.worker" in cmdline


def stray_processes(worker_pids: list[int]) -> list[int]:
    """Live descendants of the workers that are not workers themselves (programs, escapees)."""
    return [pid for worker in worker_pids for pid in descendants(worker) if not is_worker(pid)]


ORDINARY_UID = 43210  # no account needed: the process only needs a uid that owns nothing


def _blocked_ancestor(path: Path) -> Path | None:
    """The outermost ancestor of ``path`` that other users cannot search, if any."""
    parts = path.resolve().parts
    for i in range(1, len(parts)):
        ancestor = Path(*parts[:i])
        if ancestor != Path("/") and not ancestor.stat().st_mode & 0o001:
            return ancestor
    return None


def as_ordinary_user(command: list[str], needed: list[Path], hold: Path) -> list[str]:
    """``command`` run by a root test as uid ``ORDINARY_UID``, without any capability.

    The interpreter may live under a directory closed to other users (pyenv
    under a 0700 ``/root``): in a private mount namespace, each such directory
    is covered by an empty tmpfs into which only the ``needed`` paths are
    bound back, so the ordinary user reaches them and nothing else there.
    ``hold`` is an empty directory for the temporary binds.
    """
    steps = ["set -e"]
    for i, path in enumerate(sorted({p.resolve() for p in needed})):
        blocked = _blocked_ancestor(path)
        if blocked is None:
            continue
        keep = hold / str(i)
        steps += [f"mkdir -p '{keep}'", f"mount --bind '{path}' '{keep}'"]
        steps += [f"mountpoint -q '{blocked}' || mount -t tmpfs -o mode=0755 tmpfs '{blocked}'"]
        steps += [f"mkdir -p '{path}'", f"mount --bind '{keep}' '{path}'"]
    drop = (
        f"exec setpriv --reuid={ORDINARY_UID} --regid={ORDINARY_UID} --clear-groups "
        '--inh-caps=-all --bounding-set=-all "$@"'
    )
    script = "\n".join([*steps, drop])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]
