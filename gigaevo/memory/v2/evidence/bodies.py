"""Compact storage of ledger row bodies (schema version 4).

Every row body is canonical JSON and its SHA-256 is taken over that text. From
schema version 4 on, the ``body`` column of ``decisions``, ``terminals``, ``edges``,
``lineage`` and ``fit_sets`` holds, for a new row, a BLOB: one format byte (``1``)
followed by the raw DEFLATE stream of the UTF-8 text, compressed against the fixed
dictionary ``DICTIONARY_V1`` (typical bodies of each row type: their keys, enum
values and number shapes, so a 300-byte terminal stores in ~100 bytes). A body
the dictionary would not shrink stays TEXT, as every row of older ledgers does.
Reading gives back the exact text that was hashed, so both forms decode bit for
bit and the hash checks are unchanged; ``body_text`` is the one reader (also for
notebooks reading the SQLite file directly).

``DICTIONARY_V1`` must never change: rows compressed against it would no longer
decode. A new dictionary takes a new format byte (a test pins its SHA-256).
"""

from __future__ import annotations

import zlib

from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import canonical_json

FORMAT_V1 = 1
_WBITS = 13  # 8 KiB window: holds the dictionary and a body; cheap to set up
_LEVEL = 9

_H = "0123456789abcdef" * 4  # a 64-hex field (hashes)
_D = "d-0123456789abcdef01234567"  # a decision id
_P = "0123456789abcdef"  # a program id

# typical bodies of each row type (rarest first: DEFLATE reaches recent bytes more cheaply)
_SAMPLES: tuple[object, ...] = (
    {
        "abstain": False,
        "attempt": 1234,
        "candidate_columns": {
            "card_id": ["ins-0123456789ab", "prg-0123456789ab"],
            "control_joint": [0.11828935031639418, 0.009691283178395431],
            "mc_se": [None, 0.0011],
            "mean_effect": [0.010013289870154225, None],
            "offer": [0.7, 0.7],
            "offer_joint": [0.27600848407158635, 0.022612994082922666],
            "p_positive": [1.0, None],
            "rag": [None, None],
            "rho": [0.39429783438798055, 0.0323042772613181],
            "safe": [True, True],
            "sd_effect": [0.003332524763690095, None],
        },
        "context": {
            "cell": [2, 6],
            "coordinates": [0.11969689956272687, 0.6528402830306823],
            "features": [1.0, 0.9840806374771964, 0.9976803751909104, -0.7606062008745462],
            "island": 1,
            "parent_fitness": 1.98992031535046,
            "parent_id": _P,
            "progress": 0.9998,
            "task_key": "",
        },
        "created_at": 0.0,
        "decision_id": _D,
        "event_ordinal": 1234,
        "evidence_version": _H,
        "excluded_ids": [],
        "fit": [
            {"name": "immediate.rows", "value": 3264.0},
            {"name": "immediate.sigma", "value": 0.021758993553145558},
            {"name": "immediate.ok", "value": 1.0},
            {"name": "immediate.at_boundary", "value": 0.0},
            {"name": "invalidity.rows", "value": 3311.0},
            {"name": "invalidity.ok", "value": 1.0},
            {"name": "lineages", "value": 11.0},
            {"name": "lineage.rows", "value": 3226.0},
            {"name": "lineage.sigma", "value": 0.0014366661948353931},
            {"name": "lineage.ok", "value": 1.0},
            {"name": "lineage.at_boundary", "value": 0.0},
        ],
        "fitted_rows_ref": _H,
        "joint": 0.27600848407158635,
        "offer": 0.7,
        "owner": "host:12345:0123456789ab",
        "pending": [{"card_id": "ins-0123456789ab", "count": 1}],
        "proposed_id": "ins-0123456789ab",
        "q0": -4.297425711659952,
        "q1": -1.7941032441213955,
        "r0": 0.01631391880453438,
        "r1": 0.009810275584044154,
        "rag_record": "",
        "reward": {
            "budget": 32,
            "depth": 3,
            "direction": "higher",
            "lower": 0.0,
            "metric": "fitness",
            "upper": 1.0,
        },
        "rho": 0.39429783438798055,
        "rho0": 0.0,
        "run_id": "run-0123456789",
        "seed": 0,
        "universe_ref": _H,
        "z": 1,
    },
    {"added": [_D, f"lineage:{_D}:v1"], "parent": _H, "removed": []},
    {
        "best_depth": 1,
        "best_descendant_id": _P,
        "best_gain": 0.0001794381700364056,
        "budget": 32,
        "created_at": 0.0,
        "credit_owner": None,
        "depth": 3,
        "maturity_ordinal": 176,
        "residual": 0.0,
        "root_decision_id": _D,
        "status": "pending",
        "version": 1,
    },
    {
        "base_id": _P,
        "censor_reason": "startup orphan",
        "child_id": "no-child:",
        "cited_ids": [],
        "created_at": 1796226165.6903474,
        "decision_id": _D,
        "direction": "lower",
        "gain": None,
        "measurement": None,
        "metric": "fitness",
        "se": None,
        "status": "censored",
    },
    {
        "attempt": 101,
        "child_id": _P,
        "created_at": 1796226166.7991927,
        "decision_id": _D,
        "disposition": "rejected",
        "edge_id": _P,
        "gain": 0.08197034626265065,
        "island": 1,
        "ordinal": 51,
        "parent_id": _P,
        "run_id": "run-0123456789",
        "status": "invalid",
    },
    {
        "base_id": _P,
        "censor_reason": None,
        "child_id": _P,
        "cited_ids": ["ins-0123456789ab"],
        "created_at": 1796226166.7791784,
        "decision_id": _D,
        "direction": "lower",
        "gain": 0.08197034626265065,
        "measurement": "deterministic",
        "metric": "fitness",
        "se": 0.0,
        "status": "valid",
    },
)
DICTIONARY_V1 = "".join(canonical_json(s) for s in _SAMPLES).encode()


def pack_body(text: str) -> str | bytes:
    """The stored form of the body ``text``: format byte + DEFLATE against the
    dictionary, or ``text`` itself when that is not shorter."""
    raw = text.encode()
    comp = zlib.compressobj(
        _LEVEL, zlib.DEFLATED, -_WBITS, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_V1
    )
    packed = bytes((FORMAT_V1,)) + comp.compress(raw) + comp.flush()
    return packed if len(packed) < len(raw) else text


def body_text(stored: str | bytes, where: str = "body") -> str:
    """The canonical JSON text of a stored body (TEXT as is, a BLOB decompressed).

    Raises:
        LedgerIntegrityError: a BLOB of an unknown format, or one that does not
            decompress to UTF-8 text (``where`` names the row).
    """
    if isinstance(stored, str):
        return stored
    if not isinstance(stored, bytes | bytearray | memoryview):
        raise LedgerIntegrityError(f"ledger row {where}: body is {type(stored).__name__}")
    data = bytes(stored)
    if not data or data[0] != FORMAT_V1:
        head = data[0] if data else None
        raise LedgerIntegrityError(f"ledger row {where}: unknown body format {head!r}")
    try:
        out = zlib.decompressobj(-15, DICTIONARY_V1)
        raw = out.decompress(data[1:]) + out.flush()
        if not out.eof or out.unused_data:
            raise ValueError("truncated or trailing bytes")
        return raw.decode()
    except (zlib.error, ValueError) as exc:
        raise LedgerIntegrityError(
            f"ledger row {where}: body does not decompress ({exc})"
        ) from None
