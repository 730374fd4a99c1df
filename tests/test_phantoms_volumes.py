"""3D phantoms: CT, paired T1/T2 MR and CT projection per subject."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from medheb_app.evidence.phantoms import generate_volume_corpus
from medheb_app.evidence.phantoms.volumes import SHAPE, TISSUES, build_subject

N_SUBJECTS = 4


@pytest.fixture(scope="module")
def corpus():
    return generate_volume_corpus(n_subjects=N_SUBJECTS, seed=0)


@pytest.fixture(scope="module")
def by_subject(corpus):
    groups = defaultdict(dict)
    for study in corpus:
        groups[study.meta["subject_id"]][study.modality] = study
    return groups


def test_four_studies_per_subject_sharing_ids_and_shapes(corpus, by_subject):
    assert len(corpus) == 4 * N_SUBJECTS and len(by_subject) == N_SUBJECTS
    for subject, studies in by_subject.items():
        assert set(studies) == {"CT", "MR-T1", "MR-T2", "DX-projection"}
        for modality in ("CT", "MR-T1", "MR-T2"):
            study = studies[modality]
            assert study.form == "3d" and study.pixels.shape == SHAPE
            assert study.pixels.dtype == np.float32
            assert study.pixels.min() >= 0 and study.pixels.max() <= 1
        projection = studies["DX-projection"]
        assert projection.form == "2d" and projection.pixels.ndim == 2
        assert projection.pixels.shape[1] == SHAPE[2]
        assert {s.patient_id for s in studies.values()} == {subject}
        assert len({s.split for s in studies.values()}) == 1
        assert all(s.synthetic and s.source == "phantom" for s in studies.values())


def test_deterministic_by_seed(corpus):
    again = generate_volume_corpus(n_subjects=1, seed=0)
    assert np.array_equal(again[0].pixels, corpus[0].pixels)
    other = generate_volume_corpus(n_subjects=1, seed=5)
    assert not np.array_equal(other[0].pixels, corpus[0].pixels)


def test_tissue_contrasts_fat_bright_on_t1_fluid_bright_on_t2():
    (hu, t1, t2), _, _ = build_subject(np.random.default_rng(3))
    fat = np.abs(hu - TISSUES["fat"][0]) < 1
    fluid = np.abs(hu - TISSUES["fluid"][0]) < 1
    muscle = np.abs(hu - TISSUES["muscle"][0]) < 1
    assert fat.sum() > 100 and fluid.sum() > 10
    assert t1[fat].mean() > t2[fat].mean() and t1[fat].mean() > t1[muscle].mean()
    assert t2[fluid].mean() > t1[fluid].mean() and t2[fluid].mean() > t2[fat].mean()


def test_mr_pair_shares_the_anatomy(by_subject):
    for studies in by_subject.values():
        t1 = studies["MR-T1"].pixels > 0.15
        t2 = studies["MR-T2"].pixels > 0.15
        ct_body = studies["CT"].pixels > 0.45  # soft tissue and bone in the lung window
        body_t1 = t1 | t2
        overlap = (ct_body & body_t1).sum() / (ct_body | body_t1).sum()
        assert overlap > 0.6
        assert not np.array_equal(studies["MR-T1"].pixels, studies["MR-T2"].pixels)


def test_projection_is_dense_over_the_mediastinum(by_subject):
    for studies in by_subject.values():
        image = studies["DX-projection"].pixels
        middle_rows = image[image.shape[0] // 3 : image.shape[0] // 2]
        centre = middle_rows[:, 44:52].mean()
        lungs = np.r_[middle_rows[:, 20:30].ravel(), middle_rows[:, 66:76].ravel()].mean()
        assert centre > lungs + 0.05


def test_findings_and_text_describe_the_lesions(corpus):
    for study in corpus:
        count = study.meta["nodule_count"]
        assert study.findings["Lung Lesion"] == (1 if count else 0)
        assert study.findings["Pleural Effusion"] == (1 if study.meta["effusion"] else 0)
        if count == 0:
            assert "No pulmonary nodules." in study.text
        for nodule in study.meta["nodules"]:
            assert f"{nodule['side']} {nodule['zone']} zone" in study.text
        if study.modality == "DX-projection":
            assert len(study.boxes) == count
            height, width = study.pixels.shape
            for box in study.boxes:
                assert box.x >= 0 and box.x + box.w <= width
                assert box.y >= 0 and box.y + box.h <= height


def test_lesions_are_visible_in_the_ct():
    subjects = generate_volume_corpus(n_subjects=6, seed=2)
    seen = 0
    for ct in (s for s in subjects if s.modality == "CT"):
        for nodule in ct.meta["nodules"]:
            z, y, x = (
                int(c / s) for c, s in zip(nodule["centre_mm"], ct.meta["spacing_mm"], strict=True)
            )
            assert ct.pixels[z, y, x] > 0.6  # soft tissue inside aerated lung (about 0.33)
            seen += 1
    assert seen > 0


def test_split_by_subject_70_30():
    studies = generate_volume_corpus(n_subjects=10, seed=1)
    splits = {s.meta["subject_id"]: s.split for s in studies}
    assert sorted(splits.values()).count("train") == 7
    assert sorted(splits.values()).count("test") == 3
