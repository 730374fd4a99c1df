"""search(): constraints parsed, hits checked against them, files searched, errors clear."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from medheb_app.demo import ensure_demo
from medheb_app.evidence.phantoms.saved import demo_corpus
from medheb_app.query.parser import parse_query, satisfies
from medheb_app.search import SearchError, search
from medheb_app.settings import Settings

QUERY = "pleural effusion and no cardiomegaly"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = Settings(data_dir=tmp_path_factory.mktemp("search") / "data", demo_size=120)
    ensure_demo(settings, models=["oracle", "random"])
    return settings


def test_oracle_puts_studies_that_meet_the_query_first(demo: Settings) -> None:
    response = search(query_text=QUERY, model_spec="oracle", k=5, settings=demo)
    payload = response.to_json()
    assert payload["constraints"]["positive"] == ["Pleural Effusion"]
    assert payload["constraints"]["negative"] == ["Cardiomegaly"]
    # issue 23: the only warning says that the probes' own training studies were left out
    assert [w for w in payload["warnings"] if "were fit on" not in w] == []
    assert not any(hit["training"] for hit in payload["results"])
    assert len(payload["results"]) == 5
    for hit in payload["results"]:
        assert set(hit) >= {"id", "score", "findings", "source", "satisfies"}
        assert hit["source"] == "phantom"
        assert hit["findings"]["Pleural Effusion"] == 1
        assert hit["findings"]["Cardiomegaly"] != 1
        assert hit["satisfies"] is True and hit["violations"] == {}
    scores = [hit["score"] for hit in payload["results"]]
    assert scores == sorted(scores, reverse=True)


def test_the_training_note_counts_within_the_index_not_beyond_it(demo: Settings) -> None:
    response = search(query_text=QUERY, model_spec="oracle", k=1000, settings=demo)
    note = next(w for w in response.warnings if "were fit on" in w)
    assert " of the top 120 by logic-aware ranking" in note  # the demo holds 120 studies


def test_satisfies_and_violations_follow_each_hits_labels(demo: Settings) -> None:
    response = search(query_text=QUERY, model_spec="random", k=40, settings=demo)
    parsed = parse_query(QUERY)
    assert {hit.satisfies for hit in response.results} == {True, False}  # chance mixes both
    for hit in response.results:
        assert hit.satisfies == satisfies(hit.findings, parsed)
        assert (hit.violations == {}) == hit.satisfies
    strict = search(query_text=QUERY, model_spec="random", k=40, settings=demo, setting="strict")
    for hit in strict.results:
        assert hit.satisfies == satisfies(hit.findings, parsed, "strict")


def test_a_query_without_known_findings_still_searches_with_a_warning(demo: Settings) -> None:
    response = search(query_text="something interesting", model_spec="random", k=3, settings=demo)
    assert len(response.results) == 3
    assert all(hit.satisfies is None for hit in response.results)
    assert any("No known finding" in warning for warning in response.warnings)
    assert response.to_json()["constraints"]["positive"] == []


def test_a_query_naming_findings_only_as_possible_says_so_not_no_known_finding(
    demo: Settings,
) -> None:
    for text, named in (("?PTX", "Pneumothorax"), ("h/o pneumonia", "Pneumonia")):
        response = search(query_text=text, model_spec="random", k=3, settings=demo)
        assert not any("No known finding" in w for w in response.warnings), text
        assert any(f"names {named} only as possible or past" in w for w in response.warnings), (
            response.warnings
        )


def test_a_file_query_finds_the_same_image_first(demo: Settings, tmp_path: Path) -> None:
    from medheb_app.evidence.phantoms import load_corpus

    target = load_corpus(demo_corpus(demo))[7]
    response = search(file=target.path, model_spec="random", k=3, settings=demo)
    assert response.query_kind == "file"
    assert response.results[0].id == target.id
    assert response.results[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(hit.satisfies is None for hit in response.results)
    assert response.to_json()["constraints"] == {"positive": [], "negative": [], "uncertain": []}
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("this is not an image")
    with pytest.raises(SearchError, match=r"notes\.png"):
        search(file=not_an_image, model_spec="random", settings=demo)


def test_a_zip_of_two_series_says_which_one_it_searched(demo: Settings, tmp_path: Path) -> None:
    import zipfile

    from pydicom.data import get_testdata_file

    archive = tmp_path / "two.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for name in ("CT_small.dcm", "MR_small.dcm"):
            handle.write(get_testdata_file(name), name)
    response = search(file=archive, model_spec="random", k=3, settings=demo)
    assert any(
        "The upload holds 2 DICOM series; the search used the largest (1 image)" in warning
        for warning in response.warnings
    ), response.warnings


def test_blank_nan_and_tiny_uploads_say_their_hits_mean_little(
    demo: Settings, tmp_path: Path
) -> None:
    import nibabel as nib
    import numpy as np

    nan_volume = tmp_path / "nan.nii.gz"
    nib.save(nib.Nifti1Image(np.full((16, 16, 8), np.nan, np.float32), np.eye(4)), nan_volume)
    blank, dot, photo = tmp_path / "blank.png", tmp_path / "dot.png", tmp_path / "photo.png"
    Image.new("L", (64, 64), 128).save(blank)
    Image.new("L", (1, 1), 200).save(dot)
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), np.uint8)).save(photo)
    for path in (nan_volume, blank):
        warnings = search(file=path, model_spec="random", k=3, settings=demo).warnings
        assert any("pixels all have one value" in w for w in warnings), (path.name, warnings)
    warnings = search(file=dot, model_spec="random", k=3, settings=demo).warnings
    assert any("pixels all have one value" in w for w in warnings), warnings  # one pixel
    strip = tmp_path / "strip.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (10, 400), np.uint8)).save(strip)
    warnings = search(file=strip, model_spec="random", k=3, settings=demo).warnings
    assert any("only 400x10 pixels" in w for w in warnings), warnings
    clean = search(file=photo, model_spec="random", k=3, settings=demo).warnings
    assert not any("pixels" in w for w in clean), clean


def test_bad_requests_get_one_clear_error(demo: Settings, tmp_path: Path) -> None:
    with pytest.raises(SearchError, match="exactly one"):
        search(model_spec="random", settings=demo)
    picture = tmp_path / "x.png"
    Image.new("L", (8, 8)).save(picture)
    with pytest.raises(SearchError, match="exactly one"):
        search(query_text="edema", file=picture, model_spec="random", settings=demo)
    for blank in ("   ", "\u200b\u200b", "?? --"):  # whitespace, zero-width spaces, marks
        with pytest.raises(SearchError, match="empty"):
            search(query_text=blank, model_spec="random", settings=demo)
    with pytest.raises(SearchError, match="between 1 and"):
        search(query_text="edema", model_spec="random", k=0, settings=demo)
    with pytest.raises(SearchError, match="does not exist"):
        search(query_text="edema", model_spec="random", index="my-index", settings=demo)
    with pytest.raises((KeyError, ValueError), match="no-such-model"):
        search(query_text="edema", model_spec="no-such-model", settings=demo)


def test_a_model_the_demo_was_not_built_for_is_an_error_and_builds_nothing(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", demo_size=30)
    ensure_demo(settings, models=["oracle"])
    before = sorted(p.relative_to(settings.data_dir) for p in settings.index_dir.rglob("*"))
    with pytest.raises(SearchError, match="has not been built for model 'random'"):
        search(query_text="edema", model_spec="random", k=3, settings=settings)
    after = sorted(p.relative_to(settings.data_dir) for p in settings.index_dir.rglob("*"))
    assert after == before


def test_a_missing_build_names_the_spec_asked_for_and_a_missing_index_loads_no_model(
    demo: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from medheb_app.index.catalog import IndexNotFoundError, load_index
    from medheb_app.models import registry

    with pytest.raises(IndexNotFoundError) as caught:  # the card names dual-lite, no tag
        load_index("demo-cxr", "0" * 16, demo, spec="dual-lite@label-aware")
    assert "not been built for model 'dual-lite@label-aware'; it exists for: " in str(caught.value)

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for an index that does not exist")

    monkeypatch.setattr(registry, "load_embedder", no_model)
    with pytest.raises(SearchError, match="'my-index' does not exist"):
        search(query_text="edema", model_spec="oracle", index="my-index", settings=demo)


def test_an_upload_the_oracle_cannot_read_says_its_order_means_nothing(demo: Settings) -> None:
    from medheb_app.evidence.phantoms import load_corpus

    target = load_corpus(demo_corpus(demo))[7]
    blank = search(file=target.path, model_spec="oracle", k=3, settings=demo)
    assert {hit.score for hit in blank.results} == {0.0}
    assert any(
        "found nothing to rank by in the uploaded study" in w and "an upload carries none" in w
        for w in blank.warnings
    )
    read = search(file=target.path, model_spec="random", k=3, settings=demo)
    assert not any("found nothing to rank by" in w for w in read.warnings)


def test_a_query_over_the_limit_is_refused_before_any_model_is_loaded(demo: Settings) -> None:
    text = "pleural effusion and no cardiomegaly " * 30  # 1,110 characters
    with pytest.raises(SearchError) as caught:  # a model that does not exist is never reached
        search(query_text=text, model_spec="no-such-model", k=3, settings=demo)
    message = str(caught.value)
    assert "1,110 characters" in message and "limit is 1,000" in message
    assert "cardiomegaly pleural" not in message


def test_corrections_and_suggestions_travel_in_the_response(demo: Settings) -> None:
    response = search(query_text="efusion and no pneumo", model_spec="oracle", k=3, settings=demo)
    payload = response.to_json()
    assert payload["constraints"]["positive"] == ["Pleural Effusion"]
    assert payload["corrections"] == {"efusion": "effusion"}
    assert payload["suggestions"]["pneumo"][:2] == ["pneumonia", "pneumothorax"]
    assert "Read 'efusion' as 'effusion'." in payload["warnings"]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_query_is_encoded_at_the_configured_thread_count_and_the_callers_is_restored(
    demo: Settings, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    import dataclasses

    import torch

    from medheb_app.models.registry import load_embedder

    seen: list[int] = []
    embedder = load_embedder("random", demo)
    original = type(embedder).encode

    def recording_encode(self, items):
        seen.append(torch.get_num_threads())
        return original(self, items)

    monkeypatch.setattr(type(embedder), "encode", recording_encode)
    # the cache off: the parametrised run repeats the query, and a cache hit encodes nothing
    settings = dataclasses.replace(demo, query_threads=threads, query_cache=0)
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # a caller's own count, different from both settings
    try:
        search(query_text=QUERY, model_spec="random", k=3, settings=settings, ranking="similarity")
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert seen and seen[0] == threads
    assert after == 3
    assert Settings.from_env().query_threads == 1
