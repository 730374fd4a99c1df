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
    # the baselines are floor / ceiling marks, not bars competing with the models
    assert {trace.name for trace in family.data} == {"random (floor)", "oracle (ceiling)"}
    assert {trace.type for trace in family.data} == {"scatter"}
    ceiling = next(t for t in family.data if t.name == "oracle (ceiling)")
    assert list(ceiling.y) == [100.0, 100.0] and ceiling.marker.symbol == "line-ew"
    scatter = ex.scatter_figure(frame, "random", "oracle")
    assert list(scatter.data[0].y) + list(scatter.data[1].y) == [100.0, 100.0]
    assert ex.scatter_figure(frame, "random", "random").layout.annotations


def test_drill_down_marks_the_gold(services, run_id):
    summary = ex.load_summary(services, run_id)
    ids = ex.query_ids(summary, "tt-one")
    assert len(ids) == 25
    page = ex.ranked_lists_html(summary, "tt-one", ids[0], ["oracle", "random"])
    assert page.count('class="dd-model"') == 2
    oracle_column = page.split("<h4>oracle · ✓ hit</h4>")[1].split('class="dd-model"')[0]
    first = oracle_column.split('data-rank="1"')[1].split('data-rank="2"')[0]
    assert "✓ GOLD" in first  # rank 1 is gold
    assert "gold first at rank 1" in oracle_column
    assert " target</div>" in oracle_column  # candidate texts shown
    assert f"<b>Query {ids[0]}</b>" in page
    assert "Pick a task" in ex.ranked_lists_html(summary, None, None, ["oracle"])


def test_query_list_marks_hits_and_filters_failures(services, run_id):
    summary = ex.load_summary(services, run_id)
    every = ex.query_choices(summary, "tt-one", ["oracle", "random"])
    failed = ex.query_choices(summary, "tt-one", ["oracle", "random"], failures_only=True)
    assert len(every) == 25 and all(label.startswith(("✓✓", "✓✗")) for label, _ in every)
    assert [qid for label, qid in every if label.startswith("✓✗")] == [qid for _, qid in failed]
    assert 0 < len(failed) < 25  # random misses most, not all
    assert ex.query_choices(summary, "tt-one", ["oracle"], failures_only=True) == []


def test_leaderboard_has_bootstrap_ci_and_baselines_last(services, run_id):
    summary = ex.load_summary(services, run_id)
    board = ex.leaderboard_with_ci(summary, ex.task_frame(summary))
    assert list(board["model"]) == ["oracle (ceiling)", "random (floor)"]
    assert board.loc[0, "Hit@1 95% CI"] == "[100.0, 100.0]"
    low, high = (float(v) for v in board.loc[1, "Hit@1 95% CI"].strip("[]").split(","))
    assert low <= board.loc[1, "hit@1"] <= high and high - low > 0
