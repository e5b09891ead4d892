"""Startup validation of memory.* settings: unknown keys, bad values, contradictions."""

from __future__ import annotations

import pytest

from gigaevo.memory.v2 import MemoryConfigError, MemorySettings


def test_defaults_are_valid() -> None:
    s = MemorySettings.parse()
    assert s.write.cadence == "live" and s.writer.max_ingest_attempts == 3
    assert s.store.lock == "os" and s.exemplars.max_per_task == 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"writer": {"max_ingest_attempts": 0}}, "memory.writer: max_ingest_attempts must be >= 1"),
        ({"writer": {"ingest_call_timeout_s": 0}}, "ingest_call_timeout_s must be > 0"),
        (
            {"writer": {"scope": "global"}},
            r"memory.writer.scope: expected one of \['task', 'bank'\]",
        ),
        ({"writer": {"neighbours_k": "5"}}, "memory.writer.neighbours_k: expected an integer"),
        ({"writer": {"audit": True}}, "memory.writer: unknown key 'audit'"),
        ({"write": {"cadence": "sometimes"}}, "memory.write.cadence: expected one of"),
        ({"store": {"lock": "nfs"}}, r"memory.store.lock: expected one of \['os', 'soft'\]"),
        ({"program_exemplars": {"max_per_task": 0}}, "max_per_task must be >= 1"),
        (
            {"writer": {"ingest_call_timeout_s": 600}},
            "authoring_lock_timeout_s=300.0 is shorter than memory.writer.ingest_call_timeout_s",
        ),
        (
            {"program_exemplars": {"enabled": False, "store_code": True}},
            "store_code=true has no effect",
        ),
    ],
)
def test_bad_settings_are_refused_with_one_line_naming_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(MemoryConfigError, match=message) as info:
        MemorySettings.parse(**kwargs)
    assert "\n" not in str(info.value)
