"""Length-prefixed JSON framing for the pipes between the evaluator and its workers.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of
UTF-8 JSON. NaN and infinities are allowed (Python's JSON dialect). Only JSON
ever crosses a pipe: nothing a sandboxed program produced is unpickled.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 256 * 1024 * 1024


class ProtocolError(RuntimeError):
    """A frame was malformed, too large, or the pipe closed mid-frame."""


class PipeClosedError(ProtocolError):
    """The peer closed the pipe (normally: the peer process died)."""


class FrameTimeoutError(ProtocolError):
    """No complete frame arrived before the deadline."""


def encode_frame(message: Any) -> bytes:
    """Serialise ``message`` to one frame.

    Raises:
        ProtocolError: the message is not JSON-serialisable or exceeds
            ``MAX_FRAME_BYTES``.
    """
    try:
        body = json.dumps(message, allow_nan=True, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"message is not JSON-serialisable: {exc}") from exc
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(body)) + body


def write_frame(fd: int, message: Any) -> None:
    """Write one frame to ``fd`` (blocking).

    Raises:
        ProtocolError: the message cannot be encoded.
        PipeClosedError: the reader is gone.
    """
    view = memoryview(encode_frame(message))
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise PipeClosedError("peer closed the pipe") from exc


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    poller = None
    if deadline is not None:
        poller = select.poll()  # not select(): descriptors may exceed FD_SETSIZE
        poller.register(fd, select.POLLIN)
    while remaining:
        if poller is not None and deadline is not None:
            wait_ms = math.ceil((deadline - time.monotonic()) * 1000)
            if wait_ms <= 0 or not poller.poll(wait_ms):
                raise FrameTimeoutError("no complete frame before the deadline")
        try:
            chunk = os.read(fd, min(remaining, 1 << 20))
        except ConnectionResetError as exc:
            raise PipeClosedError("peer closed the pipe") from exc
        if not chunk:
            raise PipeClosedError("peer closed the pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None) -> Any:
    """Read one frame from ``fd`` and decode its JSON.

    Args:
        fd: a readable pipe.
        deadline: ``time.monotonic()`` value after which to give up; ``None``
            blocks indefinitely.

    Raises:
        FrameTimeoutError: the deadline passed first.
        PipeClosedError: end of file (the writer died or closed the pipe).
        ProtocolError: the length is out of range or the body is not JSON.
    """
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"announced frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    body = _read_exact(fd, size, deadline)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame body is not valid JSON: {exc}") from exc
