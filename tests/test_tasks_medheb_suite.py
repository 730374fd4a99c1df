"""The medheb-lite suite end to end on a small phantom corpus: families, ids, CLI, training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medheb_app import cli
from medheb_app.eval.rankers import OracleRanker
from medheb_app.eval.runner import evaluate_task
from medheb_app.tasks import medheb
from medheb_app.tasks.base import FAMILIES


@pytest.fixture
def small_suite(monkeypatch: pytest.MonkeyPatch):
    """The suite shrunk; its corpora are the session's shared ones (tests/conftest.py)."""
    monkeypatch.setattr(medheb, "CHEST_N", 240)
    monkeypatch.setattr(medheb, "VOLUME_SUBJECTS", 8)
    return medheb.get_suite("medheb-lite")


@pytest.mark.slow
def test_suite_covers_every_family_and_oracle_is_perfect(small_suite, settings) -> None:
    tasks, skipped = small_suite.build(settings)
    built = {task.name: task for task in tasks}
    assert set(built) | set(skipped) == set(small_suite.names())
    families = {task.metadata.family for task in tasks if not task.metadata.graded}
    phantom_families = {
        t.metadata.family for t in tasks if t.metadata.synthetic and not t.metadata.graded
    }
    assert set(FAMILIES) - {"T-T"} <= phantom_families  # phantoms alone cover 7 families
    if not skipped:
        assert families == set(FAMILIES)
        assert {t.metadata.split for t in tasks} == {"ID", "held-out-source"}
    for task in tasks:
        assert task.metadata.data_revision, task.name
        assert len(task.queries) <= medheb.MAX_QUERIES["test"]
        run = evaluate_task(task, OracleRanker())
        main = "ndcg@5" if task.metadata.graded else "hit@1"
        assert run.scores[main] == pytest.approx(1.0), task.name
    # ids are stable across builds (they key the embedding cache)
    again, _ = small_suite.build(settings, only=["phantom-cxr-vqa"])
    assert [q.id for q in again[0].queries] == [q.id for q in built["phantom-cxr-vqa"].queries]


@pytest.mark.slow
def test_training_pairs_come_from_id_train_parts_only(small_suite, settings) -> None:
    pairs = medheb.training_pairs(settings)
    names = {name for *_, name in pairs}
    assert names and all(small_suite.specs[n].split == "ID" for n in names)
    assert not any("nih" in n or "prostate" in n or "graded" in n for n in names)
    reports = [p for p in pairs if p[3] == "phantom-cxr-i2report"]
    assert reports and all(p[0] == medheb.INST_I2REP for p in reports)
    assert all(p[1].split == "train" for p in reports)  # the query items are train Studies
    assert all(isinstance(p[2], str) and p[2] == p[1].text for p in reports)
    test_tasks, _ = small_suite.build(settings, only=["phantom-cxr-i2report"])
    test_studies = {q.item.id for q in test_tasks[0].queries}
    assert test_studies and not test_studies & {p[1].id for p in reports}


def check_list_payload(payload: dict) -> None:
    assert payload["tasks"]
    wanted = {"name", "family", "form", "split", "n_queries", "n_candidates", "source"}
    for row in payload["tasks"]:
        assert wanted <= set(row)
        assert row["family"] in FAMILIES


@pytest.mark.slow
def test_bench_list_json_contract(small_suite, settings, capsys) -> None:
    assert cli.main(["bench", "list", "--build", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    check_list_payload(payload)
    listed = {row["name"] for row in payload["tasks"]} | {r["name"] for r in payload["skipped"]}
    assert listed == set(small_suite.names())


def test_bench_list_reads_metadata_without_building_any_task(
    small_suite, settings, capsys, monkeypatch
) -> None:
    from medheb_app.tasks import base

    def refuse(*args, **kwargs):
        raise AssertionError("bench list built a task")

    with monkeypatch.context() as patch:
        patch.setattr(base.Suite, "build", refuse)
        assert cli.main(["bench", "list", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["built"] is False
    names = {row["name"] for row in payload["tasks"]}
    assert {"phantom-cxr-vg", "nih-i2i", "prostate-t2-dwi"} <= names
    assert all(row["family"] in FAMILIES for row in payload["tasks"])
    # the CLI contract's fields are always there: null until a task was built here ...
    row = next(r for r in payload["tasks"] if r["name"] == "phantom-cxr-vg")
    assert {"form", "n_queries", "n_candidates", "split", "source"} <= set(row)
    assert row["n_queries"] is None
    # ... and the form and sizes of its last build once it was
    (task,), _ = small_suite.build(settings, only=["phantom-cxr-vg"])
    with monkeypatch.context() as patch:
        patch.setattr(base.Suite, "build", refuse)
        assert cli.main(["bench", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["tasks"]
    again = next(r for r in listed if r["name"] == "phantom-cxr-vg")
    assert (again["form"], again["n_queries"], again["n_candidates"]) == (
        task.metadata.form,
        len(task.queries),
        len(task.candidates),
    )


def test_bench_list_and_run_on_a_manifest_folder(settings, capsys, tmp_path: Path) -> None:
    from test_tasks_manifest import write_fixture

    write_fixture(tmp_path / "tasks")
    assert cli.main(["bench", "list", "--suite", str(tmp_path / "tasks"), "--build", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    check_list_payload(payload)
    assert payload["tasks"][0]["n_queries"] == 3
    out = tmp_path / "run"
    args = ["bench", "run", "--suite", str(tmp_path / "tasks"), "--model", "oracle"]
    assert cli.main([*args, "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["models"]["oracle"]["splits"]["held-out-source"]["hit@1"] == 100.0
    ranked = json.loads((out / "oracle" / "toy-i2label.json").read_text())["queries"]
    assert all(q["ranked"][0] in q["positives"] for q in ranked)


def test_unknown_suite_and_task_are_one_line_errors(settings, capsys, tmp_path) -> None:
    assert (
        cli.main(["bench", "run", "--suite", "nope", "--model", "random", "--out", str(tmp_path)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: Unknown suite 'nope'") and err.count("\n") == 1
    assert "known: medheb-lite, cxr-retrieve or a manifest folder." in err  # both it runs
    code = cli.main(["bench", "run", "--model", "random", "--task", "nope", "--out", str(tmp_path)])
    assert code == 2
    assert "Unknown task(s) nope" in capsys.readouterr().err
