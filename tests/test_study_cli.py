"""`study create | list | export | analyse` end to end, and the votes table behind export."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_study_items import write_run

from medheb_app.cli import main
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.study import find_study, next_item, record_vote, sign_in, undo_last_vote
from medheb_app.study.export import COLUMNS, outcome, stratum, votes_frame


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_outcome_maps_screen_sides_to_the_canonical_pair():
    assert outcome("A", model_left="m1", model_a="m1") == "a"
    assert outcome("A", model_left="m2", model_a="m1") == "b"
    assert outcome("B", model_left="m2", model_a="m1") == "a"
    assert outcome("tie", model_left="m2", model_a="m1") == "tie"
    assert stratum(True, False) == "only_a" and stratum(False, False) == "neither"


def test_study_commands_end_to_end(tmp_path: Path, settings: Settings, capsys):
    run = write_run(tmp_path / "run", models=("oracle", "worst"), payloads=True)
    code, out, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "worst",
        "--n", "6", "--raters", "2", "--name", "pilot", "--json",
    )  # fmt: skip
    assert code == 0, err
    created = json.loads(out)
    assert created["n_items"] == 6 and created["models"] == ["oracle", "worst"]

    store = Store.open(settings.database_url)
    study_id = find_study(store, "pilot").id
    for name, choice in (("dr-a", "A"), ("dr-b", "tie")):
        rater = sign_in(store, study_id, name)
        while (view := next_item(store, study_id, rater.id)) is not None:
            record_vote(store, view.token, rater.id, choice)
    undo_last_vote(store, rater.id)  # dr-b's last vote is retracted, not exported

    code, out, _ = run_cli(capsys, "study", "list", "--json")
    assert json.loads(out)["studies"][0]["votes"] == 11

    csv_path = tmp_path / "out" / "votes.csv"
    code, out, err = run_cli(capsys, "study", "export", "--out", str(csv_path))
    assert code == 0, err
    assert "Wrote 11 vote(s)" in out
    table = pd.read_csv(csv_path)
    assert list(table.columns) == COLUMNS
    assert len(table) == 11 and not table["retracted"].any()
    assert set(table["stratum"]) == {"only_a"}  # oracle always hits, worst never does
    dr_a = table[table["rater"] == "dr-a"]
    # dr-a always chose the left list: the winner is whichever model was on the left
    assert (dr_a["winner"] == dr_a["model_left"]).all()
    assert len(votes_frame(store, "pilot", include_retracted=True)) == 12

    code, out, err = run_cli(
        capsys, "study", "analyse", "--study", "pilot", "--boot", "50", "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_votes"] == 11
    overall = next(row for row in summary["rates"] if row["stratum"] == "all")
    assert overall["tie"] == 5 and overall["a"] + overall["b"] == 6
    assert summary["agreement"]["method"] == "cohen" and summary["agreement"]["n_items"] == 5
    assert summary["position_bias"] == {
        **summary["position_bias"],
        "n": 6,
        "left": 6,
        "left_rate": 1.0,
    }
    code, out, _ = run_cli(capsys, "study", "analyse", "--boot", "0")
    assert "oracle (a) vs worst (b)" in out and "Position bias" in out


def test_study_command_errors_are_one_line(tmp_path: Path, settings: Settings, capsys):
    run = write_run(tmp_path / "run")
    code, _, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "nope",
        "--n", "2", "--name", "x",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "No outputs for model 'nope'" in err
    code, _, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "random",
        "--n", "2", "--name", "x", "--payloads", "tasks",
    )  # fmt: skip
    assert code == 2 and "summary.json not found" in err
    (run / "summary.json").write_text(json.dumps({"suite": "no-such-suite", "tasks": []}))
    code, _, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "random",
        "--n", "2", "--name", "x",
    )  # fmt: skip
    assert code == 2 and "Unknown suite 'no-such-suite'" in err
    code, _, err = run_cli(capsys, "study", "analyse", "--study", "missing")
    assert code == 2 and "No study 'missing'" in err
    code, _, err = run_cli(capsys, "study", "export", "--out", str(tmp_path))
    assert code == 2 and "is a folder" in err
    code, out, _ = run_cli(capsys, "study", "list")
    assert code == 0 and "No studies yet" in out
