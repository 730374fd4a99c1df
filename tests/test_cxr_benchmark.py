"""CXR-Retrieve benchmark definition and scoring, on hand-built galleries."""

from __future__ import annotations

import numpy as np
import pytest

from medheb_app.eval.cxr_retrieve import evaluate, top_indices
from medheb_app.eval.cxr_tables import coverage_line, table2, table3, table4, table5
from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import Study
from medheb_app.models.base import ModelCard
from medheb_app.query.parser import parse_query, satisfies
from medheb_app.tasks.cxr_retrieve import (
    Gallery,
    benchmark_queries,
    benchmark_source,
    hard_negative_ids,
    label_notes,
    relevant_ids,
    select_split,
)

AT, PN, PE = "Atelectasis", "Pneumonia", "Pleural Effusion"


def study(sid: str, split: str = "test", **labels: object) -> Study:
    findings = dict.fromkeys(CXR_RETRIEVE_10)
    findings.update({k.replace("_", " "): v for k, v in labels.items()})
    return Study(id=sid, form="2d", findings=findings, split=split)  # type: ignore[arg-type]


def test_query_counts_and_ids() -> None:
    queries = benchmark_queries()
    kinds = [q.kind for q in queries]
    assert (kinds.count("single"), kinds.count("pair"), kinds.count("negation")) == (10, 45, 90)
    assert len({q.id for q in queries}) == 145
    assert len({(q.positives, q.negatives) for q in queries}) == 145


@pytest.mark.parametrize("paraphrase", [False, True])
def test_every_query_text_parses_to_its_constraints(paraphrase: bool) -> None:
    for query in benchmark_queries(paraphrase=paraphrase):
        parsed = parse_query(query.text)
        assert set(parsed.positive) == set(query.positives), query.text
        assert set(parsed.negative) == set(query.negatives), query.text
        assert parsed.warnings == ()


def test_paraphrase_changes_only_negation_texts() -> None:
    plain = benchmark_queries()
    para = benchmark_queries(paraphrase=True)
    assert [q.text for q in plain if q.kind != "negation"] == [
        q.text for q in para if q.kind != "negation"
    ]
    negation = [q for q in para if q.kind == "negation"]
    assert negation[0].text == "an image with atelectasis but without cardiomegaly"
    assert next(q for q in plain if q.kind == "negation").text == "Atelectasis and no cardiomegaly"


GALLERY = [
    study("both", Atelectasis=1, Pneumonia=1),
    study("a-neg", Atelectasis=1, Pneumonia=0),
    study("a-blank", Atelectasis=1),
    study("a-unc", Atelectasis=1, Pneumonia=-1),
    study("b-only", Pneumonia=1),
    study("none", Atelectasis=0, Pneumonia=0),
]


def _query(text: str):
    return next(q for q in benchmark_queries() if q.text == text)


def test_relevance_main_strict_and_hard_negatives() -> None:
    query = _query("Atelectasis and no pneumonia")
    assert relevant_ids(query, GALLERY, "main") == {"a-neg", "a-blank", "a-unc"}
    assert relevant_ids(query, GALLERY, "strict") == {"a-neg"}
    assert hard_negative_ids(query, GALLERY) == {"both"}
    pair = _query("Atelectasis and pneumonia")
    assert relevant_ids(pair, GALLERY, "main") == {"both"}
    assert hard_negative_ids(pair, GALLERY) == set()


class FakeRanker:
    """Scores from labels: 'oracle' prefers satisfying images, 'affirm' the mentioned findings."""

    note = ""

    def __init__(self, mode: str) -> None:
        self.spec = mode
        self.mode = mode
        self.card = ModelCard(name=mode, version="1", dims=0, modalities=("text",), license="-")

    def score(self, task, progress=None, stop=None) -> np.ndarray:
        texts = [q.item for q in task.queries]
        gallery = [c.item for c in task.candidates]
        scores = np.zeros((len(texts), len(gallery)))
        for row, text in enumerate(texts):
            parsed = parse_query(text)
            for col, s in enumerate(gallery):
                if self.mode == "oracle":
                    scores[row, col] = float(bool(satisfies(s.findings, parsed, "strict"))) + float(
                        bool(satisfies(s.findings, parsed, "main"))
                    )
                else:  # bag of words: every mentioned finding counts as wanted
                    named = [*parsed.positive, *parsed.negative]
                    scores[row, col] = sum(s.findings.get(n) == 1 for n in named)
        return scores


def test_evaluate_oracle_vs_bag_of_words() -> None:
    gallery = Gallery(list(GALLERY), source="hand", split="test", notes=label_notes(GALLERY))
    oracle = evaluate(FakeRanker("oracle"), gallery)
    bag = evaluate(FakeRanker("affirm"), gallery)
    neg = "Atelectasis and no pneumonia"
    oracle_q = next(q for q in oracle.queries if q["text"] == neg)
    bag_q = next(q for q in bag.queries if q["text"] == neg)
    # main: three relevant images -> P@1 = 1, P@3 = 1, P@5 = 3/5
    assert oracle_q["metrics_main"]["P@1"] == 1.0
    assert oracle_q["metrics_main"]["P@5"] == pytest.approx(0.6)
    # ties at score 0 keep gallery order, so the hard negative "both" is 4th
    assert oracle_q["metrics_main"]["HNRR@3"] == 0.0
    assert oracle_q["metrics_main"]["HNRR@5"] == pytest.approx(0.2)
    # strict: only one relevant image, ranked first by the oracle
    assert oracle_q["metrics_strict"]["P@1"] == 1.0
    assert oracle_q["metrics_strict"]["P@5"] == pytest.approx(0.2)
    # the bag-of-words ranker puts the hard negative first
    assert bag_q["top_k"][0]["id"] == "both"
    assert bag_q["metrics_main"]["HNRR@1"] == 1.0
    assert bag.regimes["negation"]["HNRR@1"] > oracle.regimes["negation"]["HNRR@1"]
    assert bag.regimes["negation"]["P@1"] < oracle.regimes["negation"]["P@1"]
    # macro averages are in percent and every regime is present
    assert set(oracle.regimes) == {"single", "pair", "negation"}
    assert 0.0 <= oracle.regimes["pair"]["P@5"] <= 100.0
    assert "HNRR@5" not in oracle.regimes["single"]
    # most queries have no relevant image in a 6-image gallery, and the count is reported
    assert oracle.without_relevant["main"]["single"] == 8
    assert "have no relevant image" in coverage_line(oracle)
    payload = oracle.to_json()
    assert {"id", "kind", "text", "positives", "negatives", "top_k"} <= set(payload["queries"][0])
    assert set(payload["queries"][0]["top_k"][0]) >= {"id", "findings"}


def test_tables_render_every_model() -> None:
    gallery = Gallery(list(GALLERY), source="hand", split="test")
    reports = [evaluate(FakeRanker("oracle"), gallery), evaluate(FakeRanker("affirm"), gallery)]
    for text in (table2(reports), table3(reports), table5(reports)):
        assert "oracle" in text and "affirm" in text
    assert table2(reports).count("| oracle |") == 3
    assert "| Loss | CLIP |" in table4([("Loss", "CLIP", reports[0])])


def test_top_indices_breaks_ties_by_gallery_order() -> None:
    scores = np.array([[0.5, 0.9, 0.5, 0.9]])
    assert top_indices(scores, 4).tolist() == [[1, 3, 0, 2]]


def test_label_notes_positive_only_and_missing_fracture() -> None:
    nih_like = [study("x", Atelectasis=1), study("y", Pneumonia=1)]
    notes = " ".join(label_notes(nih_like))
    assert "Fracture" in notes and "No confirmed negatives" in notes
    assert not any("No confirmed negatives" in n for n in label_notes(GALLERY))


def test_split_and_source_errors() -> None:
    studies = [study("a", split="train"), study("b", split="test")]
    assert [s.id for s in select_split(studies, "test")] == ["b"]
    assert len(select_split(studies, None)) == 2
    with pytest.raises(ValueError, match="splits present: test, train"):
        select_split(studies, "val")
    nih = benchmark_source("nih:/data/nih")
    assert (nih.kind, str(nih.path)) == ("nih", "/data/nih")
    assert benchmark_source("phantom").kind == "phantom"
    with pytest.raises(ValueError, match="phantom"):
        benchmark_source("chexpert:/x")
    with pytest.raises(ValueError, match="Unknown source"):  # the one grammar's own words
        benchmark_source("nhi:/x")
