"""``python -m gigaevo.scratchpad``: the scratchpad file protocol for agents outside the pipeline.

Every command works on one file (``--file``, default ``.agent/scratchpad.md``)
with the same library the runs use: reads once, upserts by key under the file
lock, refuses Findings and Decisions without provenance, and never overwrites a
file that does not parse. Exit codes: 0 done, 1 ``check`` found violations,
2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from gigaevo.scratchpad.checker import (
    ContractsError,
    check_report_file,
    lint_scratchpad,
    load_contracts,
)
from gigaevo.scratchpad.document import render_prompt, section_name
from gigaevo.scratchpad.errors import ScratchpadError
from gigaevo.scratchpad.format import SECTIONS, parse_date
from gigaevo.scratchpad.pad import DEFAULT_PATH, Scratchpad, WriteResult

DONE, VIOLATIONS, BAD_INPUT = 0, 1, 2

EXAMPLES = """examples:
  python -m gigaevo.scratchpad show
  python -m gigaevo.scratchpad upsert findings cache.hit "prompt cache hit rate is 93%" \\
      --source bench/run-12 --date 2025-11-30
  python -m gigaevo.scratchpad upsert hypotheses h.bigger-batch "a larger batch may help"
  python -m gigaevo.scratchpad upsert open q.retry "does the retry fix the timeout?"
  python -m gigaevo.scratchpad resolve q.retry
  python -m gigaevo.scratchpad prune
  python -m gigaevo.scratchpad check                  # lint the file against assets/contracts
  python -m gigaevo.scratchpad check --report .agent/design_report.json
"""


class _Parser(argparse.ArgumentParser):
    """Reports a usage error in one line (exit 2) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def _date(value: str) -> dt.date:
    date = parse_date(value)
    if date is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date YYYY-MM-DD")
    return date


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m gigaevo.scratchpad",
        description="Read and write an audited scratchpad: fixed sections "
        f"({', '.join(SECTIONS)}), one entry per stable key, provenance "
        "[src:<source> @ <YYYY-MM-DD>] required in Findings and Decisions.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f", "--file", default=str(DEFAULT_PATH), help="scratchpad file (default: %(default)s)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    show = sub.add_parser("show", help="print the file (created from the skeleton if missing)")
    show.add_argument("--section", help="only this section")
    show.add_argument("--json", action="store_true", help="entries as JSON")
    show.add_argument("--prompt", action="store_true", help="as shown in a mutation prompt")
    up = sub.add_parser("upsert", help="add or replace one entry by key")
    up.add_argument("section", help="hypotheses, decisions, findings or open")
    up.add_argument("key", help="stable key: letters, digits, . _ : -")
    up.add_argument("text", help="the claim, one line")
    up.add_argument("--source", help="provenance source (required in findings and decisions)")
    up.add_argument("--date", type=_date, help="provenance date YYYY-MM-DD (default: today)")
    up.add_argument(
        "--no-record-change",
        action="store_true",
        help="replacing a finding supersedes it: do not record a revision in Decisions",
    )
    res = sub.add_parser("resolve", help="mark an Open item resolved and prune it")
    res.add_argument("key")
    res.add_argument("--keep", action="store_true", help="keep it marked instead of pruning")
    obs = sub.add_parser("obsolete", help="mark a Finding or Hypothesis obsolete")
    obs.add_argument("key")
    pr = sub.add_parser("prune", help="remove resolved Open items and obsolete entries")
    pr.add_argument("keys", nargs="*", help="only these keys (default: all that qualify)")
    chk = sub.add_parser("check", help="lint the file (or a design report) against the contracts")
    chk.add_argument("--report", metavar="JSON", help="check this design report instead")
    chk.add_argument("--assets", metavar="DIR", help="contracts directory (default: assets/)")
    return parser


def _show(pad: Scratchpad, args: argparse.Namespace) -> int:
    state = pad.load()
    if args.prompt:
        print(render_prompt(state))
    elif args.json:
        data = state.to_dict()
        if args.section:
            data = {section_name(args.section): data[section_name(args.section)]}
        print(json.dumps(data, indent=2))
    elif args.section:
        name = section_name(args.section)
        print(f"## {name}")
        for entry in state.section(name):
            print(entry.render())
    else:
        sys.stdout.write(state.text)
    return DONE


def _report(result: WriteResult, what: str) -> int:
    notes = [*result.notes, *(f"pruned {key}" for key in result.removed)]
    print("; ".join(notes) if result.changed else f"unchanged: {what}")
    return DONE


def _check(args: argparse.Namespace) -> int:
    contracts = load_contracts(args.assets)
    target = args.report or args.file
    lines = (
        check_report_file(target, contracts) if args.report else lint_scratchpad(target, contracts)
    )
    for line in lines:
        print(line)
    if lines:
        return VIOLATIONS
    print(f"ok: {target} meets {len(contracts.contracts)} contracts")
    return DONE


def _run(args: argparse.Namespace) -> int:
    if args.command == "check":
        return _check(args)
    pad = Scratchpad(args.file)
    if args.command == "show":
        return _show(pad, args)
    if args.command == "upsert":
        result = pad.upsert(
            args.section,
            args.key,
            args.text,
            source=args.source,
            date=args.date,
            record_change=not args.no_record_change,
        )
        return _report(result, args.key)
    if args.command == "resolve":
        return _report(pad.resolve(args.key, prune=not args.keep), args.key)
    if args.command == "obsolete":
        return _report(pad.mark_obsolete(args.key), args.key)
    return _report(pad.prune(args.keys or None), "nothing to prune")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run one command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (ScratchpadError, ContractsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"error: {exc.filename or args.file}: {exc.strerror}", file=sys.stderr)
    return BAD_INPUT
