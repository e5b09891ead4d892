"""Identity of a writing process (host, pid, nonce) and whether it is known to be dead."""

from __future__ import annotations

import os
import socket
import uuid


def session_owner() -> str:
    """A fresh ``host:pid:nonce`` for one ledger or lease session of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host (zombies count as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_dead(owner: str, current: str) -> bool:
    """Whether the session ``owner`` is certainly gone, judged from session ``current``.

    A session on another host is never judged dead (its pid means nothing
    here). On this host it is dead when its pid is not alive. Another session
    of this very process is never judged dead: a second reader opened in the
    same process must not censor the first one's in-flight decisions.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid_text, _nonce = parts
    cur_host, cur_pid, _ = current.rsplit(":", 2)
    if host != cur_host or pid_text == cur_pid:
        return False
    return not pid_alive(int(pid_text))
