"""Task builders on hand-made Studies (every expected id worked out by hand) and real data."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NIH_DIR, PROSTATE_DIR, require_shared

from medheb_app.evidence.study import Box, Evidence, Study
from medheb_app.tasks.base import TaskMetadata, TaskUnavailable
from medheb_app.tasks.builders import generic, phantom, real
from tests.run_fixtures import task_meta


def meta(family: str = "I-I", **extra) -> TaskMetadata:
    return task_meta("t", family, **extra)


def chest(
    sid: str,
    patient: str,
    drawn: list[str],
    findings: dict,
    laterality: dict | None = None,
    severity: dict | None = None,
    boxes: list[Box] | None = None,
) -> Study:
    pixels = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    return Study(
        id=sid,
        form="2d",
        pixels=pixels,
        text=f"report {sid}",
        findings=findings,
        boxes=boxes or [],
        laterality=laterality or {},
        severity=severity or {},
        patient_id=patient,
        split="test",
        source="phantom",
        meta={"drawn": drawn},
    )


def test_chest_label_keeps_single_visible_findings_only() -> None:
    assert phantom.chest_label(chest("a", "p", ["Edema"], {"Edema": 1})) == "Edema"
    # a support device does not make a second label
    both = chest("b", "p", ["Edema", "Support Devices"], {"Edema": 1, "Support Devices": 1})
    assert phantom.chest_label(both) == "Edema"
    assert phantom.chest_label(chest("c", "p", [], {"No Finding": 1})) == "No Finding"
    assert phantom.chest_label(chest("d", "p", ["Edema", "Fracture"], {"Edema": 1})) is None
    # drawn faintly because uncertain: ambiguous, so not a label sample
    assert phantom.chest_label(chest("e", "p", ["Edema"], {"Edema": -1})) is None
    assert phantom.chest_label(chest("f", "p", [], {"Edema": 0})) is None


def test_same_label_task_excludes_self_and_same_patient() -> None:
    items = [
        generic.LabelledItem("a1", "x", "Edema", "p1"),
        generic.LabelledItem("a2", "x", "Edema", "p1"),  # same patient as a1
        generic.LabelledItem("b1", "x", "Edema", "p2"),
        generic.LabelledItem("c1", "x", "Fracture", "p3"),
    ]
    task = generic.same_label_task(meta(), items)
    by_id = {q.id: q for q in task.queries}
    assert by_id["a1"].positives == ("b1",)
    assert by_id["a1"].exclude == frozenset({"a1", "a2"})
    assert by_id["b1"].positives == ("a1", "a2")
    assert "c1" not in by_id  # no other fracture: no query
    assert [c.id for c in task.candidates] == ["a1", "a2", "b1", "c1"]


def test_label_tasks_both_directions() -> None:
    items = [
        generic.LabelledItem("i1", "x", "Edema"),
        generic.LabelledItem("i2", "x", "Fracture"),
        generic.LabelledItem("i3", "x", "Edema"),
    ]
    i2l = generic.image_to_label_task(meta("I-Lab"), items, lambda label: f"L:{label}", str.lower)
    assert [(c.id, c.item) for c in i2l.candidates] == [
        ("L:Edema", "edema"),
        ("L:Fracture", "fracture"),
    ]
    assert {q.id: q.positives for q in i2l.queries}["i2"] == ("L:Fracture",)
    t2i = generic.label_to_image_task(meta("T-I"), items, lambda label: f"L:{label}", str.lower)
    assert {q.id: q.positives for q in t2i.queries} == {
        "L:Edema": ("i1", "i3"),
        "L:Fracture": ("i2",),
    }


def test_subsample_is_seeded_and_keeps_order() -> None:
    items = list(range(100))
    first = generic.subsample(items, 10, seed=3)
    assert first == generic.subsample(items, 10, seed=3)
    assert first == sorted(first) and len(set(first)) == 10
    assert generic.subsample(items, 10, seed=4) != first
    assert generic.subsample(items, None, seed=0) == items


def test_vqa_questions_follow_the_label_row() -> None:
    study = chest(
        "v",
        "p",
        ["Pleural Effusion"],
        {"Pleural Effusion": 1, "Edema": 0, "Fracture": None, "Atelectasis": -1},
        laterality={"Pleural Effusion": "left"},
        severity={"Pleural Effusion": "moderate"},
    )
    questions = set(phantom.vqa_questions(study))
    assert questions == {
        ("presence", "Pleural Effusion", "yes"),
        ("presence", "Edema", "no"),
        ("side", "Pleural Effusion", "left"),
        ("severity", "Pleural Effusion", "moderate"),
    }
    task = phantom.vqa_task(meta("VQA"), [study] * 1, "r", None, seed=0)
    query = task.queries[0]
    assert isinstance(query.item, Evidence) and query.item.text.endswith("?")
    assert query.positives[0].removeprefix("answer:") in {"yes", "no", "left", "moderate"}


def test_crop_clips_to_the_image_and_has_a_minimum_size() -> None:
    pixels = np.arange(100 * 80, dtype=np.float32).reshape(100, 80)
    assert phantom.crop(pixels, Box("x", 10, 20, 30, 40)).shape == (40, 30)
    assert np.array_equal(phantom.crop(pixels, Box("x", 10, 20, 30, 40)), pixels[20:60, 10:40])
    edge = phantom.crop(pixels, Box("x", 78, 98, 2, 2))  # grown to 8 px, pulled inside
    assert edge.shape == (8, 8)
    assert np.array_equal(edge, pixels[92:100, 72:80])


def test_region_pairs_one_per_box_with_its_text() -> None:
    boxes = [Box("Edema", 5, 5, 20, 20, "bilateral"), Box("Fracture", 30, 30, 10, 10, "left")]
    study = chest("r", "p", ["Edema", "Fracture"], {"Edema": 1, "Fracture": 1}, boxes=boxes)
    pairs = phantom.region_pairs([study], "rev", lambda box: f"{box.side} {box.finding}")
    assert [q.item.text for q, _ in pairs] == ["bilateral Edema", "left Fracture"]
    assert pairs[1][1].item.image.shape == (10, 10)
    task = generic.paired_task(meta("VG"), pairs, distractors=[t for _, t in pairs])
    assert task.queries[0].positives == (pairs[0][1].id,)
    assert len(task.candidates) == 2


def test_graded_gains() -> None:
    assert phantom.severity_gain("mild", "mild") == 1.0
    assert phantom.severity_gain("mild", "moderate") == 0.5
    assert phantom.severity_gain("mild", "severe") == 0.25
    assert phantom.severity_gain(None, "mild") == 0.0
    assert phantom.laterality_gain("left", "left") == 1.0
    assert phantom.laterality_gain("left", "bilateral") == 0.5
    assert phantom.laterality_gain("bilateral", "right") == 0.5
    assert phantom.laterality_gain("left", "right") == 0.0


def test_graded_severity_task_scores_same_finding_by_grade() -> None:
    def effusion(sid: str, grade: str, patient: str) -> Study:
        return chest(
            sid, patient, ["Pleural Effusion"], {"Pleural Effusion": 1},
            severity={"Pleural Effusion": grade},
        )  # fmt: skip

    studies = [
        effusion("q", "mild", "p1"),
        effusion("same", "mild", "p2"),
        effusion("near", "moderate", "p3"),
        chest("other", "p4", ["Edema"], {"Edema": 1}, severity={"Edema": "mild"}),
    ]
    task = phantom.graded_attribute_task(
        meta(main_metric="ndcg@5", graded=True, relation="severity"),
        studies, "r", "severity", phantom.severity_gain, None, seed=0,
    )  # fmt: skip
    gains = {q.id: dict(q.gains) for q in task.queries}
    assert gains["phantom@r:q"] == {"phantom@r:same": 1.0, "phantom@r:near": 0.5}
    # "near" has no candidate of its own grade: it cannot be a graded query
    assert "phantom@r:near" not in gains


def test_volume_pairs_match_subjects() -> None:
    def vol(sid: str, subject: str, modality: str) -> Study:
        return Study(
            id=sid,
            form="3d",
            modality=modality,
            pixels=np.zeros((4, 8, 8), np.float32),
            source="phantom",
            meta={"subject_id": subject},
        )

    studies = [vol("a1", "s1", "MR-T1"), vol("a2", "s1", "MR-T2"), vol("b1", "s2", "MR-T1")]
    pairs = phantom.volume_pairs(studies, "r", "MR-T1", "MR-T2")
    assert [(q.id, t.id) for q, t in pairs] == [("phantom@r:a1", "phantom@r:a2")]


def test_prostate_slices_pair_by_position() -> None:
    directory = require_shared(PROSTATE_DIR)
    pairs, revision = real.prostate_slice_pairs(directory)
    assert len(pairs) == 19 and len(revision) == 12
    query, target = pairs[7]
    assert query.id.endswith(":t2:7") and target.id.endswith(":dwi:7")
    assert query.item.image.shape == (384, 384) and target.item.image.shape == (128, 84)


def test_missing_real_data_is_a_stated_skip(tmp_path) -> None:
    with pytest.raises(TaskUnavailable, match="not found"):
        real.prostate_slice_pairs(tmp_path)


def test_nih_label_tasks_are_single_label_and_patient_safe() -> None:
    directory = require_shared(NIH_DIR)
    studies, revision = real.load_nih_part(directory, "test")
    items = real.nih_labelled(studies, revision)
    assert items and all(item.id.startswith(f"nih@{revision}:") for item in items)
    by_id = {item.id: item for item in items}
    task = generic.same_label_task(meta(), items)
    for query in task.queries:
        assert query.id not in query.positives
        assert all(by_id[p].label == by_id[query.id].label for p in query.positives)
        assert all(by_id[p].group != by_id[query.id].group for p in query.positives)
    multi = [s for s in studies if len(s.meta["nih_labels"]) > 1]
    assert multi and not {f"nih@{revision}:{s.id}" for s in multi} & set(by_id)


def test_studies_with_boxes_keeps_whole_images_under_the_cap() -> None:
    boxes = [Box("Edema", 0, 0, 10, 10)]
    studies = [
        chest(f"s{i}", f"p{i}", ["Edema"], {"Edema": 1}, boxes=boxes * (i % 4)) for i in range(20)
    ]
    chosen = phantom.studies_with_boxes(studies, 12, seed=0)
    assert sum(len(s.boxes) for s in chosen) <= 12
    assert all(s.boxes for s in chosen)
    assert chosen == phantom.studies_with_boxes(studies, 12, seed=0)
    # greedy fill: no unchosen boxed study would still fit
    room = 12 - sum(len(s.boxes) for s in chosen)
    assert all(len(s.boxes) > room for s in studies if s.boxes and s not in chosen)
