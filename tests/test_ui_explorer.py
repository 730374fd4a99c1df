"""The benchmark explorer's data and figure functions on a real (small) stored run."""

from __future__ import annotations

import numpy as np
import pytest

from medheb_app.eval.runner import run_suite
from medheb_app.services import create_services
from medheb_app.tasks.base import Item, TaskMetadata
from medheb_app.tasks.builders.generic import paired_task
from medheb_app.ui import explorer_tab as ex


def _meta(name: str, family: str, split: str = "ID") -> TaskMetadata:
    return TaskMetadata(
        name=name,
        family=family,
        form="text",
        split=split,
        anatomy="chest",
        source="unit",
        qry_inst="Find the matching passage:",
    )


def _pairs(n: int, seed: int) -> list[tuple[Item, Item]]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)]
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words, size=4, replace=False))
        out.append((Item(f"q{i}", text), Item(f"t{i}", text + " target")))
    return out


@pytest.fixture
def services(settings):
    return create_services(settings, start_bootstrap=False)


@pytest.fixture
def run_id(services, tmp_path):
    tasks = [
        paired_task(_meta("tt-one", "T-T"), _pairs(25, 1)),
        paired_task(_meta("vg-two", "VG", "held-out-source"), _pairs(20, 2)),
    ]
    summary = run_suite(tasks, ["random", "oracle"], tmp_path / "run", services.settings)
    return summary.run_id


def test_runs_listed_and_summary_loaded(services, run_id):
    choices = ex.run_choices(services)
    assert [value for _, value in choices] == [run_id]
    summary = ex.load_summary(services, run_id)
    assert set(summary.models) == {"random", "oracle"}
    with pytest.raises(KeyError):
        ex.load_summary(services, 999)


def test_filtered_leaderboard_is_task_macro(services, run_id):
    frame = ex.task_frame(ex.load_summary(services, run_id))
    assert len(frame) == 4 and set(frame["split"]) == {"ID", "held-out-source"}
    board = ex.leaderboard(frame)
    assert list(board["model"]) == ["oracle", "random"]
    assert board.loc[0, "hit@1"] == 100.0 and board.loc[0, "tasks"] == 2
    held_out = ex.leaderboard(ex.filter_frame(frame, splits=["held-out-source"]))
    random_row = frame[(frame.model == "random") & (frame.task == "vg-two")]
    assert held_out.set_index("model").loc["random", "hit@1"] == random_row["hit@1"].item()
    assert ex.leaderboard(ex.filter_frame(frame, families=["I-I"])).empty


def test_figures_render_from_the_run(services, run_id):
    summary = ex.load_summary(services, run_id)
    frame = ex.task_frame(summary)
    family = ex.grouped_figure(frame, "family", "t")
    assert {trace.name for trace in family.data} == {"random", "oracle"}
    scatter = ex.scatter_figure(frame, "random", "oracle")
    assert list(scatter.data[0].y) + list(scatter.data[1].y) == [100.0, 100.0]
    assert ex.scatter_figure(frame, "random", "random").layout.annotations


def test_drill_down_marks_the_gold(services, run_id):
    summary = ex.load_summary(services, run_id)
    ids = ex.query_ids(summary, "tt-one")
    assert len(ids) == 25
    page = ex.ranked_lists_html(summary, "tt-one", ids[0], ["oracle", "random"])
    assert page.count("<ol>") == 2
    oracle_column = page.split("<h4>oracle</h4>")[1].split("</ol>")[0]
    assert oracle_column.index("✓ GOLD") < oracle_column.index("</li>")  # rank 1 is gold
    assert "gold first at rank 1" in oracle_column
    assert "target</div>" in oracle_column  # candidate texts shown under their ids
    assert page.startswith(f"<div><b>Query {ids[0]}</b>")
    assert "Pick a task" in ex.ranked_lists_html(summary, None, None, ["oracle"])
