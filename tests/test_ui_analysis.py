"""The study analysis view on real votes cast through the rater callbacks."""

from __future__ import annotations

import csv

import pytest

from medheb_app.services import create_services
from medheb_app.ui import analysis_tab, compare_tab
from tests.run_fixtures import MODELS, write_run


@pytest.fixture
def services(settings):
    services = create_services(settings, start_bootstrap=False)
    yield services
    services.jobs.shutdown(wait=False)


@pytest.fixture
def study_id(services, tmp_path):
    from medheb_app.study.items import create_study

    write_run(tmp_path / "run")
    study = create_study(
        services.store,
        "Analysis pilot",
        list(MODELS),
        tmp_path / "run",
        n_items=4,
        raters_per_item=2,
        seed=2,
        open_enrolment=True,
    ).id
    for rater_name, choices in (("R1", "AABt"), ("R2", "ABBp")):
        rater, _ = compare_tab.sign_in(services, study, rater_name)
        for code in choices:
            item = compare_tab.next_item(services, rater)
            choice = {"A": "A", "B": "B", "t": "tie", "p": "both_poor"}[code]
            assert compare_tab.vote(services, rater, item.token, choice)[0]
    return study


def test_analysis_shows_rates_strengths_agreement_and_bias(services, study_id):
    [(label, value)] = analysis_tab.study_options(services)
    assert value == study_id and "(8 votes)" in label
    overview, rates, strengths, figure = analysis_tab.analyse(services, study_id)
    assert "<b>8</b> votes on <b>4</b> items by <b>2</b> raters" in overview
    assert "cohen kappa" in overview and "Position bias: left list chosen in" in overview
    overall = rates[rates["stratum"] == "all"]
    assert len(overall) == 1 and overall["n"].item() == 8
    assert overall["Tie"].item().startswith("12% [")  # 1 of 8, with its Wilson interval
    assert set(strengths["model"]) == set(MODELS)
    assert len(figure.data) > 0


def test_csv_download_has_one_row_per_vote(services, study_id):
    path = analysis_tab.export(services, study_id)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8 and {row["rater_name"] for row in rows} == {"R1", "R2"}


def test_empty_and_missing_studies_give_messages(services):
    assert "Pick a study" in analysis_tab.analyse(services, None)[0]
    assert "No study" in analysis_tab.analyse(services, 42)[0]
    assert analysis_tab.export(services, None) is None
