"""The logic-aware ranker fixes a bag-of-words embedder's negation failure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from medheb_app.eval.cxr_retrieve import evaluate
from medheb_app.eval.rankers import EmbeddingRanker
from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import Study
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.query.parser import ParsedQuery, parse_query
from medheb_app.ranking.logic_aware import (
    LogicAwareRanker,
    load_or_fit_probe,
    log_sigmoid,
    logic_scores,
    probe_path,
)
from medheb_app.ranking.probes import FindingProbe, ProbeConfig, fit_probe, roc_auc
from medheb_app.tasks.cxr_retrieve import Gallery

DIMS = 24
GLOBAL_ONLY = ProbeConfig(views="whole")  # the bag-of-words embedder has no pixels to crop


class BagOfWordsEmbedder:
    """Images: noisy label indicators. Texts: every named finding +1, negated or not."""

    card = ModelCard(name="bag", version="1", dims=DIMS, modalities=("text", "2d"), license="-")

    def encode(self, items: Sequence[object], instruction: str | None = None) -> np.ndarray:
        rows = []
        for item in items:
            vector = np.zeros(DIMS)
            if isinstance(item, Study):
                rng = np.random.default_rng(int(item.id.split("-")[1]))
                for i, name in enumerate(CXR_RETRIEVE_10):
                    vector[i] = 1.0 if item.findings.get(name) == 1 else 0.0
                vector += rng.normal(0, 0.15, DIMS)
            else:
                parsed = parse_query(str(item))
                for name in (*parsed.positive, *parsed.negative):
                    vector[CXR_RETRIEVE_10.index(name)] = 1.0
            rows.append(vector)
        return l2_normalise(np.stack(rows))


def corpus(n: int, seed: int, split: str) -> list[Study]:
    rng = np.random.default_rng(seed)
    studies = []
    for i in range(n):
        findings = {
            name: (1 if rng.random() < 0.3 else (0 if rng.random() < 0.3 else None))
            for name in CXR_RETRIEVE_10
        }
        studies.append(
            Study(id=f"s-{seed * 10000 + i}", form="2d", findings=findings, split=split)  # type: ignore[arg-type]
        )
    return studies


def test_log_sigmoid_is_stable() -> None:
    values = log_sigmoid(np.array([-800.0, 0.0, 800.0]))
    assert np.all(np.isfinite(values))
    assert values[1] == pytest.approx(np.log(0.5))
    assert values[2] == pytest.approx(0.0)


def test_logic_scores_combine_constraints() -> None:
    findings = ("A", "B")
    logits = np.array([[3.0, 3.0], [3.0, -3.0], [-3.0, -3.0]])
    parsed = parse_query("x", vocabulary=findings)
    assert not parsed.has_constraints
    similarity = np.array([0.1, 0.2, 0.3])
    assert logic_scores(parsed, logits, findings, similarity).tolist() == similarity.tolist()
    query = ParsedQuery(text="A and no B", positive=("A",), negative=("B",), vocabulary=findings)
    scores = logic_scores(query, logits, findings, tie_weight=0.0)
    assert np.argmax(scores) == 1
    expected = log_sigmoid(np.array([3.0]))[0] + log_sigmoid(np.array([3.0]))[0]
    assert scores[1] == pytest.approx(expected)


def test_probe_fits_learnable_findings_and_marks_the_rest(tmp_path) -> None:
    train = corpus(300, 1, "train")
    for study in train:
        study.findings["Fracture"] = None  # never labelled, like NIH
    embedder = BagOfWordsEmbedder()
    rows = [s.findings for s in train]
    probe = fit_probe(embedder.encode(train), rows, CXR_RETRIEVE_10, "fp", GLOBAL_ONLY)
    assert not probe.fitted[CXR_RETRIEVE_10.index("Fracture")]
    assert probe.fitted.sum() == 9
    logits = probe.logits(embedder.encode(train))
    assert np.isnan(logits[:, CXR_RETRIEVE_10.index("Fracture")]).all()
    edema = CXR_RETRIEVE_10.index("Edema")
    truth = np.array([s.findings["Edema"] == 1 for s in train])
    accuracy = np.mean((logits[:, edema] > 0) == truth)
    assert accuracy > 0.95
    path = probe.save(tmp_path / "probe.npz")
    again = FindingProbe.load(path)
    assert np.allclose(again.weights, probe.weights) and again.findings == probe.findings
    assert again.c == probe.c and all(c in GLOBAL_ONLY.c_grid for c in again.c if c)
    with pytest.raises(ValueError, match="24-d features"):
        probe.logits(np.zeros((2, 5)))


def test_roc_auc_is_scikit_learns_on_ties_and_missing_classes() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(4)
    for n in (2, 7, 60, 501):
        positive = rng.random(n) < 0.3
        positive[:2] = [True, False]
        for scores in (rng.normal(size=n), rng.integers(0, 3, size=n).astype(float)):  # ties
            assert roc_auc(scores, positive) == pytest.approx(
                roc_auc_score(positive, scores), abs=1e-12
            )
    assert roc_auc(np.array([0.1, 0.9, 0.5]), np.array([False, True, True])) == 1.0
    assert np.isnan(roc_auc(np.array([0.1, 0.2]), np.array([True, True])))


def test_the_probe_picks_the_c_and_weights_scikit_learns_roc_auc_scoring_picks() -> None:
    """The probe's own AUC scorer changes its cost, not its choice: the same C, the same
    weights and (to rounding) the same cross-validated AUC as scoring="roc_auc"."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    rng = np.random.default_rng(5)
    config = ProbeConfig()
    for n, d, rate in ((40, 16, 0.3), (200, 24, 0.1), (600, 32, 0.5)):
        z = rng.normal(size=(n, d))
        y = z[:, 0] + 0.8 * rng.normal(size=n) > np.quantile(z[:, 0], 1 - rate)
        probe = fit_probe(z, [{"Edema": int(v)} for v in y], ["Edema"], "fp", config)
        mean, scale = z.mean(axis=0), z.std(axis=0) + 1e-8
        reference = LogisticRegressionCV(
            Cs=list(config.c_grid),
            cv=StratifiedKFold(config.folds, shuffle=True, random_state=config.seed),
            scoring="roc_auc",
            max_iter=5000,
            random_state=config.seed,
            l1_ratios=(0.0,),
            use_legacy_attributes=False,
        ).fit((z - mean) / scale, y)
        assert probe.c[0] == float(np.ravel(reference.C_)[0])
        assert np.allclose(probe.weights[0], reference.coef_[0] / scale, rtol=0, atol=1e-12)
        auc = float(np.asarray(reference.scores_).mean(axis=0).max())
        assert probe.cv_auc[0] == pytest.approx(auc, abs=1e-12)


def test_logic_ranker_fixes_negation_of_a_bag_of_words_model(settings) -> None:
    embedder = BagOfWordsEmbedder()
    train, test = corpus(400, 1, "train"), corpus(300, 2, "test")
    gallery = Gallery(test, source="synthetic", split="test")
    probe = load_or_fit_probe(embedder, train, settings, config=GLOBAL_ONLY)
    again = load_or_fit_probe(embedder, train, settings, config=GLOBAL_ONLY)
    assert again.n_train == probe.n_train  # from disk
    assert [p.name for p in (settings.data_dir / "probes").glob("*.npz")] == [
        probe_path(settings, embedder, train, GLOBAL_ONLY).name
    ]
    assert probe_path(settings, embedder, train, GLOBAL_ONLY) != probe_path(
        settings, embedder, train, ProbeConfig()
    )  # probe settings are part of the cache key
    bag = evaluate(EmbeddingRanker("bow", embedder), gallery)
    logic = evaluate(LogicAwareRanker(embedder, probe), gallery)
    assert bag.regimes["negation"]["HNRR@5"] > 20.0  # affirmation bias
    assert logic.regimes["negation"]["HNRR@5"] < 2.0
    assert logic.regimes["negation"]["P@5"] > bag.regimes["negation"]["P@5"] + 30.0
    assert logic.regimes["pair"]["P@5"] >= bag.regimes["pair"]["P@5"]


def test_probe_of_another_model_is_rejected() -> None:
    embedder = BagOfWordsEmbedder()
    probe = FindingProbe(
        ("Edema",), np.zeros((1, DIMS)), np.zeros(1), np.ones(1, bool), "other", 1, (1,)
    )
    with pytest.raises(ValueError, match="another model"):
        LogicAwareRanker(embedder, probe)
