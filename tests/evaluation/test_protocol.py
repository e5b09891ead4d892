"""Length-prefixed JSON framing."""

from __future__ import annotations

import math
import os
import time

import pytest

from gigaevo.evaluation.protocol import (
    HEADER,
    FrameTimeoutError,
    PipeClosedError,
    ProtocolError,
    encode_frame,
    read_frame,
    write_frame,
)


def test_round_trip_with_nan() -> None:
    read_fd, write_fd = os.pipe()
    try:
        write_frame(write_fd, {"a": [1, 2.5, "x"], "b": float("nan")})
        frame = read_frame(read_fd, time.monotonic() + 1)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert frame["a"] == [1, 2.5, "x"] and math.isnan(frame["b"])


def test_timeout_and_eof() -> None:
    read_fd, write_fd = os.pipe()
    with pytest.raises(FrameTimeoutError):
        read_frame(read_fd, time.monotonic() + 0.05)
    os.close(write_fd)
    with pytest.raises(PipeClosedError):
        read_frame(read_fd, time.monotonic() + 1)
    os.close(read_fd)


def test_bad_frames_are_rejected() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, HEADER.pack(2**31))
    with pytest.raises(ProtocolError, match="exceeds"):
        read_frame(read_fd)
    os.write(write_fd, HEADER.pack(3) + b"{x}")
    with pytest.raises(ProtocolError, match="JSON"):
        read_frame(read_fd)
    os.close(read_fd)
    os.close(write_fd)
    with pytest.raises(ProtocolError):
        encode_frame({"not": object()})
