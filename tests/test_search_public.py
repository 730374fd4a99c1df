"""Attacks on the public search: an anonymous request never builds an index, generates a
corpus, fits probes or loads a model or weights by path, and every error it can provoke reads
as a sentence without exception classes or server paths."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from medheb_app.demo import ensure_demo
from medheb_app.search import SearchError, search
from medheb_app.services import create_services
from medheb_app.serving import offered
from medheb_app.settings import Settings
from medheb_app.ui import search_tab

QUERY = "pleural effusion and no cardiomegaly"


def _tree(root: Path) -> list[tuple[str, int]]:
    """Every file under root with its size: equal trees mean nothing was written."""
    if not root.exists():
        return []
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Settings:
    settings = Settings(data_dir=tmp_path_factory.mktemp("public") / "data", demo_size=40)
    ensure_demo(settings, models=["oracle"])
    return settings


@pytest.fixture
def services(built):
    services = create_services(built, ensure_demo=lambda s, p: None)
    services.bootstrap.wait(10)
    yield services
    services.jobs.shutdown(wait=False)


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Every way to build an index, generate a corpus, fit probes or load weights by path
    raises; a handler that reaches one fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a request handler started heavy work")

    import medheb_app.demo as demo
    import medheb_app.evidence.phantoms as phantoms
    import medheb_app.evidence.phantoms.saved as saved
    import medheb_app.index.build as build
    import medheb_app.models.open_clip_embedder as open_clip
    import medheb_app.ranking.index_logic as index_logic

    for module, name in [
        (build, "build_index"),
        (demo, "build_index"),
        (demo, "ensure_demo"),
        (saved, "generate_chest_corpus"),
        (saved, "generate_volume_corpus"),
        (phantoms, "generate_chest_corpus"),
        (phantoms, "generate_volume_corpus"),
        (index_logic, "fit_probe"),
        (open_clip, "OpenClipEmbedder"),
    ]:
        monkeypatch.setattr(module, name, forbidden)


def test_only_built_pairs_of_listed_models_are_offered(built) -> None:
    assert offered(built) == {"demo-cxr": ["oracle"]}


@pytest.mark.parametrize(
    ("model", "index", "refusal"),
    [
        ("random", "demo-cxr", "Model 'random' is not offered for index 'demo-cxr'"),
        ("medemb-lite", "demo-cxr", "Model 'medemb-lite' is not offered"),
        ("oracle", "demo-3d", "Index 'demo-3d' is not offered here"),
        ("open_clip:ViT-B-32@/etc/passwd", "demo-cxr", "is not offered"),
        ("open_clip:/tmp/gradio/x/c.json@/tmp/gradio/x/w.pt", "demo-cxr", "is not offered"),
        ("dual-lite@/tmp/gradio/checkpoint", "demo-cxr", "is not offered"),
        ("mllm:/models/qwen", "demo-cxr", "is not offered"),
        ("x" * 5000, "demo-cxr", "is not offered"),
    ],
)
def test_an_anonymous_search_with_an_unlisted_model_or_index_is_refused_and_builds_nothing(
    built, services, no_heavy_work, model, index, refusal
) -> None:
    before = _tree(built.data_dir)
    with pytest.raises(SearchError, match=refusal) as caught:
        search(query_text=QUERY, model_spec=model, index=index, settings=built, public=True)
    assert len(str(caught.value)) < 400, "a long spec is not echoed whole"
    outcome = search_tab.run_search(services, QUERY, None, model, index, 5)
    assert "is not offered" in outcome.notice and not outcome.gallery
    assert "/etc/passwd" not in outcome.notice and "/tmp/gradio" not in outcome.notice
    assert _tree(built.data_dir) == before


def test_no_search_tab_handler_embeds_a_corpus(built, services, no_heavy_work) -> None:
    """Call every handler of the tab with what a page (or a forged request) can send."""
    from pydicom.data import get_testdata_file

    before = _tree(built.index_dir)
    for ranking in ("auto", "logic", "similarity"):
        for compare in (False, True):
            outcome = search_tab.run_search(
                services, QUERY, None, "oracle", "demo-cxr", 5, ranking, compare
            )
            assert len(outcome.gallery) == 5, outcome.notice
    for model in ("random", "medemb-lite", "dual-lite", "open_clip:ViT-B-32@/etc/hosts"):
        for index in ("demo-cxr", "demo-3d", "../indices"):
            outcome = search_tab.run_search(services, QUERY, None, model, index, 5, "logic")
            assert not outcome.gallery
    upload, _, _, _, _ = search_tab.on_upload(
        services, get_testdata_file("emri_small.dcm", download=False)
    )
    for mode in ("volume", "slice"):
        outcome = search_tab.run_search(
            services, "", upload, "oracle", "demo-cxr", 3, "auto", False, mode, 2
        )
        assert outcome.notice and "error" not in outcome.notice.split('"')[1]
    search_tab.on_slice(upload, 1)
    search_tab.hit_detail(outcome.hits, 0)
    search_tab.hit_detail([{"forged": True}], 0)
    search_tab.hit_detail("not a list", 7)  # type: ignore[arg-type]
    search_tab.refresh_pickers(services, "random", "demo-3d")
    search_tab.bootstrap_status(services)
    search_tab.pickers_when_ready(services, "random", "demo-3d")
    assert _tree(built.index_dir) == before


def test_probes_not_prepared_are_never_fit_by_a_web_request(built, tmp_path) -> None:
    """An index whose probes were not fit in advance is ranked by similarity, with a note."""
    import shutil

    import medheb_app.ranking.index_logic as index_logic

    fresh = replace(built, data_dir=tmp_path / "data")
    shutil.copytree(built.index_dir, fresh.index_dir)
    index_logic._LOADED.clear()
    response = search(query_text=QUERY, model_spec="oracle", settings=fresh, public=True)
    assert response.ranking == "similarity" and not (fresh.data_dir / "probes").exists()
    assert any("not prepared" in warning for warning in response.warnings)
    cli = search(query_text=QUERY, model_spec="oracle", settings=fresh)  # the CLI may fit
    assert cli.ranking == "logic" and (fresh.data_dir / "probes").is_dir()
    index_logic._LOADED.clear()


def test_every_error_of_the_search_tab_is_a_sentence_without_class_or_path(
    services, monkeypatch
) -> None:
    def message(outcome) -> str:
        assert outcome.notice and not outcome.gallery
        return outcome.notice

    cases = [
        search_tab.run_search(services, "", None, "oracle", "demo-cxr", 5),
        search_tab.run_search(services, "a" * 1001, None, "oracle", "demo-cxr", 5),
        search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", "many"),  # type: ignore[arg-type]
        search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", 5, "cosine!"),
        search_tab.run_search(services, QUERY, "/etc/passwd", "oracle", "demo-cxr", 5),  # type: ignore[arg-type]
        search_tab.run_search(services, QUERY, None, "no-such", "demo-cxr", 5),
        search_tab.run_search(services, QUERY, None, "oracle", "nope", 5),
    ]
    import medheb_app.search as service

    def broken(*args, **kwargs):
        raise RuntimeError(f"{services.settings.index_dir}/demo-cxr/abc/index.faiss is corrupt")

    monkeypatch.setattr(service, "search", broken)
    cases.append(search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", 5))

    def evidence(*args, **kwargs):
        raise service.SearchError("/home/user/app/data/x.png: ValueError: bad pixels")

    monkeypatch.setattr(service, "search", evidence)
    cases.append(search_tab.run_search(services, QUERY, None, "oracle", "demo-cxr", 5))
    texts = [message(outcome) for outcome in cases]
    assert "a" * 200 not in texts[1] and "1,001 characters" in texts[1]
    for text in texts:
        assert "Error" not in text and "Exception" not in text and "Traceback" not in text
        assert str(services.settings.data_dir) not in text and "/home/user" not in text
        assert "/etc/passwd" not in text and ".faiss" not in text


def test_per_client_limits_refuse_with_a_wait_and_other_clients_go_on(services) -> None:
    from medheb_app.access.limits import RateLimiter

    limits = search_tab.TabLimits(searches=RateLimiter(2, 60.0, lockout_s=30.0))
    for _ in range(2):
        ok = search_tab.run_search(
            services, QUERY, None, "oracle", "demo-cxr", 3, client="1.2.3.4", limits=limits
        )
        assert ok.gallery
    refused = search_tab.run_search(
        services, QUERY, None, "oracle", "demo-cxr", 3, client="1.2.3.4", limits=limits
    )
    assert "Too many searches" in refused.notice and "30 seconds" in refused.notice
    other = search_tab.run_search(
        services, QUERY, None, "oracle", "demo-cxr", 3, client="5.6.7.8", limits=limits
    )
    assert other.gallery


def test_search_and_upload_events_have_bounded_concurrency(services) -> None:
    import gradio as gr

    with gr.Blocks() as demo:
        search_tab.build_search_tab(services)
    limits = {
        fn.name: (fn.concurrency_limit, fn.concurrency_id) for fn in demo.fns.values() if fn.name
    }
    assert limits["_search"] == (search_tab.SEARCH_CONCURRENCY, "search")
    assert limits["_upload"] == (search_tab.UPLOAD_CONCURRENCY, "upload")
    # The pickers take typed values (the Gradio API must accept the names the page shows, which
    # a build-time choice list cannot hold): the handler itself re-checks each pair against
    # what is offered, so a value outside them is refused on the server, not by the widget.
    dropdowns = [b for b in demo.blocks.values() if isinstance(b, gr.Dropdown)]
    assert dropdowns
    refused = search_tab.run_search(services, QUERY, None, "random", "demo-cxr", 3)
    assert "is not offered" in refused.notice and not refused.gallery


def test_an_upload_of_another_kind_than_the_index_is_flagged(built, tmp_path) -> None:
    from pydicom.data import get_testdata_file

    head_ct = search(
        file=get_testdata_file("CT_small.dcm", download=False), model_spec="oracle", settings=built
    )
    assert any("a CT" in w and "chest radiographs" in w for w in head_ct.warnings)
    mr = search(
        file=get_testdata_file("MR_small.dcm", download=False), model_spec="oracle", settings=built
    )
    assert any("an MR" in w for w in mr.warnings)
    from PIL import Image

    picture = tmp_path / "film.png"
    Image.fromarray((np.random.default_rng(0).random((32, 32)) * 255).astype(np.uint8)).save(
        picture
    )
    plain = search(file=picture, model_spec="oracle", settings=built)
    assert not any("holds" in w for w in plain.warnings)


def test_concurrent_uploads_beyond_the_free_slots_are_told_the_server_is_busy(
    services, tmp_path
) -> None:
    from pydicom.data import get_testdata_file

    limits = search_tab.TabLimits(upload_slots=threading.BoundedSemaphore(1))
    limits.upload_slots.acquire()
    try:
        state, _, _, _, message = search_tab.on_upload(
            services, get_testdata_file("CT_small.dcm", download=False), limits=limits
        )
    finally:
        limits.upload_slots.release()
    assert state is None and "busy" in message
