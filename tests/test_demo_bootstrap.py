"""ensure_demo: builds the phantom corpus and the demo index once, then only loads them."""

from __future__ import annotations

import pytest

from medheb_app.demo import DEMO_CXR, ensure_demo
from medheb_app.evidence.phantoms.saved import CorpusKey, corpus_path
from medheb_app.index.catalog import list_indices, load_index

pytestmark = pytest.mark.own_phantoms  # these tests watch the corpus being generated


def test_first_start_builds_and_second_start_only_loads(settings) -> None:
    events: list[tuple[float, str]] = []
    first = ensure_demo(
        settings, progress=lambda f, m: events.append((f, m)), n=40, models=["oracle"]
    )
    assert first.corpus_generated
    assert first.corpus_dir == corpus_path(
        settings.demo_dir, CorpusKey("cxr", 40, settings.demo_seed)
    )
    assert (first.corpus_dir / "COMPLETE").is_file()
    [entry] = first.indices
    assert entry["name"] == DEMO_CXR and entry["built"] and entry["count"] == 40
    fractions = [fraction for fraction, _ in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any("generating 40 synthetic" in message for _, message in events)

    second = ensure_demo(settings, n=40, models=["oracle"])
    assert not second.corpus_generated
    assert second.indices[0]["built"] is False
    assert second.indices[0]["fingerprint"] == entry["fingerprint"]


def test_index_metadata_comes_from_the_phantom_corpus(settings) -> None:
    from medheb_app.evidence.phantoms import load_corpus
    from medheb_app.models.registry import load_embedder

    assets = ensure_demo(settings, n=30, models=["random"])
    studies = {study.id: study for study in load_corpus(assets.corpus_dir)}
    loaded = load_index(DEMO_CXR, load_embedder("random", settings), settings)
    assert set(loaded.items) == set(studies)
    some_id = next(iter(studies))
    row = loaded.item(some_id)
    assert row["findings"] == studies[some_id].findings
    assert row["synthetic"] is True and row["source"] == "phantom"
    assert row["text"] == studies[some_id].text
    assert loaded.info["corpus"]["n"] == 30


def test_a_different_corpus_size_rebuilds_the_index(settings) -> None:
    ensure_demo(settings, n=30, models=["oracle"])
    bigger = ensure_demo(settings, n=45, models=["oracle"])
    assert bigger.corpus_generated and bigger.indices[0]["built"]
    assert bigger.indices[0]["count"] == 45
    assert [e["count"] for e in list_indices(settings)] == [45]


def test_demo_index_for_another_model_reuses_the_built_corpus(settings) -> None:
    first = ensure_demo(settings, n=30, seed=3, models=["oracle"])
    second = ensure_demo(settings, n=30, seed=3, models=["random"])
    assert not second.corpus_generated and second.corpus_dir == first.corpus_dir
    loaded = load_index(DEMO_CXR, second.indices[0]["fingerprint"], settings)
    assert loaded.index.count == 30
    assert loaded.info["corpus"]["seed"] == 3
    assert sorted(e["model"] for e in list_indices(settings)) == ["oracle", "random"]


def test_too_small_a_demo_is_refused(settings) -> None:
    with pytest.raises(ValueError, match="at least 10"):
        ensure_demo(settings, n=3, models=["oracle"])


def test_a_changed_phantom_generator_regenerates_the_demo(settings, monkeypatch) -> None:
    import medheb_app.evidence.phantoms.saved as saved

    first = ensure_demo(settings, n=20, models=["oracle"])
    monkeypatch.setattr(saved, "generator_version", lambda: "changed000")
    second = ensure_demo(settings, n=20, models=["oracle"])
    assert second.corpus_dir != first.corpus_dir and second.corpus_dir.name.endswith("gchanged000")
    assert second.corpus_generated and second.indices[0]["built"]
    assert (
        load_index(DEMO_CXR, second.indices[0]["fingerprint"], settings).info["corpus"]["generator"]
        == "changed000"
    )


def test_the_3d_demo_index_holds_ct_mr_and_projections(settings) -> None:
    from medheb_app.demo import DEMO_3D
    from medheb_app.search import search

    assets = ensure_demo(settings, n=20, models=["random"], with_3d=True)
    assert [entry["name"] for entry in assets.indices] == [DEMO_CXR, DEMO_3D]
    loaded = load_index(DEMO_3D, assets.indices[1]["fingerprint"], settings)
    modalities = {row["modality"] for row in loaded.items.values()}
    assert modalities == {"CT", "MR-T1", "MR-T2", "DX-projection"}
    assert {row["form"] for row in loaded.items.values()} == {"2d", "3d"}
    ct = next(row for row in loaded.items.values() if row["modality"] == "CT")
    response = search(file=ct["path"], model_spec="random", index=DEMO_3D, k=1, settings=settings)
    assert response.results[0].id == ct["id"]  # a volume query finds the same volume
