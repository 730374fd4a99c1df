"""MedHEB-lite tasks built from real data in ../shared/data (or the packages that ship it).

Each builder raises TaskUnavailable (the task is skipped with that reason) when its data is
not on this machine; everything else about a task (labels, pairs, splits) comes from the
source adapters in medheb_app.evidence.sources and the readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from medheb_app.evidence.readers import read_any
from medheb_app.evidence.sources.iu_xray import bundled_reports, load_iu_reports
from medheb_app.evidence.study import Evidence, Study
from medheb_app.tasks.base import Item, TaskUnavailable, file_digest
from medheb_app.tasks.builders.generic import LabelledItem, single_label

NO_FINDING = "No Finding"


def require(path: Path, what: str) -> Path:
    """The path, or TaskUnavailable naming what is missing and where it was looked for."""
    if not path.exists():
        raise TaskUnavailable(f"{what} not found at {path} (see ../shared/data/README.md)")
    return path


def prostate_slice_pairs(directory: Path) -> tuple[list[tuple[Item, Item]], str]:
    """T2 slice i -> DWI slice i of the same prostate MRI subject, and the data revision.

    The two series share slice positions (../shared/data/README.md), so the DWI slice at the
    same index is the paired positive; slices are 2D images read through readers.read_any.
    """
    t2_path = require(directory / "t2.nii.gz", "prostate T2 volume")
    dwi_path = require(directory / "dwi.nii.gz", "prostate DWI volume")
    t2 = read_any(t2_path).pixels
    dwi = read_any(dwi_path).pixels
    if t2.shape[0] != dwi.shape[0]:
        raise ValueError(
            f"T2 has {t2.shape[0]} slices and DWI {dwi.shape[0]}; slice pairing needs equal counts."
        )
    revision = file_digest(t2_path, dwi_path)
    pairs = [
        (
            Item(f"prostate-mri@{revision}:t2:{index}", Evidence(image=t2[index])),
            Item(f"prostate-mri@{revision}:dwi:{index}", Evidence(image=dwi[index])),
        )
        for index in range(t2.shape[0])
    ]
    return pairs, revision


def nih_label(study: Study) -> str | None:
    """The NIH image's only label ('No Finding' when none is listed), None when several."""
    labels = study.meta.get("nih_labels")
    if labels is None:
        return None
    labels = list(labels) or [NO_FINDING]  # type: ignore[call-overload]
    return single_label({study.id: labels}).get(study.id)


def load_nih_part(directory: Path, part: str) -> tuple[list[Study], str]:
    """NIH studies of one patient-level part (seeded 70/30 re-split) and the data revision."""
    # deferred: pandas
    from medheb_app.evidence.sources.nih import load_nih

    labels = require(directory / "labels.csv", "NIH ChestX-ray14 labels.csv")
    studies = [s for s in load_nih(directory, resplit_by_patient=True) if s.split == part]
    return studies, file_digest(labels)


def nih_labelled(studies: Sequence[Study], revision: str) -> list[LabelledItem]:
    """Single-label NIH studies with cache-safe ids and the patient as group."""
    return [
        LabelledItem(f"nih@{revision}:{study.id}", study, label, study.patient_id)
        for study in studies
        if (label := nih_label(study)) is not None
    ]


def pubmedqa_pairs(directory: Path, part: str) -> tuple[list[tuple[Item, Item]], str]:
    """Question -> its abstract context (PubMedQA PQA-L; test = the 500 official test ids)."""
    # deferred: pandas
    from medheb_app.evidence.sources.pubmedqa import load_pubmedqa

    data_file = require(directory / "ori_pqal.json", "PubMedQA ori_pqal.json")
    split_file = require(directory / "test_ground_truth.json", "PubMedQA test ids")
    data = load_pubmedqa(directory)
    rev = file_digest(data_file, split_file)
    pairs = [
        (
            Item(f"pubmedqa@{rev}:{question.id}", question.text or ""),
            Item(f"pubmedqa@{rev}:{context.id}", context.text or ""),
        )
        for question, context in zip(data.questions, data.contexts, strict=True)
        if question.split == part
    ]
    return pairs, rev


def iu_findings_impression_pairs(part: str, test_fraction: float = 0.3, seed: int = 0):
    """IU X-ray FINDINGS -> IMPRESSION, split 70/30 by report, impressions deduplicated.

    Many IU impressions are the same sentence ("No acute cardiopulmonary abnormality."), so
    each distinct impression text is one candidate and every report stating it points to it:
    the single positive is then never a false negative of an identical twin.
    """
    # deferred: pandas
    from medheb_app.evidence.sources.layout import split_by_patient

    source = bundled_reports()
    if not source.exists():
        raise TaskUnavailable(f"IU X-ray reports not found at {source} (torchxrayvision data)")
    reports = load_iu_reports(source)
    splits = split_by_patient([r.id for r in reports], test_fraction, seed)
    rev = file_digest(source)
    impressions: dict[str, Item] = {}
    pairs = []
    for report in reports:
        if splits[report.id] != part:
            continue
        impression = " ".join(str(report.meta["impression"]).split())
        key = impression.lower()
        if key not in impressions:
            impressions[key] = Item(f"iu@{rev}:impression:{report.id}", impression)
        pairs.append((Item(f"iu@{rev}:{report.id}", report.text or ""), impressions[key]))
    return pairs, rev
