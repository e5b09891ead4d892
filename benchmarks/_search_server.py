"""A seeded OpenAI-compatible stand-in for a code model that reads the prompt: the search benchmark.

``bench_search_llm.py`` runs it in its own process; it prints ``port <n>`` once it
listens on 127.0.0.1::

    python benchmarks/_search_server.py --seed 1000 [--mode aware] [--median 0.2 --sigma 1.0]

Every answer is a SEARCH/REPLACE diff of the parent program in the prompt
(gigaevo's "## Parent program" block; for another framework's prompt, the block
``_latency_server.program_to_improve`` finds), drawn from a seeded generator
of the server seed, the request's ``seed`` field, the digest of that parent
program (not of the whole prompt: ids, inspirations and feedback do not
re-seed, though the answer reads them) and how many times this contestant
sent that (seed, parent) before: the same prompt and attempt seed give the
same answer whatever the arrival order.

**Paired contestants.** A client names itself in the path,
``http://127.0.0.1:<port>/c/<contestant>/v1`` (plain ``/v1`` is the contestant
""). The repeat count is kept per contestant and the contestant's name is
not part of the seed, so two contestants that ask about the same parent with
the same attempt seed draw the same random numbers (common random numbers:
configurations that make the same choices see the same answers, and two runs
of one configuration give the same history), and a contestant's repeats do
not shift another's draws.
A latency of a log-normal law (median ``--median`` s, log-sd ``--sigma``; one
answer in fifty stalls ten times longer) from a separate stream of the same
seeds delays each answer; it never changes the content.

``--mode aware`` (the default) behaves like a model that reads what it is shown:

- **a habitual mistake per parent**: for each parent (by its code's digest)
  the model has one tempting refactor, "make this constant a tunable
  ``<name>``", which it writes without defining ``<name>``: the child fails
  with ``NameError: name '<name>' is not defined``. It proposes it in
  ``TRAP_RATE`` of its answers, unless the prompt already shows that error
  (gigaevo's feedback section; anywhere in a foreign prompt): then it never
  repeats it and, in ``FIX_RATE`` (as often) of its answers, writes the same
  change correctly (the name defined on the line before: a valid child whose
  constant moved by a 10 % step, like any other perturbation). The feedback
  thus turns would-be failures into ordinary moves, no more;
- **recombination**: with inspirations shown, in ``RECOMBINE_RATE`` of its
  answers it moves some of the parent's numbers towards (or to) the
  corresponding numbers of an inspiration (aligned token by token; the
  first inspiration, the archive's best, twice as likely as each other);
- **it does not repeat a failed move**: its change report names the numbers
  it moved (``line 9: 26 -> 27``); a move that the feedback lists for a failed
  child of this parent (``line 9: 26 -> 27 -> IndexError ...``) is not made again;
- **otherwise it perturbs** 1 to 3 numbers of the EVOLVE-BLOCK: a Gaussian
  step of 10 % of their size (integers by one), or in ``BOLD_RATE`` of these
  answers a bold step of 50 %, which usually makes things worse;
- ``GARBAGE_RATE`` of its answers hold no code at all.

``--mode perturb`` only perturbs (small steps, no mistakes, no garbage) and
ignores everything but the parent: the server of the previous benchmark.
The rates are set near what code models show in published evolutionary
runs (tens of percent of children invalid, most of them repeated mistakes).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import io
import json
import math
import os
import re
import sys
import threading
import time
import tokenize
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency_server import completion, program_to_improve

from gigaevo.llm.answer_format import (
    editable_line_ranges,
    make_diff_blocks,
    render_answer,
    render_diff_blocks,
)
from gigaevo.llm.prompt_reader import fenced_blocks, read_prompt

TRAP_RATE = 0.2
FIX_RATE = TRAP_RATE  # the same idea at the same rate, written correctly
RECOMBINE_RATE = 0.5
BOLD_RATE = 0.2
GARBAGE_RATE = 0.03
STALL_RATE, STALL_FACTOR, MAX_LATENCY = 0.02, 10.0, 30.0
FEEDBACK_HEADING = "## Feedback on the parent"
_MOVE_RE = re.compile(r"line (\d+): (\S+) -> ")
_NAMES = ("gain", "scale", "factor", "weight", "ratio", "shift")


def _numbers(code: str) -> list[tokenize.TokenInfo]:
    """Numeric literals inside the EVOLVE-BLOCK (complex ones aside), in order."""
    ranges = editable_line_ranges(code)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    return [
        t
        for t in tokens
        if t.type == tokenize.NUMBER
        and any(lo <= t.start[0] <= hi for lo, hi in ranges)
        and not t.string.lower().endswith("j")
    ]


def _literal(value: float, is_int: bool) -> str:
    if is_int:
        return str(max(0, round(value)))
    text = f"{value:.6g}"
    return text if any(c in text for c in ".en") else text + ".0"


def _replace(code: str, changes: dict[tokenize.TokenInfo, str]) -> str:
    """``code`` with the given tokens' text replaced (right to left, offsets stay valid)."""
    lines = code.splitlines(keepends=True)
    for tok in sorted(changes, key=lambda t: t.start, reverse=True):
        row, col = tok.start[0] - 1, tok.start[1]
        lines[row] = lines[row][:col] + changes[tok] + lines[row][tok.end[1] :]
    return "".join(lines)


def _step(tok: tokenize.TokenInfo, rng: np.random.Generator, size: float) -> str:
    value = _value(tok)
    if tok.string.isdigit():
        return _literal(value + int(rng.choice([-1, 1])), True)
    return _literal(value + rng.normal(0.0, size) * max(abs(value), 0.01), False)


def perturb(
    code: str, rng: np.random.Generator, size: float = 0.1, avoid: frozenset = frozenset()
) -> tuple[str, str] | None:
    """``code`` with 1 to 3 numeric literals of its EVOLVE-BLOCK moved, and the moves as text
    (``line 9: 26 -> 27; ...``); None without any. Literals in ``avoid`` ((line, text)
    pairs) stay.

    Floats move by a Gaussian step of ``size`` times their size (at least 0.01),
    integers by one.
    """
    tokens = [t for t in _numbers(code) if (t.start[0], t.string) not in avoid]
    for _ in range(5):  # a step can round back to the same text (an integer at 0, say)
        if not tokens:
            return None
        k = min(len(tokens), int(rng.integers(1, 4)))
        chosen = rng.choice(len(tokens), size=k, replace=False)
        changes = {tokens[int(i)]: _step(tokens[int(i)], rng, size) for i in chosen}
        child = _replace(code, changes)
        if child != code:
            return child, _moves(changes)
    return None


def _moves(changes: dict[tokenize.TokenInfo, str]) -> str:
    items = sorted(changes.items(), key=lambda kv: kv[0].start)
    return "; ".join(f"line {t.start[0]}: {t.string} -> {new}" for t, new in items)


def recombine(
    parent: str, other: str, rng: np.random.Generator, avoid: frozenset = frozenset()
) -> tuple[str, str] | None:
    """``parent`` with some numbers moved towards ``other``'s aligned numbers; None if none differ.

    Numbers are aligned through the two token sequences with numbers masked
    (layout and comments aside); each differing pair inside the parent's
    EVOLVE-BLOCK is taken with probability 1/2 (at least one) and moves to
    ``p + u (o - p)``, ``u`` 1 in half the cases, else uniform in [0.25, 1.25].
    """
    mine, theirs = _aligned(parent), _aligned(other)
    editable = {t.start for t in _numbers(parent)}
    matcher = difflib.SequenceMatcher(
        a=[k for k, _ in mine], b=[k for k, _ in theirs], autojunk=False
    )
    pairs = []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            a, b = mine[block.a + k][1], theirs[block.b + k][1]
            if a is None or b is None or a.start not in editable:
                continue
            if (a.start[0], a.string) in avoid:
                continue
            if _value(a) != _value(b):
                pairs.append((a, b))
    if not pairs:
        return None
    take = [p for p in pairs if rng.random() < 0.5] or [pairs[int(rng.integers(len(pairs)))]]
    changes = {}
    for a, b in take:
        u = 1.0 if rng.random() < 0.5 else float(rng.uniform(0.25, 1.25))
        is_int = a.string.isdigit() and b.string.isdigit()
        changes[a] = _literal(_value(a) + u * (_value(b) - _value(a)), is_int)
    child = _replace(parent, changes)
    return None if child == parent else (child, _moves(changes))


def _value(tok: tokenize.TokenInfo) -> float:
    return float(tok.string.replace("_", ""))


def _aligned(code: str) -> list[tuple[str, tokenize.TokenInfo | None]]:
    """Alignment keys of ``code``'s tokens (numbers masked), with the number tokens."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    return [
        ("<num>", t) if t.type == tokenize.NUMBER else (t.string, None)
        for t in tokens
        if t.type not in skip
    ]


def trap_site(code: str) -> tuple[tokenize.TokenInfo, int, str, str] | None:
    """The parent's habitual mistake: (literal, its statement's line, indentation, name).

    A number on a one-line simple statement inside the EVOLVE-BLOCK, and a
    tunable's name, both chosen by the code's digest; None without any.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    lines = {
        node.lineno: node.col_offset
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr))
        and node.lineno == node.end_lineno
    }
    sites = [t for t in _numbers(code) if t.start[0] in lines]
    if not sites:
        return None
    digest = int.from_bytes(hashlib.sha256(code.encode()).digest()[:8], "big")
    tok = sites[digest % len(sites)]
    name = f"{_NAMES[(digest >> 8) % len(_NAMES)]}_{(digest >> 16) % 90 + 10}"
    return tok, tok.start[0], " " * lines[tok.start[0]], name


def trap(code: str, rng: np.random.Generator, fixed: bool) -> str | None:
    """The tunable refactor of ``trap_site``: the literal times ``name``, with ``name``
    defined on the line before (``fixed``) or not at all (a NameError when it runs)."""
    site = trap_site(code)
    if site is None:
        return None
    tok, line, indent, name = site
    value = 1.0 + float(rng.normal(0.0, 0.1))
    child = _replace(code, {tok: f"{tok.string} * {name}"})
    if not fixed:
        return child
    lines = child.splitlines(keepends=True)
    lines.insert(line - 1, f"{indent}{name} = {value:.4f}\n")
    return "".join(lines)


def feedback_text(prompt: str) -> str:
    """What the prompt says about failures: gigaevo's feedback section, else the whole prompt."""
    if FEEDBACK_HEADING not in prompt:
        return prompt if "## Parent program" not in prompt else ""
    tail = prompt.split(FEEDBACK_HEADING, 1)[1]
    out = []
    for line in tail.split("\n")[1:]:
        if line.startswith("## "):
            break
        out.append(line)
    return "\n".join(out)


def choose(prompt: str, rng: np.random.Generator, mode: str) -> tuple[str, str | None, str]:
    """(tactic, child code or None, the moves made as text) for one prompt."""
    view = read_prompt(prompt)
    parent = _parent(prompt)
    if parent is None:
        return "none", None, ""
    if mode == "perturb":
        return "perturb", *(perturb(parent, rng) or (None, ""))
    if rng.random() < GARBAGE_RATE:
        return "garbage", None, ""
    warnings = feedback_text(prompt)
    site = trap_site(parent)
    if site is not None:
        warned = f"name '{site[3]}' is not defined" in warnings
        if warned and rng.random() < FIX_RATE:
            return "fix", trap(parent, rng, fixed=True), ""
        if not warned and rng.random() < TRAP_RATE:
            return "trap", trap(parent, rng, fixed=False), ""
    # moves that the feedback lists as tried by a failed child are not made again
    avoid = frozenset((int(line), old) for line, old in _MOVE_RE.findall(warnings))
    others = [e.code for e in view.inspirations]
    if "## Parent program" not in prompt:  # a foreign prompt: its other programs
        others = _foreign_inspirations(prompt, parent)
    if others and rng.random() < RECOMBINE_RATE:
        weights = np.array([2.0] + [1.0] * (len(others) - 1))
        other = others[int(rng.choice(len(others), p=weights / weights.sum()))]
        made = recombine(parent, other, rng, avoid)
        if made is not None:
            return "recombine", *made
    bold = rng.random() < BOLD_RATE
    made = perturb(parent, rng, 0.5 if bold else 0.1, avoid)
    return ("bold" if bold else "perturb"), *(made or (None, ""))


def _parent(prompt: str) -> str | None:
    """The program to improve: gigaevo's parent, else what ``program_to_improve`` finds."""
    if "## Parent program" in prompt:
        return read_prompt(prompt).parent_code
    return program_to_improve(prompt)


def _foreign_inspirations(prompt: str, parent: str) -> list[str]:

    blocks = fenced_blocks(prompt.replace("\r\n", "\n").split("\n"))
    return [b for b in blocks if "EVOLVE-BLOCK-START" in b and b.strip() != parent.strip()]


_REPORTS = {
    "perturb": ("tactic: perturb_constants\n- {moves}", "Small moves of the numbers."),
    "bold": ("tactic: perturb_constants\n- {moves}", "A bigger step."),
    "recombine": ("tactic: crossover\n- {moves}", "The inspiration scores better with these."),
    "trap": (
        "tactic: refactor\n- made a constant a tunable parameter",
        "A named parameter makes the constant easier to tune.",
    ),
    "fix": (
        "tactic: refactor\n- made a constant a tunable parameter, now defined",
        "The last attempt failed because the parameter was not defined; it is defined now.",
    ),
}


def answer(prompt: str, rng: np.random.Generator, mode: str = "aware") -> tuple[str, str]:
    """(tactic, answer text) for one prompt; the change report lists the numbers moved."""
    tactic, child, moves = choose(prompt, rng, mode)
    parent = _parent(prompt)
    if child is None or parent is None or child == parent:
        return tactic, "I would rather rethink the whole approach before changing this code."
    report, explanation = _REPORTS[tactic]
    code_part = render_diff_blocks(make_diff_blocks(parent, child))
    return tactic, render_answer(report.format(moves=moves), explanation, (), code_part)


class SearchServer:
    """The server (see the module docstring); ``tactics`` counts the answers by kind."""

    def __init__(self, seed: int, mode: str = "aware", median: float = 0.2, sigma: float = 1.0):
        if mode not in ("aware", "perturb"):
            raise ValueError(f"mode must be aware or perturb, got {mode!r}")
        self.seed, self.mode, self.median, self.sigma = seed, mode, median, sigma
        self.tactics: dict[str, int] = {}
        self._seen: dict[tuple[str, int, int], int] = {}
        self._lock = threading.Lock()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.http.daemon_threads = True
        self.http.request_queue_size = 128

    def reply(self, body: dict[str, Any], contestant: str = "") -> tuple[float, str]:
        """(latency, answer text) for one request body from ``contestant``, seeded by the
        attempt seed and the parent program's digest.

        The same request again from the same contestant (a fixed seed, a retry)
        samples afresh; from another contestant it is answered as the first time
        it was sent by that one (the name is not part of the seed).
        """
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        call_seed = int(body.get("seed") or 0) % 2**63
        keyed = _parent(prompt) or prompt  # the program asked about, not the prompt's wrapping
        digest = int.from_bytes(hashlib.sha256(keyed.encode()).digest()[:8], "big")
        with self._lock:
            key = (contestant, call_seed, digest)
            repeat = self._seen.get(key, 0)
            self._seen[key] = repeat + 1
        rng = np.random.default_rng([self.seed, call_seed, digest, repeat])
        tactic, text = answer(prompt, rng, self.mode)
        timing = np.random.default_rng([self.seed, call_seed, digest, repeat, 1])
        latency = float(timing.lognormal(math.log(self.median), self.sigma)) if self.median else 0.0
        if timing.random() < STALL_RATE:
            latency *= STALL_FACTOR
        with self._lock:
            self.tactics[tactic] = self.tactics.get(tactic, 0) + 1
        return min(latency, MAX_LATENCY), text


def contestant_of(path: str) -> str:
    """The contestant named in a request path ``/c/<name>/v1/...``; "" without one."""
    parts = path.split("/")
    return parts[2] if len(parts) > 3 and parts[0] == "" and parts[1] == "c" else ""


def _handler(server: SearchServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/tactics"):
                with server._lock:
                    self._send(dict(server.tactics))
            else:
                self._send({"object": "list", "data": [{"id": "search-model", "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            latency, text = server.reply(body, contestant_of(self.path))
            time.sleep(latency)
            prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
            model = body.get("model", "search-model")
            self._send(completion("chatcmpl-search", model, text, prompt_chars, time.time()))

        def _send(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except ConnectionError:
                pass  # the client gave up waiting (its timeout): nothing to answer

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=["aware", "perturb"], default="aware")
    parser.add_argument("--median", type=float, default=0.2, help="median latency, s")
    parser.add_argument("--sigma", type=float, default=1.0, help="log-sd of the latency")
    parser.add_argument(
        "--exit-on-eof", action="store_true", help="stop when stdin closes (the parent died)"
    )
    args = parser.parse_args()
    server = SearchServer(args.seed, args.mode, args.median, args.sigma)
    if args.exit_on_eof:
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    print(f"port {server.http.server_address[1]}", flush=True)
    server.http.serve_forever()


if __name__ == "__main__":
    main()
