"""The scratchpad file format: fixed sections, one-line entries, provenance; a scanner.

A scratchpad is a Markdown file::

    # Scratchpad
    <!-- a comment line is allowed anywhere -->

    ## Hypotheses
    - [card.swap-loops] swapping the two loops may help [src:card:c12 @ 2025-11-30]

    ## Decisions
    - [config.llm] mutations by offline-mutator [src:config @ 2025-11-30]

    ## Findings
    - [best] best f so far 0.125 by program 3fa1 [src:3fa1 @ 2025-11-30]

    ## Open
    - [attempt.41] (resolved) outcome of attempt 41 awaited

The four ``##`` sections appear exactly once, in this order; before the first
one only blank lines, one ``#`` title and comment lines may appear. Inside a
section every non-blank line is a comment or an entry
``- [<key>] [(<status>) ]<text>[ [src:<source> @ <YYYY-MM-DD>]]``. Keys are
unique in the whole file. Findings and Decisions entries must carry the
provenance; Open items may be ``(resolved)`` and Findings or Hypotheses
``(obsolete)``, which ``prune`` then removes.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from gigaevo.scratchpad.errors import InvalidEntryError

HYPOTHESES, DECISIONS, FINDINGS, OPEN = "Hypotheses", "Decisions", "Findings", "Open"
SECTIONS: tuple[str, ...] = (HYPOTHESES, DECISIONS, FINDINGS, OPEN)
EVIDENCED: tuple[str, ...] = (DECISIONS, FINDINGS)  # provenance required here
RESOLVED, OBSOLETE = "resolved", "obsolete"
STATUSES: dict[str, tuple[str, ...]] = {
    OPEN: (RESOLVED,),
    FINDINGS: (OBSOLETE,),
    HYPOTHESES: (OBSOLETE,),
}

MAX_KEY_CHARS = 96  # keys a caller may choose; "rev:" + key still fits the parser's 100
MAX_TEXT_CHARS = 400  # an entry is a conclusion, not a dump
MAX_SOURCE_CHARS = 120
TITLE = "# Scratchpad"
PROVENANCE = "[src:<source> @ <YYYY-MM-DD>]"
SKELETON = (
    f"{TITLE}\n"
    "<!-- Validated conclusions only. One entry per key: - [key] text "
    "[src:<source> @ <YYYY-MM-DD>], provenance required in Decisions and Findings. "
    "Edit with: python -m gigaevo.scratchpad -->\n" + "".join(f"\n## {name}\n" for name in SECTIONS)
)

KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")
_ENTRY_RE = re.compile(r"^- \[(?P<key>[^\]]*)\](?: (?P<body>.*))?$")
_STATUS_RE = re.compile(r"^\((?P<status>[a-z]+)\) ")
_PROV_RE = re.compile(r" ?\[src:(?P<source>[^\[\]]*) @ (?P<date>[^\[\]]*)\]$")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_COMMENT_RE = re.compile(r"^<!--.*-->$")

# contract ids the scanner's findings belong to (see assets/manifest.json)
RULE_SECTIONS, RULE_EVIDENCE, RULE_KEYS = "sections", "minimum_evidence", "idempotent_write"


@dataclass(frozen=True)
class Entry:
    """One line of the scratchpad.

    Attributes:
        section: one of ``SECTIONS``.
        key: the stable key shown in brackets.
        text: the claim, one line.
        source: provenance source (None when the entry has no provenance).
        date: provenance date (set exactly when ``source`` is).
        status: ``"resolved"``, ``"obsolete"`` or None (active).
        line: 1-based line in the file it was read from (0 for a new entry).
    """

    section: str
    key: str
    text: str
    source: str | None = None
    date: dt.date | None = None
    status: str | None = None
    line: int = 0

    @property
    def active(self) -> bool:
        return self.status is None

    def render(self) -> str:
        """The entry's line, without the newline."""
        status = f"({self.status}) " if self.status else ""
        prov = ""
        if self.source is not None and self.date is not None:
            prov = f" [src:{self.source} @ {self.date.isoformat()}]"
        return f"- [{self.key}] {status}{self.text}{prov}"

    def same_claim(self, other: Entry) -> bool:
        """Same section, text, source and status (the date may differ)."""
        return (self.section, self.text, self.source, self.status) == (
            other.section,
            other.text,
            other.source,
            other.status,
        )


@dataclass(frozen=True)
class Issue:
    """One problem found by the scanner: 1-based line (0: whole file), contract id, message."""

    line: int
    rule: str
    message: str


@dataclass
class Layout:
    """Where things are in the text: entries in file order, their spans, insertion points."""

    entries: list[Entry] = field(default_factory=list)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> [start, end) w/o \n
    inserts: dict[str, int] = field(default_factory=dict)  # section -> offset of a new line


def validate_key(key: str) -> None:
    """Raises InvalidEntryError unless ``key`` is a usable stable key."""
    if not KEY_RE.fullmatch(key) or len(key) > MAX_KEY_CHARS:
        raise InvalidEntryError(
            f"bad key {key!r}: use 1-{MAX_KEY_CHARS} characters from A-Z a-z 0-9 . _ : - "
            "starting with a letter or digit"
        )


def check_text(text: str, *, limit: int = MAX_TEXT_CHARS) -> str | None:
    """Why ``text`` cannot be an entry's claim, or None when it can."""
    if not text.strip():
        return "the text is empty"
    if "\n" in text or "\r" in text:
        return "the text must be one line (an entry is a conclusion, not a transcript)"
    if text != text.strip():
        return "the text must not start or end with spaces"
    if "[src:" in text:
        return "the text must not contain '[src:' (give the provenance separately)"
    if _STATUS_RE.match(text):
        return "the text must not start with a '(status) ' marker"
    if len(text) > limit:
        return f"the text has {len(text)} characters; the limit is {limit} (no raw dumps)"
    return None


def check_source(source: str) -> str | None:
    """Why ``source`` cannot be a provenance source, or None when it can."""
    if not source or source != source.strip():
        return "the source must be non-empty, without leading or trailing spaces"
    if any(c in source for c in "[]@\n\r"):
        return "the source must not contain '[', ']', '@' or a line break"
    if len(source) > MAX_SOURCE_CHARS:
        return f"the source has more than {MAX_SOURCE_CHARS} characters"
    return None


def parse_date(value: str) -> dt.date | None:
    """``YYYY-MM-DD`` as a date, or None when it is not a real calendar date."""
    if not _DATE_RE.fullmatch(value):
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        return None


def split_lines(text: str) -> list[tuple[int, int, str]]:
    """``(line number, start offset, content without newline)`` for every line."""
    out: list[tuple[int, int, str]] = []
    pos = 0
    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        content = raw[:-1] if raw.endswith("\n") else raw
        out.append((number, pos, content))
        pos += len(raw)
    return out


def parse_entry(
    section: str, number: int, content: str, evidenced: tuple[str, ...] = EVIDENCED
) -> tuple[Entry | None, list[Issue]]:
    """Read one entry line of ``section``; the entry is None when the line is unusable."""
    m = _ENTRY_RE.match(content)
    if m is None:
        return None, [Issue(number, RULE_SECTIONS, "not an entry (expected '- [key] text')")]
    key, body = m.group("key"), (m.group("body") or "")
    if not KEY_RE.fullmatch(key):
        return None, [Issue(number, RULE_SECTIONS, f"bad key [{key}]")]
    status = None
    sm = _STATUS_RE.match(body)
    if sm is not None:
        status, body = sm.group("status"), body[sm.end() :]
        if status not in STATUSES.get(section, ()):
            msg = f"entry '{key}': status '({status})' is not allowed in {section}"
            return None, [Issue(number, RULE_SECTIONS, msg)]
    source, date = None, None
    pm = _PROV_RE.search(body)
    if pm is not None:
        source, raw_date, body = pm.group("source").strip(), pm.group("date"), body[: pm.start()]
        date = parse_date(raw_date)
        if date is None or not source:
            msg = f"entry '{key}': malformed provenance [src:{source} @ {raw_date}]"
            return None, [Issue(number, RULE_EVIDENCE, msg)]
    elif "[src:" in body:
        msg = f"entry '{key}': malformed provenance (expected {PROVENANCE} at the end)"
        return None, [Issue(number, RULE_EVIDENCE, msg)]
    if not body.strip():
        return None, [Issue(number, RULE_SECTIONS, f"entry '{key}' has no text")]
    entry = Entry(section, key, body.strip(), source, date, status, number)
    issues = []
    if section in evidenced and source is None:
        issues.append(
            Issue(
                number,
                RULE_EVIDENCE,
                f"{section} entry '{key}' has no provenance [src:<source> @ <YYYY-MM-DD>]; "
                "unvalidated notes belong in Hypotheses or Open",
            )
        )
    return entry, issues


class _Scanner:
    """State of one pass over a scratchpad text."""

    def __init__(self, text: str, sections: tuple[str, ...], evidenced: tuple[str, ...]) -> None:
        self.text = text
        self.sections = sections
        self.evidenced = evidenced
        self.layout = Layout()
        self.issues: list[Issue] = []
        self.current: str | None = None  # None: preamble or an unknown section
        self.in_preamble = True
        self.title_seen = False
        self.seen: list[str] = []

    def run(self) -> None:
        if "\x00" in self.text:
            line = self.text[: self.text.index("\x00")].count("\n") + 1
            self.issues.append(Issue(line, RULE_SECTIONS, "binary content (NUL byte)"))
            return
        for number, start, content in split_lines(self.text):
            self.line(number, start, content)
        for name in self.sections:
            if name not in self.seen:
                self.issues.append(Issue(0, RULE_SECTIONS, f"missing section '## {name}'"))

    def line(self, number: int, start: int, content: str) -> None:
        end = start + len(content) + 1  # start of the next line
        if "\r" in content:
            self.issues.append(Issue(number, RULE_SECTIONS, "carriage return (use LF line ends)"))
        elif not content.strip() or _COMMENT_RE.match(content.strip()):
            return
        elif content.startswith("## "):
            self.heading(number, content[3:].strip(), end)
        elif content.startswith("# ") and self.in_preamble and not self.title_seen:
            self.title_seen = True
        elif self.in_preamble:
            self.issues.append(Issue(number, RULE_SECTIONS, "text before the first section"))
        elif self.current is not None:
            self.entry(number, start, content, end)

    def heading(self, number: int, name: str, end: int) -> None:
        self.in_preamble = False
        self.current = None
        if name not in self.sections:
            fixed = ", ".join(f"## {s}" for s in self.sections)
            msg = f"unknown section '## {name}' (the schema is fixed: {fixed})"
            self.issues.append(Issue(number, RULE_SECTIONS, msg))
        elif name in self.seen:
            self.issues.append(Issue(number, RULE_SECTIONS, f"section '## {name}' appears twice"))
        elif self.seen and self.sections.index(name) < self.sections.index(self.seen[-1]):
            msg = f"section '## {name}' is out of order (expected {', '.join(self.sections)})"
            self.issues.append(Issue(number, RULE_SECTIONS, msg))
            self.seen.append(name)
        else:
            self.seen.append(name)
            self.current = name
            self.layout.inserts[name] = end

    def entry(self, number: int, start: int, content: str, end: int) -> None:
        assert self.current is not None
        entry, issues = parse_entry(self.current, number, content, self.evidenced)
        self.issues.extend(issues)
        if entry is None:
            return
        if entry.key in self.layout.spans:
            first = next(e.line for e in self.layout.entries if e.key == entry.key)
            msg = f"key '{entry.key}' appears twice (first on line {first}); one entry per key"
            self.issues.append(Issue(number, RULE_KEYS, msg))
            return
        self.layout.entries.append(entry)
        self.layout.spans[entry.key] = (start, start + len(content))
        self.layout.inserts[self.current] = end


def scan(
    text: str, sections: tuple[str, ...] = SECTIONS, evidenced: tuple[str, ...] = EVIDENCED
) -> tuple[Layout, list[Issue]]:
    """Read ``text`` as a scratchpad; returns its layout and every problem found (in order).

    ``sections`` and ``evidenced`` (sections needing provenance) default to the
    fixed schema; the checker passes the values of its contracts. The text is
    usable only when the issue list is empty.
    """
    scanner = _Scanner(text, sections, evidenced)
    scanner.run()
    return scanner.layout, scanner.issues
