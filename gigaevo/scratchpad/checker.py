"""Checks design reports and scratchpad files against the offline contracts in ``assets/``.

``assets/manifest.json`` lists the contracts (one JSON file each under
``assets/contracts/``). A contract holds ``rules`` on the design report, each
``{"pointer": "/block/field", "op": ..., "value": ..., "optional": bool}``
with ``op`` one of ``equals``, ``one_of``, ``matches`` (regex search),
``contains_all``, ``subset_of``, ``at_most``, ``at_least``; and optional
``lint`` parameters used when a scratchpad file is checked. Every problem is
one line: ``<file>[:<line>]: <contract id>: <message>``.

Run as ``scripts/check.sh REPORT.json`` or ``scripts/check.sh --scratchpad
FILE`` (``python -m gigaevo.scratchpad.checker``): exit 0 when everything
holds, 1 with one line per violation, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gigaevo.scratchpad.errors import CorruptScratchpadError, ScratchpadError
from gigaevo.scratchpad.format import EVIDENCED, MAX_TEXT_CHARS, SECTIONS, scan
from gigaevo.scratchpad.pad import read_text, utc_today

OPS = ("equals", "one_of", "matches", "contains_all", "subset_of", "at_most", "at_least")
OK, VIOLATIONS, USAGE = 0, 1, 2


class ContractsError(ScratchpadError):
    """The manifest or a contract file is missing or malformed (names the file)."""


@dataclass(frozen=True)
class Rule:
    """One requirement on a value of the report, found by JSON pointer."""

    pointer: str
    op: str
    value: Any
    optional: bool = False


@dataclass(frozen=True)
class Contract:
    """A named set of rules (and lint parameters) from ``assets/contracts/<id>.json``."""

    id: str
    title: str
    requirement: str
    rules: tuple[Rule, ...]
    lint: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Contracts:
    """The manifest: report shape and every contract, in manifest order."""

    report_version: int
    required: tuple[str, ...]
    optional: tuple[str, ...]
    contracts: tuple[Contract, ...]

    def lint(self, contract_id: str, name: str, default: Any) -> Any:
        """A lint parameter of a contract (``default`` when the contract sets none)."""
        for c in self.contracts:
            if c.id == contract_id:
                return c.lint.get(name, default)
        return default


def default_assets_dir() -> Path:
    """The repository's ``assets/`` directory (beside the ``gigaevo`` package)."""
    return Path(__file__).resolve().parents[2] / "assets"


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ContractsError(f"{path}: cannot read ({exc.strerror})") from exc
    except ValueError as exc:
        raise ContractsError(f"{path}: not valid JSON ({exc})") from exc


def _contract(path: Path, expected_id: str) -> Contract:
    doc = _load_json(path)
    if not isinstance(doc, dict) or doc.get("id") != expected_id:
        raise ContractsError(f"{path}: must be an object with id {expected_id!r}")
    rules = []
    for i, r in enumerate(doc.get("rules", [])):
        if not isinstance(r, dict) or r.get("op") not in OPS or "pointer" not in r:
            raise ContractsError(f"{path}: rule {i} needs a pointer and an op in {OPS}")
        rules.append(Rule(str(r["pointer"]), str(r["op"]), r.get("value"), bool(r.get("optional"))))
    lint = doc.get("lint", {})
    return Contract(
        id=expected_id,
        title=str(doc.get("title", "")),
        requirement=str(doc.get("requirement", "")),
        rules=tuple(rules),
        lint=lint if isinstance(lint, dict) else {},
    )


def load_contracts(assets_dir: str | Path | None = None) -> Contracts:
    """Read ``manifest.json`` and every contract it lists.

    Raises:
        ContractsError: a missing or malformed manifest or contract (names the file).
    """
    root = Path(assets_dir) if assets_dir is not None else default_assets_dir()
    manifest = _load_json(root / "manifest.json")
    try:
        report = manifest["report"]
        contracts = tuple(
            _contract(root / entry["file"], entry["id"]) for entry in manifest["contracts"]
        )
        return Contracts(
            int(report["report_version"]),
            tuple(report["required"]),
            tuple(report.get("optional", ())),
            contracts,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ContractsError(f"{root / 'manifest.json'}: malformed ({exc!r})") from exc


# -- design reports -------------------------------------------------------------------
_MISSING = object()


def _resolve(doc: Any, pointer: str) -> Any:
    node = doc
    for part in pointer.strip("/").split("/"):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _js(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _violation(rule: Rule, value: Any) -> str | None:
    """Why ``value`` breaks ``rule``, or None when it holds."""
    want, op = rule.value, rule.op
    if op == "equals" and _js(value) != _js(want):
        return f"must equal {_js(want)} (got {_js(value)})"
    if op == "one_of" and _js(value) not in {_js(w) for w in want}:
        return f"must be one of {_js(want)} (got {_js(value)})"
    if op == "matches" and not (isinstance(value, str) and re.search(want, value)):
        return f"must match /{want}/ (got {_js(value)})"
    if op in ("contains_all", "subset_of"):
        if not isinstance(value, list):
            return f"must be a list (got {_js(value)})"
        if op == "contains_all" and (missing := [w for w in want if w not in value]):
            return f"must include {_js(missing)} (got {_js(value)})"
        if op == "subset_of" and (extra := [v for v in value if v not in want]):
            return f"may only name {_js(want)} (got {_js(extra)})"
    if op in ("at_most", "at_least"):
        if not _is_number(value):
            return f"must be a number (got {_js(value)})"
        if (op == "at_most" and value > want) or (op == "at_least" and value < want):
            return f"must be {op.replace('_', ' ')} {_js(want)} (got {_js(value)})"
    return None


def check_report(report: Any, contracts: Contracts) -> list[str]:
    """Every violation of ``report`` as ``<contract id>: <message>`` (empty when it passes)."""
    if not isinstance(report, dict):
        return ["report: the design report must be a JSON object"]
    out: list[str] = []
    has_version = "report_version" in report
    if has_version and _js(report.get("report_version")) != _js(contracts.report_version):
        got = _js(report.get("report_version"))
        out.append(f"report: /report_version must equal {contracts.report_version} (got {got})")
    for block in contracts.required:
        if block not in report:
            out.append(f"report: missing block /{block}")
    allowed = set(contracts.required) | set(contracts.optional)
    for key in sorted(set(report) - allowed):
        out.append(f"report: unknown key /{key} (allowed: {', '.join(sorted(allowed))})")
    for contract in contracts.contracts:
        for rule in contract.rules:
            value = _resolve(report, rule.pointer)
            if value is _MISSING:
                line = f"{contract.id}: {rule.pointer} is missing"
                if not rule.optional and line not in out:  # several rules may share a pointer
                    out.append(line)
                continue
            problem = _violation(rule, value)
            if problem is not None:
                out.append(f"{contract.id}: {rule.pointer} {problem}")
    return out


def check_report_file(path: str | Path, contracts: Contracts) -> list[str]:
    """Violations of the report in ``path``, one line each, prefixed with the path.

    Raises:
        OSError: the file cannot be read (FileNotFoundError when there is none).
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        report = json.loads(data)
    except ValueError as exc:
        return [f"{path}: report: not valid JSON ({exc})"]
    return [f"{path}: {line}" for line in check_report(report, contracts)]


# -- scratchpad files -------------------------------------------------------------------
def lint_scratchpad(
    path: str | Path, contracts: Contracts, today: dt.date | None = None
) -> list[str]:
    """Violations of a scratchpad file, one line each (``<path>[:<line>]: <contract>: ...``).

    Raises:
        FileNotFoundError: there is no such file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(path)
    out = []
    pattern = contracts.lint("allowed_path", "path_pattern", r"(^|/)\.agent/[^/]+\.md$")
    if not re.search(pattern, path.resolve().as_posix()):
        out.append(f"{path}: allowed_path: a scratchpad lives at .agent/<name>.md (/{pattern}/)")
    try:
        text = read_text(path)
    except CorruptScratchpadError as exc:  # empty, unreadable or not UTF-8
        where = f"{path}:{exc.line}" if exc.line else str(path)
        return [*out, f"{where}: sections: {exc.problem}"]
    if text is None:  # removed since the existence check
        raise FileNotFoundError(path)
    sections = tuple(contracts.lint("sections", "sections", SECTIONS))
    required_in = tuple(contracts.lint("minimum_evidence", "required_in", EVIDENCED))
    layout, issues = scan(text, sections, required_in)
    for issue in issues:
        where = f"{path}:{issue.line}" if issue.line else str(path)
        out.append(f"{where}: {issue.rule}: {issue.message}")
    limit = int(contracts.lint("minimum_evidence", "max_entry_chars", MAX_TEXT_CHARS))
    ahead = int(contracts.lint("minimum_evidence", "max_days_ahead", 1))
    latest = (today or utc_today()) + dt.timedelta(days=ahead)
    for e in layout.entries:
        if len(e.text) > limit:
            out.append(
                f"{path}:{e.line}: minimum_evidence: entry '{e.key}' has {len(e.text)} "
                f"characters (limit {limit}): a conclusion, not a dump"
            )
        if e.date is not None and e.date > latest:
            out.append(f"{path}:{e.line}: minimum_evidence: entry '{e.key}' is dated in the future")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``check.sh REPORT.json`` or ``check.sh --scratchpad FILE``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="check.sh",
        description="Validate a scratchpad design report (JSON) or lint a scratchpad file "
        "against the contracts in assets/manifest.json. Exit 0: passes; 1: one line per "
        "violation; 2: usage error.",
    )
    parser.add_argument("report", nargs="?", help="design report to validate (JSON)")
    parser.add_argument("--scratchpad", metavar="FILE", help="scratchpad file to lint instead")
    parser.add_argument("--assets", metavar="DIR", help="contracts directory (default: assets/)")
    args = parser.parse_args(argv)
    if (args.report is None) == (args.scratchpad is None):
        print("error: give exactly one of REPORT.json or --scratchpad FILE", file=sys.stderr)
        return USAGE
    try:
        contracts = load_contracts(args.assets)
        target = args.report or args.scratchpad
        if args.report is not None:
            lines = check_report_file(target, contracts)
        else:
            lines = lint_scratchpad(target, contracts)
    except ContractsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    except OSError as exc:
        print(f"error: {target}: {exc.strerror or 'cannot read'}", file=sys.stderr)
        return USAGE
    for line in lines:
        print(line)
    if lines:
        return VIOLATIONS
    print(f"ok: {target} meets {len(contracts.contracts)} contracts")
    return OK


if __name__ == "__main__":
    sys.exit(main())
