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


def test_the_pickers_are_refreshed_from_what_the_page_shows_after_each_tick(services):
    """The bootstrap timer's answer sets only the progress line and the timer; the pickers
    are refreshed by an event chained after it, which reads them as the page shows them then.
    The tick used to answer the picker values it was sent with (up to a second old), which
    reverted an index picked while it was in flight."""
    import gradio as gr

    from medheb_app.ui.server import build_server

    main = build_server(services).state.blocks["main"]
    ids = {getattr(block, "elem_id", None): i for i, block in main.blocks.items()}
    pickers = {ids["search-model"], ids["search-index"]}
    (timer,) = [i for i, block in main.blocks.items() if isinstance(block, gr.Timer)]
    events = main.get_config_file()["dependencies"]
    (tick,) = [e for e in events if [tuple(t) for t in e["targets"]] == [(timer, "tick")]]
    assert set(tick["outputs"]) == {ids["bootstrap-status"], timer} and not tick["inputs"]
    (after,) = [e for e in events if e.get("trigger_after") == tick["id"]]
    assert set(after["inputs"]) == set(after["outputs"]) == pickers
    model, index = search_tab.pickers_when_ready(services, "random", "demo-cxr")
    assert model["value"] == "random" and index["value"] == "demo-cxr"  # the page's choice kept
    assert search_tab.bootstrap_status(services)[0] == ""  # done: no progress bar


def test_the_pickers_are_left_alone_while_the_demo_is_prepared(services, monkeypatch):
    import gradio as gr

    from medheb_app.services.bootstrap import BootstrapState

    running = BootstrapState(done=False, fraction=0.4, message="building the demo index")
    monkeypatch.setattr(services.bootstrap, "state", lambda: running)
    unchanged = gr.update()
    assert search_tab.pickers_when_ready(services, "random", "demo-cxr") == (unchanged, unchanged)
    bar, timer = search_tab.bootstrap_status(services)
    assert "Preparing the demo: building the demo index" in bar and timer.active is not False


def test_oracle_hits_all_match_and_are_labelled_synthetic(services):
    outcome = search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", 5)
    assert ">Pleural Effusion</span>" in outcome.parsed_html.split("Must not show")[0]
    assert 'Must not show:</b> <span class="medheb-chip absent">Cardiomegaly' in outcome.parsed_html
    assert len(outcome.gallery) == 5
    for hit, card in zip(outcome.hits, outcome.gallery, strict=True):
        assert hit["findings"]["Pleural Effusion"] == 1 and hit["findings"]["Cardiomegaly"] != 1
        assert card.caption == f"#{hit['rank']} ✓" and card.synthetic and card.verdict is True
        assert card.uri and card.uri.startswith("data:image/png;base64,")
    # every generated thumbnail has the mark under its <img>, inside the same card
    cards = outcome.gallery_html.split('class="sr-hit')[1:]
    assert len(cards) == 5
    assert all(card.index("<img") < card.index('class="ev-mark">SYNTHETIC') for card in cards)
    image, detail = search_tab.hit_detail(outcome.hits, 0)
    assert image.index("<img") < image.index('class="ev-mark">SYNTHETIC')
    assert "SYNTHETIC phantom" in detail
    assert outcome.hits[0]["text"] and outcome.hits[0]["text"][:20] in detail


def test_random_model_hits_that_break_the_query_are_marked(services):
    outcome = search_tab.run_search(services, QUERY, None, "random", "demo-cxr", 40, "similarity")
    broken = [hit for hit in outcome.hits if hit["satisfies"] is False]
    assert broken, "a random ranking of 40 of 60 phantoms breaks the query somewhere"
    for hit, card in zip(outcome.hits, outcome.gallery, strict=True):
        assert (card.caption == f"#{hit['rank']} ✗") == (hit["satisfies"] is False)
        assert card.caption.startswith(f"#{hit['rank']} ")
    # one score kind for the whole list, its meaning in one line above it
    assert outcome.gallery_html.startswith('<div class="sr-line">Ranked by similarity. Score = ')
    assert "p =" not in outcome.gallery_html and "log-odds" not in outcome.gallery_html
    first = outcome.hits.index(broken[0])
    _, detail = search_tab.hit_detail(outcome.hits, first)
    assert "Breaks the query" in detail and "medheb-chip violates" in detail
    assert f"cosine {broken[0]['score']:.3f} (similarity" in detail and "log-odds" not in detail


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
    assert outcome.gallery_html.startswith('<div class="sr-line">Ranked logic-aware. Score p = ')
    assert "log-odds" not in outcome.gallery_html + outcome.notice
    assert len(outcome.hits) == 5
    for hit, card in zip(outcome.hits, outcome.gallery, strict=True):
        assert hit["findings"]["Pleural Effusion"] == 1 and hit["findings"]["Cardiomegaly"] != 1
        assert card.caption == f"#{hit['rank']} ✓"
        assert 0.0 < hit["p_query"] <= 1.0
    probabilities = [hit["p_query"] for hit in outcome.hits]
    assert probabilities == sorted(probabilities, reverse=True)
    _, detail = search_tab.hit_detail(outcome.hits, 0)
    shown = search_tab.p_text(outcome.hits[0]["score"])
    assert f"p(meets the query) {shown} (estimated probability" in detail
    assert "log-odds" not in detail
    # issue 23: the probes' own training studies are left out of a logic ranking on the page
    for position, hit in enumerate(outcome.hits):
        _, detail = search_tab.hit_detail(outcome.hits, position)
        assert "training studies" not in detail
        assert not hit["training"] and hit["p_fit"] == "held-out" and hit["split"] != "train"
    assert "training study" not in outcome.gallery_html  # no card carries the mark
    trained = [{**outcome.hits[0], "training": True, "p_fit": "out-of-fold"}]
    assert "cross-fitted probe that left it out" in search_tab.hit_detail(trained, 0)[1]
    trained[0]["p_fit"] = "in-sample"
    assert "its p is optimistic" in search_tab.hit_detail(trained, 0)[1]
    # a hit the service marks as a training study carries the mark on its card
    card = search_tab.HitCard(1, "#1 ✓", None, False, True, search_tab.is_training(trained[0]))
    assert 'class="sr-tag">training study' in search_tab.card_html(card, 0)
    assert search_tab.is_training({"training": False, "split": "train"}) is False


def test_p_keeps_the_digits_that_separate_hits_and_says_where_precision_ends():
    near = [math.log(p) for p in (0.97312, 0.99912, 0.99987, 0.999991)]
    shown = [search_tab.p_text(round(value, 6)) for value in near]
    assert shown == ["0.973", "0.999120", "0.999870", "0.999991"]
    assert search_tab.p_text(-4e-7) == search_tab.p_text(0.0002) == "> 0.999999"
    assert search_tab.score_text(Score("cosine", 0.4123)) == "cos 0.412"
    assert search_tab.score_text(Score("log_p", math.log(0.5))) == "p 0.500"
    assert search_tab.caption(3, False, ["has Cardiomegaly"]) == "#3 ✗"
    assert search_tab.caption(1, None, []) == "#1" and search_tab.caption(2, True, []) == "#2 ✓"
    assert Score("cosine", 0.4).p is None and Score("cosine", 0.4).log_odds is None


def test_equal_p_are_ordered_by_similarity_and_the_detail_names_the_ties():
    """The list's stated tie rule is the ranking code's: logic_scores adds TIE_WEIGHT x cosine,
    so two studies with the same finding probabilities come out closer-to-the-query first."""
    from medheb_app.query.parser import parse_query
    from medheb_app.ranking.logic_aware import TIE_WEIGHT, logic_scores

    parsed = parse_query(QUERY)
    findings = list(parsed.vocabulary)
    logits = np.zeros((4, len(findings)))
    logits[:, findings.index("Pleural Effusion")] = 40.0  # p rounds to 1 for every study
    logits[:, findings.index("Cardiomegaly")] = -40.0
    similarity = np.array([0.1, 0.4, 0.3, 0.2])
    scores = logic_scores(parsed, logits, findings, similarity)
    assert TIE_WEIGHT > 0 and list(np.argsort(-scores, kind="stable")) == [1, 2, 3, 0]
    assert "equal p are ordered by similarity to the query" in search_tab.SCORE_LINES["log_p"]
    records = [
        {"rank": r, "score": round(float(v), 6), "score_kind": "log_p", "id": f"s{r}"}
        for r, v in enumerate(sorted(scores, reverse=True), start=1)
    ]
    search_tab._ties(records)
    assert [record["ties"] for record in records] == [[2, 3, 4], [1, 3, 4], [1, 2, 4], [1, 2, 3]]
    detail = search_tab.score_detail(records[0])
    assert detail.startswith("p(meets the query) > 0.999999 (")
    assert "same score as #2, #3, #4 at these digits, ordered by closer to the query" in detail


def test_a_small_real_image_is_upscaled_with_its_true_size_stated(tmp_path):
    from PIL import Image

    path = tmp_path / "nih.png"
    Image.fromarray((np.random.default_rng(1).random((64, 64)) * 255).astype(np.uint8)).save(path)
    shown = search_tab.large_html(str(path), synthetic=False, alt="hit 1")
    assert "shown at 6x; original 64x64 px" in shown and "SYNTHETIC" not in shown
    big, factor = search_tab.ui.upscaled(np.zeros((64, 48)))
    assert factor == 6 and big.shape == (384, 288, 3)
    same, factor = search_tab.ui.upscaled(np.zeros((512, 400)))
    assert factor == 1 and same.shape == (512, 400, 3)
    marked = search_tab.large_html(str(path), synthetic=True, alt="hit 1")
    assert marked.index("<img") < marked.index("SYNTHETIC</div>") < marked.index("shown at 6x")


def test_the_banner_follows_whether_the_selected_index_is_synthetic(services):
    from medheb_app.evidence.study import Study
    from medheb_app.models import registry
    from tests.index_helpers import build_studies

    assert "SYNTHETIC DEMO DATA" in search_tab.banner(services, "demo-cxr")
    assert "SYNTHETIC DEMO DATA" in search_tab.banner(services, None)  # the default index
    studies = [
        Study(id=f"real-{i}", form="2d", modality="DX", source="nih", synthetic=False,
              pixels=np.full((32, 32), i / 10, dtype=np.float32))
        for i in range(6)
    ]  # fmt: skip
    embedder = registry.load_embedder("random", services.settings)
    build_studies("real-mini", studies, embedder, services.settings)
    assert search_tab.index_is_synthetic(services, "real-mini") is False
    assert search_tab.banner(services, "real-mini") == ""
    assert search_tab.banner(services, "no-such-index") == ""
