"""random (chance level) and oracle (label upper bound) embedders."""

from __future__ import annotations

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import Evidence, Study
from medheb_app.models.baselines import OracleEmbedder, RandomEmbedder


def _study(sid: str, positives: list[str], form: str = "2d") -> Study:
    findings = {name: (1 if name in positives else 0) for name in CXR_RETRIEVE_10}
    pixels = np.full((8, 8), len(positives) / 10, dtype=np.float32) if form == "2d" else None
    return Study(id=sid, form=form, pixels=pixels, findings=findings, text="report")


def test_random_is_content_seeded_unit_vectors() -> None:
    model = RandomEmbedder()
    image = np.random.default_rng(0).random((16, 16), dtype=np.float32)
    first = model.encode(["effusion", Evidence(image=image), "cardiomegaly"])
    again = RandomEmbedder().encode(["effusion", Evidence(image=image.copy()), "cardiomegaly"])
    np.testing.assert_array_equal(first, again)
    assert first.shape == (3, model.card.dims) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)
    assert abs(float(first[0] @ first[2])) < 0.5  # different content, unrelated vectors


def test_oracle_ranks_studies_meeting_every_constraint_first() -> None:
    model = OracleEmbedder()
    studies = [
        _study("both", ["Pleural Effusion", "Cardiomegaly"]),
        _study("effusion-only", ["Pleural Effusion"]),
        _study("cardio-only", ["Cardiomegaly"]),
        _study("none", []),
    ]
    candidates = model.encode(studies)
    query = model.encode(["pleural effusion and no cardiomegaly"])[0]
    ranking = [studies[i].id for i in np.argsort(-(candidates @ query), kind="stable")]
    assert ranking[0] == "effusion-only"
    assert ranking[-1] == "cardio-only"
    np.testing.assert_allclose(np.linalg.norm(candidates, axis=1), 1.0, atol=1e-6)


def test_oracle_query_vector_follows_parsed_constraints() -> None:
    model = OracleEmbedder()
    vector = model.encode(["edema without pneumothorax"])[0]
    edema, pneumothorax = CXR_RETRIEVE_10.index("Edema"), CXR_RETRIEVE_10.index("Pneumothorax")
    assert vector[edema] > 0 and vector[pneumothorax] < 0
    assert np.count_nonzero(vector) == 2


def test_oracle_gives_zero_vectors_when_it_cannot_know() -> None:
    model = OracleEmbedder()
    unlabelled = Study(id="u", form="2d", pixels=np.zeros((4, 4), dtype=np.float32))
    vectors = model.encode(["the weather today", Evidence(image=np.zeros((4, 4))), unlabelled])
    np.testing.assert_array_equal(vectors, 0.0)


def test_oracle_embeds_a_report_study_by_its_labels() -> None:
    model = OracleEmbedder()
    report = _study("r", ["Edema"], form="text")
    image = _study("i", ["Edema"])
    np.testing.assert_allclose(model.encode([report]), model.encode([image]))
