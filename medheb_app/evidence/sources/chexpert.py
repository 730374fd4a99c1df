"""CheXpert and CheXpert-Plus label tables -> Studies (images optional, for text-only tasks).

The table has the columns of CheXpert's train.csv (torchxrayvision ships it as
chexpert_train.csv.gz): Path, Sex, Age, Frontal/Lateral, AP/PA and the 14 findings coded
1 / 0 / -1 / blank. CheXpert-Plus names the image column path_to_image and may carry the report
sections section_findings and section_impression, which become the Study's text.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.sources.layout import cell, read_table
from medheb_app.evidence.study import EvidenceError, Findings, Study

_PATIENT = re.compile(r"patient(\d+)")
_STUDY = re.compile(r"(patient\d+)/(study\d+)/([^/]+?)(?:\.\w+)?$")
_WHAT = "CheXpert label table"


def _image_column(columns: list[str], path: Path) -> str:
    for name in ("Path", "path_to_image"):
        if name in columns:
            return name
    raise EvidenceError(f"{path.name} lacks the column 'Path' (or 'path_to_image'); not a {_WHAT}.")


def _resolve(image_root: Path | None, relative: str) -> str | None:
    """The image on disk: root/Path, or root/Path without its top folder (CheXpert-v1.0-small/)."""
    if image_root is None:
        return None
    for candidate in (image_root / relative, image_root / Path(*Path(relative).parts[1:])):
        if candidate.is_file():
            return str(candidate)
    return None


def coded_findings(frame: pd.DataFrame, names: tuple[str, ...], table: str) -> list[Findings]:
    """Label columns -> one {name: 1 | 0 | -1 | None} per row (vectorised; 200k rows in a blink)."""
    try:
        values = frame[list(names)].apply(pd.to_numeric, errors="raise").to_numpy(float)
    except ValueError as error:
        raise EvidenceError(f"{table} has a non-numeric label ({error}).") from None
    bad = ~np.isnan(values) & ~np.isin(values, (1.0, 0.0, -1.0))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise EvidenceError(
            f"{table} row {row + 1}: {names[col]!r} is {values[row, col]}; "
            "expected 1, 0, -1 or blank."
        )
    coded = np.where(np.isnan(values), None, values).tolist()
    return [
        {name: None if v is None else int(v) for name, v in zip(names, row, strict=True)}  # type: ignore[misc]
        for row in coded
    ]


def _column(frame: pd.DataFrame, name: str) -> list[object]:
    """A column as plain Python values (NaN -> None); all None when the table lacks it."""
    if name not in frame.columns:
        return [None] * len(frame)
    return [cell(v) for v in frame[name].tolist()]


def _reports(frame: pd.DataFrame) -> list[str | None]:
    """CheXpert-Plus report sections joined as "FINDINGS: ...\nIMPRESSION: ..." (None if absent)."""
    sections = [
        (title, _column(frame, column))
        for column, title in (
            ("section_findings", "FINDINGS"),
            ("section_impression", "IMPRESSION"),
        )
    ]
    reports: list[str | None] = []
    for i in range(len(frame)):
        parts = [
            f"{title}: {values[i].strip()}"
            for title, values in sections
            if isinstance(values[i], str) and values[i].strip()
        ]
        reports.append("\n".join(parts) or None)
    return reports


def load_chexpert(
    table: Path | str,
    image_root: Path | str | None = None,
    frontal_only: bool = False,
    limit: int | None = None,
) -> list[Study]:
    """One Study per row; `image_root` joins the Path column to images (absent images: path None).

    The patient id comes from the path (patientNNNNN) and the split from its folder (train /
    valid / test). Findings keep CheXpert's coding exactly (1, 0, -1, None).
    """
    table = Path(table)
    if not table.is_file():
        raise EvidenceError(f"{table} does not exist; expected a {_WHAT} (.csv or .csv.gz).")
    frame = read_table(table, [], nrows=limit)
    column = _image_column(list(frame.columns), table)
    missing = [c for c in (column, *CHEXPERT_14) if c not in frame.columns]
    if missing:
        raise EvidenceError(f"{table.name} lacks the column(s) {missing}; not a {_WHAT}.")
    if frontal_only and "Frontal/Lateral" in frame.columns:
        frame = frame[frame["Frontal/Lateral"] == "Frontal"]
    root = Path(image_root) if image_root is not None else None
    labels = coded_findings(frame, CHEXPERT_14, table.name)
    relatives = frame[column].astype(str).tolist()
    patients = [_PATIENT.search(r) for r in relatives]
    if None in patients:
        bad = relatives[patients.index(None)]
        raise EvidenceError(f"{table.name}: cannot find patientNNNNN in the path {bad!r}.")
    keys = [m.groups() if (m := _STUDY.search(r)) else (r.replace("/", "-"),) for r in relatives]
    splits = [
        next((p for p in ("train", "valid", "test") if f"/{p}/" in f"/{r}"), None)
        for r in relatives
    ]
    meta_columns = {
        key: _column(frame, name)
        for key, name in (
            ("sex", "Sex"),
            ("age", "Age"),
            ("view", "Frontal/Lateral"),
            ("projection", "AP/PA"),
        )
    }
    reports = _reports(frame)
    studies = []
    for i, (relative, findings) in enumerate(zip(relatives, labels, strict=True)):
        path = _resolve(root, relative)
        studies.append(
            Study(
                id=f"chexpert-{'-'.join(keys[i])}",
                form="2d",
                modality="CR",
                path=path,
                text=reports[i],
                findings=findings,
                patient_id=patients[i].group(1),  # type: ignore[union-attr]
                split=splits[i],
                source="chexpert",
                meta={
                    "image_path": relative,
                    "has_image": path is not None,
                    **{key: values[i] for key, values in meta_columns.items()},
                },
            )
        )
    return studies
