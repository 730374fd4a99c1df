"""Chest radiograph phantoms: determinism, label fidelity, report wording, boxes, splits."""

from __future__ import annotations

import re

import numpy as np
import pytest

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.phantoms import generate_chest_corpus, region_description
from medheb_app.evidence.phantoms.chest import chest_study_specs, render_chest
from medheb_app.evidence.phantoms.labels import frontal_label_table, sample_label_rows, table_rate
from medheb_app.evidence.phantoms.plan import DRAWABLE
from medheb_app.evidence.study import Box, EvidenceError

N = 200

# Words a reader would take as mentioning the finding (checked independently of reports.py).
KEYWORDS = {
    "Atelectasis": r"atelecta",
    "Cardiomegaly": r"cardiomegaly|heart",
    "Consolidation": r"consolidat",
    "Edema": r"edema",
    "Fracture": r"fracture",
    "Lung Lesion": r"nodule|mass|lesion",
    "Lung Opacity": r"opacit",
    "Pleural Effusion": r"effusion",
    "Pneumonia": r"pneumonia",
    "Pneumothorax": r"pneumothora",
}
NEGATION = re.compile(r"\b(no|not|normal)\b")
HEDGE = re.compile(r"possible|cannot exclude|questionable|may represent")


@pytest.fixture(scope="module")
def corpus():
    return generate_chest_corpus(n=N, seed=0)


def _sentences(text: str) -> list[str]:
    return [s.strip().lower() for s in re.split(r"(?<=\.)\s+", text) if s.strip()]


def test_same_seed_same_corpus_and_prefix_stable(corpus):
    again = generate_chest_corpus(n=12, seed=0)
    for a, b in zip(corpus[:12], again, strict=True):
        assert a.id == b.id and a.text == b.text and a.findings == b.findings
        assert a.boxes == b.boxes
        assert np.array_equal(a.pixels, b.pixels)
    other = generate_chest_corpus(n=12, seed=1)
    assert [s.meta["label_row"] for s in other] != [s.meta["label_row"] for s in corpus[:12]]
    assert not np.array_equal(other[0].pixels, corpus[0].pixels)


def test_study_fields(corpus):
    assert len(corpus) == N
    assert corpus[123].id == "phantom-cxr-000123"
    for study in corpus:
        assert study.form == "2d" and study.modality == "CR"
        assert study.source == "phantom" and study.synthetic is True
        assert study.pixels.shape == (256, 256) and study.pixels.dtype == np.float32
        assert study.pixels.min() >= 0.0 and study.pixels.max() <= 1.0
        assert set(study.findings) == set(CHEXPERT_14)
        assert study.meta["view"] in ("AP", "PA")
        assert set(study.laterality.values()) <= {"left", "right", "bilateral"}
        assert set(study.severity.values()) <= {"mild", "moderate", "severe"}


def test_findings_are_the_real_chexpert_rows(corpus):
    table = frontal_label_table()
    for study in corpus[:50]:
        row = table.loc[study.meta["label_row"]]
        for name in CHEXPERT_14:
            cell = row[name]
            expected = None if np.isnan(cell) else int(cell)
            assert study.findings[name] == expected, (study.id, name)


def test_drawn_findings_match_labels(corpus):
    for study in corpus:
        drawn = set(study.meta["drawn"])
        for name in drawn:
            assert study.findings[name] in (1, -1), (study.id, name)
        for name in study.meta["faint"]:
            assert study.findings[name] == -1 and name in drawn
        for name in DRAWABLE:
            if study.findings[name] == 1:
                assert name in drawn, (study.id, name)
            if study.findings[name] in (0, None):
                assert name not in drawn and name not in study.laterality
        boxed = {box.finding for box in study.boxes}
        assert boxed == drawn, study.id


def test_report_asserts_negates_hedges_and_skips_blank(corpus):
    uncertain_seen = negated_seen = 0
    for study in corpus:
        sentences = _sentences(study.text)
        for name, pattern in KEYWORDS.items():
            about = [s for s in sentences if re.search(pattern, s)]
            value = study.findings[name]
            if value is None:
                assert not about, (study.id, name, study.text)
            elif value == 0:
                negated_seen += 1
                assert about and all(NEGATION.search(s) for s in about), (study.id, name)
            elif value == -1:
                uncertain_seen += 1
                assert any(HEDGE.search(s) for s in about), (study.id, name, study.text)
            else:
                assert any(not NEGATION.search(s) and not HEDGE.search(s) for s in about), (
                    study.id,
                    name,
                    study.text,
                )
    assert uncertain_seen > 20 and negated_seen > 20


def test_report_states_side_and_severity(corpus):
    effusions = [s for s in corpus if s.findings["Pleural Effusion"] == 1]
    assert effusions
    size_word = {"mild": "small", "moderate": "moderate", "severe": "large"}
    for study in effusions:
        side = study.laterality["Pleural Effusion"]
        size = size_word[study.severity["Pleural Effusion"]]
        assert f"{size} {side} pleural effusion" in study.text.lower(), study.text


def test_phrasing_varies(corpus):
    negations = {
        s for study in corpus for s in _sentences(study.text) if "pneumothorax" in s and "no" in s
    }
    assert len(negations) >= 2


def test_boxes_inside_image_and_sides_match_laterality(corpus):
    for study in corpus:
        for box in study.boxes:
            assert box.x >= 0 and box.y >= 0 and box.w > 0 and box.h > 0
            assert box.x + box.w <= 256 and box.y + box.h <= 256
            side = study.laterality.get(box.finding)
            if side in ("left", "right"):
                assert box.side == side
        for name, side in study.laterality.items():
            sides = {b.side for b in study.boxes if b.finding == name}
            if name in study.meta["drawn"] and side == "bilateral" and name != "Edema":
                assert sides == {"left", "right"}, (study.id, name)


def test_patient_left_is_image_right(corpus):
    lefts = [b for s in corpus for b in s.boxes if b.side == "left" and b.finding != "Fracture"]
    rights = [b for s in corpus for b in s.boxes if b.side == "right" and b.finding != "Fracture"]
    assert np.mean([b.x + b.w / 2 for b in lefts]) > 128 > np.mean([b.x + b.w / 2 for b in rights])


def test_drawn_finding_changes_pixels_inside_its_box(corpus):
    """Re-render each phantom without one finding: the change must sit inside that box."""
    checked = 0
    for study in corpus[:60]:
        anatomy, specs = chest_study_specs(study)
        full, _ = render_chest(anatomy, specs)
        assert np.array_equal(full, study.pixels)
        for spec in (s for s in specs if s.drawn):
            without, _ = render_chest(anatomy, [s for s in specs if s is not spec])
            change = np.abs(full - without)
            inside = np.zeros(change.shape, bool)
            for box in (b for b in study.boxes if b.finding == spec.finding):
                rows = slice(int(box.y), int(np.ceil(box.y + box.h)))
                cols = slice(int(box.x), int(np.ceil(box.x + box.w)))
                inside[rows, cols] = True
                assert change[rows, cols].mean() > 0.005, (study.id, spec)
            assert change[inside].mean() > 3 * change[~inside].mean(), (study.id, spec)
            checked += 1
    assert checked > 60


def test_cooccurrence_follows_chexpert():
    rows = sample_label_rows(3000, seed=4)
    for pair in (("Edema", "Pleural Effusion"), ("Lung Opacity", "Pleural Effusion")):
        expected = table_rate(pair)
        observed = np.mean([all(r.findings[f] == 1 for f in pair) for r in rows])
        tolerance = 4 * np.sqrt(expected * (1 - expected) / len(rows)) + 0.01
        assert abs(observed - expected) < tolerance, (pair, observed, expected)


def test_corpus_cooccurrence_within_sampling_error(corpus):
    pair = ("Edema", "Pleural Effusion")
    expected = table_rate(pair)
    observed = np.mean([all(s.findings[f] == 1 for f in pair) for s in corpus])
    assert abs(observed - expected) < 4 * np.sqrt(expected * (1 - expected) / N) + 0.01


def test_split_by_patient(corpus):
    split_of: dict[str, str] = {}
    per_patient: dict[str, int] = {}
    for study in corpus:
        assert split_of.setdefault(study.patient_id, study.split) == study.split
        per_patient[study.patient_id] = per_patient.get(study.patient_id, 0) + 1
    assert max(per_patient.values()) <= 3 and min(per_patient.values()) >= 1
    assert max(per_patient.values()) >= 2
    shares = {
        name: list(split_of.values()).count(name) / len(split_of) for name in split_of.values()
    }
    assert abs(shares["train"] - 0.7) < 0.02 and abs(shares["test"] - 0.2) < 0.02
    assert abs(shares["val"] - 0.1) < 0.02


def test_a_patient_keeps_one_chest_across_studies(corpus):
    by_patient: dict[str, list] = {}
    for study in corpus:
        by_patient.setdefault(study.patient_id, []).append(study)
    pairs = [
        (group[0], group[1])
        for group in by_patient.values()
        if len(group) > 1 and group[0].meta["view"] == group[1].meta["view"]
    ]
    assert pairs
    for first, second in pairs[:5]:
        anatomy_a, _ = chest_study_specs(first)
        anatomy_b, _ = chest_study_specs(second)
        assert anatomy_a.heart == anatomy_b.heart and anatomy_a.base == anatomy_b.base
        assert anatomy_a.noise_shift != anatomy_b.noise_shift  # a new exposure each time


def test_region_description():
    effusion = Box("Pleural Effusion", x=150, y=150, w=70, h=35, side="left", severity="mild")
    assert region_description(effusion) == "left lower zone pleural effusion"
    nodule = Box("Lung Lesion", x=60, y=60, w=8, h=8, side="right")
    assert region_description(nodule) == "right upper zone lung lesion"
    assert "cardiomegaly" in region_description(Box("Cardiomegaly", 80, 100, 90, 70))


def test_bad_arguments_are_explained():
    with pytest.raises(EvidenceError, match="at least 1"):
        generate_chest_corpus(n=0)
    with pytest.raises(EvidenceError, match="64 pixels"):
        generate_chest_corpus(n=2, size=16)
