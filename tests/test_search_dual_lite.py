"""The demo and search with the real default model, dual-lite (slow: runs both towers)."""

from __future__ import annotations

import pytest

from medheb_app.demo import ensure_demo
from medheb_app.search import search
from medheb_app.settings import Settings


@pytest.mark.slow
def test_dual_lite_demo_answers_text_and_image_queries(tmp_path) -> None:
    from medheb_app.evidence.phantoms import load_corpus
    from medheb_app.models.registry import load_embedder

    settings = Settings(data_dir=tmp_path / "data", demo_size=12)
    try:
        load_embedder("dual-lite", settings)
    except FileNotFoundError as error:
        pytest.skip(f"dual-lite weights not present: {error}")
    assets = ensure_demo(settings, models=["dual-lite"])
    assert assets.indices[0]["count"] == 12

    query = "pleural effusion and no cardiomegaly"
    cosine = search(query_text=query, k=5, settings=settings, ranking="similarity")
    assert cosine.model == "dual-lite" and cosine.ranking == "similarity"
    scores = [hit.score for hit in cosine.results]
    assert len(scores) == 5 and scores == sorted(scores, reverse=True)
    assert -1.0 <= scores[-1] <= scores[0] <= 1.0
    assert all(isinstance(hit.satisfies, bool) for hit in cosine.results)

    # The default is the best ranking the index supports: logic-aware, since the demo
    # bootstrap fit the index's probes; its scores are log-odds of meeting the query.
    # Issue 23: the studies its probes were fit on (the train split) are left out of it.
    default = search(query_text=query, k=5, settings=settings)
    held_out = sum(s.split != "train" for s in load_corpus(assets.corpus_dir))
    assert default.ranking == "logic" and len(default.results) == min(5, held_out)
    assert not any(hit.training for hit in default.results)
    logits = [hit.score for hit in default.results]
    assert logits == sorted(logits, reverse=True)

    study = load_corpus(assets.corpus_dir)[3]
    image = search(file=study.path, k=3, settings=settings)
    assert image.results[0].id == study.id
    assert image.results[0].score == pytest.approx(1.0, abs=1e-4)
