"""``python -m gigaevo.dashboard DIR [DIR ...]``: serve the live dashboard of runs and sweeps.

Listens on 127.0.0.1 (a free port unless ``--port``) and prints the address.
``--host`` opts in to another interface: anyone who reaches it can read the
runs' programs, so it says so. A bad argument exits 2 with one line.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import socket
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gigaevo.dashboard",
        description="A live, read-only web dashboard of gigaevo runs (docs/dashboard.md).",
    )
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="a run's checkpoint_dir, a sweep or a folder of runs"
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument(
        "--host",
        default=LOOPBACK,
        help="interface to listen on (default 127.0.0.1; another one exposes the runs' programs)",
    )
    parser.add_argument(
        "--poll", type=float, default=0.5, help="least seconds between two reads of a run"
    )
    return parser


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: a response's headers and body leave at once
    # (with Nagle, a keep-alive client's delayed ACK held each answer back 40 ms)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _allowed_hosts(host: str) -> list[str]:
    if host in ("0.0.0.0", "::"):
        return ["*"]  # every interface: any name may reach it, as the user asked
    return sorted({host, LOOPBACK, "localhost", "[::1]"} if _is_loopback(host) else {host})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until interrupted; returns the exit code."""
    args = _parser().parse_args(argv)
    roots = [Path(d) for d in args.dirs]
    for root in roots:
        if not root.is_dir():
            print(f"error: {root}: not a directory", file=sys.stderr)
            return 2
    if not 0 <= args.port < 65536:
        print(f"error: --port {args.port}: not a port number (0 to 65535)", file=sys.stderr)
        return 2
    try:
        sock = _listen(args.host, args.port)
    except (OSError, OverflowError) as exc:
        print(f"error: cannot listen on {args.host}:{args.port} ({exc})", file=sys.stderr)
        return 2
    import uvicorn  # imported once the arguments are known good: pandas takes a while

    from gigaevo.analysis import PartialRunWarning
    from gigaevo.dashboard.app import create_app
    from gigaevo.dashboard.runs import Runs

    warnings.simplefilter("ignore", PartialRunWarning)  # the page shows unreadable lines
    runs = Runs(roots, min_interval_s=args.poll)
    # read the runs' stores now, so that the first page load finds them read
    threading.Thread(target=runs.warm_up, name="warm-up", daemon=True).start()
    app = create_app(runs, allowed_hosts=_allowed_hosts(args.host))
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if not _is_loopback(args.host):
        print(
            f"warning: listening on {args.host}: anyone who can reach this machine can read "
            "these runs' programs",
            file=sys.stderr,
        )
    n = len(runs.entries)
    print(f"gigaevo dashboard: http://{shown}:{port}/  ({n} run(s) so far; Ctrl-C stops)")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
