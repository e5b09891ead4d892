"""The dashboard: page load on a 10,000-mutant run, and the server's memory while a run grows.

Usage:
    .venv/bin/python benchmarks/bench_dashboard.py [--mutants 10000] [--run-dir DIR]
        [--loads 20] [--rate 250] [--no-growth]

1. A finished run of ``--mutants`` mutants (rastrigin, memory=none, the offline
   mutator), made with run.py unless ``--run-dir`` already holds one that long
   (default: a folder under the system's temporary directory, kept for next time).
2. Page load: the dashboard (``python -m gigaevo.dashboard``, its own process)
   serving that run. A page load is the requests a new page makes: the page,
   its script and style, the run list, the run's state with every program, and
   the best program in full (plotly.js, cached by the browser, is timed apart).
   Timed over one keep-alive connection, as a browser does: the first load
   (the server reads the store) and the median and p95 of ``--loads`` more.
   Target: under 200 ms.
3. Growth: a new run folder filled from that run at ``--rate`` programs a second
   through the engine's own store (``ProgramStore.commit``: one transaction per
   program) with its events lines appended, while a client polls the server
   every second like the page (``since=`` the programs it has). Prints the
   server's resident memory as the run grows, the bytes it keeps per program,
   its time to answer a poll early and late (incremental: about constant), how
   long after its commit a program reached the client, and, side by side, what
   re-reading the whole run at each poll (``gigaevo.analysis.load_run``) costs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gigaevo.analysis import load_run  # noqa: E402
from gigaevo.analysis._sqlite import query_sqlite  # noqa: E402
from gigaevo.evolution.store import ProgramStore  # noqa: E402
from gigaevo.programs import Program  # noqa: E402


def ensure_run(run_dir: Path, mutants: int) -> Path:
    """A finished run of ``mutants`` mutants in ``run_dir`` (made with run.py if needed)."""
    summary = run_dir / "summary.json"
    if summary.is_file() and json.loads(summary.read_text()).get("n_mutants", 0) >= mutants:
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"making a {mutants}-mutant run in {run_dir} (a few minutes) ...", flush=True)
    cmd = [sys.executable, str(ROOT / "run.py"), "memory=none", "pipeline=guided"]
    cmd += ["problem=rastrigin", f"max_mutants={mutants}", "progress=false"]
    cmd += [f"checkpoint_dir={run_dir}"]
    subprocess.run(cmd, cwd=run_dir.parent, check=True, capture_output=True)
    return run_dir


class Server:
    """``python -m gigaevo.dashboard DIR`` in its own process."""

    def __init__(self, run_dir: Path) -> None:
        cmd = [sys.executable, "-m", "gigaevo.dashboard", str(run_dir)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        url = self.proc.stdout.readline().split()[2]
        self.host, port = url.removeprefix("http://").strip("/").split(":")
        self.port = int(port)

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_s(self) -> float:
        """CPU seconds the server used so far (user + system; less noisy than wall time)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def get(con: http.client.HTTPConnection, path: str, gzip: bool = False) -> bytes:
    con.request("GET", path, headers={"Accept-Encoding": "gzip"} if gzip else {})
    response = con.getresponse()
    body = response.read()
    assert response.status == 200, (path, response.status)
    return body


def page_load(con: http.client.HTTPConnection) -> tuple[float, float, int]:
    """(seconds for the page itself, seconds for the whole load, programs sent)."""
    t0 = time.perf_counter()
    get(con, "/")
    t_page = time.perf_counter() - t0
    get(con, "/static/dashboard.js", gzip=True)
    get(con, "/static/dashboard.css", gzip=True)
    get(con, "/api/runs")
    state = json.loads(get(con, "/api/run/0/state?since=0"))
    get(con, f"/api/run/0/program/{state['best_id']}")
    return t_page, time.perf_counter() - t0, len(state["programs"]["id"])


def measure_page_load(run_dir: Path, loads: int) -> dict[str, Any]:
    server = Server(run_dir)
    try:
        con = server.connect()
        first_page, first_all, n = page_load(con)
        t0 = time.perf_counter()
        plotly = get(con, "/static/plotly.min.js", gzip=True)
        t_plotly = time.perf_counter() - t0
        pages, alls = [], []
        cpu0 = server.cpu_s()
        for _ in range(loads):
            p, a, _ = page_load(con)
            pages.append(p)
            alls.append(a)
        cpu = (server.cpu_s() - cpu0) / loads
        alls.sort()
        return {
            "programs": n,
            "first_page_ms": 1000 * first_page,
            "first_load_ms": 1000 * first_all,
            "page_median_ms": 1000 * statistics.median(pages),
            "load_median_ms": 1000 * statistics.median(alls),
            "load_p95_ms": 1000 * alls[int(0.95 * (len(alls) - 1))],
            "load_cpu_ms": 1000 * cpu,
            "plotly_ms": 1000 * t_plotly,
            "plotly_kb": len(plotly) / 1024,
            "rss_mb": server.rss_mb(),
        }
    finally:
        server.stop()


def _source(run_dir: Path) -> tuple[list[tuple[Any, ...]], dict[str, str], list[str]]:
    def read(con: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
        rows = con.execute("SELECT ordinal, digest, data FROM programs ORDER BY ordinal").fetchall()
        return rows, con.execute("SELECT key, value FROM meta").fetchall()

    rows, meta = query_sqlite(run_dir / "programs.sqlite3", read)
    lines = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    return rows, dict(meta), lines


class Writer(threading.Thread):
    """Commits the source run's programs into ``target`` at ``rate`` a second, with events."""

    def __init__(self, source: Path, target: Path, rate: float) -> None:
        super().__init__(daemon=True)
        self.rows, self.meta, self.lines = _source(source)
        self.target, self.rate = target, rate
        self.committed_at: list[float] = []
        for name in ("config.yaml", "command.json"):
            shutil.copy(source / name, target / name)

    def run(self) -> None:
        store = ProgramStore(self.target / "programs.sqlite3")
        for key in ("identity", "n_initial"):
            store.set_meta(key, json.loads(self.meta[key]))
        state = json.loads(self.meta["state"])
        start, done_lines = time.monotonic(), 0
        with (self.target / "events.jsonl").open("a") as events:
            for i, (_, digest, data) in enumerate(self.rows):
                program = Program.from_dict(json.loads(data))
                store.commit(program, digest, attempt=None, state=state)
                self.committed_at.append(time.monotonic())
                upto = (i + 1) * len(self.lines) // len(self.rows)
                events.writelines(self.lines[done_lines:upto])
                events.flush()
                done_lines = upto
                time.sleep(max(0.0, start + (i + 1) / self.rate - time.monotonic()))
        store.close()


def measure_growth(source: Path, rate: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "growing"
        target.mkdir()
        writer = Writer(source, target, rate)
        total = len(writer.rows)
        server = Server(target)
        con = server.connect()
        writer.start()
        n, gen, msince = 0, None, 0
        samples: list[tuple[int, float, float]] = []  # (programs held, poll seconds, rss MB)
        delays: list[float] = []
        while n < total:
            time.sleep(1.0)
            t0 = time.perf_counter()
            query = f"since={n}&msince={msince}" + (f"&gen={gen}" if gen is not None else "")
            state = json.loads(get(con, f"/api/run/0/state?{query}"))
            seen = time.monotonic()
            elapsed = time.perf_counter() - t0
            new = len(state["programs"]["id"])
            delays += [seen - writer.committed_at[i] for i in range(n, n + new)]
            n, gen = state["programs"]["start"] + new, state["gen"]
            samples.append((n, elapsed, server.rss_mb()))
        idle = []
        for _ in range(30):
            t0 = time.perf_counter()
            get(con, f"/api/run/0/state?since={n}&gen={gen}")
            idle.append(time.perf_counter() - t0)
            time.sleep(0.05)
        rss_end = server.rss_mb()
        server.stop()
        writer.join()
        t0 = time.perf_counter()
        run = load_run(target)
        reread = time.perf_counter() - t0
        assert len(run.programs) == total
    quarter = [s for s in samples if s[0] <= total // 4] or samples[:1]
    last = [s for s in samples if s[0] >= 3 * total // 4] or samples[-1:]
    return {
        "total": total,
        "samples": samples,
        "rss_end": rss_end,
        "early_poll_ms": 1000 * statistics.median(s[1] for s in quarter),
        "late_poll_ms": 1000 * statistics.median(s[1] for s in last),
        "idle_poll_ms": 1000 * statistics.median(idle),
        "delay_median_s": statistics.median(delays),
        "delay_max_s": max(delays),
        "reread_ms": 1000 * reread,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mutants", type=int, default=10_000)
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--rate", type=float, default=250.0, help="programs a second (growth)")
    parser.add_argument("--no-growth", action="store_true", help="measure the page load only")
    args = parser.parse_args()
    default = Path(tempfile.gettempdir()) / f"gigaevo-bench-dashboard-{args.mutants}"
    run_dir = ensure_run((args.run_dir or default).resolve(), args.mutants)
    print(f"load average before: {os.getloadavg()[0]:.2f}")

    p = measure_page_load(run_dir, args.loads)
    print(f"\npage load, {p['programs']} programs ({args.loads} loads after the first):")
    rows = [
        ("first page load (the server reads the store), all requests", p["first_load_ms"]),
        ("page itself (GET /), median", p["page_median_ms"]),
        ("whole page load, median", p["load_median_ms"]),
        ("whole page load, p95", p["load_p95_ms"]),
        ("whole page load, server CPU time (mean)", p["load_cpu_ms"]),
        (f"plotly.js ({p['plotly_kb']:.0f} KiB gzip), first time", p["plotly_ms"]),
    ]
    print("| what | ms |\n|---|---|")
    for what, ms in rows:
        print(f"| {what} | {ms:.1f} |")
    print(f"server resident memory after the loads: {p['rss_mb']:.0f} MB")

    if args.no_growth:
        return
    g = measure_growth(run_dir, args.rate)
    total = g["total"]
    print(f"\ngrowth: {total} programs at {args.rate:.0f}/s, polled every second:")
    print("| programs held | server RSS (MB) | poll answered in (ms) |\n|---|---|---|")
    step = max(1, len(g["samples"]) // 8)
    for n, elapsed, rss in g["samples"][::step] + g["samples"][-1:]:
        print(f"| {n} | {rss:.1f} | {1000 * elapsed:.1f} |")
    first_n, _, first_rss = g["samples"][0]
    per_program = (g["rss_end"] - first_rss) * 2**20 / max(1, total - first_n)
    print(f"RSS after 30 idle polls at the end: {g['rss_end']:.1f} MB")
    print(f"growth: {per_program:.0f} bytes per program held")
    print(
        f"poll with news, median: {g['early_poll_ms']:.1f} ms in the first quarter, "
        f"{g['late_poll_ms']:.1f} ms in the last; idle poll {g['idle_poll_ms']:.1f} ms"
    )
    print(
        f"commit to client: median {g['delay_median_s']:.2f} s, max {g['delay_max_s']:.2f} s "
        "(1 s client polls)"
    )
    ratio = g["reread_ms"] / max(g["idle_poll_ms"], 1e-9)
    print(
        f"re-reading the whole run (load_run) at the end: {g['reread_ms']:.0f} ms, "
        f"{ratio:.0f}x an incremental poll"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
