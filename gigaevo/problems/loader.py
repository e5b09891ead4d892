"""Load a problem directory (built-in or user-supplied) into a ``Problem``.

A problem directory holds ``task.md``, ``problem.yaml``, ``validator.py`` and
either ``initial_program.py`` or ``initial_programs/*.py``; see
docs/problems.md. Every check here is static (files
are read and parsed, never imported or run), and every failure raises
``ProblemError`` with a one-line message naming the culprit file or key.
"""

from __future__ import annotations

import ast
import hashlib
import math
from pathlib import Path
from typing import Any

import yaml

from gigaevo.problems.noise import MeasurementNoise, parse_noise
from gigaevo.problems.options import mapping_section, parse_cascade, parse_descriptors
from gigaevo.problems.spec import MetricsSpec, Problem, ProblemError
from gigaevo.programs import pyast

EVOLVE_START = "# EVOLVE-BLOCK-START"
EVOLVE_END = "# EVOLVE-BLOCK-END"
DEFAULT_TIMEOUT_S = 10.0

_TOP_KEYS = frozenset(
    {
        "name",
        "entry_function",
        "timeout_s",
        "metrics",
        "validator_sha256",
        "descriptors",
        "cascade",
        "noise",
    }
)
_METRIC_KEYS = frozenset(
    {"primary", "higher_is_better", "lower_bound", "upper_bound", "sentinel", "best_known", "extra"}
)


def builtin_root() -> Path:
    """Directory holding the built-in problems (shipped as package data)."""
    return Path(__file__).resolve().parent / "builtin"


def builtin_problem_names() -> list[str]:
    """Sorted names of the built-in problems (subdirectories with a ``problem.yaml``)."""
    root = builtin_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "problem.yaml").is_file())


def load_problem(name: str | None = None, directory: str | Path | None = None) -> Problem:
    """Load and statically check a problem.

    Args:
        name: a built-in problem name (see ``builtin_problem_names()``).
        directory: path of a problem directory. Exactly one of ``name`` and
            ``directory`` must be given.

    Returns:
        The loaded ``Problem`` (its ``directory`` is absolute).

    Raises:
        ProblemError: one line naming the culprit: unknown name, missing
            directory or file, bad YAML, a missing, unknown or ill-typed key,
            inconsistent bounds, or an initial program or validator that does
            not have the required shape.
    """
    if (name is None) == (directory is None):
        raise ProblemError("load_problem: give exactly one of name= or directory=")
    if name is not None:
        names = builtin_problem_names()
        if name not in names:
            raise ProblemError(
                f"problem.name={name!r} is not a built-in problem; "
                f"choose one of: {', '.join(names)}"
            )
        root = builtin_root() / name
    else:
        root = Path(str(directory)).expanduser().resolve()
        if not root.is_dir():
            raise ProblemError(f"problem.dir={root}: no such directory")

    spec_path = root / "problem.yaml"
    raw = _read_yaml(spec_path)
    entry = _entry_function(raw, spec_path)
    metrics, extra = _metrics(raw, spec_path)
    description = _read_text(root / "task.md")
    if not description.strip():
        raise ProblemError(f"{root / 'task.md'}: is empty")
    cascade = parse_cascade(raw, spec_path)
    entries = (entry,) if cascade is None else (entry, cascade.entry_function)
    programs = tuple(_check_program(p, entries) for p in _initial_program_paths(root))
    validator_path = root / "validator.py"
    _check_validator(validator_path)
    digest = _validator_digest(validator_path, raw, spec_path)
    return Problem(
        name=_optional_str(raw, "name", spec_path) or root.name,
        directory=root,
        description=description,
        initial_programs=programs,
        entry_function=entry,
        validator_path=validator_path,
        metrics=metrics,
        timeout_s=_timeout(raw, spec_path),
        extra_metrics=extra,
        validator_sha256=digest,
        descriptors=parse_descriptors(raw, (metrics.primary, *extra), spec_path),
        cascade=cascade,
        noise=_noise(raw, spec_path, metrics.primary),
    )


# ---------------------------------------------------------------- file reading


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise ProblemError(f"{path}: no such file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read ({_one_line(str(exc))})") from exc


def _read_yaml(path: Path) -> dict[str, Any]:
    text = _read_text(path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = str(exc)
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark and exc.problem:
            mark = exc.problem_mark
            detail = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
        raise ProblemError(f"{path}: invalid YAML ({_one_line(detail)})") from exc
    if not isinstance(raw, dict):
        raise ProblemError(f"{path}: must be a YAML mapping of keys to values")
    unknown = sorted(str(k) for k in raw if k not in _TOP_KEYS)
    if unknown:
        allowed = ", ".join(sorted(_TOP_KEYS))
        raise ProblemError(f"{path}: unknown key {unknown[0]!r} (allowed: {allowed})")
    return raw


def _parse_python(path: Path) -> tuple[str, ast.Module]:
    source = _read_text(path)
    try:
        tree = pyast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(
            f"{path}: does not parse as Python (line {exc.lineno}: {_one_line(exc.msg)})"
        ) from exc
    return source, tree


# ------------------------------------------------------------- problem.yaml


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(section: dict[str, Any], key: str, where: str, path: Path) -> float:
    if key not in section:
        raise ProblemError(f"{path}: {where}{key} is missing")
    value = section[key]
    if not _is_number(value):
        raise ProblemError(f"{path}: {where}{key} must be a number")
    if not math.isfinite(float(value)):
        raise ProblemError(f"{path}: {where}{key} must be finite")
    return float(value)


def _optional_str(raw: dict[str, Any], key: str, path: Path) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ProblemError(f"{path}: {key} must be a non-empty string")
    return value.strip()


def _entry_function(raw: dict[str, Any], path: Path) -> str:
    entry = _optional_str(raw, "entry_function", path)
    if entry is None:
        raise ProblemError(f"{path}: entry_function is missing")
    if not entry.isidentifier():
        raise ProblemError(f"{path}: entry_function must be a Python identifier, got {entry!r}")
    return entry


def _timeout(raw: dict[str, Any], path: Path) -> float:
    if raw.get("timeout_s") is None:
        return DEFAULT_TIMEOUT_S
    timeout = _number(raw, "timeout_s", "", path)
    if timeout <= 0:
        raise ProblemError(f"{path}: timeout_s must be positive")
    return timeout


def _noise(raw: dict[str, Any], path: Path, primary: str) -> MeasurementNoise:
    try:
        return parse_noise(raw.get("noise"), primary)
    except ValueError as exc:
        raise ProblemError(f"{path}: {exc}") from exc


def _extra_names(section: dict[str, Any], primary: str, path: Path) -> tuple[str, ...]:
    extra = section.get("extra")
    if extra is None:
        return ()
    if not isinstance(extra, list) or not all(isinstance(e, str) and e for e in extra):
        raise ProblemError(f"{path}: metrics.extra must be a list of metric names")
    if len(set(extra)) != len(extra) or primary in extra:
        raise ProblemError(f"{path}: metrics.extra must not repeat a name or the primary metric")
    return tuple(extra)


def _metrics(raw: dict[str, Any], path: Path) -> tuple[MetricsSpec, tuple[str, ...]]:
    section = mapping_section(raw, "metrics", _METRIC_KEYS, path)
    if section is None:
        raise ProblemError(f"{path}: metrics is missing")
    primary = section.get("primary")
    if not isinstance(primary, str) or not primary.strip():
        raise ProblemError(f"{path}: metrics.primary must be a non-empty string")
    higher = section.get("higher_is_better")
    if not isinstance(higher, bool):
        raise ProblemError(f"{path}: metrics.higher_is_better must be true or false")
    lower = _number(section, "lower_bound", "metrics.", path)
    upper = _number(section, "upper_bound", "metrics.", path)
    if lower >= upper:
        raise ProblemError(
            f"{path}: metrics.lower_bound ({lower}) must be below metrics.upper_bound ({upper})"
        )
    sentinel = _number(section, "sentinel", "metrics.", path)
    best_known = None
    if section.get("best_known") is not None:
        best_known = _number(section, "best_known", "metrics.", path)
    spec = MetricsSpec(
        primary=primary.strip(),
        higher_is_better=higher,
        lower_bound=lower,
        upper_bound=upper,
        sentinel=sentinel,
        best_known=best_known,
    )
    return spec, _extra_names(section, spec.primary, path)


# ------------------------------------------------------ programs and validator


def _initial_program_paths(root: Path) -> list[Path]:
    single = root / "initial_program.py"
    folder = root / "initial_programs"
    if single.exists() and folder.exists():
        raise ProblemError(f"{root}: has both initial_program.py and initial_programs/; keep one")
    if single.exists():
        return [single]
    if folder.is_dir():
        paths = sorted(folder.glob("*.py"))
        if not paths:
            raise ProblemError(f"{folder}: contains no *.py initial program")
        return paths
    raise ProblemError(
        f"{root}: no initial program (expected initial_program.py or initial_programs/*.py)"
    )


def _marker_lines(source: str, marker: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if line.strip() == marker]


def _check_program(path: Path, entries: tuple[str, ...]) -> str:
    """Return the program's source after checking its markers and entry functions."""
    source, tree = _parse_python(path)
    starts = _marker_lines(source, EVOLVE_START)
    ends = _marker_lines(source, EVOLVE_END)
    if len(starts) != 1 or len(ends) != 1:
        raise ProblemError(
            f"{path}: needs exactly one {EVOLVE_START!r} line and one {EVOLVE_END!r} line "
            f"(found {len(starts)} and {len(ends)})"
        )
    if starts[0] > ends[0]:
        raise ProblemError(
            f"{path}: {EVOLVE_START!r} (line {starts[0]}) must come before "
            f"{EVOLVE_END!r} (line {ends[0]})"
        )
    for entry in entries:
        func = _top_level_function(tree, entry)
        if func is None:
            raise ProblemError(f"{path}: no top-level 'def {entry}' (an entry_function)")
        args = func.args
        required = len(args.posonlyargs) + len(args.args) - len(args.defaults)
        required += sum(1 for d in args.kw_defaults if d is None)
        if required:
            raise ProblemError(f"{path}: {entry}() must be callable with no arguments")
    return source


def _top_level_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _check_validator(path: Path) -> None:
    _, tree = _parse_python(path)
    if _top_level_function(tree, "validate") is None:
        raise ProblemError(f"{path}: no top-level 'def validate(output)'")


def _validator_digest(path: Path, raw: dict[str, Any], spec_path: Path) -> str:
    """SHA-256 of ``validator.py``, checked against ``validator_sha256`` when problem.yaml pins it.

    The sandbox compiles exactly these bytes and refuses a file that changes
    afterwards; the pin also catches a change made between runs (the
    built-in problems pin theirs).
    """
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    pinned = _optional_str(raw, "validator_sha256", spec_path)
    if pinned is not None and pinned.lower() != digest:
        raise ProblemError(
            f"{path}: sha256 {digest[:12]}... does not match validator_sha256 "
            f"{pinned[:12]}... in {spec_path.name} (the validator changed on disk; "
            "restore it, or update the pin if the change is yours)"
        )
    return digest
