"""Logic-aware search: negation honoured where cosine fails, probes cached, clear refusals."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence

import numpy as np
import pytest

from medheb_app.cli import main
from medheb_app.demo import ensure_demo
from medheb_app.evidence.findings import CXR_RETRIEVE_10, Vocabulary
from medheb_app.evidence.phantoms import load_corpus
from medheb_app.evidence.study import Study
from medheb_app.index.catalog import load_index, query_vocabulary
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.models.baselines import label_vector
from medheb_app.query.parser import parse_query
from medheb_app.ranking.index_logic import index_probe_path, probe_rows
from medheb_app.search import FILE_LOGIC_WARNING, SearchError, search
from medheb_app.settings import Settings
from tests.index_helpers import build_studies as build_index

QUERY = "pleural effusion and no cardiomegaly"
INDEX = "biased-cxr"
SEES = np.array([name != "Fracture" for name in CXR_RETRIEVE_10], dtype=np.float64)


class AffirmationBiased:
    """A toy model with the paper's failure: images carry their labels, but text reads every
    finding it names as present, so "A and no B" is embedded like "A and B"."""

    card = ModelCard(name="biased", version="1", dims=10, modalities=("text", "2d"), license="-")

    def encode(self, items: Sequence[object], instruction: str | None = None) -> np.ndarray:
        rows = []
        for item in items:
            if isinstance(item, Study):  # Fracture is invisible to this model's images
                rows.append(label_vector(item.findings, CXR_RETRIEVE_10) * SEES)
            else:
                parsed = parse_query(str(item))
                named = {*parsed.positive, *parsed.negative}
                rows.append([1.0 if name in named else 0.0 for name in CXR_RETRIEVE_10])
        return l2_normalise(np.asarray(rows, dtype=np.float32))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, list[Study]]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("logic") / "data", demo_size=200)
    assets = ensure_demo(settings, models=["oracle"])
    return settings, load_corpus(assets.corpus_dir)


@pytest.fixture
def biased(corpus, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The biased model behind every spec, with its index over the demo corpus."""
    settings, studies = corpus
    model = AffirmationBiased()
    monkeypatch.setattr("medheb_app.models.registry.load_embedder", lambda spec, _: model)
    build_index(INDEX, studies, model, settings)
    return settings


def _broken(response) -> int:
    return sum(hit.satisfies is False for hit in response.results)


def test_logic_ranking_honours_the_negation_that_cosine_ignores(biased: Settings) -> None:
    cosine = search(query_text=QUERY, index=INDEX, k=10, settings=biased, ranking="similarity")
    logic = search(query_text=QUERY, index=INDEX, k=10, settings=biased, ranking="logic")
    assert cosine.ranking == "similarity" and logic.ranking == "logic"
    assert _broken(cosine) >= 5  # the top is full of effusions *with* cardiomegaly
    assert _broken(logic) == 0 and len(logic.results) == 10
    for hit in logic.results:
        assert hit.findings["Pleural Effusion"] == 1 and hit.findings["Cardiomegaly"] != 1
    scores = [hit.score for hit in logic.results]
    assert scores == sorted(scores, reverse=True) and max(scores) <= 1e-3  # log p, plus ties
    payload = logic.to_json()
    # issue 23: the studies the probes were fit on are left out of a logic ranking, said once
    assert payload["ranking"] == "logic" and len(payload["warnings"]) == 1
    assert "left out" in payload["warnings"][0]
    assert not any(hit.training for hit in logic.results)
    assert payload["constraints"]["negative"] == ["Cardiomegaly"]


def test_the_probe_is_fit_once_on_train_studies_then_loaded(biased: Settings, corpus) -> None:
    first = search(query_text=QUERY, index=INDEX, k=5, settings=biased, ranking="logic")
    # this build's own probe file (the demo bootstrap also fit oracle's, for demo-cxr, and a
    # test run earlier may have fit one for another build of the index)
    model = AffirmationBiased()
    loaded = load_index(INDEX, model.card.fingerprint, biased)
    rows, how = probe_rows(loaded, tuple(query_vocabulary(loaded)))
    probe = index_probe_path(biased, model, loaded, rows)
    assert how == "split" and probe.is_file()
    stamp = probe.stat().st_mtime_ns
    meta = json.loads(probe.with_suffix(".json").read_text())
    corpus_train = sum(study.split == "train" for study in corpus[1])
    assert meta["n_train"] == corpus_train and meta["views"] == "whole"
    again = search(query_text=QUERY, index=INDEX, k=5, settings=biased, ranking="logic")
    assert probe.stat().st_mtime_ns == stamp
    assert [h.id for h in again.results] == [h.id for h in first.results]


def test_file_queries_and_queries_without_findings_fall_back_to_similarity(
    biased: Settings, corpus
) -> None:
    _, studies = corpus
    by_file = search(file=studies[3].path, index=INDEX, k=3, settings=biased, ranking="logic")
    assert by_file.ranking == "similarity" and FILE_LOGIC_WARNING in by_file.warnings
    vague = search(query_text="anything odd", index=INDEX, k=3, settings=biased, ranking="logic")
    assert vague.ranking == "similarity"
    assert any("No known finding" in warning for warning in vague.warnings)


def test_an_index_without_a_train_split_cross_fits_and_one_without_labels_is_refused(
    biased: Settings, corpus
) -> None:
    _, studies = corpus
    from dataclasses import replace

    unsplit = [replace(study, split=None) for study in studies[:60]]
    build_index("no-train", unsplit, AffirmationBiased(), biased)
    # issue 23: every labelled study of an unsplit index fit the probes, so a logic ranking
    # leaves them all out unless asked; included, each is scored out of fold
    crossed = search(
        query_text=QUERY, index="no-train", settings=biased, ranking="logic",
        include_training=True,
    )  # fmt: skip
    assert crossed.ranking == "logic" and len(crossed.results) == 10
    assert {hit.p_fit for hit in crossed.results} == {"out-of-fold"}
    held = search(query_text=QUERY, index="no-train", settings=biased, ranking="logic")
    assert held.results == [] and any("left out" in w for w in held.warnings)
    unlabelled = [replace(study, findings={}) for study in studies[:30]]
    claimed = Vocabulary(CXR_RETRIEVE_10, "coded", "claims labels it lacks")
    build_index("no-labels", unlabelled, AffirmationBiased(), biased, vocabulary=claimed)
    with pytest.raises(SearchError, match="no studies labelled"):
        search(query_text=QUERY, index="no-labels", settings=biased, ranking="logic")
    with pytest.raises(SearchError, match="Unknown ranking 'fuzzy'"):
        search(query_text=QUERY, index=INDEX, settings=biased, ranking="fuzzy")


def test_cli_search_takes_ranking_logic(biased: Settings, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DATA_DIR", str(biased.data_dir))
    args = ["search", "--index", INDEX, "--text", QUERY, "--k", "4", "--ranking", "logic"]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "Ranking: logic-aware (score = log p(study meets the query))" in table
    rows = [line for line in table.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 4 and all(" yes " in row for row in rows)
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranking"] == "logic"


def test_probe_vectors_are_the_index_rows_of_train_studies(biased: Settings) -> None:
    from medheb_app.index.catalog import load_index
    from medheb_app.ranking.index_logic import labelled_train_rows

    loaded = load_index(INDEX, AffirmationBiased(), biased)
    rows = labelled_train_rows(loaded, CXR_RETRIEVE_10)
    assert rows and all(loaded.items[loaded.index.ids[r]]["split"] == "train" for r in rows)
    vectors = loaded.index.vectors()
    first = loaded.items[loaded.index.ids[rows[0]]]["findings"]
    expected = l2_normalise((label_vector(first, CXR_RETRIEVE_10) * SEES)[None])[0]
    np.testing.assert_allclose(vectors[rows[0]], expected, atol=1e-6)


def test_a_finding_the_model_cannot_see_gets_a_weak_probe_warning(biased: Settings) -> None:
    response = search(
        query_text="fracture and no pleural effusion", index=INDEX, settings=biased, ranking="logic"
    )
    weak = [w for w in response.warnings if w.startswith("Fracture: the probe")]
    assert len(weak) == 1 and "cross-validated AUC 0.5" in weak[0]
    assert not any(w.startswith("Pleural Effusion") for w in response.warnings)


def test_probe_notes_name_missing_and_weak_probes_only() -> None:
    from medheb_app.ranking.index_logic import probe_notes
    from medheb_app.ranking.probes import FindingProbe

    probe = FindingProbe(
        findings=("Edema", "Fracture", "Pneumonia"),
        weights=np.zeros((3, 2)),
        bias=np.zeros(3),
        fitted=np.array([True, False, True]),
        model_fingerprint="fp",
        n_train=50,
        n_positive=(20, 1, 6),
        c=(1.0, 0.0, 0.1),
        cv_auc=(0.97, np.nan, 0.8999),
    )
    parsed = parse_query("edema and no fracture and no pneumonia")
    notes = probe_notes(probe, parsed)
    assert len(notes) == 2
    assert notes[0].startswith("Fracture: too few labelled") and "(1 positive of 50)" in notes[0]
    assert notes[1].startswith("Pneumonia: the probe") and "AUC 0.89 over 6 positive" in notes[1]
    assert probe_notes(probe, parse_query("edema")) == []


def test_blank_labels_are_negatives_and_unlabelled_studies_are_left_out() -> None:
    from types import SimpleNamespace

    from medheb_app.ranking.index_logic import labelled_train_rows

    blank = dict.fromkeys(CXR_RETRIEVE_10)  # an NIH normal film: every finding blank
    items = {
        "normal": {"split": "train", "form": "2d", "findings": blank},
        "effusion": {"split": "train", "form": "2d", "findings": {**blank, "Pleural Effusion": 1}},
        "unlabelled": {"split": "train", "form": "2d", "findings": {}},
        "held-out": {"split": "test", "form": "2d", "findings": blank},
        "volume": {"split": "train", "form": "3d", "findings": blank},
    }
    loaded = SimpleNamespace(index=SimpleNamespace(ids=list(items)), items=items)
    assert labelled_train_rows(loaded, CXR_RETRIEVE_10) == [0, 1]  # type: ignore[arg-type]


def test_concurrent_first_searches_fit_the_probe_once(corpus, monkeypatch) -> None:
    import threading

    from medheb_app.ranking import index_logic

    settings, studies = corpus
    fresh = Settings(data_dir=settings.data_dir.parent / "concurrent", demo_size=200)
    model = AffirmationBiased()
    monkeypatch.setattr("medheb_app.models.registry.load_embedder", lambda spec, _: model)
    build_index("concurrent", studies, model, fresh)  # the build fits and keeps the probe
    shutil.rmtree(fresh.data_dir / "probes")  # as for an index built before builds fit them
    index_logic._LOADED.clear()
    fits = []
    original = index_logic.fit_probe
    monkeypatch.setattr(
        index_logic, "fit_probe", lambda *a, **k: fits.append(1) or original(*a, **k)
    )
    answers: list[list[str]] = []

    def run() -> None:
        response = search(
            query_text=QUERY, index="concurrent", k=5, settings=fresh, ranking="logic"
        )
        answers.append([hit.id for hit in response.results])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fits) == 1 and len(answers) == 4 and all(a == answers[0] for a in answers)


def test_cross_fit_scores_every_labelled_study_out_of_fold() -> None:
    """On pure noise a probe memorises its training labels (in-sample AUC near 1); the
    cross-fitted scores of the same studies are at chance, so none saw its own label."""
    from sklearn.metrics import roc_auc_score

    from medheb_app.ranking.index_logic import cross_fit_logits
    from medheb_app.ranking.probes import ProbeConfig, fit_probe

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((120, 200)).astype(np.float32)
    labels = [{"Mass": int(v)} for v in rng.integers(0, 2, 120)]
    y = np.array([row["Mass"] for row in labels])
    probe = fit_probe(vectors, labels, ("Mass",), "fp", ProbeConfig(views="whole", c_grid=(10.0,)))
    in_sample = probe.logits(vectors)
    assert roc_auc_score(y, in_sample[:, 0]) > 0.99
    crossed = cross_fit_logits(in_sample.copy(), vectors, list(range(120)), labels, probe)
    assert abs(roc_auc_score(y, crossed[:, 0]) - 0.5) < 0.15
