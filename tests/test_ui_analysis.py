"""The study analysis view on real votes cast through the study API (as the rater page does)."""

from __future__ import annotations

import csv
import io

import pytest

from medheb_app.services import create_services
from medheb_app.ui import analysis_tab
from tests.run_fixtures import MODELS, write_run


@pytest.fixture
def services(settings):
    services = create_services(settings, start_bootstrap=False)
    yield services
    services.jobs.shutdown(wait=False)


@pytest.fixture
def study_id(services, tmp_path):
    from medheb_app.study import create_study, next_item, record_vote, sign_in_open

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
    for rater_name, choices in (("R1", "AABt"), ("=HYPERLINK(1)", "ABBp")):
        rater = sign_in_open(services.store, study, rater_name)
        for code in choices:
            item = next_item(services.store, study, rater.rater_id)
            choice = {"A": "A", "B": "B", "t": "tie", "p": "both_poor"}[code]
            record_vote(services.store, item.token, rater.rater_id, choice)
    return study


def test_analysis_shows_rates_strengths_agreement_bias_and_rater_quality(services, study_id):
    [(label, value)] = analysis_tab.study_options(services)
    assert value == study_id and "(4 items, 8 votes)" in label
    overview, rates, strengths, figure, quality, mrmc = analysis_tab.analyse(services, study_id)
    assert "<b>8</b> votes on <b>4</b> items by <b>2</b> raters" in overview
    assert "cohen kappa" in overview and "Position bias: left list chosen in" in overview
    overall = rates[rates["stratum"] == "all"]
    assert len(overall) == 1 and overall["n"].item() == 8
    assert overall["Tie"].item().startswith("12% [")  # 1 of 8, with its Wilson interval
    assert set(strengths["model"]) == set(MODELS)
    assert len(figure.data) > 0
    assert len(quality) == 2 and {"gold accuracy", "median s / item"} <= set(quality.columns)
    # MRMC beside Wilson, one sentence each on what it generalises to (issue 18 item 1)
    assert "ORH: random raters, random queries" in mrmc and "Wilson (n = 8 votes)" in mrmc
    assert "new raters and new queries" in mrmc and "independent coin" in mrmc
    with_margin = analysis_tab.analyse(services, study_id, None, "exclude", 0.1)[5]
    assert "(ties exclude)" in with_margin and "(margin 0.1)" in with_margin
    # Bradley-Terry strengths at 3 significant digits (they printed with 16)
    assert all(len(str(v).replace(".", "").lstrip("0-")) <= 3 for v in strengths["strength"])
    with_threshold = analysis_tab.analyse(services, study_id, 0.5)[0]
    assert "Quality control: 0 rater(s) below 50% gold accuracy" in with_threshold


def test_csv_download_has_one_row_per_vote_and_neutralised_formulas(services, study_id):
    body = analysis_tab.export_bytes(services, study_id)
    rows = list(csv.DictReader(io.StringIO(body.decode("utf-8"), newline="")))
    assert len(rows) == 8
    names = {row["rater_name"] for row in rows}
    assert "R1" in names and not any(name.startswith("=") for name in names)


def test_empty_and_missing_studies_give_messages(services):
    assert "Pick a study" in analysis_tab.analyse(services, None)[0]
    assert "No study" in analysis_tab.analyse(services, 42)[0]
    assert analysis_tab.export_bytes(services, None) is None


def test_gold_thresholds_are_fractions_as_in_the_cli(services, study_id, capsys):
    """The UI took 80 (%) where the CLI takes 0.8: one unit everywhere, a percentage refused,
    and the label and the --help both say which."""
    import gradio as gr

    from medheb_app.cli import build_parser

    refused = analysis_tab.analyse(services, study_id, 80)[0]
    assert "a fraction from 0 to 1 (0.8 = 80%); got 80" in refused
    assert "below 80% gold accuracy" in analysis_tab.analyse(services, study_id, 0.8)[0]
    with gr.Blocks() as blocks:
        analysis_tab.build_analysis_tab(services)
    [field] = [b for b in blocks.blocks.values() if b.elem_id == "analysis-min-gold"]
    assert "0.8 = 80%" in field.label and field.maximum == 1
    with pytest.raises(SystemExit):
        build_parser("study").parse_args(["study", "analyse", "--help"])
    assert "0.8 = 80%, as in the UI" in " ".join(capsys.readouterr().out.split())


def test_study_analysis_says_how_to_reach_it_on_a_server_without_an_admin(services, monkeypatch):
    """On a Space without ADMIN_PASSWORD nobody could open Study analysis, and the tab only
    said 'sign in' (issue 22 item 6e): it now names the sign-in this server offers, or what
    to configure where it has none."""
    from dataclasses import replace

    from medheb_app.access.auth import Authenticator

    auth = Authenticator(b"k" * 32)
    assert not services.admin_enabled
    none = analysis_tab.sign_in_html(services, auth)
    assert "This server has no admin" in none and "<code>ADMIN_PASSWORD</code>" in none
    assert "<code>hf_oauth: true</code>" in none and "<code>ADMIN_USERS</code>" in none
    assert "python -m medheb_app study analyse" in none
    with_password = replace(services, settings=replace(services.settings, admin_password="pw"))
    signed = analysis_tab.sign_in_html(with_password, auth)
    assert '<a href="/auth/admin" id="analysis-sign-in">sign in as admin</a>' in signed
    assert "no admin" not in signed and "Hugging Face" not in signed
    from medheb_app.access.auth import OAUTH_VARIABLES

    monkeypatch.setenv("SYSTEM", "spaces")  # the Space runtime, where the OAuth login is real
    for name in OAUTH_VARIABLES:
        monkeypatch.setenv(name, "set-by-the-space")
    on_space = replace(services, settings=replace(services.settings, admin_users=("alice",)))
    oauth = Authenticator(b"k" * 32, admin_users=("alice",), oauth=True)
    assert on_space.admin_enabled
    hf = analysis_tab.sign_in_html(on_space, oauth)
    assert "sign in with Hugging Face in the Admin tab" in hf and "/auth/admin" not in hf
    import gradio as gr

    with gr.Blocks() as blocks:
        analysis_tab.build_analysis_tab(services, auth)
    [overview] = [b for b in blocks.blocks.values() if "This server has no admin" in str(
        getattr(b, "value", ""))]  # fmt: skip
    assert overview is not None


def test_a_preference_interval_cut_at_0_or_100_percent_is_marked_on_the_page():
    from medheb_app.study.mrmc import MRMCResult

    wide = MRMCResult("RRRC", 0.6, 0.3, 1.0, -0.9, 1.4, 0.3, 4.0, generalises_to="new raters")
    pair = {
        "model_a": "alpha", "model_b": "beta", "n_readers": 2, "n_cases": 6, "ties": "half",
        "results": {"RRRC": wide.to_dict()},
    }  # fmt: skip
    page = analysis_tab.mrmc_html([pair])
    assert "80% [5, 100] (cut at 0-100%: too few raters for this interval)" in page
    assert "0.6 [-0.9, 1.4]" in page  # the difference as computed
