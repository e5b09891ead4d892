"""A seccomp filter for the child: one process, no new namespaces, no tracing, no network.

Linux on x86_64 and aarch64; standard library alone (``ctypes``). The worker
builds the filter once (``ChildFilter``), before any fork; each child patches
in its own pid and installs it as its last confinement step, after
``no_new_privs`` (which is what lets an unprivileged process install one).

What the filter refuses, whatever the program calls from native code:

* creating processes: ``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``
  (threads stay allowed: they share the address space, so ``RLIMIT_AS`` and
  ``RLIMIT_CPU`` cover the whole tree), ``clone3`` (answered ``ENOSYS`` so
  that glibc falls back to ``clone`` for threads), ``execve``/``execveat``;
* leaving or reshaping the sandbox: ``unshare``, ``setns``, every mount call,
  ``chroot``, ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
  ``pidfd_getfd``, ``pidfd_send_signal``, ``io_uring`` (its operations bypass
  seccomp), ``bpf``, ``perf_event_open``, ``userfaultfd``, the key rings;
* memory that ``RLIMIT_AS`` does not count: ``memfd_create`` (``ENOSYS``),
  ``memfd_secret`` and System V shared memory, messages and semaphores;
* signals to any other process: ``kill``, ``tgkill`` and
  ``rt_sigqueueinfo`` only reach the child itself (or its own group, pid 0);
* with the network off, ``socket`` for every address family
  (``socketpair`` stays: asyncio uses it).

Other architectures (and a wrong-architecture syscall, such as ``int 0x80``
from a 64-bit process) get ``ENOSYS`` for everything on x86 ABIs other than
the native one; ``ChildFilter.for_machine`` returns None where the machine is
not supported, and the worker reports the layer as missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_ARG0 = 16  # low 32 bits of args[0] (little-endian)

CLONE_THREAD = 0x00010000
_X32_SYSCALL_BIT = 0x40000000


@dataclass(frozen=True)
class _Arch:
    audit: int
    x32_guard: bool
    calls: dict[str, int]


# Syscall numbers (asm/unistd_64.h and asm-generic/unistd.h).
_X86_64 = _Arch(
    audit=0xC000003E,
    x32_guard=True,
    calls={
        "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
        "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "keyctl": 250, "add_key": 248, "request_key": 249, "memfd_create": 319,
        "memfd_secret": 447, "shmget": 29, "shmat": 30, "msgget": 68, "semget": 64,
        "kill": 62, "tgkill": 234, "tkill": 200, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "socket": 41,
    },
)  # fmt: skip
_AARCH64 = _Arch(
    audit=0xC00000B7,
    x32_guard=False,
    calls={
        "clone": 220, "execve": 221, "execveat": 281, "clone3": 435, "unshare": 97,
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438, "pidfd_send_signal": 424,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "memfd_create": 279, "memfd_secret": 447, "shmget": 194,
        "shmat": 196, "msgget": 186, "semget": 190, "kill": 129, "tgkill": 131, "tkill": 130,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "socket": 198,
    },
)  # fmt: skip
_MACHINES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}

# Refused outright, with the errno the program sees.
_DENIED: tuple[tuple[str, int], ...] = (
    *((name, errno.EPERM) for name in ("fork", "vfork", "execve", "execveat")),
    ("clone3", errno.ENOSYS),
    *(
        (name, errno.EPERM)
        for name in (
            "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
            "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace",
            "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "pidfd_send_signal",
            "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
            "userfaultfd", "keyctl", "add_key", "request_key", "memfd_secret", "shmget",
            "shmat", "msgget", "semget", "tkill", "rt_tgsigqueueinfo",
        )
    ),
    ("memfd_create", errno.ENOSYS),
)  # fmt: skip
# Allowed only when args[0] is the child's own pid or 0 (its own process group).
_SELF_ONLY = ("kill", "tgkill", "rt_sigqueueinfo")


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _errno(code: int) -> int:
    return _RET_ERRNO | code


class ChildFilter:
    """The compiled filter; ``install`` loads it into the calling (child) process.

    Build it in the worker (before forking) with ``for_machine``; the child
    then only patches its pid into the self-only signal checks and makes one
    ``prctl`` call.
    """

    def __init__(self, arch: _Arch, *, network: bool) -> None:
        program: list[tuple[int, int, int, int]] = []
        self._pid_slots: list[int] = []
        program.append((_LD_W_ABS, 0, 0, _OFFSET_ARCH))
        program.append((_JEQ_K, 1, 0, arch.audit))
        program.append((_RET_K, 0, 0, _errno(errno.ENOSYS)))
        program.append((_LD_W_ABS, 0, 0, _OFFSET_NR))
        if arch.x32_guard:
            program.append((_JGE_K, 0, 1, _X32_SYSCALL_BIT))
            program.append((_RET_K, 0, 0, _errno(errno.ENOSYS)))
        program += self._clone_check(arch.calls["clone"])
        denied = list(_DENIED)
        if not network:
            denied.append(("socket", errno.EPERM))
        for name, code in denied:
            if name in arch.calls:  # aarch64 has no fork or vfork
                program.append((_JEQ_K, 0, 1, arch.calls[name]))
                program.append((_RET_K, 0, 0, _errno(code)))
        for name in _SELF_ONLY:
            program += self._self_only(arch.calls[name], len(program))
        program.append((_RET_K, 0, 0, _RET_ALLOW))
        self._filters = (_SockFilter * len(program))(*(_SockFilter(*row) for row in program))
        self._prog = _SockFprog(len(program), self._filters)
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl

    @staticmethod
    def _clone_check(number: int) -> list[tuple[int, int, int, int]]:
        """``clone`` passes only with ``CLONE_THREAD`` (a thread, not a process)."""
        return [
            (_JEQ_K, 0, 4, number),
            (_LD_W_ABS, 0, 0, _OFFSET_ARG0),
            (_JSET_K, 0, 1, CLONE_THREAD),
            (_RET_K, 0, 0, _RET_ALLOW),
            (_RET_K, 0, 0, _errno(errno.EPERM)),
        ]

    def _self_only(self, number: int, start: int) -> list[tuple[int, int, int, int]]:
        """A signal call passes when args[0] is 0 or the child's pid (patched in ``install``)."""
        self._pid_slots.append(start + 3)
        return [
            (_JEQ_K, 0, 5, number),
            (_LD_W_ABS, 0, 0, _OFFSET_ARG0),
            (_JEQ_K, 2, 0, 0),
            (_JEQ_K, 1, 0, 0),  # the pid slot
            (_RET_K, 0, 0, _errno(errno.EPERM)),
            (_RET_K, 0, 0, _RET_ALLOW),
        ]

    @classmethod
    def for_machine(cls, *, network: bool, machine: str | None = None) -> ChildFilter | None:
        """The filter for this machine's architecture, or None where it is not supported."""
        arch = _MACHINES.get((machine or platform.machine()).lower())
        return None if arch is None else cls(arch, network=network)

    def install(self) -> None:
        """Load the filter into the calling process (needs ``no_new_privs`` first).

        Raises:
            OSError: the kernel refused it.
        """
        pid = os.getpid()
        for slot in self._pid_slots:
            self._filters[slot].k = pid
        status = self._prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0)
        if status != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"seccomp filter refused: {os.strerror(code)}")
