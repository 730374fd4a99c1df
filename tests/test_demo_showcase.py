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
    assert messages[-1] == "demo ready" and messages.count("demo ready") == 1  # said once


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


def _bootstrap_small(settings: Settings, caplog) -> list[str]:
    messages: list[str] = []
    with caplog.at_level("WARNING"):
        assets = bootstrap_app(settings, lambda fraction, message: messages.append(message))
    assert assets.n == settings.demo_size and messages[-1] == "demo ready"
    failures = [r for r in caplog.records if r.levelname == "ERROR" or r.exc_info]
    assert not failures  # (withheld study items are warnings, one line each)
    return [m for m in messages if "skipped" in m]


def test_a_demo_too_small_for_the_tasks_says_so_in_one_line_and_serves(tmp_path, caplog) -> None:
    """MEDHEB_DEMO_SIZE=40 leaves no two test phantoms sharing a finding (no I-I query): the
    bootstrap skips the run with a reason in its progress, not a traceback in the log."""
    settings = Settings(data_dir=tmp_path / "data", demo_size=40, demo_models=("oracle",))
    assert _bootstrap_small(settings, caplog) == [
        "demo benchmark run skipped: the 40-study demo corpus is too small for its tasks "
        "(a larger MEDHEB_DEMO_SIZE builds it)"
    ]
    assert run_table.list_runs(Store.open(settings.database_url)) == []
    assert list_studies(Store.open(settings.database_url)) == []


def test_a_demo_with_too_few_candidates_keeps_the_run_and_says_why_there_is_no_study(
    tmp_path, caplog
) -> None:
    settings = Settings(data_dir=tmp_path / "data", demo_size=60, demo_models=("oracle",))
    skipped = _bootstrap_small(settings, caplog)
    assert len(skipped) == 1 and skipped[0].startswith("demo study skipped: No item could be")
    runs = run_table.list_runs(Store.open(settings.database_url))
    assert len(runs) == 1 and runs[0].status == "finished"
    assert list_studies(Store.open(settings.database_url)) == []
    again: list[str] = []  # the next start keeps the run and does not benchmark again
    bootstrap_app(settings, lambda fraction, message: again.append(message))
    assert not [m for m in again if "benchmarking" in m]
    assert len(run_table.list_runs(Store.open(settings.database_url))) == 1
