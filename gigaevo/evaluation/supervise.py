"""Watch one running child from the worker: its output, its result, its exit, its deadline.

The child writes its stdout and stderr into one pipe and its JSON result into
another; the worker reads both as they come (so neither can fill a disk or
the worker's memory: past its cap a stream stops the child), keeps the tail
of the output, and notices the child's exit through a pidfd. Every figure
that reaches the verdict (wall time, CPU time, peak memory) is measured here
or by the kernel, never reported by the program.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from dataclasses import dataclass

_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class Collected:
    """What was read from a child while it ran."""

    wall_seconds: float
    timed_out: bool
    result: bytes
    result_too_large: bool
    output_bytes: int
    output_too_large: bool
    tail: bytes


class _Stream:
    """One pipe: a byte count, a cap and either the whole content or only its tail."""

    def __init__(self, fd: int, cap: int, keep: int | None) -> None:
        self.fd = fd
        self.cap = cap
        self.keep = keep  # None: keep everything (the result); else the last ``keep`` bytes
        self.size = 0
        self.data = bytearray()
        self.open = True

    @property
    def over(self) -> bool:
        return self.size > self.cap

    def read(self) -> bool:
        """Read one chunk; False at end of file or when nothing is ready."""
        try:
            chunk = os.read(self.fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            self.open = False
            return False
        self.size += len(chunk)
        self.data += chunk
        if self.keep is not None and len(self.data) > 2 * self.keep:
            del self.data[: len(self.data) - self.keep]
        return True

    def drain(self) -> None:
        """Read what is left without blocking (the writer may live on in a grandchild)."""
        os.set_blocking(self.fd, False)
        while self.open and not self.over and self.read():
            pass

    def tail(self) -> bytes:
        return bytes(self.data if self.keep is None else self.data[-self.keep :])


def collect(
    pid: int,
    *,
    result_fd: int,
    output_fd: int,
    started: float,
    timeout_s: float,
    max_result_bytes: int,
    max_output_bytes: int,
    tail_bytes: int,
) -> Collected:
    """Read the child's pipes until it exits, a stream passes its cap, or time runs out.

    ``started`` is the ``time.monotonic()`` of the fork. The caller kills the
    child's group afterwards in every case.
    """
    result = _Stream(result_fd, max_result_bytes, None)
    output = _Stream(output_fd, max_output_bytes, tail_bytes)
    streams = {result_fd: result, output_fd: output}
    deadline = started + timeout_s
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in (result_fd, output_fd, pidfd):
        poller.register(fd, select.POLLIN)
    exited = timed_out = False
    try:
        while not exited and not result.over and not output.over:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1)):
                if fd == pidfd:
                    exited = True
                elif not streams[fd].read() and not streams[fd].open:
                    poller.unregister(fd)
        wall = time.monotonic() - started
        if exited:
            for stream in (result, output):
                stream.drain()
    finally:
        os.close(pidfd)
    return Collected(
        wall_seconds=wall,
        timed_out=timed_out,
        result=b"" if result.over else result.tail(),
        result_too_large=result.over,
        output_bytes=output.size,
        output_too_large=output.over,
        tail=output.tail(),
    )


def reap(pid: int) -> tuple[int, float, int]:
    """Wait for ``pid``; return its wait status, CPU seconds (user + system) and peak RSS bytes."""
    while True:
        with contextlib.suppress(InterruptedError):
            _, status, usage = os.wait4(pid, 0)
            return status, usage.ru_utime + usage.ru_stime, int(usage.ru_maxrss) * 1024
