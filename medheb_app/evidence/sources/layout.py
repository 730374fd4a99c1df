"""Shared checks for on-disk data sets: find a table, insist on its columns, split by patient.

Every adapter fails the same way when a folder is not in the expected layout: one
EvidenceError that names the missing file or column and the folder it looked in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from medheb_app.evidence.study import EvidenceError


def require_dir(directory: Path | str, what: str) -> Path:
    """The folder as a Path, or an error saying which data set was expected there."""
    path = Path(directory)
    if not path.is_dir():
        raise EvidenceError(f"{path} is not a folder; expected the {what} folder.")
    return path


def find_table(directory: Path, names: Sequence[str], what: str) -> Path:
    """The first of `names` (each tried as is and with .gz) present in `directory`."""
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    wanted = " or ".join(names)
    raise EvidenceError(f"{directory} has no {wanted}; it is not in the {what} layout.")


def read_table(path: Path, columns: Iterable[str], **read_csv: object) -> pd.DataFrame:
    """Read a CSV (plain or gzipped) and insist on `columns`, naming any that are missing."""
    try:
        frame = pd.read_csv(path, **read_csv)  # type: ignore[arg-type]
    except (OSError, ValueError, pd.errors.ParserError) as error:
        raise EvidenceError(f"{path.name} cannot be read as a CSV table ({error}).") from None
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise EvidenceError(
            f"{path.name} lacks the column(s) {', '.join(repr(m) for m in missing)}; "
            f"found {', '.join(map(str, frame.columns))}."
        )
    return frame


def split_by_patient(
    patient_ids: Iterable[str], test_fraction: float = 0.3, seed: int = 0
) -> dict[str, str]:
    """Patient -> "train" | "test", drawing whole patients so no patient spans both splits."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be between 0 and 1")
    patients = sorted(set(patient_ids))
    order = np.random.default_rng(seed).permutation(len(patients))
    n_test = round(len(patients) * test_fraction)
    test = {patients[i] for i in order[:n_test]}
    return {p: "test" if p in test else "train" for p in patients}


def cell(value: object) -> object:
    """A pandas cell as plain Python: NaN becomes None, numpy scalars become int/float."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value
