"""The app's bootstrap leaves a small benchmark run and a demo study behind, so the explorer and
the analysis tab of a fresh Space are not empty; a second start builds nothing."""

from __future__ import annotations

import json

import pytest

from medheb_app.demo import bootstrap_app
from medheb_app.demo_showcase import SHOWCASE_RUN, SHOWCASE_STUDY
from medheb_app.settings import Settings
from medheb_app.store import runs as run_table
from medheb_app.store.db import Store
from medheb_app.study import list_studies

pytestmark = pytest.mark.slow  # a 200-phantom oracle demo, then the small run


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    data = tmp_path_factory.mktemp("showcase") / "data"
    settings = Settings(data_dir=data, demo_size=200, demo_models=("oracle",))
    messages: list[str] = []
    bootstrap_app(settings, lambda fraction, message: messages.append(message))
    return settings, messages


def test_the_bootstrap_records_a_small_run_of_random_against_the_demo_model(started) -> None:
    settings, messages = started
    runs = run_table.list_runs(Store.open(settings.database_url))
    assert len(runs) == 1 and runs[0].status == "finished", runs
    assert sorted(runs[0].models) == ["oracle", "random"]
    summary = json.loads((settings.runs_dir / SHOWCASE_RUN / "summary.json").read_text())
    assert set(summary["models"]) == {"oracle", "random"}
    assert messages[-1] == "demo ready"


def test_the_bootstrap_creates_a_demo_study_from_that_run(started) -> None:
    settings, _ = started
    studies = list_studies(Store.open(settings.database_url))
    assert [study["name"] for study in studies] == [SHOWCASE_STUDY]
    assert studies[0]["n_items"] >= 1 and sorted(studies[0]["models"]) == ["oracle", "random"]
    from medheb_app.study import find_study
    from medheb_app.study.blinding import run_is_blinded

    store = Store.open(settings.database_url)
    run_dir = settings.runs_dir / SHOWCASE_RUN
    assert find_study(store, SHOWCASE_STUDY).source == str(run_dir)  # was stored empty
    assert run_is_blinded(store, run_dir)  # and its run is recognised by content anyway


def test_a_second_start_builds_nothing(started) -> None:
    settings, _ = started
    messages: list[str] = []
    bootstrap_app(settings, lambda fraction, message: messages.append(message))
    assert not [m for m in messages if "benchmarking" in m or "building index" in m]
    assert len(run_table.list_runs(Store.open(settings.database_url))) == 1
