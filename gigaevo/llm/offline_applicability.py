"""The offline memory LLM's applicability rule: does a card's condition hold for a parent?

A card reads "When C, try A because M". The card is ``applicable`` to a parent
program when at least ``APPLICABLE_OVERLAP`` of the content words of C occur
in the parent's vocabulary: its identifiers (lower case, with their ``_``
parts) and the plain names of code features it shows (numeric literals,
loops, comparisons, arithmetic). Otherwise it is ``not_applicable``. The
labels depend on the card text and the parent source only, so the same pair
always gets the same label and different parents can get different labels.
"""

from __future__ import annotations

import re
from typing import Any

APPLICABLE_OVERLAP = 0.5  # share of the condition's content words the parent must show
MODULE_SCOPE = "<module>"

_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_RE = re.compile(r"`([A-Za-z_<][A-Za-z0-9_.>]*)`")  # a backticked code name
_CONDITION_RE = re.compile(r"^\s*When\s+(.+?),\s*(?:try|use)\b", re.IGNORECASE | re.DOTALL)
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "are",
        "was",
        "when",
        "its",
        "into",
        "from",
        "one",
        "two",
        "how",
        "many",
        "more",
        "than",
        "may",
        "can",
        "each",
        "set",
        "sets",
        "which",
        "what",
        "where",
        "there",
        "their",
        "then",
        "only",
        "all",
        "any",
        "not",
        "use",
        "used",
        "try",
        "has",
        "have",
        "been",
        "some",
        "such",
        "other",
    ]
)
# plain words a condition uses for a code feature, and how the feature shows in code
_FEATURES: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = (
    (
        frozenset({"numeric", "literal", "literals", "constant", "constants", "number"}),
        re.compile(r"(?<![A-Za-z0-9_.])\d"),
    ),
    (frozenset({"loop", "loops", "iteration", "iterations"}), re.compile(r"\b(?:for|while)\b")),
    (frozenset({"comparison", "boundary"}), re.compile(r"[<>]=?|==|!=")),
    (frozenset({"arithmetic", "operator", "operators"}), re.compile(r"\w\s*[-+*/%]\s*\w")),
)


def label_cards(code: str, cards: list[tuple[str, str]]) -> dict[str, Any]:
    """The assessor's JSON answer: a label for each (card id, description) of ``cards``."""
    vocabulary = code_vocabulary(code)
    labels = [
        {
            "card_id": card_id,
            "label": "applicable"
            if condition_overlap(description, vocabulary) >= APPLICABLE_OVERLAP
            else "not_applicable",
        }
        for card_id, description in cards
    ]
    n = sum(1 for label in labels if label["label"] == "applicable")
    reason = f"{n} of {len(labels)} card conditions are visible in the parent program"
    return {"labels": labels, "reason": reason}


def condition_words(description: str) -> frozenset[str]:
    """Content words of the condition C of "When C, try A ..." (backticked names of any length)."""
    match = _CONDITION_RE.match(description)
    condition = match.group(1) if match else description.split(",", 1)[0]
    named = {w.lower() for w in _NAME_RE.findall(condition)}
    words = {w.lower() for w in _WORD_RE.findall(condition) if len(w) >= 3}
    return frozenset(named | (words - _STOPWORDS))


def code_vocabulary(code: str) -> frozenset[str]:
    """Identifiers of ``code`` (lower case, with their ``_`` parts) and its feature words."""
    words = {MODULE_SCOPE}
    for word in _WORD_RE.findall(code):
        low = word.lower()
        words.add(low)
        words.update(part for part in low.split("_") if part)
    for names, pattern in _FEATURES:
        if pattern.search(code):
            words |= names
    return frozenset(words)


def condition_overlap(description: str, vocabulary: frozenset[str]) -> float:
    """Share of the condition's content words found in ``vocabulary`` (0 for no words)."""
    words = condition_words(description)
    return len(words & vocabulary) / len(words) if words else 0.0
