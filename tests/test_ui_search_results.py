"""The search tab against a real (small) demo index: parsed query, marks on broken hits,
the SYNTHETIC label on every thumbnail, the detail view, and the messages for bad queries."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from medheb_app.demo import ensure_demo
from medheb_app.search import Score
from medheb_app.services import create_services
from medheb_app.ui import search_tab, search_upload

pytestmark = pytest.mark.slow  # builds a 60-phantom demo index (about 20 s)
QUERY = "pleural effusion and no cardiomegaly"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from medheb_app.settings import Settings

    data_dir = tmp_path_factory.mktemp("search-ui") / "data"
    settings = replace(Settings.from_env(data_dir=data_dir), demo_size=60)
    ensure_demo(settings, models=["random", "oracle"])
    services = create_services(settings, ensure_demo=lambda s, p: None)
    services.bootstrap.wait(30)
    yield services
    services.jobs.shutdown(wait=False)


def test_pickers_list_the_built_index_and_models(services):
    model, index = search_tab.refresh_pickers(services, "oracle", None)
    assert {"random", "oracle"} <= set(model["choices"]) and model["value"] == "oracle"
    assert index["choices"] == ["demo-cxr"] and index["value"] == "demo-cxr"


def test_oracle_hits_all_match_and_are_labelled_synthetic(services):
    outcome = search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", 5)
    assert ">Pleural Effusion</span>" in outcome.parsed_html.split("Must not show")[0]
    assert 'Must not show:</b> <span class="medheb-chip absent">Cardiomegaly' in outcome.parsed_html
    assert len(outcome.gallery) == 5
    for hit, (thumbnail, caption) in zip(outcome.hits, outcome.gallery, strict=True):
        assert hit["findings"]["Pleural Effusion"] == 1 and hit["findings"]["Cardiomegaly"] != 1
        assert caption.startswith(f"#{hit['rank']} · ✓ meets · ")
        assert thumbnail.ndim == 3 and (thumbnail[:5, :, 0] > thumbnail[:5, :, 2]).mean() > 0.5
    image, detail = search_tab.hit_detail(outcome.hits, 0)
    assert image is not None and "SYNTHETIC phantom" in detail
    assert outcome.hits[0]["text"] and outcome.hits[0]["text"][:20] in detail


def test_random_model_hits_that_break_the_query_are_marked(services):
    outcome = search_tab.run_search(services, QUERY, None, "random", "demo-cxr", 40, "similarity")
    broken = [hit for hit in outcome.hits if hit["satisfies"] is False]
    assert broken, "a random ranking of 40 of 60 phantoms breaks the query somewhere"
    for hit, (_, caption) in zip(outcome.hits, outcome.gallery, strict=True):
        assert ("✗ violates · cos " in caption) == (hit["satisfies"] is False)
        assert caption.startswith(f"#{hit['rank']} · ") and " · cos " in caption
    first = outcome.hits.index(broken[0])
    _, detail = search_tab.hit_detail(outcome.hits, first)
    assert "Breaks the query" in detail and "medheb-chip violates" in detail


def test_query_without_known_finding_warns_and_unknown_model_errors(services):
    outcome = search_tab.run_search(services, "zebra stripes", None, "oracle", "demo-cxr", 3)
    assert "No known finding" in outcome.notice and "warning" in outcome.notice
    bad = search_tab.run_search(services, QUERY, None, "no-such-model", "demo-cxr", 3)
    assert 'class="medheb-notice error"' in bad.notice and not bad.gallery
    assert "is not offered" in bad.notice and "Traceback" not in bad.notice
    missing = search_tab.run_search(services, QUERY, None, "oracle", "no-such-index", 3)
    assert "is not offered here" in missing.notice and "demo-cxr" in missing.notice


def test_a_query_over_the_limit_gets_the_message_and_no_search(services, monkeypatch):
    def no_model(*_args, **_kwargs):
        raise AssertionError("a refused query must not load a model or an index")

    monkeypatch.setattr("medheb_app.models.registry.load_embedder", no_model)
    text = ("effusion and no edema " * 60).strip()  # 1,319 characters
    outcome = search_tab.run_search(services, text, None, "oracle", "demo-cxr", 3)
    assert "1,319 characters long; the limit is 1,000" in outcome.notice
    assert "Not read:</b> The query is 1,319" in outcome.parsed_html
    assert "no edema effusion" not in outcome.notice + outcome.parsed_html
    assert not outcome.gallery


def test_a_misspelt_query_shows_how_it_was_read(services):
    outcome = search_tab.run_search(
        services, "efusion and no pneumo, zorbless edema", None, "oracle", "demo-cxr", 3
    )
    assert ">Pleural Effusion</span>" in outcome.parsed_html.split("Must not show")[0]
    assert "<b>Read:</b> 'efusion' as 'effusion'" in outcome.parsed_html
    assert (
        'Uncertain (hedged or unclear):</b> <span class="medheb-chip uncertain">Edema'
        in outcome.parsed_html
    )
    assert "<b>Did you mean</b> 'pneumonia' or 'pneumothorax'" in outcome.parsed_html


def test_uploaded_image_searches_the_index(services, tmp_path):
    from PIL import Image

    path = tmp_path / "query.png"
    Image.fromarray((np.random.default_rng(0).random((64, 64)) * 255).astype(np.uint8)).save(path)
    upload, _ = search_upload.load_upload(services, str(path))
    outcome = search_tab.run_search(services, "", upload, "random", "demo-cxr", 4)
    assert len(outcome.hits) == 4 and outcome.parsed_html == ""
    assert all(hit["satisfies"] is None for hit in outcome.hits)


def test_logic_ranking_shows_the_probability_of_meeting_the_query(services):
    outcome = search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", 5, "logic")
    assert "Ranked logic-aware" in outcome.notice
    assert len(outcome.hits) == 5
    for hit, (_, caption) in zip(outcome.hits, outcome.gallery, strict=True):
        assert hit["findings"]["Pleural Effusion"] == 1 and hit["findings"]["Cardiomegaly"] != 1
        score = search_tab.score_text(Score("log_p", hit["score"]))
        assert caption == f"#{hit['rank']} · ✓ meets · {score}"
        assert 0.0 < hit["p_query"] <= 1.0
    probabilities = [hit["p_query"] for hit in outcome.hits]
    assert probabilities == sorted(probabilities, reverse=True)
    _, detail = search_tab.hit_detail(outcome.hits, 0)
    assert f"p(meets the query) {outcome.hits[0]['p_query']:.4f} · log-odds " in detail
    # issue 23: the probes' own training studies are left out of a logic ranking on the page
    for position, hit in enumerate(outcome.hits):
        _, detail = search_tab.hit_detail(outcome.hits, position)
        assert "training studies" not in detail
        assert not hit["training"] and hit["p_fit"] == "held-out" and hit["split"] != "train"
    trained = [{**outcome.hits[0], "training": True, "p_fit": "out-of-fold"}]
    assert "cross-fitted probe that left it out" in search_tab.hit_detail(trained, 0)[1]
    trained[0]["p_fit"] = "in-sample"
    assert "its p is optimistic" in search_tab.hit_detail(trained, 0)[1]


def test_scores_separate_hits_near_certainty():
    near = [Score("log_p", math.log(p)) for p in (0.97312, 0.99912, 0.99987, 0.999991, 0.9999991)]
    shown = [search_tab.score_text(score) for score in near]
    assert shown == ["p 0.973", "p 0.9991", "p 0.9999", "log-odds +11.6", "log-odds +13.9"]
    assert len(set(shown)) == len(shown)
    assert search_tab.caption(3, near[0], False, ["has Cardiomegaly"]) == (
        "#3 · ✗ violates · p 0.973 · has Cardiomegaly"
    )
    assert search_tab.caption(1, Score("cosine", 0.4123), None, []) == "#1 · cos 0.412"
    assert near[3].log_odds == pytest.approx(math.log(0.999991 / (1 - 0.999991)), rel=1e-6)
    assert Score("cosine", 0.4).p is None and Score("cosine", 0.4).log_odds is None
