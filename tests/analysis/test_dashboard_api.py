"""The dashboard's JSON API and assets, through Starlette's test client, on real runs."""

from __future__ import annotations

import difflib
import gzip
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gigaevo.analysis import load_programs, load_run
from gigaevo.dashboard.app import create_app
from gigaevo.dashboard.runs import Runs


def _client(*roots: Path) -> TestClient:
    return TestClient(create_app(Runs(list(roots), min_interval_s=0), ["127.0.0.1", "testserver"]))


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_state_sends_every_program_once_then_only_news(plain_run: Path) -> None:
    client = _client(plain_run)
    programs = load_programs(plain_run)
    first = client.get("/api/run/0/state").json()
    assert first["reset"] and first["programs"]["start"] == 0
    assert first["programs"]["id"] == list(programs["id"])
    assert first["programs"]["mutant"] == list(programs["mutant"])
    valid = programs[programs["valid"]]
    sent = first["programs"]
    assert [f for f, v in zip(sent["fitness"], sent["valid"], strict=True) if v] == list(
        valid["fitness"]
    )
    assert first["status"]["state"] == "stopped" and first["metric"] == "rastrigin_value"
    assert first["higher_is_better"] is False
    assert first["counters"]["n_mutants"] == programs["mutant"].max()
    n = len(programs)
    again = client.get(f"/api/run/0/state?since={n}&gen={first['gen']}").json()
    assert not again["reset"] and again["programs"]["id"] == [] and again["programs"]["start"] == n
    # a page from another generation (or beyond the end) gets everything again
    stale = client.get(f"/api/run/0/state?since={n}&gen={first['gen'] + 7}").json()
    assert stale["reset"] and len(stale["programs"]["id"]) == n


def test_archive_and_categories_match_the_run(plain_run: Path) -> None:
    state = _client(plain_run).get("/api/run/0/state").json()
    run = load_run(plain_run)
    elites = [e for island in state["archive"]["islands"] for e in island["elites"]]
    assert sorted((tuple(c), pid) for c, _, pid in elites) == sorted(
        zip(run.archive["cell"], run.archive["program_id"], strict=True)
    )
    # the problem's own axes (rastrigin declares them), as the run's summary lists them
    axes = run.summary["descriptors"]
    assert state["archive"]["dims"] == [a["name"] for a in axes]
    assert state["archive"]["bins"] == [a["bins"] for a in axes]
    assert len(state["archive"]["dims"]) == 2
    statuses = [state["categories"]["status"][c] for c in state["programs"]["status"]]
    assert statuses == list(run.programs["status"])


def test_program_has_its_code_and_the_diff_against_its_parent(plain_run: Path) -> None:
    client = _client(plain_run)
    programs = load_programs(plain_run).set_index("id")
    child = programs[programs["parent_id"].notna() & programs["valid"]].index[-1]
    parent = programs.at[child, "parent_id"]
    p = client.get(f"/api/run/0/program/{child}").json()
    assert p["code"] == programs.at[child, "code"]
    expected = difflib.unified_diff(
        programs.at[parent, "code"].splitlines(keepends=True),
        programs.at[child, "code"].splitlines(keepends=True),
        fromfile=f"parent {parent}",
        tofile="this program",
    )
    assert p["diff"] == "".join(expected) and p["diff"].count("\n+") >= 1
    assert p["mutation"]["change_report"] == programs.at[child, "mutation.change_report"]
    assert p["mutation"]["explanation"] == programs.at[child, "mutation.explanation"]
    assert p["metrics"]["rastrigin_value"] == pytest.approx(programs.at[child, "fitness"])
    chain = [n["id"] for n in p["lineage"]["chain"]]
    assert chain[0] == child and chain[1] == parent and p["lineage"]["chain"][-1]["parent"] == -1
    initial = programs.index[programs["status"] == "initial"][0]
    assert client.get(f"/api/run/0/program/{initial}").json()["diff"] is None
    assert client.get("/api/run/0/program/nope").status_code == 404
    assert client.get("/api/run/5/state").status_code == 404


def test_memory_panels_and_card_effects(read_side_run: Path) -> None:
    client = _client(read_side_run)
    state = client.get("/api/run/0/state").json()
    memory = state["memory"]
    run = load_run(read_side_run)
    actions = run.evidence.decisions["action"].value_counts().to_dict()
    assert memory["actions"] == actions
    assert len(memory["decisions"]["attempt"]) == len(run.evidence.decisions)
    assert memory["n_cards"] == len(run.cards)
    assert sum(n for _, _, n in memory["writes"]) == len(run.write_ledger)
    cards = client.get("/api/run/0/cards").json()
    effects = run.card_effects().head(len(cards["cards"]))
    assert [c["card_id"] for c in cards["cards"]] == list(effects["card_id"])
    assert [c["n_cited"] for c in cards["cards"]] == list(effects["n_cited"])
    plain = client.get(f"/api/run/0/state?since=1&gen={state['gen']}&msince=3").json()
    assert plain["memory"]["decisions"]["start"] == 3


def test_sweep_compares_its_runs(sweep_dir: Path) -> None:
    client = _client(sweep_dir)
    runs = client.get("/api/runs").json()["runs"]
    assert [r["name"] for r in runs] == ["0", "1"]
    sweep = client.get("/api/sweep").json()
    assert sweep["columns"] == ["override.seed"]
    assert [r["override.seed"] for r in sweep["runs"]] == [0, 1]
    for r in sweep["runs"]:
        run = load_run(Path(runs[r["rid"]]["path"]))
        curve = sweep["curves"][str(r["rid"])]
        assert curve[-1][1] == pytest.approx(run.best_so_far()["best"].iloc[-1])
        assert r["best_fitness"] == pytest.approx(run.summary["best_fitness"])
    assert sum(a["n"] for a in sweep["compare"]) == 2


def test_page_assets_are_local_and_locked_down(plain_run: Path) -> None:
    client = _client(plain_run)
    page = client.get("/")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http://" not in page.text and "https://" not in page.text  # no CDN, no network
    plotly = client.get("/static/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert plotly.headers["content-encoding"] == "gzip"
    assert b"plotly.js" in plotly.content[:200]  # decoded by the client
    assert client.get("/static/dashboard.js").text.startswith("// gigaevo dashboard")
    assert client.get("/static/..%2Fapp.py").status_code == 404
    assert client.get("/static/missing.js").status_code == 404
    assert client.post("/api/runs").status_code == 405
    assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400
    assert len(gzip.compress(plotly.content)) < len(plotly.content)


def test_serving_changes_nothing_in_the_run_folder(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    before = _fingerprint(run_dir)
    client = _client(run_dir)
    state = client.get("/api/run/0/state").json()
    for pid in state["programs"]["id"][:: max(1, len(state["programs"]["id"]) // 5)]:
        assert client.get(f"/api/run/0/program/{pid}").status_code == 200
    client.get("/api/run/0/cards")
    client.get("/api/sweep")
    assert _fingerprint(run_dir) == before


def test_json_is_strict_even_with_non_finite_numbers() -> None:
    from gigaevo.dashboard.payloads import clean

    data = clean({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert json.dumps(data, allow_nan=False) == '{"a": null, "b": [null, 1.5], "c": {"d": null}}'
