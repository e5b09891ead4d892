"""The Program record, its id scheme and code normalisation for duplicate detection."""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from gigaevo.programs import pyast


class ProgramStatus(StrEnum):
    """What became of a program once it was committed to the store."""

    INITIAL = "initial"  # a seed program of the problem
    ACCEPTED = "accepted"  # valid and entered at least one island archive
    REJECTED = "rejected"  # valid but not good enough for its cell
    INVALID = "invalid"  # failed to mutate, run or validate; reason recorded
    DUPLICATE = "duplicate"  # normalised code equal to an earlier program; not evaluated


def clip_text(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a note.

    The head keeps two thirds of the room, the tail the rest; the note says
    how many characters were left out. The result is at most ``limit``
    characters long (for ``limit`` >= 64).
    """
    if len(text) <= limit:
        return text
    note = f"\n[... {len(text)} characters in all; the middle is left out ...]\n"
    room = max(0, limit - len(note))
    head = (2 * room) // 3
    tail = room - head
    return text[:head] + note + (text[len(text) - tail :] if tail else "")


@dataclass(frozen=True)
class MutationInfo:
    """How a child was produced: which operator, which model, what it said.

    ``raw_answer`` is kept when the answer failed to parse or apply, clipped
    to a bounded head and tail (``raw_answer_chars`` is the full length), so
    that a model answering megabytes of garbage grows the store by kilobytes.
    """

    model: str
    tactic: str = ""
    change_report: str = ""
    explanation: str = ""
    card_ids_used: tuple[str, ...] = ()
    inspiration_ids: tuple[str, ...] = ()
    failure: str | None = None  # reason when the answer could not be turned into a child
    raw_answer: str | None = None  # kept (clipped) when the answer failed to parse
    raw_answer_chars: int | None = None  # length of the whole raw answer

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["card_ids_used"] = list(self.card_ids_used)
        d["inspiration_ids"] = list(self.inspiration_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MutationInfo:
        d = dict(d)
        d["card_ids_used"] = tuple(d.get("card_ids_used", ()))
        d["inspiration_ids"] = tuple(d.get("inspiration_ids", ()))
        return cls(**d)


@dataclass(frozen=True)
class Program:
    """One evaluated (or attempted) program and its lineage.

    ``fitness`` is the primary metric for valid programs and the problem's
    sentinel otherwise. ``cell`` is the MAP-Elites cell on ``island`` (None
    when the program never had behaviour coordinates, e.g. it was invalid).
    ``ordinal`` is the commit order: 0.. for initial programs, then mutants.
    ``output_tail`` is the end of what the program printed when evaluated and
    ``feedback`` the text its validator returned (both bounded, "" if none);
    they reach the prompts of its children.
    """

    id: str
    code: str
    ordinal: int
    parent_ids: tuple[str, ...] = ()
    generation: int = 0
    island: int = 0
    cell: tuple[int, ...] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    fitness: float = 0.0
    valid: bool = False
    invalid_reason: str | None = None
    status: ProgramStatus = ProgramStatus.INITIAL
    mutation: MutationInfo | None = None
    eval_seconds: float = 0.0
    duplicate_of: str | None = None
    output_tail: str = ""
    feedback: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "code": self.code,
            "ordinal": self.ordinal,
            "parent_ids": list(self.parent_ids),
            "generation": self.generation,
            "island": self.island,
            "cell": list(self.cell) if self.cell is not None else None,
            "metrics": dict(self.metrics),
            "fitness": self.fitness,
            "valid": self.valid,
            "invalid_reason": self.invalid_reason,
            "status": str(self.status),
            "mutation": self.mutation.to_dict() if self.mutation else None,
            "eval_seconds": self.eval_seconds,
            "duplicate_of": self.duplicate_of,
            "output_tail": self.output_tail,
            "feedback": self.feedback,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Program:
        return cls(
            id=d["id"],
            code=d["code"],
            ordinal=int(d["ordinal"]),
            parent_ids=tuple(d.get("parent_ids", ())),
            generation=int(d.get("generation", 0)),
            island=int(d.get("island", 0)),
            cell=tuple(d["cell"]) if d.get("cell") is not None else None,
            metrics={k: float(v) for k, v in (d.get("metrics") or {}).items()},
            fitness=float(d.get("fitness", 0.0)),
            valid=bool(d.get("valid", False)),
            invalid_reason=d.get("invalid_reason"),
            status=ProgramStatus(d.get("status", "initial")),
            mutation=MutationInfo.from_dict(d["mutation"]) if d.get("mutation") else None,
            eval_seconds=float(d.get("eval_seconds", 0.0)),
            duplicate_of=d.get("duplicate_of"),
            output_tail=str(d.get("output_tail") or ""),
            feedback=str(d.get("feedback") or ""),
        )


def make_program_id(run_seed: int, ordinal: int, code: str) -> str:
    """Deterministic id: the same seed, commit ordinal and code give the same id.

    Returns 16 hex digits of SHA-256 over the three, so ids are stable across
    runs and resumes and independent of worker timing.
    """
    h = hashlib.sha256(f"{run_seed}\x00{ordinal}\x00{code}".encode())
    return h.hexdigest()[:16]


def normalise_code(code: str) -> str:
    """Code with comments, docstring-free formatting and whitespace removed.

    Two programs that differ only in comments or layout normalise equal. Code
    that parses is round-tripped through ``ast.unparse``; code that does not is
    reduced token by token (comments and whitespace dropped); text after the
    point where tokenising fails is compared with all whitespace stripped.
    """
    try:
        return ast.unparse(pyast.parse(code))
    except (SyntaxError, ValueError):
        pass
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    toks: list[str] = []
    last_line = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            last_line = tok.end[0]
            if tok.type not in skip:
                toks.append(tok.string)
    except tokenize.TokenError as exc:
        # keep the tokens read so far; compare the unread rest without whitespace
        line, col = exc.args[1] if len(exc.args) > 1 else (last_line + 1, 0)
        toks.append(_squeeze_from(code, line, col))
    except (IndentationError, SyntaxError):
        toks.append(_squeeze_from(code, last_line + 1, 0))
    return " ".join(toks)


def _squeeze_from(code: str, line: int, col: int) -> str:
    """The text from 1-based ``line``, 0-based ``col`` onwards, whitespace removed."""
    lines = code.splitlines()
    rest = [lines[line - 1][col:], *lines[line:]] if 0 < line <= len(lines) else []
    return "".join("".join(rest).split())


def code_digest(code: str) -> str:
    """SHA-256 of the normalised code: the duplicate-detection key."""
    return hashlib.sha256(normalise_code(code).encode()).hexdigest()
