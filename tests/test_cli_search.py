"""CLI contract: `demo build` and `search` print a table or one JSON document; errors one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medheb_app.cli import main
from medheb_app.settings import PROJECT_ROOT

QUERY = "pleural effusion and no cardiomegaly"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli") / "data"


@pytest.fixture
def env(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.setenv("MEDHEB_DEFAULT_MODEL", "oracle")
    return data_dir


@pytest.mark.own_phantoms  # it watches the corpus being generated
def test_demo_build_then_rebuild_is_a_no_op(env: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", "build", "--n", "120", "--model", "oracle", "--json"]) == 0
    captured = capsys.readouterr()
    built = json.loads(captured.out)
    assert built["n"] == 120 and built["corpus_generated"] is True
    assert built["indices"][0]["name"] == "demo-cxr" and built["indices"][0]["built"] is True
    assert "generating 120 synthetic" in captured.err  # progress goes to stderr
    assert main(["demo", "build", "--n", "120", "--model", "oracle"]) == 0
    human = capsys.readouterr().out
    assert "already there" in human and "already built" in human


def test_search_json_and_table(env: Path, capsys: pytest.CaptureFixture) -> None:
    main(["demo", "build", "--n", "120", "--model", "oracle"])
    capsys.readouterr()
    assert main(["search", "--model", "oracle", "--text", QUERY, "--k", "3", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["query"] == QUERY
    assert payload["constraints"]["positive"] == ["Pleural Effusion"]
    assert payload["constraints"]["negative"] == ["Cardiomegaly"]
    assert [hit["satisfies"] for hit in payload["results"]] == [True] * 3
    assert main(["search", "--model", "oracle", "--text", QUERY, "--k", "3"]) == 0
    table = capsys.readouterr().out
    assert "Wanted: Pleural Effusion    Excluded: Cardiomegaly" in table
    rows = [line for line in table.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and all(" yes " in row for row in rows)
    for hit in payload["results"]:
        assert hit["id"] in table


def test_errors_are_one_line_on_stderr(env: Path, capsys: pytest.CaptureFixture) -> None:
    main(["demo", "build", "--n", "120", "--model", "oracle"])
    capsys.readouterr()
    assert main(["search", "--model", "oracle", "--index", "nope", "--text", "edema"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: Index 'nope' does not exist")
    assert len(captured.err.strip().splitlines()) == 1
    assert main(["search", "--model", "oracle", "--text", "edema", "--k", "0"]) == 2
    assert "k must be between 1 and 1000; got 0." in capsys.readouterr().err  # as for 1001
    missing = env / "missing.dcm"
    assert main(["search", "--model", "oracle", "--file", str(missing)]) == 2
    assert "missing.dcm does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:  # argparse: --text and --file are exclusive
        main(["search", "--text", "edema", "--file", str(missing)])
    assert both.value.code == 2
    said = capsys.readouterr().err  # one line, as every other error (no usage block)
    assert said.startswith("error: argument --file: not allowed with argument --text; see ")
    assert said.endswith("search --help\n") and said.count("\n") == 1


def test_a_query_over_the_limit_exits_non_zero_with_one_line(
    env: Path, capsys: pytest.CaptureFixture
) -> None:
    text = "effusion and no edema " * 50  # 1,100 characters
    assert main(["search", "--model", "oracle", "--text", text]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: The query is 1,100 characters long; the limit is 1,000")
    assert len(captured.err.strip().splitlines()) == 1
    assert "no edema effusion" not in captured.err


def test_table_shows_corrections_and_suggestions(env: Path, capsys: pytest.CaptureFixture) -> None:
    main(["demo", "build", "--n", "120", "--model", "oracle"])
    capsys.readouterr()
    assert main(["search", "--model", "oracle", "--text", "efusion and no pneumo", "--k", "2"]) == 0
    table = capsys.readouterr().out
    assert "Read: 'efusion' as 'effusion'" in table
    assert "Did you mean: pneumonia / pneumothorax" in table


def test_json_contract_through_a_real_process(env: Path) -> None:
    """Exactly the documented command, defaults included (default model set by env)."""
    main(["demo", "build", "--n", "120", "--model", "oracle"])
    result = subprocess.run(
        [sys.executable, "-m", "medheb_app", "search", "--text", QUERY, "--json"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DATA_DIR": str(env), "MEDHEB_DEFAULT_MODEL": "oracle"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert set(payload) >= {"query", "constraints", "results", "unknown_terms", "warnings"}
    assert payload["index"] == "demo-cxr" and payload["model"] == "oracle"
    assert len(payload["results"]) == 10
    for hit in payload["results"]:
        assert set(hit) >= {"id", "score", "findings", "source", "satisfies"}
        assert all(value in (1, 0, -1, None) for value in hit["findings"].values())
        assert hit["satisfies"] is True
