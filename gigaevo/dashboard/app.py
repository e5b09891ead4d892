"""The dashboard's Starlette application: the page, its assets and a read-only JSON API.

Routes (GET only):

===============================  ===============================================
``/``                            the page
``/static/{name}``               the page's script and style, and plotly.js from
                                 the installed ``plotly`` package (gzip when
                                 asked, cached by the browser)
``/api/runs``                    the runs followed: number, name, state
``/api/run/{rid}/state``         a run's news: ``since`` (programs the page
                                 has), ``gen`` (its view generation),
                                 ``msince`` (memory decisions it has)
``/api/run/{rid}/program/{id}``  one program in full
``/api/run/{rid}/cards``         card usage and posterior effects (memory=v2)
``/api/sweep``                   every run side by side
===============================  ===============================================

The page's Content-Security-Policy allows nothing but this server, and only
the host names the server listens on are answered (no DNS rebinding).
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.resources
import json
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gigaevo.dashboard import payloads
from gigaevo.dashboard.runs import Entry, Runs

STATIC = Path(__file__).parent / "static"
ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; worker-src blob:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def plotly_js() -> tuple[str, bytes]:
    """(version, bytes) of the plotly.js bundle that ships with the ``plotly`` package."""
    data = (importlib.resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    return importlib.metadata.version("plotly"), data


class Assets:
    """Static files read once, kept with their gzip form."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[bytes, bytes, str]] = {}
        self._lock = threading.Lock()
        self.plotly_version, _ = plotly_js()

    def _load(self, name: str) -> tuple[bytes, bytes, str] | None:
        if name == "plotly.min.js":
            data = plotly_js()[1]
        elif "/" not in name and (STATIC / name).is_file():
            data = (STATIC / name).read_bytes()
        else:
            return None
        kind = ASSET_TYPES.get(Path(name).suffix, "application/octet-stream")
        return data, gzip.compress(data, compresslevel=6, mtime=0), kind

    def get(self, name: str) -> tuple[bytes, bytes, str] | None:
        with self._lock:
            if name not in self._cache:
                found = self._load(name)
                if found is None:
                    return None
                self._cache[name] = found
            return self._cache[name]


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return Response(body, status, media_type="application/json", headers=HEADERS)


def _int(request: Request, name: str, default: int | None) -> int | None:
    try:
        return int(request.query_params[name])
    except (KeyError, ValueError):
        return default


class Api:
    """The route handlers over one set of runs and assets."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.assets = Assets()
        page = (STATIC / "index.html").read_text(encoding="utf-8")
        self.page = page.replace("{{plotly_version}}", self.assets.plotly_version)

    def index(self, request: Request) -> Response:
        return Response(self.page, media_type="text/html", headers=HEADERS)

    def static(self, request: Request) -> Response:
        found = self.assets.get(str(request.path_params["name"]))
        if found is None:
            return Response("not found", 404)
        raw, packed, kind = found
        headers = {**HEADERS, "Cache-Control": "public, max-age=86400"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return Response(packed, media_type=kind, headers=headers)
        return Response(raw, media_type=kind, headers=headers)

    def run_list(self, request: Request) -> Response:
        entries = self.runs.scan()
        out = [{"rid": e.rid, "name": e.name, "path": str(e.live.path)} for e in entries]
        return _json({"runs": out, "roots": [str(r) for r in self.runs.roots]})

    def _entry(self, request: Request) -> Entry | Response:
        entry = self.runs.get(int(request.path_params["rid"]))
        return entry if entry is not None else _json({"error": "no such run"}, 404)

    def state(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        since = _int(request, "since", 0) or 0
        msince = _int(request, "msince", 0) or 0
        return _json(payloads.run_state(entry, since, _int(request, "gen", None), msince))

    def program(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        found = payloads.program(entry, str(request.path_params["pid"]))
        return _json(found) if found is not None else _json({"error": "no such program"}, 404)

    def cards(self, request: Request) -> Response:
        entry = self._entry(request)
        return entry if isinstance(entry, Response) else _json(payloads.cards(entry))

    def sweep(self, request: Request) -> Response:
        return _json(payloads.sweep(self.runs.scan()))


def create_app(runs: Runs, allowed_hosts: list[str] | None = None) -> Starlette:
    """The application serving ``runs`` (answering only requests for ``allowed_hosts``)."""
    api = Api(runs)
    routes = [
        Route("/", api.index),
        Route("/static/{name}", api.static),
        Route("/api/runs", api.run_list),
        Route("/api/run/{rid:int}/state", api.state),
        Route("/api/run/{rid:int}/program/{pid}", api.program),
        Route("/api/run/{rid:int}/cards", api.cards),
        Route("/api/sweep", api.sweep),
    ]
    middleware = []
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=routes, middleware=middleware)
