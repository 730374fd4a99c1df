"""Chart colours: colour-blind-safe, distinct within every run, recorded so a model keeps its
colour; random and oracle are grey floor / ceiling marks (issue 22 item 2)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from medheb_app.eval import colours, figures
from medheb_app.eval.runner import run_suite
from medheb_app.services import create_services
from medheb_app.store.colours import model_slots
from medheb_app.store.runs import start_run
from medheb_app.tasks.base import Item, TaskMetadata
from medheb_app.tasks.builders.generic import paired_task
from medheb_app.ui.explorer_tab import grouped_figure, task_frame

NAMES = ("dual-lite", "medemb-lite", "dual-lite@ux-report", "open_clip:ViT-B-32", "mllm:tiny")


def _meta(name: str, family: str) -> TaskMetadata:
    return TaskMetadata(
        name=name, family=family, form="text", split="ID", anatomy="chest", source="unit",
        qry_inst="Find:",
    )  # fmt: skip


@pytest.fixture
def summary(settings, tmp_path: Path):
    """A real run (random, oracle) whose model blocks are copied under five model names."""
    pairs = [(Item(f"q{i}", f"query {i}"), Item(f"t{i}", f"target {i}")) for i in range(20)]
    tasks = [paired_task(_meta("a-tt", "T-T"), pairs), paired_task(_meta("b-ii", "I-I"), pairs)]
    run = run_suite(tasks, ["random", "oracle"], tmp_path / "run", settings, record=False)
    models = {name: run.models["random"] for name in NAMES}
    return dataclasses.replace(run, models={**models, **run.models})


def _bar_colours(figure) -> dict[str, str]:
    return {t.name: t.marker.color for t in figure.data if t.type == "bar"}


def test_every_pair_of_models_in_a_run_gets_distinct_colours(summary) -> None:
    for by in ("family", "split"):
        bars = _bar_colours(grouped_figure(task_frame(summary), by, by))
        assert set(bars) == set(NAMES)
        for first, second in itertools.combinations(NAMES, 2):
            assert bars[first] != bars[second], (by, first, second)
        assert set(bars.values()) <= set(colours.PALETTE)  # the colour-blind-safe list only
    (points,) = figures.accuracy_vs_balance(summary).data
    real = [c for name, c in zip(points.text, points.marker.color, strict=True) if name in NAMES]
    assert len(set(real)) == len(real) == len(NAMES)


def test_shipped_models_hold_the_first_colours_whatever_the_order() -> None:
    palette = colours.run_colours(["mllm:tiny", "medemb-lite", "dual-lite"])
    assert palette["dual-lite"] == colours.PALETTE[0]
    assert palette["medemb-lite"] == colours.PALETTE[1]
    assert palette["mllm:tiny"] not in (colours.PALETTE[0], colours.PALETTE[1])


def test_random_and_oracle_are_grey_marks_not_bars(summary) -> None:
    figure = grouped_figure(task_frame(summary), "family", "family")
    marks = [t for t in figure.data if t.type == "scatter"]
    assert [t.name for t in marks] == ["random (floor)", "oracle (ceiling)"]
    for trace in marks:
        red, green, blue = (int(trace.marker.line.color[k : k + 2], 16) for k in (1, 3, 5))
        assert max(red, green, blue) - min(red, green, blue) < 8  # neutral grey
        assert trace.marker.line.color not in colours.PALETTE


def test_recorded_slots_keep_a_models_colour_across_runs(settings) -> None:
    services = create_services(settings, start_bootstrap=False)
    start_run(services.store, "medheb-lite", ["random", "model-b", "model-a"], "/tmp/x", {})
    first = services.runs.colours(["model-a", "model-b", "oracle"])
    # a later run with a new model and a different order: the old models keep their colours
    later = services.runs.colours(["model-c", "model-a"])
    assert later["model-a"] == first["model-a"]
    assert later["model-c"] not in (first["model-a"], first["model-b"])
    slots = model_slots(services.store, [])
    assert slots["dual-lite"] == 0 and slots["medemb-lite"] == 1  # shipped first
    assert slots["model-b"] < slots["model-a"] < slots["model-c"]  # first appearance in store
    assert "random" not in slots and "oracle" not in slots


def test_models_whose_slots_wrap_still_differ_within_a_run(settings) -> None:
    services = create_services(settings, start_bootstrap=False)
    many = [f"model-{i:02d}" for i in range(40)]
    model_slots(services.store, many)
    slots = model_slots(services.store, [])
    wrapped = [n for n in many if slots[n] % len(colours.PALETTE) == slots["dual-lite"]]
    run = ["dual-lite", *wrapped]
    palette = services.runs.colours(run)
    assert len(set(palette.values())) == len(run)
    big = colours.run_colours(many)  # more models than palette colours: still all distinct
    assert len(set(big.values())) == len(many)
