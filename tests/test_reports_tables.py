"""Tables and figures from a run summary: the numbers land in the right cells."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from medheb_app.eval import figures, reports
from medheb_app.eval.runner import run_suite
from medheb_app.tasks.base import Item, TaskMetadata
from medheb_app.tasks.builders.generic import graded_task, paired_task
from medheb_app.ui.explorer_tab import grouped_figure, task_frame


def meta(name: str, family: str, split: str = "ID", **extra) -> TaskMetadata:
    return TaskMetadata(
        name=name, family=family, form="text", split=split, anatomy="chest", source="unit",
        qry_inst="Find:", **extra,
    )  # fmt: skip


def pairs(n: int, prefix: str) -> list[tuple[Item, Item]]:
    return [
        (Item(f"{prefix}q{i}", f"query {i}"), Item(f"{prefix}t{i}", f"target {i}"))
        for i in range(n)
    ]


@pytest.fixture
def summary(settings, tmp_path: Path):
    level = {f"g{i}": i % 3 for i in range(9)}
    items = [Item(key, key) for key in level]
    tasks = [
        paired_task(meta("a-tt", "T-T"), pairs(40, "a")),
        paired_task(meta("b-vg", "VG", "held-out-source"), pairs(40, "b")),
        paired_task(meta("c-ii", "I-I"), pairs(40, "c")),
        graded_task(
            meta("d-graded", "I-I", main_metric="ndcg@5", graded=True, relation="severity"),
            items, items, lambda q, c: 1.0 if level[q] == level[c] else 0.0,
        ),
    ]  # fmt: skip
    return run_suite(tasks, ["random", "oracle"], tmp_path / "run", settings, record=False)


def test_table4_cells_are_hit1_with_mrr5(summary) -> None:
    rows = {row["model"]: row for row in reports.table4_rows(summary)}
    assert list(rows["oracle"]) == ["model", "I-I", "VG", "T-T", "ID", "Held-out", "All"]
    assert rows["oracle"]["VG"] == "100.00 (100.00)"
    random_block = summary.models["random"].families["T-T"]
    assert rows["random"]["T-T"] == f"{random_block['hit@1']:.2f} ({random_block['mrr@5']:.2f})"


def test_all_split_is_task_macro_and_graded_tasks_stay_out(summary) -> None:
    model = summary.models["random"]
    per_task = [model.tasks[name]["hit@1"] for name in ("a-tt", "b-vg", "c-ii")]
    assert model.splits["all"]["hit@1"] == pytest.approx(np.mean(per_task), abs=0.01)
    assert model.splits["all"]["n_tasks"] == 3
    assert model.families["I-I"]["n_tasks"] == 1  # the graded I-I task is only in Table 5
    assert set(model.graded) == {"severity", "all"}
    table5 = reports.table5_rows(summary)
    assert {row["model"]: row["Severity"] for row in table5}["oracle"] == "100.00"


def test_table7_cv_matches_family_scores(summary) -> None:
    model = summary.models["random"]
    family_hit1 = [block["hit@1"] for block in model.families.values()]
    assert model.consistency["cv"] == pytest.approx(
        np.std(family_hit1) / np.mean(family_hit1), abs=1e-3
    )
    row = {r["model"]: r for r in reports.table7_rows(summary)}["oracle"]
    assert (row["mu"], row["sigma"], row["CV"]) == ("100.00", "0.00", "0.000")


def test_difficulty_buckets_and_gap(summary) -> None:
    assert reports.bucket_of(0.0) == "Collapse"
    assert reports.bucket_of(2.99) == "Collapse"
    assert reports.bucket_of(3.0) == "Weak"
    assert reports.bucket_of(29.9) == "Medium"
    assert reports.bucket_of(30.0) == "Tractable"
    # only baselines ran: difficulty uses every model except the oracle
    assert reports.reference_models(summary) == ["random"]
    rows = reports.difficulty_rows(summary)
    assert {r["task"] for r in rows} == {"a-tt", "b-vg", "c-ii"}
    gap = {r["model"]: r for r in reports.gap_rows(summary)}
    assert gap["oracle"]["gap"] == 0.0
    expected = np.mean([summary.models["random"].families[f]["hit@1"] for f in ("I-I", "T-T")])
    assert gap["random"]["established"] == pytest.approx(expected, abs=0.01)


def test_markdown_report_and_figures_render(summary) -> None:
    text = reports.render_report(summary)
    for heading in ("Table 4", "Table 7", "Table 8", "Table 5", "difficulty", "Per task"):
        assert heading in text
    assert "oracle is not a model" in text
    for build in (
        figures.accuracy_vs_balance,
        figures.difficulty_buckets,
        figures.relation_gap,
        figures.graded_ndcg,
    ):  # the explorer's charts (ui/explorer_tab.py)
        assert build(summary).data, build.__name__
    marks = grouped_figure(task_frame(summary), "family", "Hit@1 per family").data
    assert [trace.name for trace in marks] == ["random (floor)", "oracle (ceiling)"]
    assert {trace.type for trace in marks} == {"scatter"}  # floor / ceiling, never bars
    assert list(marks[1].y) == [100.0, 100.0, 100.0]


def test_one_colour_per_model_across_every_chart(summary) -> None:
    renamed = dataclasses.replace(
        summary, models={"model-a": summary.models["random"], **summary.models}
    )
    colours: dict[str, set[str]] = {}
    charts = (
        grouped_figure(task_frame(renamed), "family", "family"),
        grouped_figure(task_frame(renamed), "split", "split"),
        figures.graded_ndcg(renamed),
    )
    for chart in charts:
        for trace in chart.data:
            if trace.type == "bar":
                colours.setdefault(trace.name, set()).add(trace.marker.color)
    assert colours == {"model-a": {figures.model_colours(renamed.models)["model-a"]}}


def test_comparison_rows_pair_each_tasks_queries(summary) -> None:
    rows = {r["task"]: r for r in reports.comparison_rows(summary, "oracle", "random")}
    assert set(rows) == {"a-tt", "b-vg", "c-ii", "d-graded"}
    tt = rows["a-tt"]
    random_hit1 = summary.models["random"].tasks["a-tt"]["hit@1"]
    assert tt["oracle"] == "100.00"
    assert float(tt["diff"]) == pytest.approx(100 - random_hit1, abs=0.01)
    assert float(tt["p"]) < 0.01  # 40 queries, oracle always right, random rarely
    assert rows["d-graded"]["metric"] == "ndcg@5"
