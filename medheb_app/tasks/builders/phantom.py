"""MedHEB-lite tasks built from the synthetic phantom corpus (2D chest and 3D volumes).

Every task here is derived by code from the generated Studies: labels from their CheXpert
label rows, reports from their text, regions from their boxes, modality pairs from their
subject ids. The corpus is deterministic by seed, so a task's data revision is the generator
arguments plus the ids and relevance it produced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.study import Box, Evidence, Study
from medheb_app.tasks.base import Item, Part, Query, Task, TaskMetadata
from medheb_app.tasks.builders.generic import LabelledItem, subsample

SOURCE_2D = "phantom-cxr"
SOURCE_3D = "phantom-vol"
SEVERITY_LEVELS = ("mild", "moderate", "severe")
MIN_CROP_PX = 8
NO_FINDING = "No Finding"
IGNORED_FOR_LABEL = ("Support Devices",)


def in_part(studies: Sequence[Study], part: Part) -> list[Study]:
    """The studies of one split; phantoms split by patient, so parts never share a patient."""
    return [study for study in studies if study.split == part]


def item_id(study: Study, revision: str) -> str:
    """A cache-safe id: the corpus revision plus the study id ('phantom-cxr@ab12:...')."""
    return f"{study.source}@{revision}:{study.id}"


def chest_label(study: Study) -> str | None:
    """The study's single visible finding, "No Finding", or None when it is not single-label.

    MedHEB section 3.1.3 keeps single-positive samples for label tasks, so that every other
    label is a valid negative. A phantom's visible truth is what was drawn (meta["drawn"]):
    the label is its only drawn finding when the label row codes it 1; an uncertain (-1)
    finding drawn faintly makes the study ambiguous. Support devices are not findings (as in
    CheXpert's own "No Finding") and are ignored.
    """
    drawn = [f for f in study.meta.get("drawn", ()) if f not in IGNORED_FOR_LABEL]
    if not drawn:
        return NO_FINDING if study.findings.get(NO_FINDING) == 1 else None
    if len(drawn) == 1 and study.findings.get(drawn[0]) == 1:
        return str(drawn[0])
    return None


def labelled_chest(studies: Sequence[Study], revision: str) -> list[LabelledItem]:
    return [
        LabelledItem(item_id(study, revision), study, label, study.patient_id)
        for study in studies
        if (label := chest_label(study)) is not None
    ]


def crop(pixels: np.ndarray, box: Box) -> np.ndarray:
    """The box's pixels (clipped to the image, at least MIN_CROP_PX on a side)."""
    height, width = pixels.shape[:2]
    w = max(round(box.w), MIN_CROP_PX)
    h = max(round(box.h), MIN_CROP_PX)
    x0 = int(np.clip(round(box.x), 0, max(width - w, 0)))
    y0 = int(np.clip(round(box.y), 0, max(height - h, 0)))
    return np.ascontiguousarray(pixels[y0 : y0 + h, x0 : x0 + w])


def studies_with_boxes(studies: Sequence[Study], max_boxes: int, seed: int) -> list[Study]:
    """Whole studies, in a seeded order, while their boxes total at most `max_boxes`."""
    boxed = [study for study in studies if study.boxes]
    order = np.random.default_rng(seed).permutation(len(boxed))
    chosen, total = [], 0
    for index in order:
        study = boxed[index]
        if total + len(study.boxes) > max_boxes:
            continue
        chosen.append(study)
        total += len(study.boxes)
    return sorted(chosen, key=lambda study: study.id)


def region_pairs(
    studies: Sequence[Study], revision: str, describe: Callable[[Box], str]
) -> list[tuple[Item, Item]]:
    """(full image + region text, the region's crop) for every box (MedHEB VG family)."""
    pairs = []
    for study in studies:
        pixels = study.load_pixels()
        if pixels is None:
            continue
        for index, box in enumerate(study.boxes):
            base = f"{item_id(study, revision)}#box{index}"
            text = describe(box)
            query = Item(f"{base}|{text}", Evidence(image=pixels, text=text))
            pairs.append((query, Item(f"{base}:crop", Evidence(image=crop(pixels, box)))))
    return pairs


def _question_text(kind: str, finding: str) -> str:
    name = finding.lower()
    if kind == "presence":
        return f"Is there {name} in this chest X-ray?"
    if kind == "side":
        return f"On which side is the {name}?"
    return f"How severe is the {name}?"


def vqa_questions(study: Study) -> list[tuple[str, str, str]]:
    """(kind, finding, answer) for every question the study's labels answer unambiguously.

    Presence: confirmed positive (1) -> yes, confirmed negative (0) -> no; blank and
    uncertain are not asked. Side and severity: only for findings actually drawn.
    """
    questions: list[tuple[str, str, str]] = []
    drawn = set(study.meta.get("drawn", ())) if study.meta.get("drawn") is not None else None
    for finding in CHEXPERT_14:
        if finding == "No Finding":
            continue
        value = study.findings.get(finding)
        if value == 1:
            questions.append(("presence", finding, "yes"))
        elif value == 0:
            questions.append(("presence", finding, "no"))
        if value != 1 or (drawn is not None and finding not in drawn):
            continue
        if (side := study.laterality.get(finding)) in ("left", "right", "bilateral"):
            questions.append(("side", finding, side))
        if (severity := study.severity.get(finding)) in SEVERITY_LEVELS:
            questions.append(("severity", finding, severity))
    return questions


def vqa_task(
    metadata: TaskMetadata,
    studies: Sequence[Study],
    revision: str,
    max_queries: int | None,
    seed: int,
) -> Task:
    """Image + question -> its answer among the task's answer set (MedHEB VQA family).

    One question per study, drawn by a seeded generator with the question kinds balanced
    (presence questions outnumber the others otherwise), so each image appears once.
    """
    rng = np.random.default_rng(seed)
    chosen: list[tuple[Study, str, str, str]] = []
    for study in studies:
        questions = vqa_questions(study)
        if not questions:
            continue
        kinds = sorted({kind for kind, _, _ in questions})
        kind = kinds[int(rng.integers(len(kinds)))]
        options = [q for q in questions if q[0] == kind]
        chosen.append((study, *options[int(rng.integers(len(options)))]))
    chosen = subsample(chosen, max_queries, seed)
    answers = sorted({answer for *_, answer in chosen})
    queries = []
    for study, kind, finding, answer in chosen:
        question = _question_text(kind, finding)
        pixels = study.load_pixels()
        queries.append(
            Query(
                id=f"{item_id(study, revision)}|{question}",
                item=Evidence(image=pixels, text=question),
                positives=(f"answer:{answer}",),
            )
        )
    candidates = [Item(f"answer:{answer}", answer) for answer in answers]
    return Task(metadata, queries, candidates)


def severity_gain(query: str | None, candidate: str | None) -> float:
    """Graded severity: 1 for the same grade, halved for each grade apart (mild..severe)."""
    if query not in SEVERITY_LEVELS or candidate not in SEVERITY_LEVELS:
        return 0.0
    distance = abs(SEVERITY_LEVELS.index(query) - SEVERITY_LEVELS.index(candidate))
    return 0.5**distance


def laterality_gain(query: str | None, candidate: str | None) -> float:
    """Graded laterality: same side 1; one side vs bilateral 0.5 (partly the same lung); else 0."""
    sides = ("left", "right", "bilateral")
    if query not in sides or candidate not in sides:
        return 0.0
    if query == candidate:
        return 1.0
    return 0.5 if "bilateral" in (query, candidate) else 0.0


def graded_attribute_task(
    metadata: TaskMetadata,
    studies: Sequence[Study],
    revision: str,
    attribute: str,
    gain: Callable[[str | None, str | None], float],
    max_queries: int | None,
    seed: int,
) -> Task:
    """Graded image-image retrieval on one attribute of the query's single finding.

    Queries are single-label studies whose finding has the attribute; a candidate earns
    gain(query attribute, candidate attribute) when the finding is positive in it too.
    """
    ids = {study.id: item_id(study, revision) for study in studies}
    queries: list[Query] = []
    for study in studies:
        finding = chest_label(study)
        if finding is None:
            continue
        value = getattr(study, attribute).get(finding)
        gains = {}
        for other in studies:
            if other.id == study.id or other.findings.get(finding) != 1:
                continue
            if (g := gain(value, getattr(other, attribute).get(finding))) > 0:
                gains[ids[other.id]] = g
        if value is not None and gains and max(gains.values()) == 1.0:
            queries.append(
                Query(ids[study.id], study, gains=gains, exclude=frozenset({ids[study.id]}))
            )
    candidates = [Item(ids[study.id], study) for study in studies]
    return Task(metadata, subsample(queries, max_queries, seed), candidates)


def volume_pairs(
    studies: Sequence[Study], revision: str, query_modality: str, target_modality: str
) -> list[tuple[Item, Item]]:
    """(query volume, the same subject's target-modality study) for MB-VR."""
    by_subject: dict[str, dict[str, Study]] = {}
    for study in studies:
        subject = str(study.meta.get("subject_id", study.patient_id))
        by_subject.setdefault(subject, {})[study.modality] = study
    pairs = []
    for subject in sorted(by_subject):
        members = by_subject[subject]
        if query_modality in members and target_modality in members:
            query, target = members[query_modality], members[target_modality]
            pairs.append(
                (Item(item_id(query, revision), query), Item(item_id(target, revision), target))
            )
    return pairs
